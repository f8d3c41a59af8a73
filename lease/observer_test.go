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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
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

// The observer answers only from a snapshot it keeps current: one that
// nobody followed for a while is relisted before GetHolder or a holder
// watch answers from it; a start while the lease's leader of this process
// ends is not dropped; an observer a caller waits on is never evicted; and
// a read after a gap trusts versions over content.

// heldListsManager is fakeManager whose lists of Leases, once armed, each
// call hold first, on the client side (outside the fake's global lock): a
// list held until the caller waits for it shows an answer given before it.
func heldListsManager(hold func()) (m *Manager, client *fake.Clientset, armed *atomic.Bool) {
	m, client, _ = fakeManager()
	armed = &atomic.Bool{}
	m.api.kube = clientsetapi.Wrap(hooked{Clientset: client, beforeList: func(metav1.ListOptions) {
		if armed.Load() {
			hold()
		}
	}})
	return m, client, armed
}

// until is a hold that lasts until cond holds (10 s at most).
func until(cond func() bool) func() { return func() { waitUntil(10*time.Second, cond) } }

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
	m, client, slow := heldListsManager(until(func() bool { return waitingIn("(*observer).awaitSynced") > 0 })) // until GetHolder waits
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	m.SetEvents(false)
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
	m, client, slow := heldListsManager(until(func() bool { return waitingIn("(*HolderWatch).run") > 0 })) // until the watch waits
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	m.SetEvents(false)
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
	n := maxIdleObservers + 8
	var inFlight atomic.Int32
	m, _, slow := heldListsManager(func() { // until every list is in flight
		inFlight.Add(1)
		waitUntil(10*time.Second, func() bool { return inFlight.Load() >= int32(n) })
	})
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	slow.Store(true)
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
	o.applyRead(testLease("l", "a", 3, testNow, 10), "10", o.seqNow())
	clk.Step(5 * time.Second)
	o.applyRead(testLease("l", "a", 3, testNow, 10), "30", o.seqNow()) // the same content, written again
	if s := o.snapshot(); !s.observedAt.Equal(clk.Now()) {
		t.Fatalf("observedAt %v after a relist found the same content at a new version; want %v (this sighting)",
			s.observedAt.Sub(testNow), clk.Now().Sub(testNow))
	}
	clk.Step(time.Second)
	o.applyRead(testLease("l", "a", 3, testNow, 10), "30", o.seqNow()) // nothing written since
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "b", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: o, clock: clk, stats: &leaseStats{}})
	clk.Step(5 * time.Second)
	if !e.refresh("100") {
		t.Fatal("refresh after a conflict learned nothing from a Lease whose version went back")
	}
	s := o.snapshot()
	if s.rec.resourceVersion != "50" || !s.observedAt.Equal(clk.Now()) {
		t.Fatalf("after the re-read: version %q, observedAt %v; want 50 and now (first seen)", s.rec.resourceVersion, s.observedAt.Sub(testNow))
	}
}

// heldGet answers a Get with answer once proceed is closed (announcing on
// entered first): a re-read whose answer arrives after the watch moved on.
type heldGet struct {
	coordclient.LeaseInterface
	entered, proceed chan struct{}
	answer           *coordinationv1.Lease
}

func (g heldGet) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	close(g.entered)
	<-g.proceed
	return g.answer.DeepCopy(), nil
}

func leaseAt(holder string, token int32, renewed time.Time, seconds int32, rv string) *coordinationv1.Lease {
	l := testLease("l", holder, token, renewed, seconds)
	l.ResourceVersion = rv
	return l
}

// refreshRacingTheWatch runs a candidate's re-read after a conflict whose
// answer (stale) arrives after the watch applied watched.
func refreshRacingTheWatch(t *testing.T, o *observer, stale *coordinationv1.Lease, watched func()) {
	t.Helper()
	g := heldGet{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"),
		entered: make(chan struct{}), proceed: make(chan struct{}), answer: stale}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "c", unitTiming, ElectionOptions{}, electionParts{leases: g, obs: o, clock: o.clock, stats: &leaseStats{}})
	done := make(chan struct{})
	go func() { defer close(done); e.refresh(o.snapshot().rec.resourceVersion) }()
	<-g.entered
	watched()
	close(g.proceed)
	<-done
}

// A re-read served before a takeover and answered after the watch showed
// it must not put the older state back: a deletion seen next would then
// have no holder to wait out (the snapshot's last holder would be the
// release), and the candidate would re-create the Lease while x leads.
func TestARefreshAnsweredLateDoesNotUndoANewerTakeover(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(leaseAt("y", 1, testNow, 15, "100"), "100", o.seqNow())
	o.apply(leaseAt("", 1, testNow, 1, "101"), "101") // y released
	refreshRacingTheWatch(t, o, leaseAt("", 1, testNow, 1, "101"), func() {
		clk.Step(100 * time.Millisecond)
		o.apply(leaseAt("x", 2, clk.Now(), 15, "102"), "102") // x took it, and leads
	})
	if s := o.snapshot(); s.rec.holder != "x" {
		t.Fatalf("after the late re-read the snapshot holds %q at %s; want x at 102", s.rec.holder, s.rec.resourceVersion)
	}
	o.apply(nil, "103") // an operator deletes the Lease
	if act, _ := decide(o.snapshot(), clk.Now(), 15*time.Second, "c", record{}); act != actWait {
		t.Fatalf("decide after x took the Lease and it was deleted = %v; want wait (x's term)", act)
	}
}

// The same when the watch showed a deletion: the late answer must not bring
// the Lease back, or the candidate would only ever send Updates (NotFound)
// and never re-create it.
func TestARefreshAnsweredLateDoesNotUndoADeletion(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(leaseAt("x", 2, testNow, 15, "101"), "101", o.seqNow())
	refreshRacingTheWatch(t, o, leaseAt("x", 2, testNow, 15, "101"), func() { o.apply(nil, "102") })
	if s := o.snapshot(); s.rec.exists {
		t.Fatalf("after the late re-read the snapshot has the Lease at %s; want it deleted", s.rec.resourceVersion)
	}
}

// An acquisition answered NotFound (the Lease deleted since the snapshot)
// is learnt from: the candidate re-creates the Lease once the last
// holder's term ran out, even when no watch event tells it.
func TestAnAcquisitionAnsweredNotFoundLeadsToARecreate(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	client := fake.NewClientset()
	leases := client.CoordinationV1().Leases("ns")
	o := newObserver(leases, "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(leaseAt("x", 2, testNow, 15, "101"), "101", o.seqNow()) // the Lease is gone from the server
	e := newElection(Key{Namespace: "ns", Name: "l"}, "c", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: o, clock: clk, stats: &leaseStats{}})
	notify := o.subscribe()
	done := make(chan struct{})
	go func() { defer close(done); _ = e.campaign(notify, clk.Now()) }()
	defer func() { e.ending.cancel(); clk.Step(time.Hour); <-done }()
	recreated := func() bool {
		_, err := leases.Get(context.Background(), "l", metav1.GetOptions{})
		return err == nil
	}
	for range 200 { // a second of fake time at each wait of the campaign
		// The campaign waits on the clock (a retry's sleep, or a wait for
		// the term to run out): the candidate record's timer, also on it, is
		// no sign of that.
		waiting := func() bool { return waitingIn("(*Election).waitFor")+waitingIn("(*Election).sleep") > 0 }
		if !waitUntil(10*time.Second, func() bool { return waiting() || recreated() }) {
			t.Fatal("the campaign neither waits nor re-created the Lease")
		}
		if recreated() {
			return
		}
		clk.Step(time.Second)
	}
	t.Fatalf("the Lease was not re-created within 200 s of fake time (snapshot: exists %v at %s)",
		o.snapshot().rec.exists, o.snapshot().rec.resourceVersion)
}

// A GetHolder waiting on a resumed loop's list while this process's own
// election acquires: the pause that follows makes the snapshot live, and
// must wake the waiter (the list it waited for is cut short by the pause).
func TestThePauseOfANewLeaderWakesAGetHolderWaitingForAList(t *testing.T) {
	client := fake.NewClientset()
	release := make(chan struct{})
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release // a list in flight
		return false, nil, nil
	})
	defer close(release)
	o := newObserver(client.CoordinationV1().Leases("ns"), "l", clocktesting.NewFakeClock(testNow), time.Minute, 0, &leaseStats{})
	defer func() { go o.stop() }()
	o.applyRead(leaseAt("", 1, testNow, 1, "10"), "10", o.seqNow()) // followed before, then idle
	o.start()                                                       // resumed: lists first
	got := make(chan error, 1)
	go func() { _, err := o.awaitSynced(time.Second); got <- err }()
	awaitWaitingIn(t, "(*observer).awaitSynced", 1)
	o.apply(leaseAt("a", 2, testNow, 15, "11"), "11") // our acquisition's answer: the waiter looks again
	awaitWaitingIn(t, "(*observer).awaitSynced", 1)   // not live yet: it waits again
	o.pauseWhileLeading(new(int))
	if err := receive(t, got, 10*time.Second, "the pause waking awaitSynced"); err != nil {
		t.Fatalf("awaitSynced with a live snapshot there: %v", err)
	}
}

// A candidate's re-read after a conflict shows, after a gap (the watch is
// down), the holder's record at a NEW resourceVersion with the SAME content
// as the snapshot (a renewal patch that landed twice: rv 10 = P1, rv 11 = P2,
// rv 12 = P1 again). A relist
// racing the re-read (served before rv 11: the very same rv 10) must not
// make the re-read lose that rule: the expiry counts from this sighting,
// or the candidate would take the Lease at rv 12 while the holder's P2
// term may still run.
func TestAReadRacingARelistStillCountsANewVersionAsAChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(leaseAt("h", 3, testNow, 15, "10"), "10", o.seqNow()) // P1 seen at testNow
	clk.Step(16 * time.Second)                                        // judged expired; CAS at rv 10 conflicts (rv 11, 12 exist)
	listSent := o.seqNow()                                            // the follow loop's relist, sent before the re-read
	refreshRacingTheWatch(t, o, leaseAt("h", 3, testNow, 15, "12"), func() {
		o.applyList(leaseAt("h", 3, testNow, 15, "10"), "10", listSent, 0) // served before rv 11: the same version again
	})
	s := o.snapshot()
	if s.rec.resourceVersion != "12" {
		t.Fatalf("rv %s", s.rec.resourceVersion)
	}
	if act, _ := decide(s, clk.Now(), 15*time.Second, "c", record{}); act == actAcquire {
		t.Fatalf("after a re-read found the same content at a new version (rv 10 -> 12, a gap): decide = acquire, observedAt %v ago; want a wait of a lease duration from this sighting (as without the racing relist)",
			clk.Now().Sub(s.observedAt))
	}
}

// Control: the same without the racing relist waits (read semantics).
func TestAReadAfterAGapAtANewVersionWaitsATerm(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(leaseAt("h", 3, testNow, 15, "10"), "10", o.seqNow())
	clk.Step(16 * time.Second)
	refreshRacingTheWatch(t, o, leaseAt("h", 3, testNow, 15, "12"), func() {})
	if act, _ := decide(o.snapshot(), clk.Now(), 15*time.Second, "c", record{}); act == actAcquire {
		t.Fatal("control: acquire")
	}
}

// An absence learnt after a gap keeps what is known of the last holder: a
// release another writer wrote over y's record (y's incarnation kept) is
// waited out for y's whole term, with the watch up or after a relist.
func TestAGapKeepsTheLastKnownHoldersTerm(t *testing.T) {
	run := func(gap bool) time.Time {
		clk := clocktesting.NewFakeClock(testNow)
		o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
		held := leaseAt("y", 1, testNow, 30, "100")
		held.Annotations = map[string]string{IncarnationAnnotation: "y-inc"}
		o.applyRead(held, "100", o.seqNow())
		clk.Step(time.Second)
		rel := leaseAt("", 1, testNow, 1, "101")
		rel.Annotations = map[string]string{IncarnationAnnotation: "y-inc"} // client-go keeps annotations
		o.apply(rel, "101")
		clk.Step(time.Second)
		if gap {
			o.applyList(nil, "102", o.seqNow(), 0) // a relist finds it gone
		} else {
			o.apply(nil, "102") // the watch's Deleted event
		}
		act, until := decide(o.snapshot(), clk.Now(), 5*time.Second, "c", record{})
		if act != actWait {
			t.Fatalf("gap=%v: %v", gap, act)
		}
		return until
	}
	watched, relisted := run(false), run(true)
	if relisted.Before(watched) || relisted.Before(testNow.Add(30*time.Second)) {
		t.Fatalf("waits until +%v with the watch up, +%v after a gap; want y's 30 s term at least, in both", watched.Sub(testNow), relisted.Sub(testNow))
	}
}

// A released Lease deleted afterwards is free at once, also for the
// process that released it and stands again (its observer relists first).
func TestOwnReleaseThenDeleteThenStandAgainIsFreeAtOnce(t *testing.T) {
	client := fake.NewClientset()
	m := process(t, client)
	a, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if err := client.CoordinationV1().Leases("ns").Delete(context.Background(), "l", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := m.RunElection("ns", "l", "c", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitElected(4 * time.Second); err != nil { // a lease duration is 15 s: 4 s is "at once" on any machine
		t.Fatalf("standing again after our own release and a deletion: %v", err)
	}
}

// A GET that found the Lease gone keeps the last resourceVersion, so that a
// list sent at the same time and served before the deletion is not taken
// for newer and does not bring the Lease back.
func TestAListOlderThanALearntDeletionDoesNotBringTheLeaseBack(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(leaseAt("z", 2, testNow, 15, "102"), "102", o.seqNow())
	sent := o.seqNow()                                               // a relist and a re-read, both sent now
	o.applyGone(sent)                                                // the GET, served after the deletion
	o.applyList(leaseAt("z", 2, testNow, 15, "102"), "102", sent, 0) // the list, served before it
	if s := o.snapshot(); s.rec.exists {
		t.Fatalf("a list older than the deletion put the Lease back (rv %s)", s.rec.resourceVersion)
	}
}

// withUID is l with the UID a real API server gives every object.
func withUID(l *coordinationv1.Lease, uid types.UID) *coordinationv1.Lease {
	l.UID = uid
	return l
}

// A list, or a lagging watch, that shows a renewal this process never saw
// (one version above the last known) after a read learnt the deletion must
// not bring the deleted Lease back: the deleted object (its UID) cannot
// come back, whatever its version.
func TestAStateOfALearntDeletedLeaseNeverBringsItBack(t *testing.T) {
	for _, via := range []string{"list", "watch"} {
		t.Run(via, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(testNow)
			o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
			o.applyRead(withUID(leaseAt("z", 2, testNow, 15, "102"), "uid-1"), "102", o.seqNow())
			sent := o.seqNow()                                                               // a relist and a re-read, both sent now
			o.applyGone(sent)                                                                // the GET, served after the deletion
			unseen := withUID(leaseAt("z", 2, testNow.Add(time.Second), 15, "103"), "uid-1") // z's renewal just before the deletion
			if via == "list" {
				o.applyList(unseen, "103", sent, 0)
			} else {
				o.apply(unseen, "103")
			}
			if s := o.snapshot(); s.rec.exists {
				t.Fatalf("a %s at rv 103 of the deleted Lease put it back", via)
			}
			o.apply(withUID(leaseAt("w", 3, testNow, 15, "110"), "uid-2"), "110") // re-created: another object
			if s := o.snapshot(); !s.rec.exists || s.rec.holder != "w" {
				t.Fatalf("the re-created Lease (a new UID) was not taken: %+v", s.rec)
			}
		})
	}
}

// Once a renewal's compare-and-swap failed (another holder took the lease)
// and IsLeader says 0, GetHolder must not name this process: the view the
// renewals kept is no longer current, even while the re-read that asks
// why is unanswered.
func TestGetHolderAfterARenewalFoundATakeoverDoesNotNameThisProcess(t *testing.T) {
	server := fake.NewClientset()
	enforceResourceVersions(server)
	var holdGets atomic.Bool
	release := make(chan struct{})
	m := process(t, hooked{Clientset: server, beforeGet: func(name string) {
		if name == "l" && holdGets.Load() {
			<-release // the re-read after the failed renewal hangs
		}
	}})
	t.Cleanup(func() { close(release) }) // before the Manager's Shutdown
	e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	holdGets.Store(true)
	leases := server.CoordinationV1().Leases("ns")
	l, err := leases.Get(t.Context(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x, five := "x", int32(5)
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions = &x, &five
	delete(l.Annotations, IncarnationAnnotation)
	if _, err := leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a's next renewal finds the takeover", func() bool {
		ok, _, _ := e.IsLeader()
		return !ok
	})
	h, err := m.GetHolder("ns", "l")
	if err == nil && (h.Holder == "a" || h.Token == 1) {
		t.Fatalf("GetHolder after the takeover = %+v; want x with token 5 (or an error), never this process's ended term", h)
	}
}

// A read sent after the deletion was learnt that shows the same object is
// the truth (etcd restored from a backup brought it back): it is taken, or
// a candidate would only ever try to create the Lease (AlreadyExists).
func TestAReadAfterALearntDeletionTakesTheObjectBack(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.applyRead(withUID(leaseAt("z", 2, testNow, 15, "102"), "uid-1"), "102", o.seqNow())
	o.applyGone(o.seqNow())
	o.applyRead(withUID(leaseAt("z", 2, testNow, 15, "90"), "uid-1"), "90", o.seqNow()) // restored
	if s := o.snapshot(); !s.rec.exists || s.rec.resourceVersion != "90" {
		t.Fatalf("a fresh read of the restored Lease was not taken: %+v", s.rec)
	}
	o.apply(withUID(leaseAt("z", 2, testNow.Add(time.Second), 15, "91"), "uid-1"), "91") // and followed on the watch
	if s := o.snapshot(); s.rec.resourceVersion != "91" {
		t.Fatalf("the restored Lease's next renewal on the watch was not taken: %+v", s.rec)
	}
}

// A standby behind a frozen API server: its API watch of a held Lease
// delivers nothing. Once it has been quiet for two retry periods, the
// connections that received nothing since its last event are closed and
// the Lease listed again; a quiet that the relist showed unchanged (the
// holder stopped renewing) is not suspected again, and an event re-arms
// the suspicion.
func TestAQuietWatchOfAHeldLeaseIsSuspectedAndRelisted(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	client := fake.NewClientset()
	var mu sync.Mutex
	current := leaseAt("x", 3, testNow, 15, "10")
	var lists atomic.Int32
	watches := make(chan *watch.RaceFreeFakeWatcher, 8)
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return true, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: current.ResourceVersion}, Items: []coordinationv1.Lease{*current.DeepCopy()}}, nil
	})
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake() // delivers nothing unless told
		watches <- w
		return true, w, nil
	})
	closer := &closerLog{}
	o := newObserver(client.CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	o.expectRenewalsEvery(time.Second)
	o.redial = &redialer{conns: closer}
	o.start()
	defer o.stop()
	awaitWatch(t, watches)
	awaitWaiters(t, clk, 1) // the quiet timer
	clk.Step(1999 * time.Millisecond)
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d lists after 1.999 s of quiet; want 1 (two retry periods not over)", n)
	}
	mu.Lock()
	current = leaseAt("x", 3, testNow.Add(2*time.Second), 15, "11") // a renewal the frozen server never delivered
	mu.Unlock()
	clk.Step(time.Millisecond)
	w := awaitWatch(t, watches) // relisted, and watching again
	if n, rounds := lists.Load(), len(closer.sinces()); n != 2 || rounds != 1 {
		t.Fatalf("after two retry periods of quiet: %d lists, %d rounds of closing silent connections; want 2 and 1", n, rounds)
	}
	if s := o.snapshot(); s.rec.resourceVersion != "11" || !s.live {
		t.Fatalf("after the relist the snapshot is at %s (live %v); want the renewal at 11, live", s.rec.resourceVersion, s.live)
	}
	// The holder renews no more: quiet again, from the relist, which showed
	// a newer record (the renewal): suspected once more; the relist after
	// that shows the same record, and that quiet (a holder that stopped
	// renewing) is not suspected again.
	awaitWaiters(t, clk, 1)
	clk.Step(2 * time.Second)
	w = awaitWatch(t, watches)
	if n := lists.Load(); n != 3 {
		t.Fatalf("%d lists after two more retry periods of quiet at a newer record; want 3", n)
	}
	awaitWaiters(t, clk, 1)
	clk.Step(3 * time.Second)
	awaitWaiters(t, clk, 1) // re-armed, not suspected
	if n := lists.Load(); n != 3 {
		t.Fatalf("%d lists after a quiet the relist showed unchanged; want 3", n)
	}
	// A renewal delivered re-arms the suspicion.
	w.Modify(leaseAt("x", 3, testNow.Add(5*time.Second), 15, "12"))
	eventually(t, 5*time.Second, "the renewal applied", func() bool { return o.snapshot().rec.resourceVersion == "12" })
	awaitWaiters(t, clk, 1)
	clk.Step(2 * time.Second)
	awaitWatch(t, watches)
	if n := lists.Load(); n != 4 {
		t.Fatalf("%d lists after a renewal then two retry periods of quiet; want 4", n)
	}
}

// hangingLists is a Lease client whose first `hang` lists go unanswered
// until their context ends (an API server whose etcd member froze), and
// that records how long each list waited.
type hangingLists struct {
	coordclient.LeaseInterface
	hang int

	mu     sync.Mutex
	waited []time.Duration
}

func (h *hangingLists) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	h.mu.Lock()
	n := len(h.waited)
	h.waited = append(h.waited, -1)
	h.mu.Unlock()
	start := time.Now()
	if n < h.hang {
		<-ctx.Done()
		h.mu.Lock()
		h.waited[n] = time.Since(start)
		h.mu.Unlock()
		return nil, ctx.Err()
	}
	l, err := h.LeaseInterface.List(ctx, opts)
	h.mu.Lock()
	h.waited[n] = time.Since(start)
	h.mu.Unlock()
	return l, err
}

func (h *hangingLists) lists() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.waited...)
}

// A list that hangs (traced in the soak: standbys' relists of the Lease,
// hung at a frozen etcd member, held API Priority and Fairness seats of the
// leader-election level for 2 to 6.8 s while the leader's renewals queued
// behind them) is given up after two retry periods of the process's
// elections, not after the 10 s every request may take, and listed again;
// each list given up in a row doubles the next one's bound (a server slow
// rather than hung is waited for in the end). Without an election the
// bound stays requestTimeout.
func TestAnObserversHungListIsGivenUpAfterTwoRetryPeriods(t *testing.T) {
	client := fake.NewClientset(testLease("l", "a", 1, time.Now(), 15))
	h := &hangingLists{LeaseInterface: client.CoordinationV1().Leases("ns"), hang: 2}
	o := newObserver(h, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	closer := &closerLog{}
	o.redial = &redialer{conns: closer}
	o.expectRenewalsEvery(50 * time.Millisecond)
	o.start()
	t.Cleanup(o.stop)
	// A list given up is no news of the API server: what waits for the
	// view (GetHolder) goes on waiting, no error is reported.
	if !waitUntil(5*time.Second, func() bool { return len(h.lists()) >= 2 }) {
		t.Fatal("no second list within 5 s")
	}
	if err := o.snapshot().err; err != nil {
		t.Errorf("a list given up was reported as the view's error: %v", err)
	}
	if !waitUntil(5*time.Second, func() bool { s := o.snapshot(); return s.synced && s.rec.holder == "a" }) {
		t.Fatalf("not synced within 5 s with its first two lists hung (lists so far: %v)", h.lists())
	}
	// Each list given up closes the connections silent since it was sent
	// (its server may be frozen), one round per two retry periods at most.
	if rounds := closer.sinces(); len(rounds) == 0 {
		t.Error("no connection round after a list was given up")
	}
	got := h.lists()
	if len(got) < 3 {
		t.Fatalf("%d lists; want 3 (two given up, one answered)", len(got))
	}
	// Waits are measured inside List, a little after the bound started.
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		if got[i] < want-20*time.Millisecond || got[i] > want+time.Second {
			t.Errorf("list %d was given up after %v; want %v", i+1, got[i], want)
		}
	}
}

// An observer with no election on the Lease (a holder watch) does not
// know how often the holder renews: its lists keep the bound of every
// request.
func TestAListBoundWithoutAnElectionIsTheRequestTimeout(t *testing.T) {
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	if got := o.listBound(); got != requestTimeout {
		t.Fatalf("list bound %v without an election; want %v", got, requestTimeout)
	}
	o.expectRenewalsEvery(2 * time.Second)
	o.listsGivenUp = 1
	if got := o.listBound(); got != 8*time.Second {
		t.Fatalf("list bound %v at a 2 s retry period after one list given up; want 8s", got)
	}
	o.listsGivenUp = 5
	if got := o.listBound(); got != requestTimeout {
		t.Fatalf("list bound %v after five given up; want at most %v", got, requestTimeout)
	}
}
