package lease

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func TestManagerRefusals(t *testing.T) {
	noConfig(t)
	uninit := NewManager(nil)
	m, _, _ := fakeManager()
	t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
	if _, err := m.RunElection("ns", "l", "a", unitTiming); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WatchHolder("ns", "l", func(HolderState) {}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"election, no configuration", func() error { _, err := uninit.RunElection("ns", "l", "a", unitTiming); return err }(), ErrNoConfig},
		{"watch, no configuration", func() error { _, err := uninit.WatchHolder("ns", "l", func(HolderState) {}); return err }(), ErrNoConfig},
		{"pod label, no configuration", uninit.SetPodLabel("ns", "p", "k", "v"), ErrNoConfig},
		{"second election", func() error { _, err := m.RunElection("ns", "l", "b", unitTiming); return err }(), ErrElectionExists},
		{"second watch", func() error { _, err := m.WatchHolder("ns", "l", func(HolderState) {}); return err }(), ErrWatchExists},
		{"nil callback", func() error { _, err := m.WatchHolder("ns", "x", nil); return err }(), ErrInvalidArgument},
		{"bad identity", func() error { _, err := m.RunElection("ns", "x", "", unitTiming); return err }(), ErrInvalidArgument},
		{"bad timing", func() error { _, err := m.RunElection("ns", "x", "a", Timing{}); return err }(), ErrInvalidArgument},
		{"bad lease name", func() error { _, err := m.RunElection("ns", "X", "a", unitTiming); return err }(), ErrInvalidArgument},
		{"cancel bad name", m.CancelElection("ns", ""), ErrInvalidArgument},
		{"bad label key", m.SetPodLabel("ns", "p", "bad key", "v"), ErrInvalidArgument},
		{"bad label value", m.SetPodLabel("ns", "p", "k", "bad value!"), ErrInvalidArgument},
		{"bad pod name", m.RemovePodLabel("ns", "Pod", "k"), ErrInvalidArgument},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	for _, ok := range []error{m.CancelElection("ns", "none"), m.CancelWatch("ns", "none")} {
		if ok != nil {
			t.Errorf("cancelling nothing: %v", ok)
		}
	}
}

func TestManagerCancelForgetsAndAllowsNewElection(t *testing.T) {
	m, _, _ := fakeManager()
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if !e.Ended() || e.WaitLost() != nil || m.Election("ns", "l") != nil {
		t.Fatal("cancelled election not ended and forgotten")
	}
	if _, err := m.RunElection("ns", "l", "a", unitTiming); err != nil {
		t.Fatalf("new election after cancel: %v", err)
	}
	if err := m.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if len(m.observers.leases) != 0 {
		t.Fatalf("observers left after Shutdown: %d", len(m.observers.leases))
	}
}

// When an election that led ends, its observer resumes following the lease
// at once only if something else (here a holder watch) still uses it;
// otherwise it sends no list until it is used again (here a GetHolder).
func TestObserverAfterLeadershipEnds(t *testing.T) {
	for _, withWatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("holder watch %v", withWatch), func(t *testing.T) {
			m, client, _ := fakeManager()
			defer func() { _ = m.Shutdown(5 * time.Second) }()
			var lists atomic.Int32
			client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				lists.Add(1)
				return false, nil, nil // counted, then served by the fake's tracker
			})
			if withWatch {
				if _, err := m.WatchHolder("ns", "l", func(HolderState) {}); err != nil {
					t.Fatal(err)
				}
			}
			e, err := m.RunElection("ns", "l", "a", unitTiming)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.WaitElected(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			before := lists.Load()
			if err := m.CancelElection("ns", "l"); err != nil {
				t.Fatal(err)
			}
			if withWatch {
				eventually(t, 5*time.Second, "the observer to resume with a list", func() bool { return lists.Load() > before })
			} else {
				// CancelElection returned once the election's goroutine, and
				// so its leadingEnded, was over: a resumed loop runs now.
				m.mu.Lock()
				obs := m.observers.leases[Key{"ns", "l"}].obs
				m.mu.Unlock()
				obs.mu.Lock()
				following := obs.cancelLoop != nil
				obs.mu.Unlock()
				if following || lists.Load() != before {
					t.Fatalf("lists %d before the end of leadership, %d after, following the lease: %v, with nothing using the observer",
						before, lists.Load(), following)
				}
			}
			if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "" || !got.Exists {
				t.Fatalf("GetHolder after the release = %+v, %v; want released", got, err)
			}
		})
	}
}

// The counters and highest tokens of leases nothing uses any more are
// bounded; those of leases in use are kept.
func TestRememberedLeasesAreBounded(t *testing.T) {
	m, _, _ := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	if _, err := m.RunElection("ns", "in-use", "a", unitTiming); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	for i := 0; i < maxRememberedLeases+500; i++ {
		key := Key{"ns", fmt.Sprintf("old-%d", i)}
		m.statsLocked(key).CampaignStarted(unitTiming.LeaseDuration, unitTiming.RenewDeadline, unitTiming.RetryPeriod)
		m.observers.highestToken[key] = int64(i + 1)
	}
	m.pruneRememberedLocked()
	stats, tokens, inUse := len(m.stats), len(m.observers.highestToken), m.stats[Key{"ns", "in-use"}] != nil
	m.mu.Unlock()
	if stats > maxRememberedLeases || tokens > maxRememberedLeases || !inUse {
		t.Fatalf("after %d unused leases: %d counter sets, %d tokens kept (bound %d); in-use lease kept: %v",
			maxRememberedLeases+500, stats, tokens, maxRememberedLeases, inUse)
	}
}

// A watch lives long where the transport finds dead connections by itself,
// short where its end is what finds one.
func TestWatchLife(t *testing.T) {
	for _, tc := range []struct {
		lease time.Duration
		pings bool
		want  time.Duration
	}{
		{0, true, 2 * time.Minute},
		{time.Second, true, time.Minute},
		{15 * time.Second, true, 2 * time.Minute},
		{time.Minute, true, 8 * time.Minute},
		{5 * time.Minute, true, 10 * time.Minute},
		{0, false, 30 * time.Second},
		{time.Second, false, 10 * time.Second},
		{15 * time.Second, false, 30 * time.Second},
		{5 * time.Minute, false, 5 * time.Minute},
	} {
		t.Run(fmt.Sprintf("%v pings %v", tc.lease, tc.pings), func(t *testing.T) {
			if got := watchLife(tc.lease, tc.pings); got != tc.want {
				t.Fatalf("watchLife(%v, %v) = %v, want %v", tc.lease, tc.pings, got, tc.want)
			}
		})
	}
}
