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

// slowDeletes delays candidate-record deletes by d on the client side
// (a round trip), outside the fake's global lock, and notes when each
// landed.
type slowDeletes struct {
	*fake.Clientset
	d      time.Duration
	landed *atomic.Int64
}

func (c slowDeletes) CoordinationV1() coordclient.CoordinationV1Interface {
	return slowDeletesCoord{c.Clientset.CoordinationV1(), c}
}

type slowDeletesCoord struct {
	coordclient.CoordinationV1Interface
	c slowDeletes
}

func (s slowDeletesCoord) Leases(ns string) coordclient.LeaseInterface {
	return slowDeletesLeases{s.CoordinationV1Interface.Leases(ns), s.c}
}

type slowDeletesLeases struct {
	coordclient.LeaseInterface
	c slowDeletes
}

func (l slowDeletesLeases) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if strings.Contains(name, "-candidate-") {
		time.Sleep(l.c.d)
	}
	err := l.LeaseInterface.Delete(ctx, name, opts)
	if strings.Contains(name, "-candidate-") && l.c.landed != nil {
		l.c.landed.Store(time.Now().UnixNano())
	}
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
	client := slowDeletes{Clientset: fc, d: 100 * time.Millisecond}
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
	time.Sleep(time.Second)
	cs, err := x.Candidates("ns", "l")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("candidates a second after a stood again (a campaigning: %v): %+v", !ea2.Ended(), cs)
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
	var landed atomic.Int64
	client := slowDeletes{Clientset: fake.NewClientset(), d: 200 * time.Millisecond, landed: &landed}
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
	returned := time.Now().UnixNano()
	pending := landed.Load() == 0
	time.Sleep(500 * time.Millisecond)
	t.Logf("record delete landed when Shutdown returned: %v; landed %v after it", !pending,
		time.Duration(landed.Load()-returned))
	if !(!pending) {
		t.Fatal("regression (review 2)")
	}
}
