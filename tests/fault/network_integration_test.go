//go:build integration

package fault

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// The leader alone is cut off (its proxy black-holes everything).
func TestPartitionedLeader(t *testing.T) {
	t.Parallel()
	s := newScenario(t, steady)
	for i := 0; i < 3; i++ {
		s.start(fmt.Sprintf("part-%d", i), candOpts{proxied: true})
	}
	old, term := s.awaitLeader(30*time.Second, 0)
	time.Sleep(time.Second)
	cutAt := history.Now()
	old.proxy.BlackHole()
	ended := s.awaitTermEnd(s.timing.renew+3*time.Second, old.pid(), term.Token)
	s.requireStepDown(ended, cutAt)

	next, nextTerm := s.awaitLeader(s.timing.lease+s.timing.renew+10*time.Second, cutAt)
	if next == old {
		t.Fatalf("the partitioned leader was elected again")
	}
	t.Logf("%s took over %v after the cut, %v after the old leader stepped down",
		next.id, time.Duration(nextTerm.Start-cutAt).Round(time.Millisecond), time.Duration(nextTerm.Start-ended.Until()).Round(time.Millisecond))
	// The old leader's guarantee ended at (last renewal sent) + renewDeadline;
	// a standby may take over only a lease duration after it saw that
	// renewal: at least leaseDuration - renewDeadline later (less the 1 ms
	// the candidates poll IsLeader at).
	if gap, min := time.Duration(nextTerm.Start-ended.Until()), s.timing.lease-s.timing.renew-10*time.Millisecond; gap < min {
		t.Errorf("a standby took over %v after the old leader stepped down, want >= %v", gap, min)
	}

	// Healed, the old leader rejoins as a standby: with the third candidate
	// gone, a hand-off from the new leader must reach it.
	old.proxy.Heal()
	for _, p := range s.live() {
		if p != old && p != next {
			s.sigterm(p)
		}
	}
	time.Sleep(3 * time.Second)
	handoffAt := history.Now()
	s.sigterm(next)
	back, _ := s.awaitLeader(15*time.Second, handoffAt)
	if back != old {
		t.Fatalf("leader after the hand-off is %v, want the healed old leader %s", back, old.id)
	}
	s.stopAll()
	s.verify()
}

// Latency on every request and bursts of 429/503 with Retry-After.
func TestLatencyAndThrottling(t *testing.T) {
	s := newScenario(t, steady)
	for i := 0; i < 3; i++ {
		s.start(fmt.Sprintf("slow-%d", i), candOpts{proxied: true})
	}
	leader, term := s.awaitLeader(30*time.Second, 0)
	all := func(f func(p *proc)) {
		for _, p := range s.live() {
			f(p)
		}
	}
	requireSameTerm := func(phase string) {
		t.Helper()
		for _, tm := range s.report().Terms {
			if tm.PID == leader.pid() && tm.Token == term.Token && tm.End != history.Open {
				t.Errorf("%s: leadership of %s (token %d) ended: %s %q", phase, leader.id, term.Token, tm.EndKind, tm.Reason)
			}
		}
	}

	// renewDeadline/2 on every request: renewals are pipelined (one sent
	// every retry period, each extending leadership to its send time +
	// renewDeadline), so this fits the deadline: no loss allowed.
	half := s.timing.renew / 2
	all(func(p *proc) { p.proxy.SetLatency(half) })
	time.Sleep(8 * time.Second) // two lease durations: every renewal of them slow
	all(func(p *proc) { p.proxy.SetLatency(0) })
	requireSameTerm(fmt.Sprintf("latency %v", half))
	time.Sleep(2 * time.Second) // the slow renewals drain

	// A burst of two 429s (or 503s) with Retry-After 1 s delays a renewal by
	// 2 s of the 2.5 s the deadline leaves after a retry period: no loss.
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		before := leader.proxy.Faulted()
		for i := 0; i < 3; i++ {
			leader.proxy.Throttle(code, time.Second, 2)
			time.Sleep(3 * time.Second)
		}
		if n := leader.proxy.Faulted() - before; n < 6 {
			t.Errorf("only %d requests got %d", n, code)
		}
		requireSameTerm(fmt.Sprintf("bursts of %d", code))
	}

	// Latency of a whole renewDeadline is beyond what any deadline allows:
	// the leader must step down, and nobody may overlap.
	cur, curTerm := s.awaitLeader(30*time.Second, 0)
	all(func(p *proc) { p.proxy.SetLatency(s.timing.renew) })
	slowAt := history.Now()
	ended := s.awaitTermEnd(2*s.timing.renew+time.Second, cur.pid(), curTerm.Token)
	t.Logf("latency %v: the leader stepped down %v later: %s %q", s.timing.renew,
		time.Duration(ended.Until()-slowAt).Round(time.Millisecond), ended.EndKind, ended.Reason)
	time.Sleep(5 * time.Second)
	all(func(p *proc) { p.proxy.SetLatency(0) })
	s.awaitLeader(30*time.Second, 0)
	s.stopAll()
	s.verify()
}
