package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// hookedUpdates runs before(l) ahead of every Lease update, outside the
// fake's global lock.
type hookedUpdates struct {
	*fake.Clientset
	before func(*coordinationv1.Lease)
}

func (c hookedUpdates) CoordinationV1() coordclient.CoordinationV1Interface {
	return hookedCoord{c.Clientset.CoordinationV1(), c.before}
}

type hookedCoord struct {
	coordclient.CoordinationV1Interface
	before func(*coordinationv1.Lease)
}

func (s hookedCoord) Leases(ns string) coordclient.LeaseInterface {
	return hookedLeases{s.CoordinationV1Interface.Leases(ns), s.before}
}

type hookedLeases struct {
	coordclient.LeaseInterface
	before func(*coordinationv1.Lease)
}

func (l hookedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	l.before(lease)
	return l.LeaseInterface.Update(ctx, lease, opts)
}

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
	client := hookedUpdates{Clientset: fc, before: func(l *coordinationv1.Lease) {
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
	go func() { time.Sleep(200 * time.Millisecond); close(release) }()
	start := time.Now()
	if err := a.Shutdown(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("Shutdown returned after %v, before the hand-off in flight ended", took)
	}
	time.Sleep(500 * time.Millisecond)
	if running() {
		t.Fatal("an Events broadcaster runs after Shutdown")
	}
}
