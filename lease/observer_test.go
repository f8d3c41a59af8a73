package lease

import (
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestObserverApply(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	notify := o.subscribe()

	o.apply(testLease("l", "a", 3, testNow, 10), "10")
	s := o.snapshot()
	if !s.synced || s.rec.holder != "a" || !s.observedAt.Equal(testNow) || s.highestToken != 3 {
		t.Fatalf("first apply: %+v", s)
	}
	select {
	case <-notify:
	default:
		t.Fatal("no notification")
	}

	clk.Step(time.Second)
	o.apply(testLease("l", "old", 1, testNow, 10), "9") // stale: ignored
	if s := o.snapshot(); s.rec.holder != "a" {
		t.Fatalf("stale state applied: %+v", s.rec)
	}

	o.apply(testLease("l", "a", 3, testNow, 10), "11") // same record, newer RV
	if s := o.snapshot(); !s.observedAt.Equal(testNow) {
		t.Fatal("an unchanged record reset the observation time")
	}

	clk.Step(time.Second)
	o.apply(testLease("l", "a", 3, testNow.Add(2*time.Second), 10), "12") // renewal
	if s := o.snapshot(); !s.observedAt.Equal(testNow.Add(2 * time.Second)) {
		t.Fatal("a renewal did not reset the observation time")
	}

	clk.Step(time.Second)
	o.apply(nil, "13") // deleted
	s = o.snapshot()
	if s.rec.exists || s.lastHeld.holder != "a" || !s.lastHeldAt.Equal(testNow.Add(2*time.Second)) || s.highestToken != 3 {
		t.Fatalf("after deletion: %+v", s)
	}
}

func TestHolderView(t *testing.T) {
	s := snapshot{synced: true, rec: recordOf(testLease("l", "a", 2, testNow, 10)), observedAt: testNow}
	tests := []struct {
		at         time.Time
		wantHolder string
	}{
		{testNow, "a"}, {testNow.Add(9999 * time.Millisecond), "a"}, {testNow.Add(10 * time.Second), ""},
	}
	for _, tt := range tests {
		if h, tok, ok := s.holderView(tt.at); h != tt.wantHolder || tok != 2 || !ok {
			t.Errorf("holderView(%v) = %q, %d, %v", tt.at.Sub(testNow), h, tok, ok)
		}
	}
	if h, tok, ok := (snapshot{synced: true}).holderView(testNow); h != "" || tok != 0 || ok {
		t.Errorf("absent: %q %d %v", h, tok, ok)
	}
}

// While this process leads, the observer holds no watch (renewals check the
// Lease); when the leadership ends it lists and watches again.
func TestObserverPausesWatchWhileLeading(t *testing.T) {
	client := fake.NewClientset()
	watches := make(chan *watch.RaceFreeFakeWatcher, 4)
	var lists atomic.Int32
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return true, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, nil
	})
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		watches <- w
		return true, w, nil
	})
	o := newObserver(client.CoordinationV1().Leases("ns"), "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	o.start()

	leader, other := new(int), new(int)
	first := awaitWatch(t, watches)
	o.pauseWhileLeading(leader)
	eventually(t, 5*time.Second, "the watch to stop while leading", first.IsStopped)
	listsWhileLeading := lists.Load()
	awaitNoFollowLoop(t, o) // nothing left that could open a watch
	select {
	case <-watches:
		t.Fatal("a watch was opened while leading")
	default:
	}

	o.leadingEnded(other, true) // not the election that paused it
	awaitNoFollowLoop(t, o)
	select {
	case <-watches:
		t.Fatal("another election's end resumed the watch")
	default:
	}
	o.leadingEnded(leader, true)
	second := awaitWatch(t, watches)
	if lists.Load() != listsWhileLeading+1 {
		t.Errorf("lists: %d before resuming, %d after; want one list on resuming", listsWhileLeading, lists.Load())
	}
	o.pauseWhileLeading(leader)
	o.leadingEnded(leader, true) // a quick flip: the next loop starts after the last one returned
	eventually(t, 5*time.Second, "the second watch to stop", second.IsStopped)
	awaitWatch(t, watches)
	if s := o.snapshot(); s.err != nil || statsOf(o.stats).Restarts != 0 {
		t.Errorf("pausing counted as a failure: err %v, %d watch restarts", s.err, statsOf(o.stats).Restarts)
	}
	o.pauseWhileLeading(leader)
	o.stop()
	o.leadingEnded(leader, true) // after stop: nothing starts again
	awaitNoFollowLoop(t, o)
	select {
	case <-watches:
		t.Fatal("a watch was opened after stop")
	default:
	}
}

// awaitNoFollowLoop waits until o runs no follow loop: none is started
// and the last one has returned, so no list or watch can be sent before a
// resume.
func awaitNoFollowLoop(t *testing.T, o *observer) {
	t.Helper()
	o.mu.Lock()
	running, done := o.cancelLoop != nil, o.loopDone
	o.mu.Unlock()
	if running {
		t.Fatal("the observer follows the lease")
	}
	if done != nil {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the observer's follow loop did not return")
		}
	}
}

// A list is the truth: after an etcd restore resource versions can go
// backwards, and a list answering with an older one than the snapshot's
// must still replace it (watch events older than the snapshot stay
// ignored).
func TestListReplacesTheSnapshotEvenWithAnOlderResourceVersion(t *testing.T) {
	client := fake.NewClientset()
	restored := testLease("l", "after-restore", 2, testNow, 10)
	restored.ResourceVersion = "5"
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "5"},
			Items: []coordinationv1.Lease{*restored}}, nil
	})
	o := newObserver(client.CoordinationV1().Leases("ns"), "l", clocktesting.NewFakeClock(testNow), time.Minute, 0, &leaseStats{})
	o.apply(testLease("l", "before-restore", 7, testNow, 10), "100")
	if _, err := o.list(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if s := o.snapshot(); s.rec.holder != "after-restore" || s.rec.resourceVersion != "5" || s.highestToken != 7 {
		t.Fatalf("after a list with an older resource version: holder %q, rv %q, highest token %d; want the list's state, the highest token kept",
			s.rec.holder, s.rec.resourceVersion, s.highestToken)
	}
}

// A watch the server closes at once is not reopened at round-trip speed.
func TestWatchClosedAtOnceIsReopenedWithBackoff(t *testing.T) {
	client := fake.NewClientset()
	var watches atomic.Int32
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		watches.Add(1)
		w := watch.NewRaceFreeFake()
		w.Stop() // closed before any event
		return true, w, nil
	})
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(client.CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.start()
	// 500 ms pass on the fake clock, each step once the loop waits on it: a
	// watch reopened at round-trip speed never waits.
	waits := func() {
		eventually(t, 10*time.Second, "the loop waiting", func() bool { return clk.HasWaiters() || watches.Load() > 10 })
	}
	for elapsed := time.Duration(0); elapsed < 500*time.Millisecond && watches.Load() <= 10; elapsed += 10 * time.Millisecond {
		waits()
		clk.Step(10 * time.Millisecond)
	}
	waits()
	o.stop()
	if n := watches.Load(); n < 1 || n > 10 {
		t.Fatalf("%d watches opened in 500 ms by a server that closes each at once; want a few, with a floor between them", n)
	}
}

// A Lease released and then deleted is free at once: the release ended the
// holder's term, so nobody waits for it to run out before re-creating.
func TestReleasedThenDeletedLeaseIsFreeAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.apply(testLease("l", "a", 3, testNow, 10), "10")
	o.apply(testLease("l", "", 3, testNow, 1), "11") // released
	o.apply(nil, "12")                               // deleted
	if act, _ := decide(o.snapshot(), clk.Now(), 10*time.Second, "me", record{}); act != actCreate {
		t.Fatalf("after release then delete: %v, want create at once", act)
	}
	o.apply(testLease("l", "b", 4, testNow, 10), "13")
	o.apply(nil, "14") // deleted while held: the term must run out first
	if act, until := decide(o.snapshot(), clk.Now(), 10*time.Second, "me", record{}); act != actWait || !until.Equal(testNow.Add(10*time.Second)) {
		t.Fatalf("after a delete while held: %v until %v, want wait until the term ran out", act, until)
	}
}
