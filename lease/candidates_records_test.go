package lease

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/candidates"
	"github.com/k8s-lease/k8s-lease/lease/internal/candidates/candidatestest"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// leaseRecords is the store keeping candidate records as Leases on client.
func leaseRecords(client kubeapi.Client) candidateStore { return candidates.Leases{Client: client} }

// candidateRecordName is the name of identity's candidate record on lease.
func candidateRecordName(lease, identity string) string {
	return candidates.RecordName(lease, identity)
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

// A record write that fails (any error but a foreign object of the
// record's name) is tried again within seconds, with backoff, until it
// lands; once it has, the record is refreshed every candidateRefresh as
// before (no write in the seconds after).
func TestCandidateRecordWriteRetriedWithBackoffAfterAFailure(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
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
	m := process(t, client)
	e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Two failures back off at most 1 s + 2 s (newBackoff's jitter only
	// shortens them); 10 s leaves room for a loaded machine.
	eventually(t, 10*time.Second, "a recorded after two failed writes", func() bool {
		cs, err := m.Candidates("ns", "l")
		return err == nil && len(cs) == 1
	})
	after := writes.Load()
	time.Sleep(3 * time.Second)
	if n := writes.Load(); n != after {
		t.Fatalf("%d record writes in the 3 s after one landed: the refresh is candidateRefresh (%v)", n-after, candidateRefresh)
	}
	if after != 3 {
		t.Fatalf("%d record writes to land one after two failures, want 3", after)
	}
}

// Retries of a failing record write stop when the candidacy ends: no write
// after its end (the delete it would precede is skipped: nothing written).
func TestCandidateRecordRetriesStopWhenTheCandidacyEnds(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	name := candidateRecordName("l", "a")
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if candidatestest.ObjectName(a) == name {
			return true, nil, apierrors.NewServiceUnavailable("etcd unavailable")
		}
		return false, nil, nil
	})
	writes := countRecordWrites(client, name)
	m := process(t, client)
	e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a retried write", func() bool { return writes.Load() >= 2 })
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.candidacy.record.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the candidacy's end did not finish")
	}
	ended := writes.Load()
	// The retry pending at the end was due within 2 s (two or three
	// failures so far): 3 s would have seen it.
	time.Sleep(3 * time.Second)
	if n := writes.Load(); n != ended {
		t.Fatalf("%d record writes after the candidacy ended", n-ended)
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
	m := process(t, client)
	e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the candidacy's first write", func() bool { return tries.Load() >= 1 })
	time.Sleep(3 * time.Second) // a fast retry (1 s, 2 s) would show
	if n := tries.Load(); n != 1 {
		t.Fatalf("%d tries in 3 s to write over a foreign Lease, want 1: its refusal waits for candidateRefresh", n)
	}
	e.candidacy.record.put() // two refreshes, as candidateRefresh's timer runs them
	e.candidacy.record.put()
	if got := snapshot(); got != before {
		t.Fatalf("the foreign Lease changed:\nbefore %s\nafter  %s", before, got)
	}
	if cs, err := m.Candidates("ns", "l"); err != nil || len(cs) != 0 {
		t.Fatalf("Candidates = %+v, %v: the foreign Lease is no record", cs, err)
	}
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.candidacy.record.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the candidacy's end did not finish")
	}
	if got := snapshot(); got != before {
		t.Fatalf("the foreign Lease changed when the candidacy ended:\nbefore %s\nafter  %s", before, got)
	}
	if n := writes.Load(); n != 3 {
		t.Fatalf("%d writes of %s, want the 3 refused creates", n, name)
	}
}
