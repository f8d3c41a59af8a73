//go:build integration

package fault

import (
	"context"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/lease"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// Planned hand-offs between real processes: on SIGTERM each leader hands
// the lease to the next replica in a ring (K8sLeaseHandOff) while two more
// replicas campaign. Every time, the named replica is the next leader (the
// others never take the lease during the hand-off), with no overlap (the
// history checker), and it is restarted as kubelet would.
func TestHandOffToTheNamedReplica(t *testing.T) {
	t.Parallel()
	s := newScenario(t, steady)
	ids := []string{"ring-0", "ring-1", "ring-2", "ring-3"}
	next := func(id string) string {
		for i, x := range ids {
			if x == id {
				return ids[(i+1)%len(ids)]
			}
		}
		t.Fatalf("no replica %s", id)
		return ""
	}
	admin, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	opts := func(id string) candOpts { return candOpts{handoffTo: next(id)} }
	for _, id := range ids {
		s.start(id, opts(id))
	}
	leader, term := s.awaitLeader(30*time.Second, 0)
	// A hand-off names a replica seen campaigning (its candidate record
	// written): on a busy machine a replica can take longer than any fixed
	// pause to get there.
	for _, id := range ids {
		awaitCandidate(t, admin, s.lease, id, "")
	}
	time.Sleep(500 * time.Millisecond) // every standby follows the lease
	const rounds = 6
	var took []time.Duration
	for round := 0; round < rounds; round++ {
		target := next(leader.id)
		at := history.Now()
		s.sigterm(leader)
		nextLeader, nextTerm := s.awaitLeader(s.timing.lease, term.Start)
		if nextLeader.id != target {
			s.fail("round %d: %s handed off to %s, but %s leads", round, leader.id, target, nextLeader.id)
		}
		took = append(took, time.Duration(nextTerm.Start-at))
		t.Logf("round %d: SIGTERM of %s -> %s leads after %v", round, leader.id, nextLeader.id,
			time.Duration(nextTerm.Start-at).Round(time.Microsecond))
		s.start(leader.id, opts(leader.id)) // restarted as kubelet would
		awaitCandidate(t, admin, s.lease, leader.id, "")
		time.Sleep(300 * time.Millisecond) // and follows the lease again
		leader, term = nextLeader, nextTerm
	}
	s.stopAll()
	r := s.verify()
	if r.LeaderChanges() < rounds {
		t.Errorf("%d leader changes, want %d", r.LeaderChanges(), rounds)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("SIGTERM -> the named replica leads: p50 %v, max %v (n=%d)", took[len(took)/2], took[len(took)-1], len(took))
}

// A rolling update of three replicas, replaced from the highest ordinal
// down as a StatefulSet does (SIGTERM, exit, the new version started, until
// it campaigns), twice in a row, with the newest-version policy (hand off
// on cancel, yield to a newer version; priority prefers the lower
// ordinals, replaced last). Safety is judged by the history checker; the
// leadership moves of each update are counted.
func TestRollingUpdateWithTheNewestVersionPolicy(t *testing.T) {
	t.Parallel()
	admin, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, steady)
	ids := []string{"pod-0", "pod-1", "pod-2"}
	opts := func(i int, version string) candOpts {
		return candOpts{version: version, priority: -i, policy: 3} // K8S_LEASE_POLICY_HANDOFF_ON_CANCEL | _YIELD_TO_NEWER
	}
	procs := make([]*proc, len(ids))
	for i, id := range ids { // OrderedReady: pod-0 first
		procs[i] = s.start(id, opts(i, "1.0.0"))
		if i == 0 {
			s.awaitLeader(30*time.Second, 0)
		}
		awaitCandidate(t, admin, s.lease, id, "1.0.0")
	}
	for update, version := range []string{"2.0.0", "3.0.0"} {
		began := history.Now()
		for i := len(ids) - 1; i >= 0; i-- {
			s.sigterm(procs[i])
			procs[i] = s.start(ids[i], opts(i, version))
			awaitCandidate(t, admin, s.lease, ids[i], version)
		}
		leader, _ := s.awaitLeader(30*time.Second, 0)
		time.Sleep(time.Second) // a hand-off still on its way shows up
		moves := 0
		for _, tm := range s.report().Terms {
			if tm.Start > began {
				moves++
			}
		}
		t.Logf("rolling update %d to %s: %d leadership move(s); %s leads", update+1, version, moves, leader.id)
		if moves < 1 || moves > 2 {
			s.fail("rolling update %d: %d leadership moves, want 1 (2 when the leader was the first replaced)", update+1, moves)
		}
	}
	s.stopAll()
	s.verify()
}

// awaitCandidate waits until id's candidate record for lease names version.
func awaitCandidate(t *testing.T, admin kubernetes.Interface, leaseName, id, version string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		l, err := admin.CoordinationV1().Leases(namespace).List(context.Background(),
			metav1.ListOptions{LabelSelector: lease.CandidateOfLabel + "=" + leaseName})
		if err == nil {
			for _, r := range l.Items {
				if r.Spec.HolderIdentity != nil && *r.Spec.HolderIdentity == id && r.Annotations[lease.CandidateVersionAnnotation] == version {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never recorded its candidacy with version %s", id, version)
}
