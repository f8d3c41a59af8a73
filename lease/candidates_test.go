package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/candidates"
	"github.com/k8s-lease/k8s-lease/lease/internal/candidates/candidatestest"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
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
	// a has listed the candidates and waits for a change: one of the same
	// version is no reason to move.
	awaitWaitingIn(t, "(*Election).yieldToNewer", 1)
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
	leaderAndRecordedStandby(t, x, am, "x", "a", fastUnitTiming)
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

// leaseRecords is the store keeping candidate records as Leases on client.
func leaseRecords(client kubeapi.Client) candidateStore { return candidates.Leases{Client: client} }

// candidateRecordName is the name of identity's candidate record on lease.
func candidateRecordName(lease, identity string) string {
	return candidates.RecordName(lease, identity)
}

// recordOnFakeClock is candidate identity's record on lease ns/l alone,
// started as a candidacy starts it, on a fake clock (the only timer there
// is the record's) and client's candidate records.
func recordOnFakeClock(t *testing.T, client *fake.Clientset, identity string) (*candidacy, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(testNow)
	api := clientsetapi.Wrap(client)
	reg := &candidateRegistry{}
	e := newElection(Key{Namespace: "ns", Name: "l"}, identity, fastUnitTiming, ElectionOptions{}, electionParts{
		leases: api.Leases("ns"), clock: clk, candidates: reg, store: func() candidateStore { return reg.storeFor(api) }})
	t.Cleanup(func() {
		e.candidacy.record.end()
		<-e.candidacy.record.done
	})
	e.recordCandidacy()
	return e.candidacy.record, clk
}

// countRecordWrites counts the tries to create, update, patch or delete the
// Lease name (the fake keeps every action, but reading them needs its lock).
// Installed last, it runs first: it sees the tries other reactors refuse.
func countRecordWrites(client *fake.Clientset, name string) *atomic.Int64 {
	var n atomic.Int64
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			if candidatestest.ObjectName(a) == name {
				n.Add(1)
			}
		}
		return false, nil, nil
	})
	return &n
}

// Through a Manager: a candidate standing again whose predecessor's record
// delete lands in the middle of its first write is recorded at once, and a
// hand-off to it goes ahead.
func TestHandOffAcceptedWhenThePredecessorDeleteLandedMidWrite(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	// Reactors are installed before any request (the fake does not lock
	// its chain against them). The predecessor's record below is only
	// created: the first get of it is the new candidacy's.
	landed := candidatestest.DeleteBefore(t, client, "get", "leases", candidateRecordName("l", "a"))
	x := process(t, client)
	ex, err := x.RunElection("ns", "l", "x", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "a", RenewTime: time.Now()}); err != nil {
		t.Fatal(err) // what a's last candidacy left (priority 0), its delete still on the way
	}
	am := process(t, client)
	ea, err := am.RunElectionWith("ns", "l", "a", fastUnitTiming, ElectionOptions{Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "the predecessor's delete landing mid-write", landed.Load)
	// A write takes a few round trips on the fake: 3 s is far below the
	// 5 min the record used to be missing for.
	eventually(t, 3*time.Second, "a recorded by its new candidacy (priority 1)", func() bool {
		cs, err := x.Candidates("ns", "l")
		for _, c := range cs {
			if c.Identity == "a" && c.Priority == 1 {
				return err == nil
			}
		}
		return false
	})
	if err := x.HandOff("ns", "l", "a", 2*time.Second); err != nil {
		t.Fatalf("HandOff to a: %v", err)
	}
	if _, err := ea.WaitElected(time.Second); err != nil {
		t.Fatal(err)
	}
}

// A record write that fails is retried with backoff (1 s, then 2 s) until
// it lands; once it has, the record is refreshed every candidateRefresh as
// before (no write until then). On the record's fake clock: its timer is
// the only one there, so a Step that does not fire it leaves it waiting.
func TestCandidateRecordWriteRetriedWithBackoffAfterAFailure(t *testing.T) {
	client := fake.NewClientset()
	name := candidateRecordName("l", "a")
	var failures atomic.Int64
	failures.Store(2)
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if candidatestest.ObjectName(a) == name && failures.Add(-1) >= 0 {
			return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return false, nil, nil
	})
	writes := countRecordWrites(client, name)
	c, clk := recordOnFakeClock(t, client, "a")
	eventually(t, 5*time.Second, "the first write", func() bool { return writes.Load() == 1 })
	// newBackoff draws each wait from [wait/2, wait]: nothing comes before
	// half of it (the fake clock fires a due timer inside Step, so a timer
	// still waiting after a Step did not fire), and all of it brings the retry.
	for i, wait := range []time.Duration{candidateRetryMin, 2 * candidateRetryMin} {
		awaitWaiters(t, clk, 1)
		clk.Step(wait/2 - time.Millisecond)
		if n := clk.Waiters(); n != 1 {
			t.Fatalf("retry %d came before half its backoff (%v): %d timers left", i+1, wait/2, n)
		}
		clk.Step(wait/2 + time.Millisecond)
		eventually(t, 5*time.Second, fmt.Sprintf("retry %d, %v after the failure", i+1, wait), func() bool { return writes.Load() == int64(i+2) })
	}
	eventually(t, 5*time.Second, "the record written", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.written })
	awaitWaiters(t, clk, 1)
	clk.Step(candidateRefresh - time.Second)
	if clk.Waiters() != 1 || writes.Load() != 3 {
		t.Fatalf("%d record writes and %d timers %v after it landed, want 3 and the refresh's still waiting: the refresh is candidateRefresh (%v)",
			writes.Load(), clk.Waiters(), candidateRefresh-time.Second, candidateRefresh)
	}
	clk.Step(time.Second)
	// A refresh is a create (answered AlreadyExists), a read and an update:
	// two writes.
	eventually(t, 5*time.Second, "the refresh, candidateRefresh after the write", func() bool { return writes.Load() == 5 })
}

// Retries of a failing record write stop when the candidacy ends: no write
// after its end (the delete it would precede is skipped: nothing written).
func TestCandidateRecordRetriesStopWhenTheCandidacyEnds(t *testing.T) {
	client := fake.NewClientset()
	name := candidateRecordName("l", "a")
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if candidatestest.ObjectName(a) == name {
			return true, nil, apierrors.NewServiceUnavailable("etcd unavailable")
		}
		return false, nil, nil
	})
	writes := countRecordWrites(client, name)
	c, clk := recordOnFakeClock(t, client, "a")
	eventually(t, 5*time.Second, "the first write", func() bool { return writes.Load() == 1 })
	awaitWaiters(t, clk, 1)
	clk.Step(candidateRetryMin)
	eventually(t, 5*time.Second, "a retried write", func() bool { return writes.Load() == 2 })
	awaitWaiters(t, clk, 1) // the next retry, pending
	c.end()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the candidacy's end did not finish")
	}
	// Nothing left to fire: no write can follow (a retry due after the end
	// would return at its ended check all the same).
	if n := clk.Waiters(); n != 0 {
		t.Fatalf("%d timers left on the record's clock after its end: the pending retry was not stopped", n)
	}
	if n := writes.Load(); n != 2 {
		t.Fatalf("%d record writes by the end, want the 2 refused creates", n)
	}
}

// The record of candidate a on lease l is named l-candidate-a, a name
// someone else's Lease may have: that Lease is never written over, nor
// deleted. The refusal is retried on the slow path (every
// candidateRefresh), not within seconds.
func TestCandidateRecordLeavesAForeignLeaseOfItsNameUntouched(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	name := candidateRecordName("l", "a")
	holder, seconds, now := "another-app-0", int32(15), metav1.NewMicroTime(time.Now().Add(-time.Minute))
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
		Annotations: map[string]string{"owner": "another-app"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}}
	if _, err := client.CoordinationV1().Leases("ns").Create(t.Context(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		t.Helper()
		l, err := client.CoordinationV1().Leases("ns").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the foreign Lease: %v", err)
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := snapshot()
	var tries atomic.Int64
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if candidatestest.ObjectName(a) == name {
			tries.Add(1)
		}
		return false, nil, nil
	})
	writes := countRecordWrites(client, name)
	c, clk := recordOnFakeClock(t, client, "a")
	eventually(t, 5*time.Second, "the candidacy's first write", func() bool { return tries.Load() >= 1 })
	awaitWaiters(t, clk, 1)
	clk.Step(2*candidateRetryMin + candidateRetryMin) // a fast retry (1 s, 2 s) would come
	if n, w := tries.Load(), clk.Waiters(); n != 1 || w != 1 {
		t.Fatalf("%d tries and %d timers 3 s after the first, want 1 try and the refresh waiting: a refusal waits for candidateRefresh", n, w)
	}
	clk.Step(candidateRefresh)
	eventually(t, 5*time.Second, "the refresh's try", func() bool { return tries.Load() == 2 })
	if got := snapshot(); got != before {
		t.Fatalf("the foreign Lease changed:\nbefore %s\nafter  %s", before, got)
	}
	if cs, err := process(t, client).Candidates("ns", "l"); err != nil || len(cs) != 0 {
		t.Fatalf("Candidates = %+v, %v: the foreign Lease is no record", cs, err)
	}
	c.end()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the candidacy's end did not finish")
	}
	if got := snapshot(); got != before {
		t.Fatalf("the foreign Lease changed when the candidacy ended:\nbefore %s\nafter  %s", before, got)
	}
	if n := writes.Load(); n != 2 {
		t.Fatalf("%d writes of %s, want the 2 refused creates", n, name)
	}
}
