package lease

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// A candidacy's record: it survives its identity standing again at once,
// and its delete lands before Shutdown returns.

// heldDeletes holds each candidate-record delete on the client side (a
// round trip), outside the fake's global lock, until hold(name) returns,
// and counts those that went through.
type heldDeletes struct {
	*fake.Clientset
	hold   func(name string)
	landed *atomic.Int32
}

func (c heldDeletes) CoordinationV1() coordclient.CoordinationV1Interface {
	return heldDeletesCoord{c.Clientset.CoordinationV1(), c}
}

type heldDeletesCoord struct {
	coordclient.CoordinationV1Interface
	c heldDeletes
}

func (s heldDeletesCoord) Leases(ns string) coordclient.LeaseInterface {
	return heldDeletesLeases{s.CoordinationV1Interface.Leases(ns), s.c}
}

type heldDeletesLeases struct {
	coordclient.LeaseInterface
	c heldDeletes
}

func (l heldDeletesLeases) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if !strings.Contains(name, "-candidate-") {
		return l.LeaseInterface.Delete(ctx, name, opts)
	}
	l.c.hold(name)
	err := l.LeaseInterface.Delete(ctx, name, opts)
	l.c.landed.Add(1)
	return err
}

// An election's record is deleted by name (lease, identity) on its own
// goroutine after it ends, and nothing orders that delete with the put of
// the next election of the same identity (Cancel and RunElection do not
// wait for it). A host that stands again at once (cancel + run, or the
// documented "start a new one to stand again" after a hand-off) loses its
// record when the old delete lands last: for candidateRefresh (5 min) it is
// invisible to Candidates, refused as a hand-off target ("not seen
// campaigning") and never chosen by the policies.
func TestHandOffRegressionRecordSurvivesStandingAgain(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	record := func() string { // the resourceVersion of a's record, "" when there is none
		l, err := fc.CoordinationV1().Leases("ns").Get(context.Background(), candidateRecordName("l", "a"), metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return l.ResourceVersion
	}
	// The ended election's delete of a's record lands last: after the
	// new election's put.
	var landed atomic.Int32
	client := heldDeletes{Clientset: fc, landed: &landed, hold: func(name string) {
		if name == candidateRecordName("l", "a") && landed.Load() == 0 {
			old := record()
			waitUntil(10*time.Second, func() bool { rv := record(); return rv != "" && rv != old })
		}
	}}
	x, am := process(t, client), process(t, client)
	ex, err := x.RunElection("ns", "l", "x", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := am.RunElection("ns", "l", "a", fastUnitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a recorded", func() bool {
		cs, err := x.Candidates("ns", "l")
		return err == nil && len(cs) == 2
	})
	// a stands again at once.
	if err := am.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	ea2, err := am.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the ended election's record delete, after the new put", func() bool { return landed.Load() > 0 })
	cs, err := x.Candidates("ns", "l")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("candidates once the old delete landed after a stood again (a campaigning: %v): %+v", !ea2.Ended(), cs)
	err = x.HandOff("ns", "l", "a", time.Second)
	t.Logf("HandOff to the campaigning a = %v", err)
	if !(!errors.Is(err, errTargetNotSeen)) {
		t.Fatal("regression (review 2)")
	}
}

// Shutdown does not wait for the candidate-record deletes: they land after
// it returned (or never, when the host exits right after it), so a cleanly
// stopped process stays listed as a live candidate for up to candidateTTL
// (10 min) and can be picked as a hand-off target.
func TestHandOffRegressionShutdownWaitsForTheRecordDelete(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	// The delete lands once Shutdown waits for it (never, if it does not).
	var landed atomic.Int32
	client := heldDeletes{Clientset: fake.NewClientset(), landed: &landed, hold: func(string) {
		waitUntil(10*time.Second, func() bool { return waitingIn("(*Manager).Shutdown.") > 0 })
	}}
	m := process(t, client)
	e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a recorded", func() bool {
		cs, err := m.Candidates("ns", "l")
		return err == nil && len(cs) == 1
	})
	if err := m.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	pending := landed.Load() == 0
	t.Logf("record delete landed when Shutdown returned: %v", !pending)
	if !(!pending) {
		t.Fatal("regression (review 2)")
	}
}
