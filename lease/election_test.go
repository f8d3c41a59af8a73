package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// A candidate whose acquisition is refused with 409 learns the current
// Lease (one GET) instead of resending the same doomed write at round-trip
// speed while its watch lags; each conflict is counted.
func TestConflictIsNotRetriedAtRoundTripSpeed(t *testing.T) {
	tests := []struct {
		name string
		// what the GET after the conflict returns
		current   *coordinationv1.Lease
		maxWrites int64
	}{
		// The GET shows nothing new (a lagging server): back off.
		{"the GET shows the same state", testLease("l", "", 3, testNow, 15), 3},
		// The GET shows a new holder: wait for its lease to run out.
		{"the GET shows a new holder", func() *coordinationv1.Lease {
			l := testLease("l", "other", 4, testNow, 15)
			l.ResourceVersion = "9"
			return l
		}(), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, client, clk := fakeManager(testLease("l", "", 3, testNow, 15)) // released: free to take
			defer func() { _ = m.Shutdown(5 * time.Second) }()
			var writes, gets atomic.Int64
			client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				writes.Add(1)
				return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "l", nil)
			})
			client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets.Add(1)
				return true, tt.current.DeepCopy(), nil
			})
			e, err := m.RunElection("ns", "l", "b", unitTiming)
			if err != nil {
				t.Fatal(err)
			}
			// 300 ms pass on the fake clock, each step once the campaign
			// waits on it: a write resent at round-trip speed never waits.
			for elapsed := time.Duration(0); elapsed < 300*time.Millisecond; elapsed += 10 * time.Millisecond {
				awaitWaiters(t, clk, 1)
				clk.Step(10 * time.Millisecond)
			}
			awaitWaiters(t, clk, 1)
			_ = e.Cancel()
			conflicts := statsOf(m.stats[Key{"ns", "l"}]).Election.Conflicts
			// And one GET more: the cancel reads what a refused acquisition
			// may have left (client-go resends a write, and answers 409 to
			// the resend of one that landed).
			if n := writes.Load(); n < 1 || n > tt.maxWrites || conflicts != n || gets.Load() != n+1 {
				t.Fatalf("in 300 ms: %d writes, %d conflicts counted, %d GETs; want 1..%d writes, each counted and followed by a GET, and the cancel's",
					n, conflicts, gets.Load(), tt.maxWrites)
			}
		})
	}
}

// slowCreate lands each Create at once but answers only when proceed is
// closed, or with the context's error when that ends first: a cancelled
// request whose write reached the server all the same.
type slowCreate struct {
	coordclient.LeaseInterface
	entered, proceed chan struct{}
}

func (s *slowCreate) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	got, err := s.LeaseInterface.Create(context.Background(), l, opts)
	close(s.entered)
	select {
	case <-s.proceed:
		return got, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Cancelling while the acquiring write is in flight lets it finish and
// releases what landed, instead of orphaning a held lease for a lease
// duration.
func TestCancelDuringAcquisitionReleases(t *testing.T) {
	leases := &slowCreate{LeaseInterface: fake.NewClientset().CoordinationV1().Leases("ns"),
		entered: make(chan struct{}), proceed: make(chan struct{})}
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	defer obs.stop()
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, leases, obs, clock.RealClock{}, &leaseStats{}, func() bool { return false })
	e.start()
	<-leases.entered
	cancelled := make(chan error, 1)
	go func() { cancelled <- e.Cancel() }()
	eventually(t, 10*time.Second, "Cancel waiting for the campaign", func() bool {
		return len(cancelled) > 0 || waitingIn("(*Election).CancelWithin.") > 0
	})
	close(leases.proceed)
	if err := <-cancelled; err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(context.Background(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != "" {
		t.Fatalf("after a cancel during the acquisition the lease is held by %q; want released", ptr.Deref(h, "<nil>"))
	}
}
