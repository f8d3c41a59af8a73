package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
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

// A leader keeps sending renewals while earlier ones are unanswered, up to
// maxRenewalsInFlight, and keeps leading once they are answered in time.
func TestRenewalsArePipelined(t *testing.T) {
	leases := &gatedPatches{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"), gate: make(chan struct{})}
	timing := Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 100 * time.Millisecond}
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	defer obs.stop()
	e := newElection(Key{Namespace: "ns", Name: "l"}, "me", timing, leases, obs, clock.RealClock{}, &leaseStats{}, func() {})
	e.start()
	defer func() { _ = e.Cancel() }()
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for leases.inFlight.Load() < maxRenewalsInFlight {
		if time.Now().After(deadline) {
			t.Fatalf("only %d renewals in flight, want %d", leases.inFlight.Load(), maxRenewalsInFlight)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(5 * timing.RetryPeriod) // ticks while the pipeline is full send nothing
	if m := leases.maxSeen.Load(); m != maxRenewalsInFlight {
		t.Fatalf("%d renewals were in flight at once, want at most %d", m, maxRenewalsInFlight)
	}
	close(leases.gate)
	deadline = time.Now().Add(5 * time.Second)
	for e.stats.renewals.Load() < maxRenewalsInFlight+1 {
		if time.Now().After(deadline) {
			t.Fatalf("renewals did not resume: %d done", e.stats.renewals.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, _, _ := e.IsLeader(); !ok || e.Ended() {
		t.Fatalf("leadership lost while renewals were answered in time: %v", e.endReason())
	}
}
