package lease

import (
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// A hand-off to an identity that a plain client-go candidate uses: client-go
// sees itself as the observed holder (IsLeader() compares the holder with
// its identity), skips the expiry check and takes the lease WITHOUT bumping
// leaseTransitions (it keeps the old leader's token), keeping every
// annotation, so the hand-off record (holder b, no incarnation,
// handed-off-to b) stays while client-go b leads. HandOff reports "timed
// out ... the lease is released" although b leads. Any candidate of this
// library named b then takes the lease at once (decide: handedOffTo(self))
// while client-go b leads: two leaders.
func TestHandOffRegressionClientGoNamedLikeTheTargetNeverLeadsBesideUs(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a := process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	tokenA, err := ea.WaitElected(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Plain client-go candidate "b".
	cgLeading, ctx := fakeClientGoCandidate(t, client, "b")
	time.Sleep(300 * time.Millisecond)
	if cgLeading.Load() {
		t.Fatal("client-go b leads before the hand-off")
	}
	// b's candidate record (say left by b's earlier life on this library,
	// or records unreadable: requireCampaigning then lets it through).
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(ctx, "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}

	err = a.HandOff("ns", "l", "b", 1500*time.Millisecond)
	if !errors.Is(err, ErrHandOffTimeout) || !errors.Is(err, errReleasedInstead) {
		t.Fatalf("HandOff = %v, want a timeout and a release: client-go b must not take the hand-off record", err)
	}
	_ = tokenA
	// client-go b takes the released lease the normal way; a candidate of
	// this library also named b must not lead beside it.
	eventually(t, 5*time.Second, "client-go b leads after the release", cgLeading.Load)
	b2 := process(t, client)
	eb2, err := b2.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if ok, _, _ := eb2.IsLeader(); ok && cgLeading.Load() {
			t.Fatal("two leaders: library b and client-go b")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
