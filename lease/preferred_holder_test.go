package lease

import (
	"context"
	"errors"
	"strings"
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

// leaderAvailability samples, every 5 ms for d, whether any host leads.
func leaderAvailability(d time.Duration, hosts ...*standingHost) float64 {
	n, up := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		n++
		for _, h := range hosts {
			if h.leads() {
				up++
				break
			}
		}
	}
	return float64(up) / float64(n)
}

func handOffCount(ms ...*Manager) int64 {
	var n int64
	for _, m := range ms {
		for _, s := range m.Stats() {
			if s.Election != nil {
				n += s.Election.HandOffs
			}
		}
	}
	return n
}

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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := &standingHost{m: process(t, client), id: "a"}
	b := &standingHost{m: process(t, client), id: "b"}
	go a.run(ctx)
	time.Sleep(200 * time.Millisecond)
	go b.run(ctx)
	eventually(t, 5*time.Second, "a leader", func() bool { return a.leads() || b.leads() })
	before := leaderAvailability(time.Second, a, b)
	if _, err := (leaseRecords{clientsetapi.Wrap(client)}).put(withNS(ctx, "ns"), "l", Candidate{Identity: "ghost", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	annotateLease(t, client, PreferredHolderAnnotation, "ghost")
	after := leaderAvailability(6*time.Second, a, b)
	t.Logf("leader availability: %.0f%% before the annotation, %.0f%% after (lease %v); hand-offs: %d",
		100*before, 100*after, fastUnitTiming.LeaseDuration, handOffCount(a.m, b.m))
	if !(after > 0.5) {
		t.Fatal("regression (review 2)")
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
	p := &standingHost{m: process(t, client), id: "p", delay: 20 * time.Millisecond, opts: ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer}}
	n := &standingHost{m: process(t, client), id: "n", delay: 20 * time.Millisecond, opts: ElectionOptions{Version: "2.0.0", Policy: PolicyYieldToNewer}}
	go p.run(ctx)
	eventually(t, 5*time.Second, "p leads", p.leads)
	annotateLease(t, client, PreferredHolderAnnotation, "p")
	go n.run(ctx)
	time.Sleep(4 * time.Second)
	got := handOffCount(p.m, n.m)
	t.Logf("hand-offs in ~4 s: %d", got)
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
	client.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if name := a.(k8stesting.GetAction).GetName(); strings.Contains(name, "-candidate-") {
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), name, errors.New("RBAC: not in resourceNames"))
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := &standingHost{m: process(t, client), id: "metadata-master-0"}
	b := &standingHost{m: process(t, client), id: "metadata-master-1"}
	go a.run(ctx)
	time.Sleep(200 * time.Millisecond)
	go b.run(ctx)
	eventually(t, 5*time.Second, "a leader", func() bool { return a.leads() || b.leads() })
	annotateLease(t, client, PreferredHolderAnnotation, "metadata-master-O") // letter O: a typo
	after := leaderAvailability(6*time.Second, a, b)
	t.Logf("leader availability with preferred holder %q (no such replica): %.0f%%; hand-offs: %d",
		"metadata-master-O", 100*after, handOffCount(a.m, b.m))
	if !(after > 0.5) {
		t.Fatal("regression (review 2)")
	}
}
