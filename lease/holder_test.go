package lease

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestGetHolderFirstLook(t *testing.T) {
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  HolderState
	}{
		{"not found", nil, HolderState{}},
		{"empty holder (released)", testLease("l", "", 4, testNow, 1), HolderState{Token: 4, Exists: true}},
		// renewTime is the holder's wall clock, which may be skewed: a first
		// look reports the holder until a lease duration after this process
		// saw the record, as a campaign would wait.
		{"renewTime long past", testLease("l", "a", 4, testNow.Add(-20*time.Second), 15), HolderState{Holder: "a", Token: 4, Exists: true}},
		{"active", testLease("l", "a", 4, testNow.Add(-2*time.Second), 15), HolderState{Holder: "a", Token: 4, Exists: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.lease != nil {
				objs = append(objs, tt.lease)
			}
			m, _, _ := fakeManager(objs...)
			defer func() { _ = m.Shutdown(5 * time.Second) }()
			got, err := m.GetHolder("ns", "l")
			if err != nil || got != tt.want {
				t.Errorf("GetHolder = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestGetHolderAPIErrorAndBadInput(t *testing.T) {
	m, client, _ := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("boom")
	})
	if _, err := m.GetHolder("ns", "l"); err == nil || !strings.Contains(err.Error(), "get lease ns/l: boom") {
		t.Fatalf("GetHolder error = %v", err)
	}
	if _, err := m.GetHolder("NS", "l"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad namespace: %v", err)
	}
	noConfig(t)
	if _, err := NewManager(nil).GetHolder("ns", "l"); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("no configuration: %v", err)
	}
}

func TestGetHolderObservedUsesMonotonicExpiry(t *testing.T) {
	// A holder whose wall clock runs an hour behind: renewTime looks
	// expired, but this process saw the record just now, so it is valid
	// until a lease duration after that, by the local monotonic clock.
	m, client, clk := fakeManager(testLease("l", "a", 2, testNow.Add(-time.Hour), 10))
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "a" {
		t.Fatalf("observed lease with skewed renewTime: %+v, %v; want holder a", got, err)
	}
	clk.Step(10 * time.Second)
	if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "" || got.Token != 2 {
		t.Fatalf("after a lease duration without change: %+v, %v; want no holder", got, err)
	}
	if n := countVerbs(t, client.Actions())["get"]; n != 0 {
		t.Fatalf("GetHolder made %d GETs; want answers from the observer", n)
	}
}

func TestConcurrentGetHolderFake(t *testing.T) {
	m, _, _ := fakeManager(testLease("l", "a", 1, testNow, 15))
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Go(func() {
			for j := 0; j < 50; j++ {
				if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "a" {
					t.Errorf("GetHolder = %+v, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestKeyFormat(t *testing.T) {
	if got := (Key{"ns", "lease"}).String(); got != "ns/lease" {
		t.Fatalf("Key.String = %q", got)
	}
}

type stateLog struct {
	mu     sync.Mutex
	states []HolderState
	seen   chan struct{}
}

func (l *stateLog) add(s HolderState) {
	l.mu.Lock()
	l.states = append(l.states, s)
	l.mu.Unlock()
	l.seen <- struct{}{}
}

func (l *stateLog) expect(t *testing.T, want HolderState) {
	t.Helper()
	select {
	case <-l.seen:
	case <-time.After(5 * time.Second):
		t.Fatalf("no callback, want %+v", want)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if got := l.states[len(l.states)-1]; got != want {
		t.Fatalf("callback %+v, want %+v", got, want)
	}
}

func (l *stateLog) expectNone(t *testing.T) {
	t.Helper()
	select {
	case <-l.seen:
		t.Fatalf("unexpected callback: %+v", l.states[len(l.states)-1])
	case <-time.After(50 * time.Millisecond):
	}
}

func TestHolderWatchDispatch(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	obs := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	// The test feeds the observer by hand, as the writes of a leader of
	// this process do: its snapshot is then live (see snapshot.live).
	obs.pauseWhileLeading(new(int))
	log := &stateLog{seen: make(chan struct{}, 10)}
	ended := make(chan struct{})
	w := newHolderWatch(Key{"ns", "l"}, obs, clk, log.add, func() { close(ended) })
	w.start()

	log.expectNone(t) // nothing before the first sync
	obs.apply(nil, "1")
	log.expect(t, HolderState{})
	obs.apply(testLease("l", "a", 1, testNow, 10), "2")
	log.expect(t, HolderState{Holder: "a", Token: 1, Exists: true})
	obs.apply(testLease("l", "a", 1, testNow.Add(time.Second), 10), "3") // renewal
	log.expectNone(t)
	// No renewal for a lease duration: reported as no holder.
	awaitWaiters(t, clk, 1) // the watch's expiry timer
	clk.Step(10*time.Second + expiryGrace)
	log.expect(t, HolderState{Token: 1, Exists: true})
	obs.apply(testLease("l", "b", 2, testNow, 10), "4")
	log.expect(t, HolderState{Holder: "b", Token: 2, Exists: true})

	w.Cancel()
	select {
	case <-ended:
	default:
		t.Fatal("Cancel returned before the watch ended")
	}
	obs.apply(nil, "5")
	log.expectNone(t)
}

// Every canceller of a watch returns only once its callback has returned
// (not just the first), so that any of them may free the callback's
// context; and Shutdown called from a holder callback does not wait for
// that callback (it would time out).
func TestCancelWatchWaitsForTheCallbackInEveryCanceller(t *testing.T) {
	m, _, _ := fakeManager(testLease("l", "a", 1, testNow, 15))
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	entered, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	var once sync.Once
	if _, err := m.WatchHolder("ns", "l", func(HolderState) {
		once.Do(func() { close(entered) })
		<-release
		returned.Store(true)
	}); err != nil {
		t.Fatal(err)
	}
	<-entered
	var wg sync.WaitGroup
	var cancelled atomic.Int32
	early := make(chan string, 2)
	for i := 0; i < 2; i++ {
		wg.Go(func() {
			if err := m.CancelWatch("ns", "l"); err != nil {
				t.Error(err)
			}
			if !returned.Load() {
				early <- "a CancelWatch returned while the callback still ran"
			}
			cancelled.Add(1)
		})
	}
	// The callback returns once each canceller waits for it or returned.
	eventually(t, 10*time.Second, "both CancelWatch calls waiting for the callback", func() bool {
		return int(cancelled.Load())+waitingIn("(*HolderWatch).cancelAsSeenFrom") == 2
	})
	close(release)
	wg.Wait()
	close(early)
	for msg := range early {
		t.Fatal(msg)
	}
}

func TestShutdownFromAHolderCallback(t *testing.T) {
	m, _, _ := fakeManager(testLease("l", "a", 1, testNow, 15))
	result := make(chan error, 1)
	var once sync.Once
	if _, err := m.WatchHolder("ns", "l", func(HolderState) {
		once.Do(func() { result <- m.Shutdown(2 * time.Second) })
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("Shutdown from a holder callback = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown from a holder callback hung")
	}
}
