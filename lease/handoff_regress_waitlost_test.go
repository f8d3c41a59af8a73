package lease

import (
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

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
	<-ea.ended
	byName, byID := a.Election("ns", "l"), a.ElectionID("ns", "l", ea.ID())
	t.Logf("the election's own WaitLost: %v; found later by name: %v, by id: %v (capi WaitLost[Id] then returns 0)",
		ea.WaitLost(), byName != nil, byID != nil)
	if !(!errors.Is(ea.WaitLost(), ErrHandedOff) || byName != nil || byID != nil) {
		t.Fatal("regression (review 2)")
	}
}
