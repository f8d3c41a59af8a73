package lease

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// The hand-off record is told apart from anything another writer's renewal
// or acquisition can leave on the Lease: a plain client-go candidate may
// have any identity, the hand-off record's holder name included, and keeps
// leaseTransitions and every annotation when it writes.

// handOffRecordAt is a hand-off record to "b" written at t0 over a lease a
// held with token 3.
func handOffRecordAt(t0 time.Time) *coordinationv1.Lease {
	l := testLease("l", "a", 3, t0.Add(-time.Second), 10)
	handOffSpec(l, "b", Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 2 * time.Second}, t0)
	return l
}

// clientGoWrite is what a plain client-go LeaderElector named identity
// writes over l: a renewal when it sees itself as the holder (acquireTime
// and leaseTransitions kept), else an acquisition (transitions + 1); the
// annotations stay as they were.
func clientGoWrite(l *coordinationv1.Lease, identity string, at time.Time) *coordinationv1.Lease {
	l = l.DeepCopy()
	renew := metav1.NewMicroTime(at)
	seconds := int32(15)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != identity {
		transitions := *l.Spec.LeaseTransitions + 1
		l.Spec.LeaseTransitions = &transitions
		l.Spec.AcquireTime = &renew
	}
	l.Spec.HolderIdentity = &identity
	l.Spec.RenewTime = &renew
	l.Spec.LeaseDurationSeconds = &seconds
	return l
}

func TestAHandOffRecordWrittenOverByAnotherWriterIsNoHandOff(t *testing.T) {
	t0 := testNow
	handed := handOffRecordAt(t0)
	if !recordOf(handed).handedOffTo("b") {
		t.Fatal("the hand-off record itself is not recognised")
	}
	renewed := clientGoWrite(handed, handOffHolder("b"), t0.Add(2*time.Second))
	// client-go named like the record's holder, after another client-go
	// candidate led in between (its acquisition sets acquireTime = renewTime).
	other := clientGoWrite(handed, "x", t0.Add(11*time.Second))
	acquired := clientGoWrite(other, handOffHolder("b"), t0.Add(30*time.Second))
	for name, l := range map[string]*coordinationv1.Lease{
		"renewed by client-go named like the record's holder":            renewed,
		"acquired by client-go named like the record's holder, later on": acquired,
	} {
		r := recordOf(l)
		if r.handedOffTo("b") || r.handingOff() {
			t.Errorf("%s: still taken for a hand-off to b", name)
		}
		s := snapshot{synced: true, rec: r, observedAt: t0.Add(time.Minute)}
		if act, _ := decide(s, t0.Add(time.Minute+time.Second), 10*time.Second, "b", record{}); act != actWait {
			t.Errorf("%s: the target decides %v; want wait (client-go leads it)", name, act)
		}
	}
}

// While a hand-off is pending the lease has a holder-to-be: GetHolder and
// holder watches report the target (only it may take the lease within the
// record's term), not "no holder", which would say a campaign could take
// it at once.
func TestAPendingHandOffReportsTheTarget(t *testing.T) {
	s := snapshot{synced: true, rec: recordOf(handOffRecordAt(testNow)), observedAt: testNow}
	if h, tok, ok := s.holderView(testNow.Add(time.Second)); h != "b" || tok != 3 || !ok {
		t.Fatalf("holderView of a pending hand-off = %q, %d, %v; want b, 3, true", h, tok, ok)
	}
	if h, _, _ := s.holderView(testNow.Add(10 * time.Second)); h != "" {
		t.Fatalf("holderView once the hand-off's term ran out = %q; want no holder", h)
	}
}

// A hand-off to b while a plain client-go candidate named like the
// hand-off record's holder campaigns: client-go takes the record as its
// own and renews it. The target must not take it over beside client-go,
// and the hand-off's timeout must not release client-go's live term.
func TestHandOffRecordRenewedByClientGoIsNeitherTakenNorReleased(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a := process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	cgLeading, ctx := fakeClientGoCandidate(t, client, handOffHolder("b"))
	// b's candidate record, as left by b, which is frozen: it does not
	// campaign while the hand-off's window runs.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(ctx, "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err = a.HandOff("ns", "l", "b", 1500*time.Millisecond)
	if err == nil || errors.Is(err, errReleasedInstead) {
		t.Fatalf("HandOff = %v; want the report that the lease changed before b took it, and no release", err)
	}
	eventually(t, 5*time.Second, "client-go leads the record it took as its own", cgLeading.Load)
	if l, err := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{}); err != nil || *l.Spec.HolderIdentity != handOffHolder("b") {
		t.Fatalf("after the hand-off's timeout the lease is %+v, %v; want client-go's live term, not released", l, err)
	}
	// b resumes and campaigns: it must wait while client-go renews.
	eb := process(t, client)
	e, err := eb.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	neverBesideClientGo(t, client, e, handOffHolder("b"), cgLeading, "two leaders: b took the hand-off record that client-go renews")
}

// clientGoWrites counts the writes of ns/l that name identity as the holder
// (a plain client-go candidate's acquisitions and renewals).
func clientGoWrites(client *fake.Clientset, identity string) int {
	n := 0
	for _, a := range client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "leases" {
			if l, ok := u.GetObject().(*coordinationv1.Lease); ok && l.Name == "l" && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == identity {
				n++
			}
		}
	}
	return n
}

// neverBesideClientGo waits until e follows the lease that the client-go
// candidate named identity leads, then while client-go renews it 25 times
// (2.5 s, more than e's lease duration: every renewal a chance for e to
// take the lease, at once or once it judged the term over), and fails with
// msg if e is elected meanwhile.
func neverBesideClientGo(t *testing.T, client *fake.Clientset, e *Election, identity string, cgLeading *atomic.Bool, msg string) {
	t.Helper()
	eventually(t, 5*time.Second, "the candidate following client-go's term", func() bool {
		s := e.obs.snapshot()
		return s.synced && s.rec.holder == identity
	})
	from := clientGoWrites(client, identity)
	eventually(t, 15*time.Second, "25 renewals by client-go", func() bool {
		return isClosed(e.elected) || clientGoWrites(client, identity) >= from+25
	})
	if isClosed(e.elected) {
		t.Fatal(msg)
	}
	if !cgLeading.Load() {
		t.Fatal("client-go no longer leads")
	}
}

// A hand-off record brought back whole (etcd restored from a backup taken
// during a hand-off, the Lease re-created from a dump) still reads as one:
// the target must not take it at once when this process saw a later term
// (a higher token) or the record is far older than its term by the clock.
func TestARestoredHandOffRecordIsNotTakenAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	for name, restored := range map[string]struct {
		at    time.Time
		token int32
	}{
		"a later term was seen":       {testNow, 3},
		"hours old by the wall clock": {testNow.Add(-3 * time.Hour), 5},
		"both":                        {testNow.Add(-3 * time.Hour), 3},
	} {
		o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
		x := testLease("l", "x", 5, testNow, 15)
		x.ResourceVersion = "500"
		o.applyRead(x, "500", o.seqNow()) // x leads, term 5
		h := testLease("l", "a", restored.token, restored.at, 15)
		handOffSpec(h, "t", unitTiming, restored.at)
		h.ResourceVersion = "300"
		o.applyRead(h, "300", o.seqNow()) // read afresh at an older version
		s := o.snapshot()
		if act, _ := decide(s, clk.Now(), 15*time.Second, "t", record{}); act == actAcquire {
			t.Errorf("%s: the target takes the restored hand-off record (token %d, highest seen %d) at once; want a wait of a lease duration",
				name, s.rec.token, s.highestToken)
		}
	}
	// The live hand-off is still taken at once.
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	h := testLease("l", "a", 5, testNow, 15)
	handOffSpec(h, "t", unitTiming, testNow)
	o.applyRead(h, "501", o.seqNow())
	if act, _ := decide(o.snapshot(), clk.Now(), 15*time.Second, "t", record{}); act != actAcquire {
		t.Fatalf("a live hand-off record: decide = %v; want acquire", act)
	}
}

// A hand-off to an identity that a plain client-go candidate uses: client-go
// sees itself as the observed holder (IsLeader() compares the holder with
// its identity), skips the expiry check and takes the lease WITHOUT bumping
// leaseTransitions (it keeps the old leader's token), keeping every
// annotation, so the hand-off record (holder b, no incarnation,
// handed-off-to b) stays while client-go b leads. HandOff reports "timed
// out ... the lease is released" although b leads. Any candidate of this
// library named b then takes the lease at once (decide: handedOffTo(self))
// while client-go b leads: two leaders.
func TestHandOffRegressionClientGoNamedLikeTheTargetNeverLeadsBesideUs(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a := process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	tokenA, err := ea.WaitElected(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Plain client-go candidate "b".
	cgLeading, ctx := fakeClientGoCandidate(t, client, "b")
	eventually(t, 5*time.Second, "client-go b's tries", func() bool { // each a GET of the lease
		n := 0
		for _, a := range client.Actions() {
			if g, ok := a.(k8stesting.GetAction); ok && a.GetResource().Resource == "leases" && g.GetName() == "l" {
				n++
			}
		}
		return n >= 2
	})
	if cgLeading.Load() {
		t.Fatal("client-go b leads before the hand-off")
	}
	// b's candidate record (say left by b's earlier life on this library,
	// or records unreadable: requireCampaigning then lets it through).
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(ctx, "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}

	err = a.HandOff("ns", "l", "b", 1500*time.Millisecond)
	if !errors.Is(err, ErrHandOffTimeout) || !errors.Is(err, errReleasedInstead) {
		t.Fatalf("HandOff = %v, want a timeout and a release: client-go b must not take the hand-off record", err)
	}
	_ = tokenA
	// client-go b takes the released lease the normal way; a candidate of
	// this library also named b must not lead beside it.
	eventually(t, 5*time.Second, "client-go b leads after the release", cgLeading.Load)
	b2 := process(t, client)
	eb2, err := b2.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	neverBesideClientGo(t, client, eb2, "b", cgLeading, "two leaders: library b and client-go b")
}
