package lease

import (
	"errors"
	"slices"
	"testing"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The store of candidate records a Manager picks by discovery: never on
// the caller's thread, and asked again after a transient error.

// RunElection (every variant: they all go through RunElectionWith) now
// asks the API server's discovery, on the caller's thread, the first time
// (candidateRegistry.storeFor), holding the registry's lock: the header's
// "Returns at once (never waits for the network)" no longer holds (a real
// discovery request has a 32 s timeout), and every other RunElection,
// Candidates and HandOff waits behind it.
func TestHandOffRegressionRunElectionDoesNotWaitForDiscovery(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	hung := make(chan struct{}) // a hung API server, until the test ends
	client.PrependReactor("get", "resource", func(k8stesting.Action) (bool, kruntime.Object, error) {
		<-hung
		return false, nil, nil
	})
	m := process(t, client)
	t.Cleanup(func() { close(hung) }) // before m's Shutdown
	ran := make(chan error, 1)
	go func() { _, err := m.RunElection("ns", "l", "a", fastUnitTiming); ran <- err }()
	if err := receive(t, ran, 10*time.Second, "regression (review 2): RunElection returning without the API server's discovery"); err != nil {
		t.Fatal(err)
	}
}

// A transient discovery error on first use fixes the Manager's record store
// to Leases for good, while processes whose discovery succeeded use
// LeaseCandidates: neither sees the other's records, so hand-offs between
// them are refused as "not seen campaigning" and the policies ignore them.
func TestHandOffRegressionTransientDiscoveryErrorIsAskedAgain(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	client.Resources = []*metav1.APIResourceList{{GroupVersion: coordinationv1beta1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "leasecandidates", Namespaced: true, Kind: "LeaseCandidate"}}}}
	failures := 1
	client.PrependReactor("get", "resource", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, errors.New("connection refused (API server restarting)")
		}
		return false, nil, nil
	})
	a := process(t, client) // first: discovery fails once
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	b := process(t, client) // discovery works: LeaseCandidates
	if _, err := b.RunElection("ns", "l", "b", fastUnitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's own record", func() bool { // written once b waits; a loaded machine takes a while
		cs, err := b.Candidates("ns", "l")
		return err == nil && slices.ContainsFunc(cs, func(c Candidate) bool { return c.Identity == "b" })
	})
	csA, errA := a.Candidates("ns", "l")
	csB, errB := b.Candidates("ns", "l")
	t.Logf("a uses %ss and sees %+v (%v); b uses %ss and sees %+v (%v)",
		a.candidates.storeFor(nil).Kind(), csA, errA, b.candidates.storeFor(nil).Kind(), csB, errB)
	err = a.HandOff("ns", "l", "b", time.Second)
	t.Logf("a.HandOff to the campaigning b = %v", err)
	if !(!errors.Is(err, errTargetNotSeen)) {
		t.Fatal("regression (review 2)")
	}
}
