//go:build integration

package fault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// userTiming is our first user's: RunElection(ns, lease, addr, 5, 3, 1).
var userTiming = timing{5 * time.Second, 3 * time.Second, time.Second}

const roleLabel = "k8s-lease.test/role"

// Three replicas driven as our first user's master drives the library
// (lease_candidate --pattern poll: GetHolder polled every 200 ms,
// WaitElected 10 s with CancelElection on timeout, WaitLost as leader, the
// Pod label, no K8sLeaseInit before the first label call). The leader is
// SIGKILLed and SIGTERMed in turn and restarted under the same identity, as
// kubelet would. The history checker judges safety; a fail-over after a
// kill must come within about one lease duration (two, before a campaign
// inherited what the process had already observed), and the label follows
// the leader with no label call failing.
func TestUserPatternFailover(t *testing.T) {
	t.Parallel()
	admin, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, userTiming)
	ids := []string{"replica-0", "replica-1", "replica-2"}
	for _, id := range ids {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.lease + "-" + id, Namespace: namespace,
			Labels: map[string]string{roleLabel: "leader"}}, // stale: every start clears it first
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "master", Image: "master"}}}}
		if _, err := admin.CoreV1().Pods(namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := func(id string) candOpts { return candOpts{poll: true, pod: s.lease + "-" + id} }
	for _, id := range ids {
		s.start(id, opts(id))
	}
	leader, term := s.awaitLeader(30*time.Second, 0)
	requireLabels(t, admin, s, leader.id, ids)

	const rounds = 2
	var kills, terms []time.Duration
	for round := 0; round < 2*rounds; round++ {
		killed := round%2 == 0
		at := history.Now()
		if killed {
			s.sigkill(leader)
		} else {
			s.sigterm(leader)
		}
		s.start(leader.id, opts(leader.id)) // restarted as kubelet would
		next, nextTerm := s.awaitLeader(3*userTiming.lease, term.Start)
		took := time.Duration(nextTerm.Start - at)
		if killed {
			kills = append(kills, took)
		} else {
			terms = append(terms, took)
		}
		t.Logf("round %d: %s of %s -> %s leads after %v", round, map[bool]string{true: "SIGKILL", false: "SIGTERM"}[killed],
			leader.id, next.id, took.Round(time.Millisecond))
		if killed && took > userTiming.lease+2*time.Second {
			s.fail("fail-over after a SIGKILL took %v, more than a lease duration (%v) + 2 s: the campaign did not inherit the observation",
				took, userTiming.lease)
		}
		requireLabels(t, admin, s, next.id, ids)
		leader, term = next, nextTerm
	}
	s.stopAll()
	r := s.verify()
	if r.LeaderChanges() < 2*rounds {
		t.Errorf("%d leader changes, want at least %d", r.LeaderChanges(), 2*rounds)
	}
	for _, p := range s.cands {
		if strings.Contains(p.stderr.String(), "label error") || strings.Contains(p.stderr.String(), "get holder") {
			t.Errorf("%s (pid %d) reported errors: %s", p.id, p.pid(), p.stderr)
		}
	}
	t.Logf("SIGKILL -> next leader: %v; SIGTERM -> next leader: %v", kills, terms)
}

// requireLabels waits until exactly the leader's Pod carries the label.
func requireLabels(t *testing.T, admin kubernetes.Interface, s *scenario, leaderID string, ids []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var wrong []string
		for _, id := range ids {
			pod, err := admin.CoreV1().Pods(namespace).Get(context.Background(), s.lease+"-"+id, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if has := pod.Labels[roleLabel] == "leader"; has != (id == leaderID) {
				wrong = append(wrong, fmt.Sprintf("%s label=%q", id, pod.Labels[roleLabel]))
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.fail("leader %s: Pod labels wrong after 10 s: %v", leaderID, wrong)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
