package lease

import (
	"context"
	"fmt"
	"sync"
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

// The observer answers only from a snapshot it keeps current: one that
// nobody followed for a while is relisted before GetHolder or a holder
// watch answers from it; a start while the lease's leader of this process
// ends is not dropped; an observer a caller waits on is never evicted; and
// a read after a gap trusts versions over content.

// slowLists delays every list of Leases by d once armed, so that an answer
// given before the list is visible as such.
func slowLists(client *fake.Clientset, d time.Duration) *atomic.Bool {
	armed := &atomic.Bool{}
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if armed.Load() {
			time.Sleep(d)
		}
		return false, nil, nil
	})
	return armed
}

// electThenCancel leads ns/l as "a" in m and cancels: the observer is then
// unused and no longer follows the lease.
func electThenCancel(t *testing.T, m *Manager) {
	t.Helper()
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	<-e.Done()
}

// takeOver writes, as another process would, holder b with token 2.
func takeOver(t *testing.T, client *fake.Clientset) {
	t.Helper()
	l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, two := "b", int32(2)
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions = &b, &two
	l.ResourceVersion = "77"
	if _, err := client.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// After this process led and cancelled, another took the lease: the first
// GetHolder must report the new holder, not the snapshot of the release.
func TestGetHolderAfterTheFollowStoppedRelists(t *testing.T) {
	m, client, _ := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	m.SetEvents(false)
	slow := slowLists(client, 100*time.Millisecond) // before any request: reactors are not safe to add later
	electThenCancel(t, m)
	takeOver(t, client)
	slow.Store(true)
	got, err := m.GetHolder("ns", "l")
	if err != nil {
		t.Fatal(err)
	}
	if got.Holder != "b" || got.Token != 2 {
		t.Fatalf("GetHolder after the lease changed unobserved = %+v; want holder b, token 2", got)
	}
}

// The same for the first callback of a new holder watch.
func TestHolderWatchFirstCallbackAfterTheFollowStoppedIsCurrent(t *testing.T) {
	m, client, _ := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	m.SetEvents(false)
	slow := slowLists(client, 100*time.Millisecond) // before any request: reactors are not safe to add later
	electThenCancel(t, m)
	takeOver(t, client)
	slow.Store(true)
	seen := make(chan HolderState, 8)
	if _, err := m.WatchHolder("ns", "l", func(s HolderState) { seen <- s }); err != nil {
		t.Fatal(err)
	}
	select {
	case first := <-seen:
		if first.Holder != "b" || first.Token != 2 {
			t.Fatalf("first callback = %+v; want holder b, token 2", first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback within 5s")
	}
}

// countingFollows counts the observer's lists and hands out its watches.
func countingFollows(client *fake.Clientset) (lists *atomic.Int32, watches chan *watch.RaceFreeFakeWatcher) {
	lists = &atomic.Int32{}
	watches = make(chan *watch.RaceFreeFakeWatcher, 8)
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return true, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, nil
	})
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		watches <- w
		return true, w, nil
	})
	return lists, watches
}

// A new election's start() that falls between the ending leader giving up
// its share (nobody else used the observer then) and lifting its pause
// must not be dropped: the observer follows the lease again.
func TestObserverStartDuringTheEndingLeadersPauseResumes(t *testing.T) {
	client := fake.NewClientset()
	lists, watches := countingFollows(client)
	o := newObserver(client.CoordinationV1().Leases("ns"), "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	defer o.stop()
	o.start()
	first := awaitWatch(t, watches)
	leader := new(int)
	o.pauseWhileLeading(leader)
	eventually(t, 5*time.Second, "the watch to stop while leading", first.IsStopped)
	before := lists.Load()
	o.start()                     // the next election, while the pause still holds
	o.leadingEnded(leader, false) // the ending leader saw no other user
	awaitWatch(t, watches)
	if lists.Load() != before+1 {
		t.Fatalf("lists: %d before, %d after; want one list on resuming", before, lists.Load())
	}
}

// GetHolder callers waiting for the first list of their lease keep its
// observer: asking about more leases at once than maxIdleObservers must not
// evict an observer whose list is still in flight.
func TestGetHolderNeverEvictsAnObserverBeingWaitedOn(t *testing.T) {
	m, client, _ := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	slowLists(client, 200*time.Millisecond).Store(true)
	n := maxIdleObservers + 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := m.GetHolder("ns", fmt.Sprintf("l-%d", i))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	var last error
	for err := range errs {
		if err != nil {
			failed++
			last = err
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d concurrent GetHolder calls failed, e.g. %v", failed, n, last)
	}
}

// After a gap (a relist), a record with a new resourceVersion counts as a
// change even if its content is one seen before: a retried renewal can
// land again after later ones and put an older renewTime back, and the
// expiry must be counted from this sighting, not from the first.
func TestAReadAfterAGapCountsANewVersionAsAChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(testLease("l", "a", 3, testNow, 10), "10")
	clk.Step(5 * time.Second)
	o.applyRead(testLease("l", "a", 3, testNow, 10), "30") // the same content, written again
	if s := o.snapshot(); !s.observedAt.Equal(clk.Now()) {
		t.Fatalf("observedAt %v after a relist found the same content at a new version; want %v (this sighting)",
			s.observedAt.Sub(testNow), clk.Now().Sub(testNow))
	}
	clk.Step(time.Second)
	o.applyRead(testLease("l", "a", 3, testNow, 10), "30") // nothing written since
	if s := o.snapshot(); !s.observedAt.Equal(testNow.Add(5 * time.Second)) {
		t.Fatal("a relist of the very same version reset the observation time")
	}
}

// resourceVersions that go back (etcd restored from a backup) are the
// truth when read afresh: a candidate's re-read after a conflict applies
// the older version, and the Lease counts as first seen.
func TestVersionsGoingBackTreatTheLeaseAsFirstSeen(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	client := fake.NewClientset()
	leases := client.CoordinationV1().Leases("ns")
	restored := testLease("l", "a", 3, testNow, 10)
	restored.ResourceVersion = "50"
	if _, err := leases.Create(context.Background(), restored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := newObserver(leases, "l", clk, time.Minute, 0, &leaseStats{})
	o.apply(testLease("l", "a", 3, testNow, 10), "100") // before the restore
	e := newElection(Key{Namespace: "ns", Name: "l"}, "b", unitTiming, leases, o, clk, &leaseStats{}, func() bool { return false })
	clk.Step(5 * time.Second)
	if !e.refresh("100") {
		t.Fatal("refresh after a conflict learned nothing from a Lease whose version went back")
	}
	s := o.snapshot()
	if s.rec.resourceVersion != "50" || !s.observedAt.Equal(clk.Now()) {
		t.Fatalf("after the re-read: version %q, observedAt %v; want 50 and now (first seen)", s.rec.resourceVersion, s.observedAt.Sub(testNow))
	}
}
