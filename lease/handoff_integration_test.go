//go:build integration

package lease

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
	"github.com/k8s-lease/k8s-lease/lease/internal/candidates"
)

// A hand-off between real processes, with another of ours and a plain
// client-go candidate campaigning: only the target takes the lease, and
// the old leader's IsLeader is 0 before the target's is 1.
func TestHandOffOnARealAPIServer(t *testing.T) {
	name := leaseName(t)
	a, b, c := newProcess(t), newProcess(t), newProcess(t)
	ea := mustRun(t, a, name, "a")
	mustElect(t, ea, 10*time.Second)
	eb, ec := mustRun(t, b, name, "b"), mustRun(t, c, name, "c")
	var clientGoLeads atomic.Bool
	stop := clientGoCandidate(t, name, "g", &clientGoLeads)
	defer stop()
	eventually(t, 10*time.Second, "c's candidate record", func() bool {
		cs, err := a.Candidates(itNamespace, name)
		if err != nil {
			return false
		}
		for _, x := range cs {
			if x.Identity == "c" {
				return true
			}
		}
		return false
	})

	// Watch the holders the API server sees from now on.
	w, err := itAdmin.CoordinationV1().Leases(itNamespace).Watch(context.Background(),
		metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if err := a.HandOff(itNamespace, name, "c", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if ok, _, _ := ea.IsLeader(); ok {
		t.Fatal("the old leader still leads")
	}
	if token, err := ec.WaitElected(time.Second); err != nil || token != 2 {
		t.Fatalf("the target: token %d, %v", token, err)
	}
	time.Sleep(3 * fastTiming.LeaseDuration) // the window and beyond: c keeps it
	w.Stop()
	for ev := range w.ResultChan() {
		if l, ok := ev.Object.(interface{ GetName() string }); ok && l.GetName() == name {
			r := recordOf(leaseOf(t, ev.Object))
			if r.holder != "a" && r.holder != "c" && r.holder != handOffHolder("c") {
				t.Errorf("holder %q appeared during the hand-off", r.holder)
			}
		}
	}
	if ok, _, _ := eb.IsLeader(); ok || clientGoLeads.Load() {
		t.Fatal("another candidate leads")
	}
	t.Logf("HandOff returned after %v (the target led)", took.Round(time.Microsecond))
}

// The preferred holder an operator names with kubectl annotate: the leader
// hands off to it at its next renewal. And what v1.37 does with
// spec.preferredHolder without the CoordinatedLeaderElection feature gate:
// it drops it.
func TestPreferredHolderOnARealAPIServer(t *testing.T) {
	name := leaseName(t)
	a, b, c := newProcess(t), newProcess(t), newProcess(t)
	ea := mustRun(t, a, name, "a")
	mustElect(t, ea, 10*time.Second)
	_, ec := mustRun(t, b, name, "b"), mustRun(t, c, name, "c")
	eventually(t, 10*time.Second, "three candidate records", func() bool {
		cs, err := a.Candidates(itNamespace, name)
		return err == nil && len(cs) == 3
	})
	leases := itAdmin.CoordinationV1().Leases(itNamespace)
	preferred := "c"
	l := updateLease(t, leases, name, func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = &preferred })
	if l.Spec.PreferredHolder != nil {
		t.Logf("this API server keeps spec.preferredHolder (%q)", *l.Spec.PreferredHolder)
	} else {
		t.Log("this API server dropped spec.preferredHolder (CoordinatedLeaderElection off): the annotation is the way")
	}
	// kubectl annotate lease NAME k8s-lease.io/preferred-holder=c
	patch := []byte(`{"metadata":{"annotations":{"` + PreferredHolderAnnotation + `":"c"}}}`)
	if _, err := leases.Patch(context.Background(), name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ec.WaitElected(5 * time.Second); err != nil {
		t.Fatalf("the preferred holder was not handed the lease: %v", err)
	}
	if lost := ea.WaitLost(); lost == nil {
		t.Fatal("the old leader's WaitLost = nil, want the hand-off reason")
	} else {
		t.Logf("old leader: %v", lost)
	}
}

// updateLease applies edit to the Lease as another writer would and
// returns what the API server stored. A leader renews it every RetryPeriod:
// an update that loses to a renewal (a conflict) reads afresh and tries
// again, as kubectl edit's user would.
func updateLease(t *testing.T, leases coordclient.LeaseInterface, name string, edit func(*coordinationv1.Lease)) *coordinationv1.Lease {
	t.Helper()
	var stored *coordinationv1.Lease
	tries := 0
	// A read and a write take milliseconds against a RetryPeriod of
	// 400 ms: 20 tries are far more than a run of lost races needs.
	err := retry.RetryOnConflict(wait.Backoff{Steps: 20, Duration: 10 * time.Millisecond, Factor: 1, Jitter: 0.5}, func() error {
		tries++
		l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(l)
		stored, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update lease %s (%d tries): %v", name, tries, err)
	}
	if tries > 1 {
		t.Logf("update of lease %s lost %d races to renewals", name, tries-1)
	}
	return stored
}

func leaseOf(t *testing.T, obj any) *coordinationv1.Lease {
	t.Helper()
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		t.Fatalf("a watch event of %T", obj)
	}
	return l
}

// Where the API server serves LeaseCandidates (the CoordinatedLeaderElection
// feature gate and coordination.k8s.io/v1beta1 on), candidate records are
// LeaseCandidates, and spec.preferredHolder is kept and honoured.
func TestLeaseCandidatesWhereServed(t *testing.T) {
	srv, err := testenv.Start(os.Stderr, "--namespace", itNamespace,
		"--apiserver-arg", "feature-gates=CoordinatedLeaderElection=true",
		"--apiserver-arg", "runtime-config=coordination.k8s.io/v1beta1=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(30 * time.Second) })
	admin, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	name := leaseName(t)
	a, b := newProcessWithConfig(t, srv.Config), newProcessWithConfig(t, srv.Config)
	ea, err := a.RunElectionWith(itNamespace, name, "a", fastTiming, ElectionOptions{Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	mustElect(t, ea, 10*time.Second)
	eb, err := b.RunElectionWith(itNamespace, name, "b", fastTiming, ElectionOptions{Version: "1.1.0", Priority: 2})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "two LeaseCandidates", func() bool {
		l, err := admin.CoordinationV1beta1().LeaseCandidates(itNamespace).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 2
	})
	cs, err := a.Candidates(itNamespace, name)
	if err != nil || len(cs) != 2 || cs[0].Identity != "b" || cs[0].Version != "1.1.0" || cs[0].Priority != 2 {
		t.Fatalf("Candidates = %+v, %v; want b (1.1.0, priority 2) first", cs, err)
	}
	if a.candidates.storeFor(nil).Kind() != "LeaseCandidate" {
		t.Fatalf("records kept as %ss", a.candidates.storeFor(nil).Kind())
	}
	leases := admin.CoordinationV1().Leases(itNamespace)
	// kubectl patch lease NAME --type merge -p '{"spec":{"strategy":"k8s-lease.io/NewestVersion","preferredHolder":"b"}}'
	// (the API server takes a preferred holder only with a strategy).
	preferred, strategy := "b", coordinationv1.CoordinatedLeaseStrategy(candidates.Strategy)
	l := updateLease(t, leases, name, func(l *coordinationv1.Lease) {
		l.Spec.PreferredHolder, l.Spec.Strategy = &preferred, &strategy
	})
	if l.Spec.PreferredHolder == nil {
		t.Fatal("the feature-gated API server dropped spec.preferredHolder")
	}
	if _, err := eb.WaitElected(5 * time.Second); err != nil {
		t.Fatalf("spec.preferredHolder was not honoured: %v", err)
	}
	if err := ea.WaitLost(); err == nil {
		t.Fatal("the old leader's WaitLost = nil, want the hand-off reason")
	}
	// Candidacies that end delete their records.
	if err := b.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the records deleted", func() bool {
		l, err := admin.CoordinationV1beta1().LeaseCandidates(itNamespace).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	})
}

// On a real API server, with a real client-go LeaderElector: a hand-off to
// b while b is frozen and client-go campaigns under the hand-off record's
// own holder name. client-go takes the record as its own and renews it;
// the hand-off reports that the lease changed and releases nothing, and b,
// once it resumes, waits while client-go leads: never two leaders.
func TestHandOffRecordTakenByClientGoNamedLikeItsHolder(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "ours-a")
	mustElect(t, a, 5*time.Second)
	var goLeading atomic.Bool
	stopGo := clientGoCandidate(t, name, handOffHolder("ours-b"), &goLeading)
	defer stopGo()

	// b campaigned long enough to leave its candidate record, then froze.
	client, err := ma.client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ma.candidates.storeFor(client).Put(context.Background(), itNamespace, name, Candidate{Identity: "ours-b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err = ma.HandOff(itNamespace, name, "ours-b", fastTiming.LeaseDuration)
	if err == nil || errors.Is(err, errReleasedInstead) {
		t.Fatalf("HandOff = %v; want the report that the lease changed before b took it, and no release", err)
	}
	eventually(t, 5*time.Second, "client-go leads the record it took as its own", goLeading.Load)
	if r := getLease(t, name); r.holder != handOffHolder("ours-b") || r.handedOffTo("ours-b") {
		t.Fatalf("after the hand-off: %+v; want client-go's live term, no hand-off", r)
	}

	// b resumes: a new candidacy of b, which must wait while client-go renews.
	b2 := mustRun(t, mb, name, "ours-b")
	for end := time.Now().Add(fastTiming.LeaseDuration + time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if ok, _, _ := b2.IsLeader(); ok && goLeading.Load() {
			t.Fatal("two leaders: b took the hand-off record that client-go renews")
		}
	}
	stopGo() // client-go releases: b takes the lease at once
	mustElect(t, b2, 5*time.Second)
}
