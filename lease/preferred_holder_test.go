package lease

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// The preferred holder: one that does not campaign, or whose record cannot
// be read, does not make leadership flap, and one that is named stops
// PolicyYieldToNewer from handing the lease back and forth.

// The preferred holder names an identity whose candidate record is live
// (renewed within 10 min) but which does not campaign: it crashed, or shut
// down cleanly and its record's delete did not land (Shutdown does not wait
// for it). Every new leader hands the lease to it at its first renewal (the
// 10 s recheck is per Election, and each term is a new Election), the lease
// then has no leader for a lease duration (the hand-off's timeout), and so
// on: for up to candidateTTL (10 min), or for good when the records cannot
// be read (requireCampaigning then lets every hand-off through).
func TestHandOffRegressionPreferredGhostCostsOneHandOff(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a, b := standingPair(t, client, "a", "b", ElectionOptions{})
	// A record that names every term (as one written by a replica that
	// died during this one does): the first hand-off to it is made.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "ghost", RenewTime: time.Now(), SeenToken: math.MaxInt32}); err != nil {
		t.Fatal(err)
	}
	annotateLease(t, client, PreferredHolderAnnotation, "ghost")
	awaitFailedHandOff(t, client, "ghost")
	awaitSteadyLeader(t, a.m, b.m)
	t.Logf("hand-offs: %d (lease %v)", handOffCount(a.m, b.m), fastUnitTiming.LeaseDuration)
	if n := handOffCount(a.m, b.m); n != 1 {
		t.Fatalf("%d hand-offs to a preferred holder that does not campaign; want the one that failed", n)
	}
}

// A preferred holder whose record was written before this term (a replica
// that died then) is never handed the lease: it is not seen alive.
func TestAPreferredHolderThatDidNotSeeThisTermIsNotHandedTheLease(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	targets := handOffTargets(client)
	a, b := standingPair(t, client, "a", "b", ElectionOptions{})
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "ghost", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	annotateLease(t, client, PreferredHolderAnnotation, "ghost")
	awaitSteadyLeader(t, a.m, b.m)
	if n, got := handOffCount(a.m, b.m), targets(); n != 0 || len(got) != 0 {
		t.Fatalf("%d hand-offs (records to %v) to a preferred holder whose record predates the term; want none", n, got)
	}
}

// PolicyYieldToNewer plus a preferred holder of an older version: P (1.0.0)
// hands to N (2.0.0) as it is newer, N hands back to P as the preferred
// holder, for ever (each term is a new Election: no rate limit across
// terms). A rolling update in a cluster with the annotation set does this.
func TestHandOffRegressionPreferredHolderStopsYielding(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &standingHost{t: t, m: process(t, client), id: "p", awaitRecordDelete: true, opts: ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer}}
	n := &standingHost{t: t, m: process(t, client), id: "n", awaitRecordDelete: true, opts: ElectionOptions{Version: "2.0.0", Policy: PolicyYieldToNewer}}
	go p.run(ctx)
	eventually(t, 5*time.Second, "p leads", p.leads)
	annotateLease(t, client, PreferredHolderAnnotation, "p")
	go n.run(ctx)
	eventually(t, 5*time.Second, "n's candidate record", func() bool {
		cs, err := p.m.Candidates("ns", "l")
		return err == nil && len(cs) == 2
	})
	awaitSteadyLeader(t, p.m, n.m)
	got := handOffCount(p.m, n.m)
	t.Logf("hand-offs before a leader stayed: %d (p leads: %v)", got, p.leads())
	if !(got < 6) {
		t.Fatal("regression (review 2)")
	}
}

// The same with no record at all, where the record cannot be read: with
// the shipped deploy/rbac.yaml, a get of a record whose name is not one of
// the three listed (a typo in the annotation, a pod name from before a
// scale-down) is Forbidden, requireCampaigning then "hands off all the
// same", and leadership flaps for as long as the annotation stays.
func TestHandOffRegressionUnreadableRecordRefusesOwnHandOffs(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	const typo = "metadata-master-O" // letter O
	var refused atomic.Int32         // reads of the typo's record
	client.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if name := a.(k8stesting.GetAction).GetName(); strings.Contains(name, "-candidate-") {
			if name == candidateRecordName("l", typo) {
				refused.Add(1)
			}
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), name, errors.New("RBAC: not in resourceNames"))
		}
		return false, nil, nil
	})
	a, b := standingPair(t, client, "metadata-master-0", "metadata-master-1", ElectionOptions{})
	annotateLease(t, client, PreferredHolderAnnotation, typo)
	eventually(t, 10*time.Second, "the leader reading the preferred holder's record", func() bool { return refused.Load() > 0 })
	awaitSteadyLeader(t, a.m, b.m)
	t.Logf("preferred holder %q (no such replica): its record read %d times, refused; hand-offs: %d",
		typo, refused.Load(), handOffCount(a.m, b.m))
	if n := handOffCount(a.m, b.m); n != 0 {
		t.Fatalf("%d hand-offs to a preferred holder whose record cannot be read; want none", n)
	}
}
