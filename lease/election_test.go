package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// A candidate whose acquisition is refused with 409 learns the current
// Lease (one GET) instead of resending the same doomed write at round-trip
// speed while its watch lags; each conflict is counted.
func TestConflictIsNotRetriedAtRoundTripSpeed(t *testing.T) {
	tests := []struct {
		name string
		// what the GET after the conflict returns
		current   *coordinationv1.Lease
		maxWrites int64
	}{
		// The GET shows nothing new (a lagging server): back off.
		{"the GET shows the same state", testLease("l", "", 3, testNow, 15), 3},
		// The GET shows a new holder: wait for its lease to run out.
		{"the GET shows a new holder", func() *coordinationv1.Lease {
			l := testLease("l", "other", 4, testNow, 15)
			l.ResourceVersion = "9"
			return l
		}(), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, client, clk := fakeManager(testLease("l", "", 3, testNow, 15)) // released: free to take
			defer func() { _ = m.Shutdown(5 * time.Second) }()
			var writes, gets atomic.Int64
			client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				writes.Add(1)
				return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "l", nil)
			})
			client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets.Add(1)
				return true, tt.current.DeepCopy(), nil
			})
			e, err := m.RunElection("ns", "l", "b", unitTiming)
			if err != nil {
				t.Fatal(err)
			}
			// 300 ms pass on the fake clock, each step once the campaign
			// waits on it: a write resent at round-trip speed never waits.
			for elapsed := time.Duration(0); elapsed < 300*time.Millisecond; elapsed += 10 * time.Millisecond {
				awaitWaiters(t, clk, 1)
				clk.Step(10 * time.Millisecond)
			}
			awaitWaiters(t, clk, 1)
			_ = e.Cancel()
			conflicts := statsOf(m.stats[Key{"ns", "l"}]).Election.Conflicts
			// And one GET more: the cancel reads what a refused acquisition
			// may have left (client-go resends a write, and answers 409 to
			// the resend of one that landed).
			if n := writes.Load(); n < 1 || n > tt.maxWrites || conflicts != n || gets.Load() != n+1 {
				t.Fatalf("in 300 ms: %d writes, %d conflicts counted, %d GETs; want 1..%d writes, each counted and followed by a GET, and the cancel's",
					n, conflicts, gets.Load(), tt.maxWrites)
			}
		})
	}
}

// slowCreate lands each Create at once but answers only when proceed is
// closed, or with the context's error when that ends first: a cancelled
// request whose write reached the server all the same.
type slowCreate struct {
	coordclient.LeaseInterface
	entered, proceed chan struct{}
}

func (s *slowCreate) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	got, err := s.LeaseInterface.Create(context.Background(), l, opts)
	close(s.entered)
	select {
	case <-s.proceed:
		return got, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Cancelling while the acquiring write is in flight lets it finish and
// releases what landed, instead of orphaning a held lease for a lease
// duration.
func TestCancelDuringAcquisitionReleases(t *testing.T) {
	leases := &slowCreate{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"),
		entered: make(chan struct{}), proceed: make(chan struct{})}
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	defer obs.stop()
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: &leaseStats{}})
	e.start()
	<-leases.entered
	cancelled := make(chan error, 1)
	go func() { cancelled <- e.Cancel() }()
	eventually(t, 10*time.Second, "Cancel waiting for the campaign", func() bool {
		return len(cancelled) > 0 || waitingIn("(*Election).CancelWithin.") > 0
	})
	close(leases.proceed)
	if err := <-cancelled; err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(context.Background(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != "" {
		t.Fatalf("after a cancel during the acquisition the lease is held by %q; want released", ptr.Deref(h, "<nil>"))
	}
}

// An election that ended with a reason at the moment WaitElected's timer
// fired reports that reason, not a timeout: the end happened first.
func TestWaitElectedReportsTheEndReasonOverATimeoutFiringTogether(t *testing.T) {
	reason := errors.New("the reason it ended")
	for i := range 40 {
		leases := fake.NewClientset().CoordinationV1().Leases("ns")
		obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
		e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: &leaseStats{}})
		e.firstRound.admitted.Store(true)
		close(e.ending.runDone) // never started: nothing runs
		e.end(reason)
		// A timer of 0 has fired by the time WaitElected selects: both
		// cases are ready.
		if _, err := e.WaitElected(0); !errors.Is(err, reason) {
			t.Fatalf("run %d: WaitElected = %v; want the end reason", i, err)
		}
	}
}

// heldEvents holds each "stopped leading" Event write, as a loaded API
// server would, until a CancelElection waits for it (for good, where none
// does): a process that exits right after CancelElection returns must
// still leave that Event.
type heldEvents struct {
	kubeapi.Client
}

func (c heldEvents) CreateEvent(ctx context.Context, ev *kubeapi.Event) error {
	if strings.Contains(ev.Message, "stopped leading") {
		waitUntil(10*time.Second, func() bool { return waitingUnder("(*Manager).CancelElectionID") > 0 })
	}
	return c.Client.CreateEvent(ctx, ev)
}

func TestCancelElectionReturnsAfterItsEventIsWritten(t *testing.T) {
	cs := fake.NewClientset()
	m := NewManager(clock.RealClock{})
	m.SetClient(heldEvents{Client: clientsetapi.Wrap(cs)})
	m.SetEvents(true)
	e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	// Nothing waits here: the process could exit now.
	evs := leaseEvents(t, cs, "l")
	found := false
	for _, ev := range evs {
		found = found || strings.Contains(ev.Message, "a stopped leading")
	}
	if !found {
		t.Fatalf("when CancelElection returned, the Lease's Events were %s; want the 'stopped leading' one written", describeEvents(evs))
	}
	_ = m.Shutdown(5 * time.Second)
}

// Shutdown flushes the Events itself, within its own timeout: the wait of a
// cancel for its Event must not count against Shutdown's timeout (a slow
// events API would make every Shutdown report a timeout although each
// release was written at once).
func TestShutdownWithSlowEventsDoesNotTimeOut(t *testing.T) {
	cs := fake.NewClientset()
	m := NewManager(clock.RealClock{})
	slow := &slowEventsAfter{Client: clientsetapi.Wrap(cs)}
	m.SetClient(slow)
	m.SetEvents(true)
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the 'became leader' Event written", func() bool { return len(leaseEvents(t, cs, "l")) == 1 })
	slow.slow.Store(true)
	if err := m.Shutdown(time.Second); errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("Shutdown(1s) with every release written at once = %v", err)
	}
}

// slowEventsAfter answers Event writes after 3 s once slow is set.
type slowEventsAfter struct {
	kubeapi.Client
	slow atomic.Bool
}

func (c *slowEventsAfter) CreateEvent(ctx context.Context, ev *kubeapi.Event) error {
	if c.slow.Load() {
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Client.CreateEvent(ctx, ev)
}

// CancelElection with PolicyHandOffOnCancel removes the election and then
// picks the candidate to hand off to: a Shutdown meanwhile must wait for
// that hand-off, not return before it is written.
func TestShutdownWaitsForACancelsHandOff(t *testing.T) {
	m, eb, cancelled := cancelHandingOff(t)
	if err := m.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("Shutdown returned while the cancel's hand-off was still under way")
	}
	if _, err := eb.WaitElected(5 * time.Second); err != nil {
		t.Fatalf("b after the cancel's hand-off: %v", err)
	}
}

// A CancelElection with PolicyHandOffOnCancel begun before Shutdown takes
// an observer share of its own (handOffElection), which resumes the follow
// loop: Shutdown waits for that hand-off before it stops the idle
// observers, so that none still lists and watches once it returned.
func TestShutdownLeavesNoObserverOfACancelsHandOffFollowing(t *testing.T) {
	m, eb, cancelled := cancelHandingOff(t)
	if err := m.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	receive(t, cancelled, 5*time.Second, "the cancel's hand-off ending") // its observer share given up
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, ol := range m.observers.leases {
		ol.obs.mu.Lock()
		following := ol.obs.cancelLoop != nil
		ol.obs.mu.Unlock()
		if following {
			t.Errorf("after Shutdown returned, the observer of %s (refs %d) still follows the lease", key, ol.refs)
		}
	}
}

// A panic below HandOff (the cgo layer's guard recovers it, as here) must
// not leave the hand-off registered as in flight: every later Shutdown
// would wait for it until its timeout and report ErrShutdownTimeout.
func TestAPanicInHandOffDoesNotLeaveShutdownWaiting(t *testing.T) {
	client := fake.NewClientset()
	var armed atomic.Bool
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		l, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if armed.Load() && ok && l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, handOffHolderPrefix) {
			panic("injected: the hand-off write")
		}
		return false, nil, nil
	})
	m := process(t, client)
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := process(t, client).RunElection("ns", "l", "b", unitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's candidate record", func() bool {
		_, found, err := leaseRecords(clientsetapi.Wrap(client)).Get(context.Background(), "ns", "l", "b")
		return err == nil && found
	})
	armed.Store(true)
	func() {
		defer func() { _ = recover() }() // the cgo layer's guard
		_ = m.HandOff("ns", "l", "b", time.Second)
	}()
	if err := m.Shutdown(time.Second); errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("Shutdown after a HandOff that panicked (and was recovered): %v", err)
	}
}

// A CancelElection racing Shutdown's end of the same election returns only
// once that end is done (its release written): a host may exit right after.
func TestCancelElectionDuringShutdownWaitsForTheRelease(t *testing.T) {
	client := fake.NewClientset()
	var released atomic.Bool
	releasing := make(chan struct{})
	var once sync.Once
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if l, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "" {
			once.Do(func() { close(releasing) })
			// The release, slow: until the racing CancelElectionID waits
			// (for good, where it does not).
			waitUntil(10*time.Second, func() bool { return waitingIn("(*Manager).CancelElectionID") > 0 })
			released.Store(true)
		}
		return false, nil, nil
	})
	m := process(t, client)
	a, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	go func() { _ = m.Shutdown(5 * time.Second) }()
	receive(t, releasing, 5*time.Second, "Shutdown releasing the lease")
	if err := m.CancelElectionID("ns", "l", a.ID()); err != nil {
		t.Fatal(err)
	}
	if !released.Load() {
		t.Fatal("CancelElectionID returned during Shutdown's end of the same election, before its release landed")
	}
}

// A panic under CancelElection before the election was cancelled (here in
// the candidates' list of PolicyHandOffOnCancel) still ends it: it was
// removed from the Manager, and nothing else would.
func TestAPanicBeforeTheCancelStillEndsTheElection(t *testing.T) {
	client := fake.NewClientset()
	var armed atomic.Bool
	client.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if armed.Load() && !a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() {
			panic("injected: the candidates' list")
		}
		return false, nil, nil
	})
	m := process(t, client)
	e, err := m.RunElectionWith("ns", "l", "a", unitTiming, ElectionOptions{Policy: PolicyHandOffOnCancel})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	func() {
		defer func() { _ = recover() }() // the cgo layer's guard
		_ = m.CancelElection("ns", "l")
	}()
	armed.Store(false)
	if ok, _, _ := e.IsLeader(); ok || !e.Ended() {
		t.Fatalf("after a CancelElection that panicked: leads %v, ended %v; want it ended", ok, e.Ended())
	}
}

// cancelling waits until a CancelElection has taken ns/l's election out of
// m (it then lists the candidates): an event, not a pause, so that a loaded
// machine cannot let Shutdown start first.
func cancelling(t *testing.T, m *Manager) {
	t.Helper()
	eventually(t, 5*time.Second, "CancelElection under way", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.elections.running[Key{"ns", "l"}] == nil && len(m.ends.elections) == 1
	})
}

// cancelHandingOff is a leader a (PolicyHandOffOnCancel) and a campaigning
// b, and a CancelElection of a under way on its own goroutine, listing the
// candidates (until a Shutdown of m waits for it) before it hands off to b;
// cancelled is closed when that CancelElection returns.
func cancelHandingOff(t *testing.T) (m *Manager, eb *Election, cancelled chan struct{}) {
	t.Helper()
	client := fake.NewClientset()
	var armed atomic.Bool
	client.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() || !armed.Load() {
			return false, nil, nil
		}
		// The candidates' list, slow: until Shutdown waits for the cancel
		// (for good, where it does not).
		waitUntil(10*time.Second, func() bool { return waitingIn("(*Manager).Shutdown.") > 0 })
		return false, nil, nil
	})
	m = process(t, client)
	e, err := m.RunElectionWith("ns", "l", "a", unitTiming, ElectionOptions{Policy: PolicyHandOffOnCancel})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eb, err = process(t, client).RunElection("ns", "l", "b", unitTiming) // b campaigns: it takes a hand-off in milliseconds
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's candidate record", func() bool {
		_, found, err := leaseRecords(clientsetapi.Wrap(client)).Get(context.Background(), "ns", "l", "b")
		return err == nil && found
	})
	armed.Store(true)
	cancelled = make(chan struct{})
	go func() { _ = m.CancelElection("ns", "l"); close(cancelled) }()
	cancelling(t, m)
	return m, eb, cancelled
}

// CancelElection of a leader with PolicyHandOffOnCancel lists the
// candidates (up to 10 s) while still leading; when leadership is lost
// meanwhile (renew deadline), the hand-off finds the election already ended
// and CancelElection returns ErrNotLeader: K8sLeaseCancelElection -1 "not
// the leader", where the header promises 0 unless the release failed (and
// a plain cancel after a loss returns 0).
func TestHandOffRegressionCancelPolicyKeepsACancelsResult(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	var armed, lostFirst atomic.Bool
	var e *Election
	// The candidate list is slow; leadership is lost while it runs.
	client := hooked{Clientset: fc, beforeList: func(opts metav1.ListOptions) {
		if opts.LabelSelector == "" || !armed.CompareAndSwap(true, false) {
			return
		}
		e.revoke() // the renew deadline passes (as after missed renewals)
		lostFirst.Store(waitUntil(10*time.Second, e.Ended))
	}}
	m := process(t, client)
	e, err := m.RunElectionWith("ns", "l", "a", fastUnitTiming, ElectionOptions{Policy: PolicyHandOffOnCancel})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := leaseRecords(clientsetapi.Wrap(fc)).Put(t.Context(), "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err = m.CancelElection("ns", "l")
	t.Logf("CancelElection = %v (WaitLost: %v)", err, e.WaitLost())
	if !lostFirst.Load() || !errors.Is(e.WaitLost(), ErrRenewDeadline) {
		t.Fatal("the leadership was not lost to the renew deadline while the candidates were listed")
	}
	if !(!errors.Is(err, ErrNotLeader)) {
		t.Fatal("regression (review 2)")
	}
}
