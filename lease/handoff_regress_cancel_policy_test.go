package lease

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// CancelElection of a leader with PolicyHandOffOnCancel lists the
// candidates (up to 10 s) while still leading; when leadership is lost
// meanwhile (renew deadline), the hand-off finds the election already ended
// and CancelElection returns ErrNotLeader: K8sLeaseCancelElection -1 "not
// the leader", where the header promises 0 unless the release failed (and
// a plain cancel after a loss returns 0).
func TestHandOffRegressionCancelPolicyKeepsACancelsResult(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	// Installed before any goroutine uses the fake (its reactor chain is not
	// safe to change concurrently), armed below.
	var armed atomic.Bool
	var e *Election
	// The candidate list is slow; leadership is lost while it runs.
	client.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() || !armed.CompareAndSwap(true, false) {
			return false, nil, nil
		}
		e.revoke() // the renew deadline passes (as after missed renewals)
		deadline := time.Now().Add(3 * time.Second)
		for !e.Ended() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return false, nil, nil
	})
	m := process(t, client)
	e, err := m.RunElectionWith("ns", "l", "a", fastUnitTiming, ElectionOptions{Policy: PolicyHandOffOnCancel})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err = m.CancelElection("ns", "l")
	t.Logf("CancelElection = %v (WaitLost: %v)", err, e.WaitLost())
	if !(!errors.Is(err, ErrNotLeader)) {
		t.Fatal("regression (review 2)")
	}
}
