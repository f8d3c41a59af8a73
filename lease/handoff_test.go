package lease

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// handOffPair is a leader "a" and a campaigning standby "b", two Managers
// (two processes) on one fake API server.
func handOffPair(t *testing.T) (a, b *Manager, ea, eb *Election, client *fake.Clientset) {
	t.Helper()
	client = fake.NewClientset()
	newM := func() *Manager {
		m := NewManager(clock.RealClock{})
		m.SetClient(clientsetapi.Wrap(client))
		m.SetEvents(false)
		t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
		return m
	}
	a, b = newM(), newM()
	var err error
	if ea, err = a.RunElection("ns", "l", "a", unitTiming); err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if eb, err = b.RunElection("ns", "l", "b", unitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b follows the lease and has recorded its candidacy", func() bool {
		s := eb.obs.snapshot()
		cs, err := a.Candidates("ns", "l")
		return s.synced && s.rec.holder == "a" && err == nil && len(cs) == 2
	})
	return a, b, ea, eb, client
}

func TestHandOffToACampaigningCandidate(t *testing.T) {
	a, _, ea, eb, client := handOffPair(t)
	if err := a.HandOff("ns", "l", "b", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := ea.IsLeader(); ok {
		t.Fatal("the old leader still leads")
	}
	if err := ea.WaitLost(); err != nil {
		t.Fatalf("the old leader's WaitLost = %v, want nil (a hand-off ends it as a cancel does)", err)
	}
	token, err := eb.WaitElected(time.Second)
	if err != nil || token != 2 {
		t.Fatalf("target: token %d, %v; want token 2", token, err)
	}
	l, err := client.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := recordOf(l); r.holder != "b" || r.handOffTo != "" || r.incarnation == "" {
		t.Fatalf("record after the hand-off: %+v", r)
	}
	if a.Election("ns", "l") != nil {
		t.Fatal("the old leader's election is still registered: a new RunElection would be refused")
	}
}

// A target whose record is live but which does not campaign (it crashed):
// after the timeout the lease is released and the campaigning standby
// takes it.
func TestHandOffToACrashedCandidateTimesOutAndReleases(t *testing.T) {
	a, _, _, eb, client := handOffPair(t)
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "c", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err := a.HandOff("ns", "l", "c", 300*time.Millisecond)
	if !errors.Is(err, ErrHandOffTimeout) {
		t.Fatalf("HandOff = %v, want a timeout", err)
	}
	if token, err := eb.WaitElected(5 * time.Second); err != nil || token != 2 {
		t.Fatalf("the standby after the release: token %d, %v", token, err)
	}
}

func TestHandOffRefusals(t *testing.T) {
	a, b, _, _, _ := handOffPair(t)
	for _, tc := range []struct {
		name      string
		m         *Manager
		lease, to string
		timeout   time.Duration
		want      error
	}{
		{"a standby", b, "l", "a", time.Second, ErrNotLeader},
		{"no election on the lease", a, "other", "b", time.Second, ErrNotLeader},
		{"to itself", a, "l", "a", time.Second, ErrInvalidArgument},
		{"bad target", a, "l", "", time.Second, ErrInvalidArgument},
		{"bad timeout", a, "l", "b", 0, ErrInvalidArgument},
		{"a target with no candidate record", a, "l", "nobody", time.Second, errTargetNotSeen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.m.HandOff("ns", tc.lease, tc.to, tc.timeout); !errors.Is(err, tc.want) {
				t.Fatalf("HandOff = %v, want %v", err, tc.want)
			}
		})
	}
	if ok, _, _ := a.Election("ns", "l").IsLeader(); !ok {
		t.Fatal("a refused hand-off ended the leadership")
	}
}
