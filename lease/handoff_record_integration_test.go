//go:build integration

package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

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
