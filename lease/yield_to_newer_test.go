package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// PolicyYieldToNewer: it tries again after a refused hand-off, and a newer
// version that only crash-loops costs one hand-off, not a flapping
// leadership.

// yieldToNewer returns after its first call of the hook whatever the hook
// did: when handOffOnItsOwn refuses (the newer candidate's record read by
// name is missing for a moment: it just stood again, see
// TestHandOffRegressionRecordSurvivesStandingAgain; or the read races its refresh),
// PolicyYieldToNewer is off for the rest of the term and the newer
// version never gets the lease.
func TestHandOffRegressionYieldRetriesAfterARefusal(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	var refused atomic.Int32
	client.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == candidateRecordName("l", "n") && refused.Add(1) == 1 {
			return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), candidateRecordName("l", "n"))
		}
		return false, nil, nil
	})
	a := process(t, client)
	ea, err := a.RunElectionWith("ns", "l", "a", fastUnitTiming, ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	n := process(t, client)
	en, err := n.RunElectionWith("ns", "l", "n", fastUnitTiming, ElectionOptions{Version: "2.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	okA, _, _ := ea.IsLeader()
	okN, _, _ := en.IsLeader()
	t.Logf("after 3 s: old version a leads %v, newer n (campaigning, record present) leads %v; record reads refused: 1 of %d",
		okA, okN, refused.Load())
	if !(!okA || okN) {
		t.Fatal("regression (review 2)")
	}
}

// PolicyYieldToNewer with a newer-version replica that does not campaign
// (a broken rollout: the new pod crash-loops; each start re-puts its record,
// so it stays live): every old-version leader yields to it at once, the
// lease then has no leader for a lease duration, is released, the next
// old-version leader yields again, ... for as long as the record is live.
func TestHandOffRegressionCrashLoopingNewerDoesNotFlapLeadership(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer | PolicyHandOffOnCancel}
	a := &standingHost{m: process(t, client), id: "a", opts: opts}
	b := &standingHost{m: process(t, client), id: "b", opts: opts}
	go a.run(ctx)
	time.Sleep(200 * time.Millisecond)
	go b.run(ctx)
	eventually(t, 5*time.Second, "a leader", func() bool { return a.leads() || b.leads() })
	if _, err := (leaseRecords{clientsetapi.Wrap(client)}).put(withNS(ctx, "ns"), "l", Candidate{Identity: "n", Version: "2.0.0", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	after := leaderAvailability(6*time.Second, a, b)
	t.Logf("leader availability while a crash-looping 2.0.0 replica's record is live: %.0f%%; hand-offs: %d",
		100*after, handOffCount(a.m, b.m))
	if !(after > 0.5) {
		t.Fatal("regression (review 2)")
	}
}
