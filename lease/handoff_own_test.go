package lease

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// Hand-offs the library makes on its own (the preferred holder,
// PolicyYieldToNewer): the host can still read why the term ended, and
// Shutdown waits for one in flight.

// A hand-off the library starts on its own (here: the preferred holder)
// takes the election out of the Manager's map before it ends it. A
// Shutdown meanwhile neither cancels nor waits for it: it returns while the
// hand-off is still being written and waited for, and the hand-off's Event
// then starts a new broadcaster after Shutdown stopped the old one
// (TestNoBroadcasterStartedAfterShutdown's leak, back by another road);
// the hand-off's observer share also keeps an observer (list + watch)
// running after Shutdown for up to a lease duration.
func TestHandOffRegressionShutdownWaitsForOwnHandOff(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	var block atomic.Bool
	block.Store(true)
	writing := make(chan struct{}, 1)
	release := make(chan struct{})
	client := hooked{Clientset: fc, beforeUpdate: func(l *coordinationv1.Lease) {
		if l.Name == "l" && l.Annotations[HandOffAnnotation] != "" && block.CompareAndSwap(true, false) {
			writing <- struct{}{}
			<-release
		}
	}}
	a := NewManager(clock.RealClock{})
	a.SetClient(clientsetapi.Wrap(client))
	a.SetEvents(true)
	b := process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunElection("ns", "l", "b", fastUnitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b recorded", func() bool {
		cs, err := a.Candidates("ns", "l")
		return err == nil && len(cs) == 2
	})
	annotateLease(t, fc, PreferredHolderAnnotation, "b")
	select {
	case <-writing:
	case <-time.After(5 * time.Second):
		t.Fatal("no hand-off started")
	}
	running := a.events.Running
	shut := make(chan error, 1)
	go func() { shut <- a.Shutdown(3 * time.Second) }()
	waiting := func() bool { // for the hand-off's end, or for the election's (which the hand-off holds)
		return waitingIn("(*Manager).Shutdown.") > 0 || lockedIn("(*Election).CancelWithin") > 0
	}
	if !waitUntil(10*time.Second, func() bool { return len(shut) > 0 || waiting() }) {
		t.Fatal("Shutdown neither returned nor waited for the hand-off in flight")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) before the hand-off in flight ended", err)
	default:
	}
	close(release) // the hand-off's write lands
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if running() {
		t.Fatal("an Events broadcaster runs after Shutdown")
	}
}

// After a hand-off the library made on its own (preferred holder,
// PolicyYieldToNewer), the header promises WaitLost -1 "leadership handed
// off to ...". handOffOnItsOwn removes the election from the Manager
// (forgetElection) and does not keep it among the replaced ones, so a
// K8sLeaseWaitLost / K8sLeaseWaitLostId called after it (capi: election()
// finds nothing, "nothing to wait for") returns 0, as after a cancel: only
// a host already blocked in WaitLost learns why. A loss, by contrast, stays
// readable.
func TestHandOffRegressionOwnHandOffReasonKeptForWaitLost(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a, b := process(t, client), process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunElection("ns", "l", "b", fastUnitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b recorded", func() bool {
		cs, err := a.Candidates("ns", "l")
		return err == nil && len(cs) == 2
	})
	annotateLease(t, client, PreferredHolderAnnotation, "b")
	<-ea.ending.ended
	byName, byID := a.Election("ns", "l"), a.ElectionID("ns", "l", ea.ID())
	t.Logf("the election's own WaitLost: %v; found later by name: %v, by id: %v (capi WaitLost[Id] then returns 0)",
		ea.WaitLost(), byName != nil, byID != nil)
	if !(!errors.Is(ea.WaitLost(), ErrHandedOff) || byName != nil || byID != nil) {
		t.Fatal("regression (review 2)")
	}
}
