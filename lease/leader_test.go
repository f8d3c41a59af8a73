package lease

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// gatedPatches holds every renewal (PATCH) until the gate opens, counting
// how many are in flight at once.
type gatedPatches struct {
	coordclient.LeaseInterface
	gate              chan struct{}
	inFlight, maxSeen atomic.Int32
}

func (g *gatedPatches) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for m := g.maxSeen.Load(); n > m && !g.maxSeen.CompareAndSwap(m, n); m = g.maxSeen.Load() {
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// tickCountingClock is the real clock, counting the Resets of its timers: a
// leader resets its renew timer at each tick.
type tickCountingClock struct {
	clock.RealClock
	resets atomic.Int64
}

func (c *tickCountingClock) NewTimer(d time.Duration) clock.Timer {
	return tickCountingTimer{c.RealClock.NewTimer(d), c}
}

type tickCountingTimer struct {
	clock.Timer
	c *tickCountingClock
}

func (t tickCountingTimer) Reset(d time.Duration) bool {
	t.c.resets.Add(1)
	return t.Timer.Reset(d)
}

// A leader whose renewals go unanswered for long starts sending more beside
// them, up to maxRenewalsInFlight, and keeps leading once they are answered
// in time.
func TestRenewalsArePipelined(t *testing.T) {
	leases := &gatedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"), gate: make(chan struct{})}
	timing := Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 100 * time.Millisecond}
	clk := &tickCountingClock{}
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	defer obs.stop()
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", timing, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clk, stats: &leaseStats{}})
	e.start()
	defer func() { _ = e.Cancel() }()
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, fmt.Sprintf("%d renewals in flight", maxRenewalsInFlight), func() bool {
		return leases.inFlight.Load() >= maxRenewalsInFlight
	})
	ticks := clk.resets.Load()
	eventually(t, 5*time.Second, "5 ticks of the renew timer", func() bool { return clk.resets.Load() >= ticks+5 }) // they send nothing while the pipeline is full
	if m := leases.maxSeen.Load(); m != maxRenewalsInFlight {
		t.Fatalf("%d renewals were in flight at once, want at most %d", m, maxRenewalsInFlight)
	}
	close(leases.gate)
	eventually(t, 5*time.Second, "renewals resuming", func() bool { return statsOf(e.stats).Election.Renewals >= maxRenewalsInFlight+1 })
	if ok, _, _ := e.IsLeader(); !ok || e.Ended() {
		t.Fatalf("leadership lost while renewals were answered in time: %v", e.endReason())
	}
}

func TestPipelineSendsBesideInFlightOnlyWhenSlow(t *testing.T) {
	tm := Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	now := testNow
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	cases := []struct {
		name    string
		p       pipeline
		want    bool
		because string
	}{
		{"nothing in flight", pipeline{}, true, "the regular renewal"},
		{"fast answers, one in flight", pipeline{sent: []time.Time{ago(500 * time.Millisecond)}, latency: 5 * time.Millisecond}, false, "one at a time keeps up"},
		{"last answer slow", pipeline{sent: []time.Time{ago(500 * time.Millisecond)}, latency: 1500 * time.Millisecond}, true, "2L + P > 3/4 R"},
		{"in flight for long", pipeline{sent: []time.Time{ago(time.Second)}, latency: 5 * time.Millisecond}, true, "its age is a latency already seen"},
		{"just under the threshold", pipeline{sent: []time.Time{ago(800 * time.Millisecond)}}, false, "4(2*0.8+0.5) = 8.4 < 9"},
		{"pipeline full", pipeline{sent: []time.Time{ago(2 * time.Second), ago(1500 * time.Millisecond), ago(time.Second), ago(500 * time.Millisecond)}}, false, "bounded"},
	}
	for _, tc := range cases {
		if got := tc.p.shouldSend(now, tm); got != tc.want {
			t.Errorf("%s: shouldSend = %v, want %v (%s)", tc.name, got, tc.want, tc.because)
		}
	}
	p := pipeline{sent: []time.Time{ago(2 * time.Second), ago(time.Second)}}
	p.done(renewal{sent: ago(2 * time.Second)}, now)
	if len(p.sent) != 1 || !p.sent[0].Equal(ago(time.Second)) || p.latency != 2*time.Second {
		t.Errorf("done: %+v", p)
	}
	p.done(renewal{sent: ago(time.Second), err: context.DeadlineExceeded}, now)
	if len(p.sent) != 0 || p.latency != 2*time.Second {
		t.Errorf("a failed renewal leaves the latency: %+v", p)
	}
}

// A renewal moves to the start of its slot: never later, less than a slot
// earlier, and renewals due within one slot go out at the same instant.
func TestRenewalSlot(t *testing.T) {
	const period = 2 * time.Second
	for _, tc := range []struct {
		name    string
		leaders int64
		slot    time.Duration // what the number of leaders makes it
		since   time.Duration // now, after the start of a slot
		d       time.Duration
		wantAt  time.Duration // after that start
	}{
		{"due at a slot's start", 1, period / 8, 0, period, period},
		{"due just after a slot's start", 1, period / 8, time.Millisecond, period, period},
		{"due at a slot's end", 100, period / 8, period/8 - time.Nanosecond, period, period},
		{"due in the next slot", 1, period / 8, period / 8, period, period + period/8},
		{"a first renewal, half a period", 1, period / 8, 3 * time.Millisecond, period / 2, period / 2},
		{"shorter than a slot: unchanged", 1, period / 8, 7 * time.Millisecond, period / 16, 7*time.Millisecond + period/16},
		{"1000 leaders: 62 slots of about 16", 1000, period / 62, time.Millisecond, period, 62 * (period / 62)},
		{"1000 leaders, due in the next slot", 1000, period / 62, period/62 + time.Millisecond, period, 63 * (period / 62)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(0, gridPhase).Add(100000 * tc.slot) // a slot's start on the grid
			d := renewalSlot(start.Add(tc.since), tc.d, period, tc.leaders)
			if d > tc.d || d <= tc.d-tc.slot {
				t.Fatalf("renewalSlot(%v) = %v: not within (d - slot, d]", tc.d, d)
			}
			if at := tc.since + d; at != tc.wantAt {
				t.Fatalf("renews %v after the slot's start, want %v", at, tc.wantAt)
			}
		})
	}
	if d := renewalSlot(time.Now(), time.Second, 7, 1); d != time.Second {
		t.Fatalf("a period too short for slots moved a renewal: %v", d)
	}
}

// The leader renews on its own goroutine while answers come well before
// the cut (half a retry period, at most the pipelining threshold), on
// workers otherwise.
func TestPipelineInline(t *testing.T) {
	tm := Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	short := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1200 * time.Millisecond, RetryPeriod: 800 * time.Millisecond}
	for _, tc := range []struct {
		name string
		t    Timing
		p    pipeline
		cut  time.Duration
		want bool
	}{
		{"no answer yet", tm, pipeline{}, time.Second, true},
		{"fast answers", tm, pipeline{latency: 20 * time.Millisecond}, time.Second, true},
		{"answers at a quarter of the cut", tm, pipeline{latency: 250 * time.Millisecond}, time.Second, false},
		{"slow answers", tm, pipeline{latency: 3 * time.Second}, time.Second, false},
		{"the pipelining threshold first", short, pipeline{}, 50 * time.Millisecond, true}, // (900 - 800) / 2 < 400
		{"one at a time never keeps up", Timing{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 800 * time.Millisecond}, pipeline{}, -25 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cut := inlineCut(tc.t); cut != tc.cut {
				t.Fatalf("inlineCut = %v, want %v", cut, tc.cut)
			}
			if got := tc.p.inline(tc.t); got != tc.want {
				t.Fatalf("inline = %v, want %v", got, tc.want)
			}
		})
	}
}

// A cancel while a renewal is on its way ends leadership at once (IsLeader
// 0) but does not cut the request short (client-go would log an error, and
// its write may land all the same): Cancel returns once it is answered, and
// the release then writes over what it left.
func TestCancelLetsTheRenewalInFlightFinish(t *testing.T) {
	leases := &gatedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"), gate: make(chan struct{})}
	timing := Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 2 * time.Second} // cut after 1 s
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	defer obs.stop()
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", timing, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: &leaseStats{}})
	e.start()
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a renewal in flight", func() bool { return leases.inFlight.Load() == 1 })
	cancelled := make(chan error, 1)
	go func() { cancelled <- e.Cancel() }()
	eventually(t, time.Second, "leadership ended by the cancel", func() bool { ok, _, _ := e.IsLeader(); return !ok && e.Ended() })
	// Once Cancel waits for the leader's goroutine, it has cancelled all it
	// cancels: a renewal it cut short would no longer wait for the gate.
	eventually(t, 5*time.Second, "Cancel waiting", func() bool { return len(cancelled) > 0 || waitingIn("(*Election).CancelWithin.") > 0 })
	if n, waiting := leases.inFlight.Load(), waitingIn("(*gatedPatches).Patch"); n != 1 || waiting != 1 {
		t.Fatalf("the cancel cut the renewal in flight short (%d in flight, %d waiting for an answer)", n, waiting)
	}
	select {
	case err := <-cancelled:
		t.Fatalf("Cancel returned (%v) before the renewal in flight was answered", err)
	default:
	}
	close(leases.gate)
	select {
	case err := <-cancelled:
		if err != nil {
			t.Fatalf("Cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Cancel did not return after the renewal was answered")
	}
	got, err := leases.Get(context.Background(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := got.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("the lease is still held by %q after Cancel", *h)
	}
}

// New leaders renew first at a random point of the retry period, so that
// elections won together do not renew in lock-step.
func TestFirstRenewalIsSpreadOverThePeriod(t *testing.T) {
	for _, rp := range []time.Duration{time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
		seen := map[time.Duration]bool{}
		for i := 0; i < 1000; i++ {
			d := firstRenewal(Timing{RenewDeadline: 3 * rp, RetryPeriod: rp}, 3*rp)
			if d <= 0 || d > rp {
				t.Fatalf("retry period %v: first renewal after %v, want within (0, %v]", rp, d, rp)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Errorf("retry period %v: only %d distinct first renewals in 1000", rp, len(seen))
		}
	}
}

// 1000 elections won at one instant use (nearly) every slot of the period,
// about 16 renewals each: their first renewals, and so all the later ones,
// spread over the whole period (they filled half the slots, twice as full,
// when first renewals came in the second half only: the slots' count tells
// that). The first renewals are random, so a slot holds 16 ± 4: the
// fullest of 62 passed twice renewalBurst (32) in 40 of 5000 runs; three
// times it (48) is as far from chance as from lock-step.
func TestElectionsWonTogetherFillTheSlots(t *testing.T) {
	const period, leaders = 2 * time.Second, 1000
	slot := period / (leaders / renewalBurst)
	slots := int64(period / slot)
	won := time.Unix(0, gridPhase).Add(123456789 * time.Nanosecond)
	perSlot := map[int64]int{}
	for range leaders {
		at := won.Add(renewalSlot(won, firstRenewal(Timing{RenewDeadline: 5 * period, RetryPeriod: period}, 5*period), period, leaders))
		perSlot[((at.UnixNano()-gridPhase)/int64(slot))%slots]++
	}
	fullest := 0
	for _, n := range perSlot {
		fullest = max(fullest, n)
	}
	if len(perSlot) < int(slots)*9/10 || fullest > 3*renewalBurst {
		t.Fatalf("%d elections won together renew in %d of %d slots, the fullest with %d", leaders, len(perSlot), slots, fullest)
	}
}

// Once validity has lapsed, a renewal that succeeds late does not bring
// leadership back: IsLeader never goes 1 -> 0 -> 1, and lead ends the term.
func TestLateRenewalDoesNotReviveLeadership(t *testing.T) {
	m, client, clk := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	obs := newObserver(client.CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	e := newElection(Key{"ns", "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: client.CoordinationV1().Leases("ns"), obs: obs, clock: clk, stats: &leaseStats{}})
	held := testLease("l", "a", 1, testNow, 15)
	e.term.phase, e.term.token, e.term.written = phaseLeader, 1, held
	e.term.validUntil = testNow.Add(unitTiming.RenewDeadline)
	sent := testNow.Add(unitTiming.RenewDeadline - time.Second)
	clk.SetTime(e.term.validUntil.Add(time.Millisecond))
	if ok, _, _ := e.IsLeader(); ok {
		t.Fatal("leader after validity lapsed")
	}
	renewedLease := held.DeepCopy()
	renewedLease.ResourceVersion = "6"
	if err := e.renewed(renewal{sent: sent, got: renewedLease}); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := e.IsLeader(); ok {
		t.Fatal("a late renewal made IsLeader 1 again after it had been 0")
	}
}

// A renewal whose compare-and-swap fails (the Lease was deleted or taken)
// ends leadership before the library asks the API server why: IsLeader is
// 0 while that diagnostic GET is in flight.
func TestLeadershipEndsBeforeTheDiagnosticRead(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	fast := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	// Reactors are set before the election starts (the fake's chain is not
	// safe to change while it serves); failing switches them on.
	var failing atomic.Bool
	reading, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !failing.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}, "l", nil)
	})
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			once.Do(func() { close(reading) })
			<-proceed
		}
		return false, nil, nil
	})
	e, err := m.RunElection("ns", "l", "a", fast)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	select {
	case <-reading:
	case <-time.After(5 * time.Second):
		t.Fatal("no diagnostic read after a failed compare-and-swap")
	}
	ok, _, _ := e.IsLeader()
	close(proceed)
	if ok {
		t.Fatal("IsLeader was 1 while the library read the Lease to learn why its renewal failed")
	}
	if err := e.WaitLost(); err == nil {
		t.Fatal("WaitLost = nil after a failed compare-and-swap")
	}
}

// A leader whose acquisition was answered late has little validity left
// (it counts from the send): its first renewal goes out in time, not at a
// random point of the retry period that may lie past the end of its term
// ("renew deadline exceeded: no answer to 0 renewal(s) in flight"). Twenty
// new leaders, each with 50 ms of a 10 s renew deadline left: each has
// sent a renewal once 40 ms have passed.
func TestALateAcquisitionRenewsBeforeItsValidityEnds(t *testing.T) {
	for i := range 20 {
		clk := clocktesting.NewFakeClock(testNow)
		client := fake.NewClientset(testLease("l", "a", 1, testNow, 15))
		leases := client.CoordinationV1().Leases("ns")
		obs := newObserver(leases, "l", clk, time.Minute, 0, &leaseStats{})
		e := newElection(Key{"ns", "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clk, stats: &leaseStats{}})
		held, err := leases.Get(t.Context(), "l", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.term.phase, e.term.token, e.term.written = phaseLeader, 1, held
		e.term.validUntil = testNow.Add(50 * time.Millisecond) // sent 9.95 s ago
		done := make(chan error, 1)
		go func() { done <- e.lead() }()
		awaitWaiters(t, clk, 2) // the renewal's timer and the deadline's
		clk.Step(40 * time.Millisecond)
		renewed := waitUntil(2*time.Second, func() bool { return countVerbs(t, client.Actions())["patch"] > 0 })
		e.ending.cancel()
		if err := receive(t, done, 5*time.Second, "lead's end"); err != nil {
			t.Fatalf("leader %d: lead = %v", i, err)
		}
		if !renewed {
			t.Fatalf("leader %d: no renewal sent with 10 ms of its validity left (first renewal due later)", i)
		}
	}
}

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
func startLeading(t *testing.T, leases coordclient.LeaseInterface, timing Timing, clk clock.WithDelayedExecution) *Election {
	t.Helper()
	obs := newObserver(leases, "l", clk, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", timing, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clk, stats: &leaseStats{}})
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
		awaitWaitingIn(t, "(*Election).lead", 1) // its renew timer and deadline set
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
// is answered in time, and, once the leader is urgent, while the renewal
// after it is not given up first (see hungAfter): at the fault suite's
// 4/3/0.5, 1.9 s is held and 2 s is not (measured).
func TestSuddenLatencyKeepsLeadership(t *testing.T) {
	for _, latency := range []time.Duration{1500 * time.Millisecond, 1900 * time.Millisecond} {
		t.Run(latency.String(), func(t *testing.T) {
			t.Parallel()
			leases := &delayedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns")}
			e := startLeading(t, leases, Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, clock.RealClock{})
			eventually(t, 5*time.Second, "a few fast renewals", func() bool { return statsOf(e.stats).Election.Renewals >= 2 })
			leases.delay.Store(int64(latency))
			// 8 renewals answered after the latency set in, and three
			// lease durations: well beyond the renew deadline, and beyond
			// the burst a leader left with little validity sends.
			from, at := statsOf(e.stats).Election.Renewals, time.Now()
			eventually(t, 30*time.Second, "8 renewals answered late over three lease durations", func() bool {
				return e.Ended() || statsOf(e.stats).Election.Renewals >= from+8 && time.Since(at) >= 12*time.Second
			})
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", fastUnitTiming, ElectionOptions{}, electionParts{leases: hung, obs: obs, clock: clock.RealClock{}, stats: stats})
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", fastUnitTiming, ElectionOptions{}, electionParts{leases: frozen, obs: obs, clock: clock.RealClock{}, stats: stats})
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

// Renewals that hang at the API server, not on the connection (an etcd
// member frozen: the API server still answers, but the requests it routed
// to that member wait), fill the pipeline; renewals sent later would be
// answered (etcd elected another leader, the next requests go to live
// members). A full pipeline whose oldest renewal is late gives it up and
// sends a fresh one, so that the hung ones cannot hold the term until its
// deadline. Here every renewal sent in a window hangs (nothing is silent
// to close: no redialer), those after it are answered: the leader keeps
// its lease.
func TestAFullPipelineOfHungRenewalsMakesRoomForAFreshOne(t *testing.T) {
	client := fake.NewClientset()
	hung := &frozenConns{LeaseInterface: client.CoordinationV1().Leases("ns"), cut: make(chan struct{})}
	obs := newObserver(hung, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	stats := &leaseStats{}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", fastUnitTiming, ElectionOptions{}, electionParts{leases: hung, obs: obs, clock: clock.RealClock{}, stats: stats})
	e.start()
	t.Cleanup(func() { _ = e.CancelWithin(time.Second) })
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	renewed := statsOf(stats).Election.Renewals
	hung.hang.Store(hung.calls.Load() + 1 + maxRenewalsInFlight) // the inline one, then a full pipeline
	eventually(t, 10*time.Second, "a renewal answered after the hung ones", func() bool {
		return hung.calls.Load() > hung.hang.Load() && statsOf(stats).Election.Renewals > renewed || e.Ended()
	})
	if ok, _, _ := e.IsLeader(); !ok {
		t.Fatalf("the leader lost its lease to renewals that hung: %+v", statsOf(stats).Election)
	}
}

// hungThenGone hangs every renewal (PATCH) once armed; the first one
// cancelled by the leader (given up) answers 404 instead, as an answer that
// beat the cancel would: the Lease was deleted meanwhile.
type hungThenGone struct {
	coordclient.LeaseInterface
	armed    atomic.Bool
	answered atomic.Bool
}

func (h *hungThenGone) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if !h.armed.Load() {
		return h.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
	}
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.Canceled) && h.answered.CompareAndSwap(false, true) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, name)
	}
	return nil, ctx.Err()
}

// A renewal given up (a full pipeline of hung ones) whose answer beat the
// cancel is that answer: a 404 ends the term as the Lease deleted, not by
// the renew deadline later.
func TestAGivenUpRenewalsAnswerIsNotTakenForItsCancel(t *testing.T) {
	leases := &hungThenGone{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns")}
	e := startLeading(t, leases, fastUnitTiming, clock.RealClock{})
	leases.armed.Store(true)
	eventually(t, 10*time.Second, "the term ended", e.Ended)
	if !leases.answered.Load() {
		t.Fatal("no renewal was given up")
	}
	if !errors.Is(e.endReason(), ErrLeaseDeleted) {
		t.Fatalf("the term ended by %v; want %v", e.endReason(), ErrLeaseDeleted)
	}
}

// etcdLeaderFrozen plays an etcd leader frozen behind the API server from
// the first renewal answered once armed, as measured on the HA bed: every
// renewal sent during the stall
// (the election of another etcd leader) hangs until the frozen member
// thaws, and afterwards every other one still does (the API server's etcd
// client takes the members in turn); the others are answered.
type etcdLeaderFrozen struct {
	coordclient.LeaseInterface
	stall   time.Duration
	armed   atomic.Bool
	frozeAt atomic.Pointer[time.Time]
	after   atomic.Int32 // renewals sent after the stall
}

func (f *etcdLeaderFrozen) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if at := f.frozeAt.Load(); at != nil && (time.Now().Before(at.Add(f.stall)) || f.after.Add(1)%2 == 1) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	l, err := f.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
	if now := time.Now(); err == nil && f.armed.Load() {
		f.frozeAt.CompareAndSwap(nil, &now)
	}
	return l, err
}

// An etcd leader frozen stalls every write until etcd has elected another
// (2.3 s here of a 3 s renew deadline, more than the 1.1-1.8 s measured
// under the HA soak's load: the pace is left no room), and half the
// renewals sent after that still hang. At the pace the pipeline is full of
// hung renewals when the stall ends, and the term lapses: with little
// validity left, renewals must go out faster, and make room.
func TestLittleValidityLeftSendsRenewalsFaster(t *testing.T) {
	leases := &etcdLeaderFrozen{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"), stall: 2300 * time.Millisecond}
	e := startLeading(t, leases, Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, clock.RealClock{})
	eventually(t, 5*time.Second, "a few renewals", func() bool { return statsOf(e.stats).Election.Renewals >= 2 })
	from := statsOf(e.stats).Election.Renewals
	leases.armed.Store(true)
	eventually(t, 10*time.Second, "renewals answered after the stall", func() bool {
		return e.Ended() || statsOf(e.stats).Election.Renewals >= from+3
	})
	if e.Ended() {
		t.Fatalf("the leader lost its lease: %v", e.endReason())
	}
}

// seatedEtcdFreeze plays an API server whose leader-election priority
// level (API Priority and Fairness) has three seats, the requests beyond
// waiting their turn in order (one cancelled leaves the queue), in front
// of an etcd whose leader froze once armed, as traced on the HA bed: every
// write waits until another etcd leader is elected (stall), and some go to
// the frozen member and hang until cancelled, holding their seat. Another
// client's request hangs there too from the freeze on, holding a seat for
// otherHolds. Of ours, the first two seated after the freeze hang, then
// one in three.
type seatedEtcdFreeze struct {
	coordclient.LeaseInterface
	seats   chan struct{}
	stall   time.Duration
	armed   atomic.Bool
	frozeAt atomic.Pointer[time.Time]
	seated  atomic.Int32 // of ours, since the freeze
	// otherHolds: how long the other client's request holds its seat.
	otherHolds time.Duration
	done       chan struct{}
}

func (f *seatedEtcdFreeze) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	select {
	case f.seats <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-f.seats }()
	if at := f.frozeAt.Load(); at != nil {
		if n := f.seated.Add(1); n <= 2 || n%3 == 0 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		select {
		case <-time.After(time.Until(at.Add(f.stall))):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l, err := f.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
	if now := time.Now(); err == nil && f.armed.Load() && f.frozeAt.CompareAndSwap(nil, &now) {
		go func() {
			f.seats <- struct{}{}
			defer func() { <-f.seats }()
			select {
			case <-time.After(f.otherHolds):
			case <-f.done:
			}
		}()
	}
	return l, err
}

// Renewals that hang at a frozen etcd member hold their API Priority and
// Fairness seats until cancelled, and the fresh ones queue behind them: a
// leader left with little validity gives up those unanswered for long
// (all but the oldest, which a server grown slow answers first), and a
// fresh one queued behind takes the seat. Without that, the two hung here
// and another client's hold all three seats until the term has lapsed.
// The stalls are the least and the most measured under the HA soak; the
// timing is the default. (At the soak's 4/3/0.5 the same model keeps the
// term with 1.1 s to spare on an idle machine, but a busy one, under
// -race, lost it in 2 of 3 CI runs: too little slack for a unit test.)
func TestHungRenewalsLeaveTheirSeatsToFreshOnes(t *testing.T) {
	timing := Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	for _, stall := range []time.Duration{1100 * time.Millisecond, 1800 * time.Millisecond} {
		t.Run(stall.String(), func(t *testing.T) {
			t.Parallel()
			leases := &seatedEtcdFreeze{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"), seats: make(chan struct{}, 3), stall: stall, otherHolds: 2 * timing.RenewDeadline, done: make(chan struct{})}
			t.Cleanup(func() { close(leases.done) })
			e := startLeading(t, leases, timing, clock.RealClock{})
			eventually(t, 3*timing.RenewDeadline, "a few renewals", func() bool { return statsOf(e.stats).Election.Renewals >= 2 })
			from := statsOf(e.stats).Election.Renewals
			leases.armed.Store(true)
			eventually(t, 4*timing.RenewDeadline, "renewals answered while the other client holds its seat", func() bool {
				froze := leases.frozeAt.Load()
				return e.Ended() || statsOf(e.stats).Election.Renewals >= from+4 && froze != nil && time.Since(*froze) > leases.otherHolds
			})
			if e.Ended() {
				t.Fatalf("the leader lost its lease: %v", e.endReason())
			}
		})
	}
}

// countedDelay answers every renewal (PATCH) after delay, counting those
// in flight; youngestOldest is the least age, since it arrived, of the
// oldest renewal in flight when another arrived beside it (0: none did).
type countedDelay struct {
	delayedPatches
	inFlight atomic.Int32

	mu             sync.Mutex
	arrived        []time.Time // of those in flight
	youngestOldest time.Duration
}

func (c *countedDelay) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	now := time.Now()
	c.mu.Lock()
	if len(c.arrived) > 0 {
		if age := now.Sub(slices.MinFunc(c.arrived, time.Time.Compare)); c.youngestOldest == 0 || age < c.youngestOldest {
			c.youngestOldest = age
		}
	}
	c.arrived = append(c.arrived, now)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.arrived = slices.DeleteFunc(c.arrived, now.Equal)
		c.mu.Unlock()
	}()
	return c.delayedPatches.Patch(ctx, name, pt, data, opts, sub...)
}

// renewalsBlocked counts the goroutines blocked handing a renewal's
// outcome to a leader that no longer reads them.
func renewalsBlocked() int {
	buf := make([]byte, 1<<22)
	buf = buf[:goruntime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if strings.Contains(g, ").sendRenewal(") && strings.Contains(head, "[chan send") {
			n++
		}
	}
	return n
}

// A term that ends with as many renewals in flight as a leader may send
// (a slow API server, the leader left with little validity) leaves no
// worker behind: each renewal's outcome, answered after the end, is
// handed over without a reader.
func TestNoRenewalWorkerIsLeftBlockedAfterTheTerm(t *testing.T) {
	leases := &countedDelay{delayedPatches: delayedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns")}}
	e := startLeading(t, leases, Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, clock.RealClock{})
	eventually(t, 5*time.Second, "a few renewals", func() bool { return statsOf(e.stats).Election.Renewals >= 2 })
	leases.delay.Store(int64(1900 * time.Millisecond))
	eventually(t, 10*time.Second, "more renewals in flight than the pipeline's usual bound", func() bool {
		return leases.inFlight.Load() > maxRenewalsInFlight
	})
	if err := e.CancelWithin(time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every renewal answered", func() bool { return leases.inFlight.Load() == 0 })
	for range 20 {
		if n := renewalsBlocked(); n > 0 {
			t.Fatalf("%d renewal worker(s) blocked for good after the term", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A server slow, but not so slow that one renewal at a time falls behind
// (0.8 s at 4/3/0.5: a renewal still in flight at a retry period's tick
// makes the next one wait for the tick after, and leaves the leader little
// validity), is sent one renewal at a time once its slow answers are all
// it gave for a renew deadline: nothing hangs, so nothing is sent beside a
// renewal not yet late. A renewal the machine delays past the 0.875 s
// after which the pace sends one beside it (pipelineAfter) is late, and
// may have one beside it: a busy machine (CI, under -race) delays some
// by 75 ms, so the test asks only that none was sent beside a renewal
// younger than its own answer time, less a margin for the delay between a
// send and its arrival here.
func TestASlowServerThatKeepsUpIsSentOneRenewalAtATime(t *testing.T) {
	leases := &countedDelay{delayedPatches: delayedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns")}}
	timing := Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	e := startLeading(t, leases, timing, clock.RealClock{})
	eventually(t, 5*time.Second, "a few renewals", func() bool { return statsOf(e.stats).Election.Renewals >= 2 })
	const latency = 800 * time.Millisecond
	slowDown(t, e, &leases.delayedPatches, latency)
	leases.mu.Lock()
	leases.youngestOldest = 0
	leases.mu.Unlock()
	at := time.Now()
	eventually(t, 30*time.Second, "three lease durations", func() bool { return e.Ended() || time.Since(at) >= 12*time.Second })
	if e.Ended() {
		t.Fatalf("the leader lost its lease: %v", e.endReason())
	}
	leases.mu.Lock()
	age := leases.youngestOldest
	leases.mu.Unlock()
	if age != 0 && age < latency-100*time.Millisecond {
		t.Fatalf("a renewal was sent beside one in flight for %v, which the server answers in %v: nothing was late", age, latency)
	}
	if age != 0 {
		t.Logf("a renewal was sent beside one in flight for %v (the machine delayed it past %v): allowed", age, pipelineAfter(timing))
	}
}

// slowDown makes d the latency of every renewal of e's, and waits until
// its slow answers are all e saw for a renew deadline (4/3/0.5 timing).
func slowDown(t *testing.T, e *Election, leases *delayedPatches, d time.Duration) {
	t.Helper()
	leases.delay.Store(int64(d))
	from, slow := statsOf(e.stats).Election.Renewals, time.Now()
	eventually(t, 10*time.Second, "a renew deadline of answers late", func() bool {
		return e.Ended() || statsOf(e.stats).Election.Renewals >= from+2 && time.Since(slow) >= 3*time.Second+d
	})
}

// slowThenOneHangs answers every renewal (PATCH) after delay; once armed,
// the next one hangs until its context ends.
type slowThenOneHangs struct {
	delayedPatches
	armed, hung atomic.Bool
}

func (s *slowThenOneHangs) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if s.armed.Load() && s.hung.CompareAndSwap(false, true) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.delayedPatches.Patch(ctx, name, pt, data, opts, sub...)
}

// A server that answers one renewal at a time in 0.8 s at 4/3/0.5 leaves
// the leader little validity when one renewal hangs: the next must go out
// at the pace's next tick, as pipelining sends it (the renewal in flight
// is late for it), whatever the urgent rule says.
func TestASlowServersHungRenewalIsFollowedAtThePace(t *testing.T) {
	leases := &slowThenOneHangs{delayedPatches: delayedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns")}}
	e := startLeading(t, leases, Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, clock.RealClock{})
	eventually(t, 5*time.Second, "a few renewals", func() bool { return statsOf(e.stats).Election.Renewals >= 2 })
	slowDown(t, e, &leases.delayedPatches, 800*time.Millisecond)
	leases.armed.Store(true)
	at := time.Now()
	eventually(t, 20*time.Second, "a lease duration after the hang", func() bool { return e.Ended() || time.Since(at) >= 4*time.Second })
	if e.Ended() {
		t.Fatalf("the leader lost its lease %v after one renewal hung: %v", time.Since(at).Round(time.Millisecond), e.endReason())
	}
}
