package lease

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// candidateProcesses is three processes on one fake API server, each with options.
func candidateProcesses(t *testing.T, opts map[string]ElectionOptions, ids ...string) (map[string]*Manager, map[string]*Election, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	ms, es := map[string]*Manager{}, map[string]*Election{}
	for i, id := range ids {
		m := NewManager(clock.RealClock{})
		m.SetClient(clientsetapi.Wrap(client))
		m.SetEvents(false)
		t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
		e, err := m.RunElectionWith("ns", "l", id, fastUnitTiming, opts[id])
		if err != nil {
			t.Fatal(err)
		}
		ms[id], es[id] = m, e
		if i == 0 {
			if _, err := e.WaitElected(5 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 5*time.Second, "every candidate recorded", func() bool {
		cs, err := ms[ids[0]].Candidates("ns", "l")
		return err == nil && len(cs) == len(ids)
	})
	return ms, es, client
}

func TestPolicyHandOffOnCancel(t *testing.T) {
	ms, es, _ := candidateProcesses(t, map[string]ElectionOptions{
		"a": {Version: "1.0.0", Policy: PolicyHandOffOnCancel},
		"b": {Version: "1.0.0", Priority: 1}, "c": {Version: "1.1.0"},
	}, "a", "b", "c")
	if err := ms["a"].CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := es["c"].WaitElected(time.Second); err != nil {
		t.Fatalf("the newest candidate did not take over: %v", err)
	}
	if ok, _, _ := es["b"].IsLeader(); ok {
		t.Fatal("b leads")
	}
	if err := es["a"].WaitLost(); err != nil {
		t.Fatalf("the cancelled leader's WaitLost = %v, want nil", err)
	}
}

func TestPolicyYieldToNewer(t *testing.T) {
	_, es, client := candidateProcesses(t, map[string]ElectionOptions{
		"a": {Version: "1.0.0", Policy: PolicyYieldToNewer}, "b": {Version: "1.0.0"},
	}, "a", "b")
	time.Sleep(200 * time.Millisecond) // a candidate of the same version is no reason to move
	if ok, _, _ := es["a"].IsLeader(); !ok {
		t.Fatal("a does not lead")
	}
	m := NewManager(clock.RealClock{})
	m.SetClient(clientsetapi.Wrap(client))
	m.SetEvents(false)
	t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
	newer, err := m.RunElectionWith("ns", "l", "n", fastUnitTiming, ElectionOptions{Version: "1.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newer.WaitElected(5 * time.Second); err != nil {
		t.Fatalf("the newer version did not get the lease: %v", err)
	}
	lost := es["a"].WaitLost()
	if !errors.Is(lost, ErrHandedOff) || !strings.Contains(lost.Error(), "to n") {
		t.Fatalf("the old leader's WaitLost = %v, want a hand-off to n", lost)
	}
	if ok, _, _ := es["b"].IsLeader(); ok {
		t.Fatal("b leads")
	}
}

func TestPreferredHolderAnnotation(t *testing.T) {
	_, es, client := candidateProcesses(t, nil, "a", "b", "c")
	l, err := client.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[PreferredHolderAnnotation] = "c" // kubectl annotate lease l k8s-lease.io/preferred-holder=c
	if _, err := client.CoordinationV1().Leases("ns").Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := es["c"].WaitElected(5 * time.Second); err != nil {
		t.Fatalf("the preferred holder did not get the lease: %v", err)
	}
	if lost := es["a"].WaitLost(); !errors.Is(lost, ErrHandedOff) {
		t.Fatalf("the old leader's WaitLost = %v, want a hand-off", lost)
	}
	if ok, _, _ := es["b"].IsLeader(); ok {
		t.Fatal("b leads")
	}
}
