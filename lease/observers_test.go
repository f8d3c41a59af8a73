package lease

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// Asking about a lease makes this process follow it: the first GetHolder
// lists and opens a watch, later ones answer locally and see changes as the
// watch delivers them.
func TestGetHolderKeepsLeaseObserved(t *testing.T) {
	m, client, _ := fakeManager(testLease("l", "a", 1, testNow, 15))
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "a" || got.Token != 1 {
		t.Fatalf("first GetHolder = %+v, %v", got, err)
	}
	eventually(t, 5*time.Second, "the watch to open", func() bool { return countVerbs(t, client.Actions())["watch"] == 1 })
	for i := 0; i < 100; i++ {
		if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "a" {
			t.Fatalf("GetHolder %d = %+v, %v", i, got, err)
		}
	}
	if n := countVerbs(t, client.Actions()); n["get"] != 0 || n["list"] != 1 || n["watch"] != 1 {
		t.Fatalf("101 GetHolder calls made %v requests; want one list and one watch", n)
	}
	next := testLease("l", "b", 2, testNow, 15)
	next.ResourceVersion = "6"
	if _, err := client.CoordinationV1().Leases("ns").Update(t.Context(), next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the new holder to be seen", func() bool {
		got, err := m.GetHolder("ns", "l")
		return err == nil && got.Holder == "b" && got.Token == 2
	})
}

// A campaign on a lease this process already follows inherits the
// observation: it takes over as soon as the lease ran out by that earlier
// sight, not a lease duration after the campaign started; and never before.
func TestCampaignInheritsObservation(t *testing.T) {
	tests := []struct {
		name       string
		campaignAt time.Duration // after the holder's record was first seen
		leaderAt   time.Duration // when the campaign must lead
	}{
		{"started after expiry: leads at once", 15 * time.Second, 15 * time.Second},
		{"started before expiry: leads at expiry", 14 * time.Second, 15 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, clk := fakeManager(testLease("l", "a", 1, testNow, 15))
			defer func() { _ = m.Shutdown(5 * time.Second) }()
			if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "a" {
				t.Fatalf("GetHolder = %+v, %v", got, err)
			}
			clk.Step(tt.campaignAt)
			e, err := m.RunElection("ns", "l", "b", unitTiming)
			if err != nil {
				t.Fatal(err)
			}
			if tt.leaderAt > tt.campaignAt {
				eventually(t, 10*time.Second, "the campaign deciding", func() bool { // to wait, or it took over
					return isClosed(e.elected) || waitingIn("(*Election).waitFor") > 0
				})
				if ok, _, _ := e.IsLeader(); ok {
					t.Fatal("took over before the holder's lease ran out by this process's observation")
				}
				clk.Step(tt.leaderAt - tt.campaignAt)
			}
			eventually(t, 5*time.Second, "the campaign to lead without waiting another lease duration", func() bool {
				ok, token, _ := e.IsLeader()
				return ok && token == 2
			})
		})
	}
}

// Observers nobody uses are stopped after idleObserverTimeout, at most
// maxIdleObservers are kept, and the counters of leases only asked about
// go with them; an observer in use by a watch stays.
func TestIdleObserversAreReapedAndBounded(t *testing.T) {
	m, client, clk := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	if _, err := m.WatchHolder("ns", "watched", func(HolderState) {}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < maxIdleObservers+10; i++ {
		if _, err := m.GetHolder("ns", fmt.Sprintf("asked-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	observers, stats := len(m.observers.leases), len(m.stats)
	m.mu.Unlock()
	if observers != maxIdleObservers+1 || stats != maxIdleObservers+1 {
		t.Fatalf("after asking about %d leases: %d observers, %d counter sets; want %d each (the bound + the watched one)",
			maxIdleObservers+10, observers, stats, maxIdleObservers+1)
	}
	eventually(t, 5*time.Second, "idle observers to be stopped", func() bool {
		clk.Step(idleObserverTimeout / 2)
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.observers.leases) == 1 && m.observers.leases[Key{"ns", "watched"}] != nil
	})
	watchesBefore := countVerbs(t, client.Actions())["watch"]
	if _, err := m.GetHolder("ns", "asked-0"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a reaped lease to be observed again when asked", func() bool {
		return countVerbs(t, client.Actions())["watch"] > watchesBefore
	})
}

// GetHolder reports a list error at once (and the next call tries again),
// naming the lease.
func TestGetHolderReportsListErrors(t *testing.T) {
	m, client, clk := fakeManager(testLease("l", "a", 1, testNow, 15))
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	var fail atomic.Bool
	fail.Store(true)
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail.Load() {
			return true, nil, errors.New("leases is forbidden")
		}
		return false, nil, nil
	})
	if _, err := m.GetHolder("ns", "l"); err == nil || err.Error() != "get lease ns/l: leases is forbidden" {
		t.Fatalf("GetHolder = %v", err)
	}
	fail.Store(false)
	eventually(t, 10*time.Second, "GetHolder to succeed once the list does", func() bool {
		clk.Step(time.Second) // the observer's backoff
		got, err := m.GetHolder("ns", "l")
		return err == nil && got.Holder == "a"
	})
}

// Every function that needs the cluster loads the configuration on first
// use (running the init hook first); with none to find, each names the
// sources it tried.
func TestFunctionsInitializeOnFirstUse(t *testing.T) {
	calls := map[string]func(m *Manager) error{
		"RunElection": func(m *Manager) error { _, err := m.RunElection("ns", "l", "a", unitTiming); return err },
		"WatchHolder": func(m *Manager) error { _, err := m.WatchHolder("ns", "l", func(HolderState) {}); return err },
		"SetPodLabel": func(m *Manager) error { return m.SetPodLabel("ns", "p", "k", "v") },
		"GetHolder":   func(m *Manager) error { _, err := m.GetHolder("ns", "l"); return err },
	}
	for name, call := range calls {
		t.Run(name+", no configuration", func(t *testing.T) {
			noConfig(t)
			m := NewManager(nil)
			var hooked atomic.Int32
			m.SetInitHook(func() error { hooked.Add(1); return nil })
			err := call(m)
			if !errors.Is(err, ErrNoConfig) || hooked.Load() != 1 || m.Initialized() {
				t.Fatalf("%s = %v (hook ran %d times, initialized %v); want ErrNoConfig after one hook run",
					name, err, hooked.Load(), m.Initialized())
			}
		})
		t.Run(name+", hook refuses", func(t *testing.T) {
			m := NewManager(nil)
			m.SetInitHook(func() error { return errors.New("another Go runtime is loaded") })
			if err := call(m); err == nil || err.Error() != "another Go runtime is loaded" {
				t.Fatalf("%s = %v; want the hook's error", name, err)
			}
		})
	}
	t.Run("a kubeconfig is found on first use", func(t *testing.T) {
		kubeconfig := filepath.Join(t.TempDir(), "config")
		// An address nothing listens on: RunElection never waits for the
		// network, so it succeeds once the configuration loads.
		if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: t}}]
current-context: c
`), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		t.Setenv("KUBECONFIG", kubeconfig)
		m := NewManager(nil)
		if _, err := m.RunElection("ns", "l", "a", unitTiming); err != nil {
			t.Fatal(err)
		}
		if !m.Initialized() {
			t.Fatal("not initialized after RunElection")
		}
		if err := m.Shutdown(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// While the observer's watch is broken and it retries, GetHolder says so
// instead of answering from what may be stale; a success clears it.
func TestGetHolderReportsABrokenWatch(t *testing.T) {
	m, _, _ := fakeManager(testLease("l", "a", 1, testNow, 15))
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	if _, err := m.GetHolder("ns", "l"); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	obs := m.observers.leases[Key{"ns", "l"}].obs
	m.mu.Unlock()
	obs.mu.Lock()
	loop := obs.loop // the running loop's error
	obs.mu.Unlock()
	obs.failed(errors.New("connection refused"), loop)
	if _, err := m.GetHolder("ns", "l"); err == nil || err.Error() != "get lease ns/l: connection refused (following the lease, retrying)" {
		t.Fatalf("GetHolder with a broken watch = %v", err)
	}
	next := testLease("l", "b", 2, testNow, 15)
	obs.apply(next, "9")
	if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "b" {
		t.Fatalf("GetHolder after the watch recovered = %+v, %v", got, err)
	}
}

// A permanent error the shared observer met before a campaign started (a
// GetHolder before RBAC was applied) does not end that campaign: it waits
// for the observer's next try.
func TestCampaignIgnoresAnEarlierObserverError(t *testing.T) {
	m, client, clk := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	var forbidden atomic.Bool
	forbidden.Store(true)
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if forbidden.Load() {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("RBAC"))
		}
		return false, nil, nil
	})
	if _, err := m.GetHolder("ns", "l"); !apierrors.IsForbidden(err) {
		t.Fatalf("GetHolder before RBAC = %v", err)
	}
	forbidden.Store(false) // the Role is applied
	clk.Step(time.Millisecond)
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the campaign looking at the observer's error", func() bool { // and waiting, or giving up
		return e.Ended() || waitingIn("(*Election).waitFor") > 0
	})
	eventually(t, 10*time.Second, "the campaign to lead once the observer lists again", func() bool {
		if e.Ended() {
			t.Fatalf("the campaign gave up on the earlier error: %v", e.endReason())
		}
		clk.Step(time.Second) // the observer's backoff
		ok, _, _ := e.IsLeader()
		return ok
	})
}
