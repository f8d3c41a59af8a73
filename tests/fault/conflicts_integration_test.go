//go:build integration

package fault

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/internal/history"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// How many 409s the API server answers for Lease writes: on a contested
// graceful hand-off with 5 standbys (the floor is one per losing standby,
// 4), and in the 15 s after the API server was frozen for 6 s and thawed
// (standbys whose watches lag must learn the Lease, not resend the same
// doomed write). Each candidate's 409 is followed by one GET of the Lease.
func TestConflictsOnARealAPIServer(t *testing.T) {
	admin, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	conflicts := func() float64 {
		n, err := testenv.APIRequests(admin, "leases", "409")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	s := newScenario(t, steady)
	for i := 0; i < 6; i++ {
		s.start(fmt.Sprintf("contender-%d", i), candOpts{})
	}
	leader, term := s.awaitLeader(30*time.Second, 0)
	time.Sleep(time.Second) // every standby's watch is up
	const handoffs = 3
	var perHandoff []float64
	for i := 0; i < handoffs; i++ {
		before := conflicts()
		s.sigterm(leader)
		next, nextTerm := s.awaitLeader(10*time.Second, term.Start)
		time.Sleep(time.Second) // the losers' 409s are answered
		n := conflicts() - before
		perHandoff = append(perHandoff, n)
		t.Logf("hand-off %d: %s -> %s, %v 409s", i, leader.id, next.id, n)
		if n > 10 {
			s.fail("hand-off %d: %v 409s from 5 standbys (at most one each, and a few for lagging watches, expected)", i, n)
		}
		s.start(leader.id, candOpts{}) // back as a standby
		leader, term = next, nextTerm
		time.Sleep(time.Second)
	}

	frozenAt := history.Now()
	if err := server.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	if err := server.ThawAPIServer(); err != nil {
		t.Fatal(err)
	}
	before := conflicts()
	s.awaitLeader(30*time.Second, frozenAt)
	time.Sleep(15*time.Second - time.Duration(history.Now()-frozenAt-int64(6*time.Second)))
	afterThaw := conflicts() - before
	t.Logf("409s per contested hand-off with 5 standbys: %v; in the 15 s after a 6 s freeze: %v", perHandoff, afterThaw)
	if afterThaw > 30 {
		s.fail("%v 409s in the 15 s after the thaw: candidates resend doomed writes", afterThaw)
	}
	s.stopAll()
	s.verify()
}
