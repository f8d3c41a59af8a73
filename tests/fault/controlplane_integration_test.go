//go:build integration

package fault

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// requireStepDown checks that the leader cut off at cutAt reported the loss
// as a missed renew deadline, and stopped acting within renewDeadline + 1 s.
func (s *scenario) requireStepDown(ended history.Term, cutAt int64) {
	s.t.Helper()
	bound := cutAt + int64(s.timing.renew+time.Second)
	after := time.Duration(ended.Until() - cutAt)
	s.t.Logf("leader (pid %d, token %d) stepped down %v after the cut: %s %q", ended.PID, ended.Token, after.Round(time.Millisecond), ended.EndKind, ended.Reason)
	if ended.Until() > bound {
		s.t.Errorf("leader stepped down %v after the cut, later than renewDeadline + 1 s (%v)", after, s.timing.renew+time.Second)
	}
	if ended.EndKind != history.Lost || !strings.Contains(ended.Reason, "renew deadline exceeded") {
		s.t.Errorf("leader ended by %s %q, want lost with \"renew deadline exceeded\"", ended.EndKind, ended.Reason)
	}
}

// The whole API server freezes (SIGSTOP) while a leader holds.
func TestFrozenAPIServer(t *testing.T) {
	s := newScenario(t, steady)
	for i := 0; i < 3; i++ {
		s.start(fmt.Sprintf("frozen-%d", i), candOpts{})
	}
	leader, term := s.awaitLeader(30*time.Second, 0)
	time.Sleep(time.Second) // a few renewals
	frozenAt := history.Now()
	if err := server.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := server.ThawAPIServer(); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	s.requireStepDown(s.awaitTermEnd(s.timing.renew+3*time.Second, leader.pid(), term.Token), frozenAt)
	time.Sleep(time.Duration(frozenAt + int64(s.timing.lease+time.Second) - history.Now()))
	thaw()
	thawedAt := history.Now()
	next, nextTerm := s.awaitLeader(30*time.Second, frozenAt)
	t.Logf("after the thaw, %s (pid %d) leads with token %d, %v later", next.id, next.pid(), nextTerm.Token,
		time.Duration(nextTerm.Start-thawedAt).Round(time.Millisecond))
	s.stopAll()
	s.verify()
}

// The control plane (kube-apiserver, then etcd) is stopped and started
// again; etcd keeps its data, so the Lease survives.
func TestRestartedControlPlane(t *testing.T) {
	s := newScenario(t, steady)
	for i := 0; i < 3; i++ {
		s.start(fmt.Sprintf("restart-%d", i), candOpts{})
	}
	leader, term := s.awaitLeader(30*time.Second, 0)
	time.Sleep(time.Second)
	// The cut is the SIGTERM: the API server stops answering at once but
	// takes seconds to exit.
	stoppedAt := history.Now()
	if err := server.StopControlPlane(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver and etcd exited %v after SIGTERM", time.Duration(history.Now()-stoppedAt).Round(time.Millisecond))
	started := false
	defer func() {
		if !started {
			_ = server.StartControlPlane()
		}
	}()
	s.requireStepDown(s.awaitTermEnd(s.timing.renew+3*time.Second, leader.pid(), term.Token), stoppedAt)
	time.Sleep(time.Duration(stoppedAt + int64(s.timing.renew+1500*time.Millisecond) - history.Now()))
	started = true
	if err := server.StartControlPlane(); err != nil {
		t.Fatal(err)
	}
	next, nextTerm := s.awaitLeader(30*time.Second, stoppedAt)
	t.Logf("control plane down %v; %s (pid %d) leads with token %d after the restart",
		time.Duration(history.Now()-stoppedAt).Round(time.Millisecond), next.id, next.pid(), nextTerm.Token)

	// The standbys' watches resynced: a graceful hand-off reaches them at
	// once, which no timer-driven retry would do within a second.
	time.Sleep(2 * time.Second)
	handoffAt := history.Now()
	s.sigterm(next)
	after, afterTerm := s.awaitLeader(10*time.Second, handoffAt)
	took := time.Duration(afterTerm.Start - handoffAt)
	t.Logf("hand-off after the restart: %s took over in %v", after.id, took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("hand-off after the restart took %v: the standbys' watches did not resync", took)
	}
	s.stopAll()
	s.verify()
}
