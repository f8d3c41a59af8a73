package lease

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestDecide(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// handOffTo is the hand-off record to id written at t0 (token 3, 10 s);
	// renewedBy moves its renewTime as any other writer's write would.
	handOffTo := func(id string) record {
		r := record{exists: true, holder: handOffHolder(id), handOffTo: id, durationSeconds: 10, token: 3, renewTime: t0}
		r.handOffAt = microString(t0)
		return r
	}
	renewedBy := func(r record, later time.Duration) record { r.renewTime = r.renewTime.Add(later); return r }
	const ownLease = 12 * time.Second // the deciding candidate's lease duration
	held := record{exists: true, holder: "a", durationSeconds: 10, token: 3}
	tests := []struct {
		name      string
		snap      snapshot
		now       time.Time
		wantAct   action
		wantUntil time.Time
	}{
		{"not synced", snapshot{}, t0, actWaitSync, time.Time{}},
		{"absent", snapshot{synced: true}, t0, actCreate, time.Time{}},
		{"released", snapshot{synced: true, rec: record{exists: true, token: 3}}, t0, actAcquire, time.Time{}},
		{"held, fresh", snapshot{synced: true, rec: held, observedAt: t0}, t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"held, expired", snapshot{synced: true, rec: held, observedAt: t0}, t0.Add(10 * time.Second), actAcquire, time.Time{}},
		{"deleted while held, term running", snapshot{synced: true, lastHeld: held, lastHeldAt: t0}, t0.Add(2 * time.Second), actWait, t0.Add(10 * time.Second)},
		{"deleted while held, term over", snapshot{synced: true, lastHeld: held, lastHeldAt: t0}, t0.Add(11 * time.Second), actCreate, time.Time{}},
		{"deleted after release", snapshot{synced: true, lastHeld: record{exists: true}, lastHeldAt: t0}, t0, actCreate, time.Time{}},
		// A release written by someone other than the holder (a plain
		// client-go candidate's tryRelease after a partition healed keeps
		// our incarnation annotation): the holder may still act until its
		// next renewal, so its term is waited out.
		{"released by another writer, term running", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: held, lastHeldAt: t0}, t0.Add(2 * time.Second), actWait, t0.Add(ownLease)},
		{"released by another writer, term over", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: held, lastHeldAt: t0}, t0.Add(ownLease), actAcquire, time.Time{}},
		{"released by another writer, the holder's longer term", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: record{exists: true, holder: "a", durationSeconds: 20, token: 3, incarnation: "x"}, lastHeldAt: t0},
			t0.Add(15 * time.Second), actWait, t0.Add(20 * time.Second)},
		// First seen by a fresh observer (or after renewals were missed):
		// the release landed after the holder's last renewal, so waiting a
		// lease duration (the longer of ours and the holder's) from its
		// first sight is safe.
		{"released by another writer, first seen now", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			observedAt: t0}, t0.Add(time.Second), actWait, t0.Add(ownLease)},
		{"released by another writer, seen after missed renewals", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: held, lastHeldAt: t0, observedAt: t0.Add(30 * time.Second)}, t0.Add(31 * time.Second), actWait, t0.Add(30*time.Second + ownLease)},
		{"deleted while held, seen after missed renewals", snapshot{synced: true, lastHeld: held, lastHeldAt: t0, observedAt: t0.Add(30 * time.Second)},
			t0.Add(31 * time.Second), actWait, t0.Add(40 * time.Second)},
		// A hand-off record (K8sLeaseHandOff): the target takes it at once;
		// every other candidate waits its term out, as for a live holder.
		{"handed off to me", snapshot{synced: true, rec: handOffTo("me"), observedAt: t0}, t0, actAcquire, time.Time{}},
		{"handed off to another", snapshot{synced: true, rec: handOffTo("b"), observedAt: t0}, t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"handed off to another, who never took it", snapshot{synced: true, rec: handOffTo("b"), observedAt: t0}, t0.Add(10 * time.Second), actAcquire, time.Time{}},
		// The record renewed by someone else since (a client-go candidate
		// named like its holder): no hand-off any more, a live holder.
		{"a hand-off record renewed by another writer", snapshot{synced: true, rec: renewedBy(handOffTo("me"), time.Second), observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"held by me in another incarnation (a restart): not a hand-off", snapshot{synced: true,
			rec: record{exists: true, holder: "me", incarnation: "old", durationSeconds: 10, token: 3}, observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		// client-go, whatever its identity, never takes a hand-off record
		// over (it is nobody's): a record naming us as holder is not one.
		{"held by me (no incarnation: client-go named like us), not a hand-off", snapshot{synced: true,
			rec: record{exists: true, holder: "me", handOffTo: "me", durationSeconds: 10, token: 3}, observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"a hand-off to me already taken up (incarnation set)", snapshot{synced: true,
			rec: record{exists: true, holder: "me", incarnation: "other", handOffTo: "me", durationSeconds: 10, token: 4}, observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
	}
	for _, tt := range tests {
		act, until := decide(tt.snap, tt.now, ownLease, "me", record{})
		if act != tt.wantAct || !until.Equal(tt.wantUntil) {
			t.Errorf("%s: decide = %v, %v; want %v, %v", tt.name, act, until, tt.wantAct, tt.wantUntil)
		}
	}
}

// An acquisition of this very candidacy whose answer was lost (or refused
// after it landed) is adopted: only that very write (its incarnation, token
// and renewTime), and not once a later term was seen (a restore brought it
// back while another leads).
func TestDecideAdoptsOnlyTheWriteLeftUnanswered(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mine := record{exists: true, holder: "me", incarnation: "mine", durationSeconds: 10, token: 3, renewTime: t0}
	later := mine
	later.renewTime = t0.Add(time.Second)
	for _, tc := range []struct {
		name       string
		snap       snapshot
		unanswered record
		want       action
	}{
		{"the write whose answer was lost", snapshot{synced: true, rec: mine, highestToken: 3, observedAt: t0}, mine, actAdopt},
		{"the same write, after a later term was seen", snapshot{synced: true, rec: mine, highestToken: 4, observedAt: t0}, mine, actWait},
		{"another write of this incarnation", snapshot{synced: true, rec: later, highestToken: 3, observedAt: t0}, mine, actWait},
		{"no write unanswered", snapshot{synced: true, rec: mine, highestToken: 3, observedAt: t0}, record{}, actWait},
	} {
		if got, _ := decide(tc.snap, t0.Add(time.Second), 12*time.Second, "me", tc.unanswered); got != tc.want {
			t.Errorf("%s: decide = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// A candidate blocked by an error only an operator cures, and what it
// reports once cured.

// Cancel of a candidate blocked by 403 (in its fix backoff) returns at once.
func TestCancelWhileBlockedIsPrompt(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	m.SetEvents(false)
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, forbiddenErr()
	})
	e, err := m.RunElection("ns", "l", "b", Timing{LeaseDuration: 60 * time.Second, RenewDeadline: 40 * time.Second, RetryPeriod: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "blocked", func() bool { return e.lastAPIError() != nil })
	done := make(chan error, 1)
	go func() { done <- e.Cancel() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // the backoff is 10 s and more: this is a hang, not a timing
		t.Fatal("Cancel of a blocked candidate did not return")
	}
}

// After the operator fixes RBAC, a standby that now waits behind another
// holder must not report the cured 403 (Stats, WaitElected's message).
func TestCuredErrorNotReportedAsWaitReason(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	m.SetEvents(false)
	var deny atomic.Bool
	deny.Store(true)
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if deny.Load() {
			return true, nil, forbiddenErr()
		}
		return false, nil, nil
	})
	e, err := m.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "blocked", func() bool { return e.lastAPIError() != nil })
	// The operator fixes RBAC; meanwhile another process took the lease.
	deny.Store(false)
	other := testLease("l", "other", 1, time.Now(), 3600)
	other.ResourceVersion = ""
	if _, err := client.CoordinationV1().Leases("ns").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the standby sees the holder", func() bool {
		s := e.obs.snapshot()
		return s.synced && s.rec.holder == "other"
	})
	eventually(t, 5*time.Second, "the cured error cleared from the stats", func() bool {
		for _, s := range m.Stats() {
			if s.Election != nil && s.Election.LastAPIError != "" {
				return false
			}
		}
		return true
	})
	if _, err = e.WaitElected(200 * time.Millisecond); err == nil || strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("WaitElected = %v, want a timeout that does not blame the cured 403", err)
	}
}

// A leader elected after a 403 was cured, whose renewals then get no
// answer, must not blame the cured 403 for the loss.
func TestCuredErrorNotReportedAsLossReason(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	m.SetEvents(false)
	var deny, hang atomic.Bool
	var e *Election
	deny.Store(true)
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if deny.Load() {
			return true, nil, forbiddenErr()
		}
		return false, nil, nil
	})
	client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if hang.Load() { // no answer within the renew deadline
			waitUntil(10*time.Second, func() bool { ok, _, _ := e.IsLeader(); return !ok })
			return true, nil, apierrors.NewTimeoutError("slow", 1)
		}
		return false, nil, nil
	})
	e, err := m.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "blocked", func() bool { return e.lastAPIError() != nil })
	deny.Store(false)
	if _, err := e.WaitElected(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	lost := e.WaitLost()
	if lost == nil || !errors.Is(lost, ErrRenewDeadline) || strings.Contains(lost.Error(), "forbidden") {
		t.Fatalf("WaitLost = %v, want a renew deadline loss that does not blame the cured 403", lost)
	}
	hang.Store(false)
	_ = m.Shutdown(5 * time.Second)
}

// A leader whose renewals are refused (401, 403) stops leading by the end
// of its guarantee, never later.
func TestRenewalRefusedEndsLeadershipByTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"403", forbiddenErr},
		{"401", func() error { return apierrors.NewUnauthorized("token revoked") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, client, _ := fakeManager()
			m.clock = clock.RealClock{}
			m.SetEvents(false)
			var fail atomic.Bool
			client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
				if fail.Load() {
					return true, nil, tc.err()
				}
				return false, nil, nil
			})
			e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.WaitElected(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			fail.Store(true)
			_, _, left := e.IsLeader()
			failedAt := time.Now()
			lost := e.WaitLost()
			if !errors.Is(lost, ErrRenewDeadline) {
				t.Fatalf("WaitLost = %v, want the renew deadline", lost)
			}
			// The guarantee is checked locally (IsLeader turns 0 at
			// validUntil by itself); the loss is reported at it.
			if ok, _, _ := e.IsLeader(); ok {
				t.Fatal("still leader after the loss")
			}
			t.Logf("lost %v after the first refusal (guarantee left then: %v): %v", time.Since(failedAt).Round(time.Millisecond), left, lost)
			_ = m.Shutdown(2 * time.Second)
		})
	}
}

// An acquisition answered with less than a retry period of its validity
// left (it counts from the send: traced in the soak, answered 2982 ms into
// a 3 s renew deadline at an etcd-member freeze) is no term to announce:
// the host would serve for milliseconds and then be told it lost. The
// library renews first and announces on that renewal's answer, with the
// validity it gives; when the renewal is refused, it announces nothing
// and adopts the Lease it holds (the acquisition landed) as soon as that
// is answered in time.
func TestAnAcquisitionAnsweredWithNoTimeToServeIsRenewedBeforeItIsAnnounced(t *testing.T) {
	for _, refused := range []bool{false, true} {
		m, client, clk := fakeManager()
		late := unitTiming.RenewDeadline - 20*time.Millisecond
		var stepped, failed atomic.Bool
		client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
			if stepped.CompareAndSwap(false, true) {
				clk.Step(late) // the answer comes 20 ms before the validity it gives ends
			}
			return false, nil, nil
		})
		client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
			if refused && failed.CompareAndSwap(false, true) {
				return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
			}
			return false, nil, nil
		})
		e, err := m.RunElection("ns", "l", "a", unitTiming)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-e.elected:
		case <-time.After(5 * time.Second):
			t.Fatalf("refused %v: not elected within 5 s", refused)
		}
		leads, _, left := e.IsLeader()
		if !leads || left < unitTiming.RetryPeriod {
			t.Errorf("refused %v: announced with %v of validity left (leader: %v); want at least a retry period (%v)", refused, left, leads, unitTiming.RetryPeriod)
		}
		if s := m.Stats()[0]; s.Election.Losses["renew_deadline"] != 0 || s.Election.Acquisitions != 1 {
			t.Errorf("refused %v: %d acquisitions, losses %v; want 1 and none", refused, s.Election.Acquisitions, s.Election.Losses)
		}
		_ = m.Shutdown(5 * time.Second)
	}
}

// The renewal sent before announcing a term may land unanswered: the
// Lease then shows it, not the acquisition, and both are writes only this
// candidacy makes. The next round adopts either.
func TestARenewalBeforeAnnouncingThatLandedUnansweredIsAdopted(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	leases := fake.NewClientset().CoordinationV1().Leases("ns")
	obs := newObserver(leases, "l", clk, time.Minute, 0, &leaseStats{})
	e := newElection(Key{"ns", "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clk, stats: &leaseStats{}})
	acquisition := testLease("l", "a", 4, testNow, 15)
	holdSpec(acquisition, e.identity, e.incarnation, 4, unitTiming, testNow, true)
	renewal := acquisition.DeepCopy()
	renewedAt := metav1.NewMicroTime(testNow.Add(2900 * time.Millisecond))
	renewal.Spec.RenewTime = &renewedAt
	e.term.unanswered, e.term.unansweredRenewal = recordOf(acquisition), recordOf(renewal)
	for _, shown := range []*coordinationv1.Lease{acquisition, renewal} {
		s := snapshot{synced: true, rec: recordOf(shown), highestToken: 4}
		if act, _ := decide(s, clk.Now(), unitTiming.LeaseDuration, e.identity, e.unansweredWrite(s)); act != actAdopt {
			t.Errorf("the Lease shows the write renewed at %v: %v; want %v", shown.Spec.RenewTime.Time, act, actAdopt)
		}
	}
	other := renewal.DeepCopy()
	otherAt := metav1.NewMicroTime(testNow.Add(5 * time.Second))
	other.Spec.RenewTime = &otherAt
	s := snapshot{synced: true, rec: recordOf(other), highestToken: 4}
	if act, _ := decide(s, clk.Now(), unitTiming.LeaseDuration, e.identity, e.unansweredWrite(s)); act == actAdopt {
		t.Error("a record of ours that is neither write was adopted")
	}
}
