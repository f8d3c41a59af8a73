package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// An election that ended with a reason at the moment WaitElected's timer
// fired reports that reason, not a timeout: the end happened first.
func TestWaitElectedReportsTheEndReasonOverATimeoutFiringTogether(t *testing.T) {
	reason := errors.New("the reason it ended")
	for i := range 40 {
		leases := fake.NewClientset().CoordinationV1().Leases("ns")
		obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
		e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, leases, obs, clock.RealClock{}, &leaseStats{}, func() bool { return false })
		e.admitted.Store(true)
		close(e.runDone) // never started: nothing runs
		e.end(reason)
		// A timer of 0 has fired by the time WaitElected selects: both
		// cases are ready.
		if _, err := e.WaitElected(0); !errors.Is(err, reason) {
			t.Fatalf("run %d: WaitElected = %v; want the end reason", i, err)
		}
	}
}

// slowEvents answers every Event write after a delay, as a loaded API
// server would: a process that exits right after CancelElection returns
// must still leave its "stopped leading" Event.
type slowEvents struct {
	kubeapi.Client
	delay time.Duration
}

func (c slowEvents) CreateEvent(ctx context.Context, ev *kubeapi.Event) error {
	time.Sleep(c.delay)
	return c.Client.CreateEvent(ctx, ev)
}

func TestCancelElectionReturnsAfterItsEventIsWritten(t *testing.T) {
	cs := fake.NewClientset()
	m := NewManager(clock.RealClock{})
	m.SetClient(slowEvents{Client: clientsetapi.Wrap(cs), delay: 100 * time.Millisecond})
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
