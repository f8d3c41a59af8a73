package lease

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
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
	eventually(t, 5*time.Second, "a following the candidate records", func() bool {
		for _, act := range client.Actions() {
			if w, ok := act.(k8stesting.WatchAction); ok && act.GetResource().Resource == "leases" && !w.GetWatchRestrictions().Labels.Empty() {
				return true
			}
		}
		return false
	})
	n := process(t, client)
	en, err := n.RunElectionWith("ns", "l", "n", fastUnitTiming, ElectionOptions{Version: "2.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if !waitUntil(10*time.Second, func() bool { ok, _, _ := en.IsLeader(); return ok }) {
		t.Logf("record reads refused: 1 of %d", refused.Load())
		t.Fatal("regression (review 2): the newer n (campaigning, record present) was not handed the lease within 10 s")
	}
	if ok, _, _ := ea.IsLeader(); ok {
		t.Fatal("the old version a still leads beside n")
	}
	t.Logf("the newer n leads; record reads refused: 1 of %d", refused.Load())
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
	a, b := standingPair(t, client, "a", "b", ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer | PolicyHandOffOnCancel})
	// Each start of n re-puts its record, naming the term it saw.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "n", Version: "2.0.0", RenewTime: time.Now(), SeenToken: math.MaxInt32}); err != nil {
		t.Fatal(err)
	}
	awaitFailedHandOff(t, client, "n")
	awaitSteadyLeader(t, a.m, b.m)
	t.Logf("hand-offs while a crash-looping 2.0.0 replica's record is live: %d", handOffCount(a.m, b.m))
	if n := handOffCount(a.m, b.m); n != 1 {
		t.Fatalf("%d hand-offs to a newer version that does not campaign; want the one that failed", n)
	}
}

// The leader follows the candidate records from the version its list
// showed: a watch without one starts with every record as an event (a real
// API server's "send initial events"), which the loop takes for a change,
// lists again and watches again, at round-trip speed for the whole term.
func TestYieldToNewerWatchesFromItsList(t *testing.T) {
	client := fake.NewClientset()
	watched := make(chan string, 16)
	client.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() {
			return false, nil, nil
		}
		return true, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "77"}}, nil
	})
	client.PrependWatchReactor("leases", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if w := a.(k8stesting.WatchAction).GetWatchRestrictions(); !w.Labels.Empty() {
			watched <- w.ResourceVersion
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
	if rv := receive(t, watched, 5*time.Second, "the watch of the candidate records"); rv != "77" {
		t.Fatalf("the candidate records watched from resourceVersion %q; want 77, the list's", rv)
	}
}
