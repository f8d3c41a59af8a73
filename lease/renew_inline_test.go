package lease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// Renewals on the leader's own goroutine (renewInline), and the cut after
// which one unanswered is replaced on a worker: a cancel sends none after
// it, a refusal answered late is a refusal, and a latency that sets in
// suddenly costs no leadership.

// delayedPatches answers every renewal (PATCH) after delay, or its
// context's end.
type delayedPatches struct {
	coordclient.LeaseInterface
	delay atomic.Int64
}

func (d *delayedPatches) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	select {
	case <-time.After(time.Duration(d.delay.Load())):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// startLeading makes "me" lead ns/l on leases, by clk.
func startLeading(t *testing.T, leases coordclient.LeaseInterface, timing Timing, clk clock.Clock) *Election {
	t.Helper()
	obs := newObserver(leases, "l", clk, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", timing, leases, obs, clk, &leaseStats{}, func() bool { return false })
	e.start()
	t.Cleanup(func() { _ = e.CancelWithin(time.Second) })
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return e
}

// heldPatch holds the first renewal (PATCH) until proceed is closed,
// ignoring its context as a response already on its way would, and
// answers the others at once; it counts those begun, and those begun after
// stopped.
type heldPatch struct {
	coordclient.LeaseInterface
	proceed            chan struct{}
	started, afterStop atomic.Int32
	stopped            atomic.Bool
}

func (h *heldPatch) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if h.stopped.Load() {
		h.afterStop.Add(1)
	}
	if h.started.Add(1) == 1 {
		<-h.proceed
	}
	return h.LeaseInterface.Patch(context.WithoutCancel(ctx), name, pt, data, opts, sub...)
}

// A cancel that waits for a renewal answered after more than a retry
// period (the renew timer fired meanwhile) sends no renewal after it: the
// leader used to pick the due renewal over the cancel half the time.
func TestNoRenewalAfterCancel(t *testing.T) {
	timing := Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 100 * time.Millisecond}
	for trial := range 10 {
		leases := &heldPatch{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"), proceed: make(chan struct{})}
		clk := clocktesting.NewFakeClock(time.Now())
		e := startLeading(t, leases, timing, clk)
		awaitWaiters(t, clk, 2) // the renew timer and the deadline
		clk.Step(timing.RetryPeriod)
		eventually(t, 5*time.Second, "a renewal begun", func() bool { return leases.started.Load() == 1 })
		clk.Step(timing.RetryPeriod) // past a retry period: the renew timer fires meanwhile
		leases.stopped.Store(true)
		cancelled := make(chan error, 1)
		go func() { cancelled <- e.Cancel() }()
		eventually(t, 5*time.Second, "Cancel waiting for the renewal", func() bool { return e.ctx.Err() != nil })
		close(leases.proceed)
		receive(t, cancelled, 5*time.Second, "Cancel returning once the renewal was answered")
		// A renewal sent by then is on a worker: let it reach the server.
		eventually(t, 5*time.Second, "the renewal workers idle", func() bool { return busyUnder("(*workers).work") == 0 })
		if a := leases.afterStop.Load(); a > 0 {
			t.Fatalf("trial %d: %d renewal(s) sent after Cancel was called", trial, a)
		}
	}
}

// invalidLate refuses the first renewal as Invalid (the lease is no longer
// as we hold it) once its context ended (on the leader's goroutine: at the
// inline cut), as a response read just then would; later renewals are
// never answered.
type invalidLate struct {
	coordclient.LeaseInterface
	n atomic.Int32
}

func (s *invalidLate) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if s.n.Add(1) == 1 {
		<-ctx.Done()
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}, name,
			field.ErrorList{field.Invalid(field.NewPath("spec"), "", "test failed")})
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// An API server's refusal that comes back after the inline renewal's cut
// is a refusal, not slowness: leadership ends at once.
func TestARefusalAfterTheCutIsNotTakenForSlowness(t *testing.T) {
	timing := Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 400 * time.Millisecond}
	leases := &invalidLate{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns")}
	e := startLeading(t, leases, timing, clock.RealClock{})
	eventually(t, 5*time.Second, "the first renewal sent", func() bool { return leases.n.Load() >= 1 })
	eventually(t, inlineCut(timing)+2*time.Second, "leadership ended by the refusal", func() bool {
		ok, _, _ := e.IsLeader()
		return !ok
	})
}

// A latency that sets in suddenly after fast answers, and stays, costs no
// leadership while the first slow renewal's replacement, sent at the cut,
// is answered in time: L < renewDeadline - retryPeriod - inlineCut (2.25 s
// at the fault suite's 4/3/0.5).
func TestSuddenLatencyKeepsLeadership(t *testing.T) {
	for _, latency := range []time.Duration{1500 * time.Millisecond, 1900 * time.Millisecond} {
		t.Run(latency.String(), func(t *testing.T) {
			t.Parallel()
			leases := &delayedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns")}
			e := startLeading(t, leases, Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, clock.RealClock{})
			eventually(t, 5*time.Second, "a few fast renewals", func() bool { return statsOf(e.stats).Election.Renewals >= 2 })
			leases.delay.Store(int64(latency))
			// 8 renewals answered after the latency set in: 5 s and more,
			// beyond the renew deadline.
			from := statsOf(e.stats).Election.Renewals
			eventually(t, 30*time.Second, "8 renewals answered late", func() bool { return e.Ended() || statsOf(e.stats).Election.Renewals >= from+8 })
			if e.Ended() {
				t.Fatalf("a latency of %v lost the leadership: %v", latency, e.endReason())
			}
		})
	}
}

// hungFirstPatch leaves the first renewal (PATCH) unanswered until its
// context ends, as a frozen API server does, and answers the others.
type hungFirstPatch struct {
	coordclient.LeaseInterface
	calls atomic.Int32
}

func (h *hungFirstPatch) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if h.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// closerLog records the rounds of CloseSilentConnections.
type closerLog struct {
	mu     sync.Mutex
	rounds []time.Time // their since
}

func (c *closerLog) CloseSilentConnections(since time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds = append(c.rounds, since)
	return 1
}

func (c *closerLog) sinces() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.rounds)
}

// A renewal unanswered at the cut (its API server frozen) has the
// connections that received nothing since it was sent closed, so that the
// renewal sent next at once dials anew; the leader keeps its lease.
func TestARenewalUnansweredAtTheCutRedials(t *testing.T) {
	client := fake.NewClientset()
	hung := &hungFirstPatch{LeaseInterface: client.CoordinationV1().Leases("ns")}
	closer := &closerLog{}
	obs := newObserver(hung, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	stats := &leaseStats{}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", fastUnitTiming, hung, obs, clock.RealClock{}, stats, func() bool { return false })
	e.api.redial = &redialer{conns: closer}
	e.start()
	t.Cleanup(func() { _ = e.CancelWithin(time.Second) })
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a renewal answered after the hung one", func() bool { return hung.calls.Load() >= 2 && statsOf(stats).Election.Renewals >= 1 })
	rounds := closer.sinces()
	if len(rounds) != 1 {
		t.Fatalf("%d rounds of closing silent connections; want 1, at the cut", len(rounds))
	}
	if ok, _, _ := e.IsLeader(); !ok {
		t.Fatal("the leader lost its lease")
	}
}

// frozenConns hangs the first `hang` renewals (PATCH) until their
// connection is closed (CloseSilentConnections) or their context ends, as
// a fresh connection that the load balancer put on the same frozen API
// server again would; it records when each round closed them.
type frozenConns struct {
	coordclient.LeaseInterface
	hang atomic.Int32

	calls  atomic.Int32
	mu     sync.Mutex
	cut    chan struct{} // closed by a round: what hangs fails
	rounds []time.Time
}

func (f *frozenConns) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if f.calls.Add(1) <= f.hang.Load() {
		f.mu.Lock()
		cut := f.cut
		f.mu.Unlock()
		select {
		case <-cut:
			return nil, errors.New("http2: client connection lost")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
}

func (f *frozenConns) CloseSilentConnections(since time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rounds = append(f.rounds, time.Now())
	close(f.cut)
	f.cut = make(chan struct{})
	return 1
}

func (f *frozenConns) roundTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.rounds)
}

// The new connection a round dials can land on the frozen API server
// again (a load balancer picks one per connection): then the renewal on
// it hangs as well, and the next round must come as soon as the pace
// allows (one round per retry period), with a renewal on its new
// connection at once, whatever the pipeline's latency rule says. Four
// renewals in a row hang here (the inline one and three on fresh
// connections): the leader keeps its lease, and the rounds are at least a
// retry period apart.
func TestRenewalsKeepRedialingWhileFreshConnectionsHang(t *testing.T) {
	client := fake.NewClientset()
	frozen := &frozenConns{LeaseInterface: client.CoordinationV1().Leases("ns"), cut: make(chan struct{})}
	obs := newObserver(frozen, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	stats := &leaseStats{}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", fastUnitTiming, frozen, obs, clock.RealClock{}, stats, func() bool { return false })
	e.api.redial = &redialer{conns: frozen}
	e.start()
	t.Cleanup(func() { _ = e.CancelWithin(time.Second) })
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	renewed := statsOf(stats).Election.Renewals
	frozen.hang.Store(frozen.calls.Load() + 4)
	eventually(t, 10*time.Second, "a renewal answered after four hung ones", func() bool {
		return frozen.calls.Load() > frozen.hang.Load() && statsOf(stats).Election.Renewals > renewed
	})
	if ok, _, _ := e.IsLeader(); !ok {
		t.Fatalf("the leader lost its lease: %v", statsOf(stats).Election)
	}
	rounds := frozen.roundTimes()
	if len(rounds) < 4 {
		t.Fatalf("%d rounds of closing silent connections; want one per hung renewal (4)", len(rounds))
	}
	for i := 1; i < len(rounds); i++ {
		if gap := rounds[i].Sub(rounds[i-1]); gap < fastUnitTiming.RetryPeriod-time.Millisecond {
			t.Errorf("rounds %d and %d %v apart; want at least a retry period (%v)", i-1, i, gap, fastUnitTiming.RetryPeriod)
		}
	}
}
