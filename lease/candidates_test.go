package lease

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// A standby that cancels and exits leaves nothing behind: CancelElection
// returns once its candidate record is deleted.
func TestCancelElectionReturnsAfterTheCandidateRecordIsDeleted(t *testing.T) {
	server := fake.NewClientset()
	a := process(t, server)
	if e, err := a.RunElection("ns", "l", "a", fastUnitTiming); err != nil {
		t.Fatal(err)
	} else if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	entered, proceed := make(chan struct{}), make(chan struct{})
	var enteredOnce sync.Once
	b := process(t, hooked{Clientset: server, beforeDelete: func(name string) {
		if name == candidateRecordName("l", "b") {
			enteredOnce.Do(func() { close(entered) })
			<-proceed
		}
	}})
	if _, err := b.RunElection("ns", "l", "b", fastUnitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's candidate record", func() bool {
		cs, err := a.Candidates("ns", "l")
		return err == nil && len(cs) == 2
	})
	done := make(chan error, 1)
	go func() { done <- b.CancelElection("ns", "l") }()
	receive(t, entered, 5*time.Second, "the record's delete")
	eventually(t, 5*time.Second, "CancelElection returned or waits for the record's delete", func() bool {
		return len(done) > 0 || waitingUnder("(*Election).awaitCandidateRecordDeleted") > 0
	})
	if len(done) > 0 {
		close(proceed)
		t.Fatal("CancelElection returned while the candidate record's delete was still on its way: a host that exits now leaves the record for ten minutes")
	}
	close(proceed)
	if err := receive(t, done, 5*time.Second, "CancelElection"); err != nil {
		t.Fatal(err)
	}
	if _, err := server.CoordinationV1().Leases("ns").Get(t.Context(), candidateRecordName("l", "b"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("b's candidate record after CancelElection returned: %v; want not found", err)
	}
}

// handOffTargets records the targets of every hand-off record written to
// the election Lease "l" of client.
func handOffTargets(client *fake.Clientset) func() []string {
	var mu sync.Mutex
	var targets []string
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if l, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && l.Name == "l" && l.Annotations[HandOffAnnotation] != "" {
			mu.Lock()
			targets = append(targets, l.Annotations[HandOffAnnotation])
			mu.Unlock()
		}
		return false, nil, nil
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(targets)
	}
}

// The hand-off policy hands the lease only to a candidate seen alive in
// this term: a record a replica left when it was killed before this
// leader's term (its best priority notwithstanding) is passed over, and
// the live standby gets the lease.
func TestTheHandOffPolicyPassesOverACandidateThatDidNotSeeThisTerm(t *testing.T) {
	client := fake.NewClientset()
	enforceResourceVersions(client)
	targets := handOffTargets(client)
	policy := ElectionOptions{Version: "1.0.0", Policy: PolicyHandOffOnCancel}
	a, b := process(t, client), process(t, client)
	ea, err := a.RunElectionWith("ns", "l", "a", fastUnitTiming, policy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// What a replica SIGKILLed before a's term left behind.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "dead", Version: "1.0.0", Priority: 10, RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	eb, err := b.RunElectionWith("ns", "l", "b", fastUnitTiming, policy)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's candidate record", func() bool {
		cs, err := a.Candidates("ns", "l")
		return err == nil && len(cs) == 3
	})
	if err := a.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := targets(); slices.Contains(got, "dead") {
		t.Fatalf("hand-off records written to %v; want none to the replica that never saw a's term", got)
	}
}

// A target that was alive when the term began and died during it costs one
// hand-off's wait, in that term only: the next leader passes over it (its
// record names an older term), and the Event of the failed hand-off says
// what happened (released, not "handed off").
func TestAPolicyHandOffTargetThatDiedCostsOneTermOnly(t *testing.T) {
	client := fake.NewClientset()
	enforceResourceVersions(client)
	targets := handOffTargets(client)
	policy := ElectionOptions{Version: "1.0.0", Policy: PolicyHandOffOnCancel}
	a := NewManager(clock.RealClock{})
	a.SetClient(clientsetapi.Wrap(client))
	a.SetEvents(true)
	t.Cleanup(func() { _ = a.Shutdown(5 * time.Second) })
	ea, err := a.RunElectionWith("ns", "l", "a", fastUnitTiming, policy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// What a replica that saw a's term, then was SIGKILLed, left behind.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "dead", Version: "1.0.0", Priority: 10, RenewTime: time.Now(), SeenToken: 1}); err != nil {
		t.Fatal(err)
	}
	ms, es := map[string]*Manager{}, map[string]*Election{}
	for _, id := range []string{"b", "c"} {
		ms[id] = process(t, client)
		if es[id], err = ms[id].RunElectionWith("ns", "l", id, fastUnitTiming, policy); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "every candidate recorded", func() bool {
		cs, err := a.Candidates("ns", "l")
		return err == nil && len(cs) == 4
	})
	if err := a.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	var next string
	eventually(t, 5*time.Second, "b or c leads", func() bool {
		for id, e := range es {
			if ok, _, _ := e.IsLeader(); ok {
				next = id
			}
		}
		return next != ""
	})
	other := map[string]string{"b": "c", "c": "b"}[next]
	_, term, _ := es[next].IsLeader()
	eventually(t, 5*time.Second, other+"'s record naming "+next+"'s term", func() bool {
		cs, err := a.Candidates("ns", "l")
		return err == nil && slices.ContainsFunc(cs, func(c Candidate) bool { return c.Identity == other && c.SeenToken >= term })
	})
	if err := ms[next].CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := es[other].WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := targets(); !slices.Equal(got, []string{"dead", other}) {
		t.Fatalf("hand-off records written to %v; want [dead %s]: dead once, by the leader of its term only", got, other)
	}
	var stopped []string
	for _, ev := range leaseEvents(t, client, "l") {
		if strings.HasPrefix(ev.Message, "a stopped leading") {
			stopped = append(stopped, ev.Type+": "+ev.Message)
		}
	}
	t.Logf("a's end: %q", stopped)
	if len(stopped) != 1 || !strings.Contains(stopped[0], "hand-off to dead failed") || !strings.Contains(stopped[0], "released") {
		t.Fatalf("a's Events about its end: %q; want one saying the hand-off to dead failed and the lease was released", stopped)
	}
}

// The hand-off policy on cancel skips a target a hand-off already failed on
// (the Lease remembers it) until its record is written again, as the
// library's other hand-offs do.
func TestThePolicyOnCancelSkipsATargetAHandOffFailedOn(t *testing.T) {
	client := fake.NewClientset()
	enforceResourceVersions(client)
	targets := handOffTargets(client)
	policy := ElectionOptions{Version: "1.0.0", Policy: PolicyHandOffOnCancel}
	a, b := process(t, client), process(t, client)
	ea, err := a.RunElectionWith("ns", "l", "a", fastUnitTiming, policy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "x", Version: "1.0.0", Priority: 10, RenewTime: written, SeenToken: 1}); err != nil {
		t.Fatal(err)
	}
	annotateLease(t, client, HandOffFailedAnnotation, "x "+written.Add(time.Second).UTC().Format(time.RFC3339Nano))
	eb, err := b.RunElectionWith("ns", "l", "b", fastUnitTiming, policy)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's record naming a's term", func() bool {
		cs, err := a.Candidates("ns", "l")
		return err == nil && slices.ContainsFunc(cs, func(c Candidate) bool { return c.Identity == "b" && c.SeenToken >= 1 })
	})
	eventually(t, 5*time.Second, "a's renewals carrying the annotation", func() bool {
		a.Election("ns", "l").mu.Lock()
		defer a.Election("ns", "l").mu.Unlock()
		return handOffFailedAt(a.Election("ns", "l").term.written, "x").After(written)
	})
	if err := a.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := targets(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("hand-off records written to %v; want [b]: x, a hand-off to it failed since its record was written, skipped", got)
	}
}
