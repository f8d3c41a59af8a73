//go:build integration

package fault

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// The leader process is frozen (SIGSTOP: every thread, the library's
// included) for longer than its lease, two standbys campaigning, then
// resumed (SIGCONT). A pause inside the process is the one fault a leader
// cannot see coming; what the library promises is that
//   - a standby takes over once the lease ran out as it observed it: no
//     earlier than the frozen leader's last renewal + leaseDuration, the
//     renewal's send time (its renewTime, read from the Lease) being the
//     earliest a standby could have seen it;
//   - the resumed process never acts as leader again: IsLeader = 0 from its
//     first call after SIGCONT (its worker logs the end of a term with the
//     return time of the last IsLeader = 1: it must come before the
//     freeze), and WaitLost returns, with a reason;
//   - no overlap and rising tokens in the history, the freeze counted as
//     the end of the frozen process's term (nothing runs in it from then
//     on; an IsLeader = 1 after the thaw would still show as a violation).
//
// At our first user's lease duration (5/4/1 s) and client-go's defaults
// (15/10/2 s), each frozen for leaseDuration + 2 s (longer only if the
// standby is elected later than that).
func TestLeaderFrozenPastItsLease(t *testing.T) {
	t.Parallel()
	for _, tm := range []timing{
		{5 * time.Second, 4 * time.Second, time.Second},
		{15 * time.Second, 10 * time.Second, 2 * time.Second},
	} {
		t.Run(fmt.Sprintf("%v_%v_%v", tm.lease, tm.renew, tm.retry), func(t *testing.T) {
			t.Parallel()
			leaderFrozenPastItsLease(t, tm)
		})
	}
}

func leaderFrozenPastItsLease(t *testing.T, tm timing) {
	admin, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, tm)
	for i := 0; i < 3; i++ {
		s.start(fmt.Sprintf("paused-%d", i), candOpts{})
	}
	old, term := s.awaitLeader(30*time.Second, 0)
	samples := watchLease(t, admin, s.lease)
	time.Sleep(tm.retry + 500*time.Millisecond) // a renewal at least, seen by the standbys

	stopAt, stopWall := history.Now(), time.Now()
	if err := syscall.Kill(old.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// thawedAt is read before SIGCONT is sent: the process may run, and log,
	// before the kill(2) returns.
	var thawedAt int64
	thaw := func() {
		if thawedAt == 0 {
			thawedAt = history.Now()
			if err := syscall.Kill(old.pid(), syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	// The freeze is complete once every thread is stopped: from then on the
	// process executes nothing. (Until then it may still have logged.)
	if err := awaitStopped(old.pid(), 5*time.Second); err != nil {
		s.fail("SIGSTOP of %s (pid %d): %v", old.id, old.pid(), err)
	}
	frozenAt := history.Now()

	next, nextTerm := s.awaitLeader(tm.lease+tm.renew+10*time.Second, stopAt)
	thawDue := max(stopAt+int64(tm.lease+2*time.Second), nextTerm.Start+int64(500*time.Millisecond))
	time.Sleep(time.Duration(thawDue - history.Now()))
	got := samples.stop()
	thaw()

	// (a) Not before a lease duration after the frozen leader's last
	// renewal: the latest renewTime the Lease showed under its holder and
	// token, read until after the freeze (so every renewal it sent landed).
	var lastRenew time.Time
	readAfterFreeze := false
	for _, sm := range got {
		if sm.err == nil && sm.holder == old.id && sm.token == term.Token {
			if sm.renew.After(lastRenew) {
				lastRenew = sm.renew
			}
			readAfterFreeze = readAfterFreeze || monoOf(sm.at) > frozenAt+int64(time.Second)
		}
	}
	if !readAfterFreeze {
		s.fail("no read of the Lease showed the frozen leader %s (token %d) a second after the freeze:\n%s",
			old.id, term.Token, formatSamples(got, stopWall))
	}
	renewedAt := monoOf(lastRenew)
	t.Logf("SIGSTOP of %s (pid %d, token %d): every thread stopped %v later; its last renewal was sent %v before the SIGSTOP",
		old.id, old.pid(), term.Token, time.Duration(frozenAt-stopAt).Round(time.Microsecond),
		time.Duration(stopAt-renewedAt).Round(time.Millisecond))
	t.Logf("%s (token %d) elected %v after the SIGSTOP, %v after the frozen leader's last renewal (leaseDuration %v)",
		next.id, nextTerm.Token, time.Duration(nextTerm.Start-stopAt).Round(time.Millisecond),
		time.Duration(nextTerm.Start-renewedAt).Round(time.Millisecond), tm.lease)
	// Less the 10 ms a term's logged start may precede the acquisition (the
	// time taken before the IsLeader call that said 1).
	if gap, want := time.Duration(nextTerm.Start-renewedAt), tm.lease-10*time.Millisecond; gap < want {
		t.Errorf("%s took over %v after the frozen leader's last renewal, want >= %v", next.id, gap, want)
	}

	// (c) WaitLost returns in the resumed process, with a reason.
	ended := s.awaitTermEnd(tm.renew+5*time.Second, old.pid(), term.Token)
	t.Logf("frozen %v; after SIGCONT the resumed process reported the loss %v later: %s %q",
		time.Duration(thawedAt-stopAt).Round(time.Millisecond), time.Duration(ended.End-thawedAt).Round(time.Millisecond),
		ended.EndKind, ended.Reason)
	if ended.EndKind != history.Lost || ended.Reason == "" {
		t.Errorf("the resumed process's term ended by %s %q, want lost with a reason", ended.EndKind, ended.Reason)
	}
	if ended.End < thawedAt {
		t.Errorf("the frozen process logged the end of its term while frozen, %v before SIGCONT", time.Duration(thawedAt-ended.End))
	}

	// (b) IsLeader = 0 from the first call after SIGCONT. The worker logs
	// "off" at its first IsLeader = 0, with the return time of the last
	// call that said 1: any call after the thaw that said 1 would have moved
	// it past the thaw.
	deadline := time.Now().Add(5 * time.Second)
	for ended.LastOn == 0 {
		if time.Now().After(deadline) {
			s.fail("the resumed process (pid %d) logged no end of IsLeader = 1 within 5 s of its loss report", old.pid())
		}
		time.Sleep(20 * time.Millisecond)
		ended = s.awaitTermEnd(time.Second, old.pid(), term.Token)
	}
	t.Logf("the frozen process's last IsLeader = 1 returned at %v from the SIGSTOP's sending (every thread stopped at +%v)",
		time.Duration(ended.LastOn-stopAt).Round(time.Microsecond), time.Duration(frozenAt-stopAt).Round(time.Microsecond))
	switch {
	case ended.LastOn <= frozenAt:
	case ended.LastOnBegan <= frozenAt:
		t.Errorf("an IsLeader call begun before the freeze returned 1 %v after SIGCONT: the process was stopped inside it, past its deadline check (the documented limit of a pause longer than leaseDuration - renewDeadline)",
			time.Duration(ended.LastOn-thawedAt))
	default:
		t.Errorf("the resumed process got IsLeader = 1 in a call begun %v after SIGCONT", time.Duration(ended.LastOnBegan-thawedAt))
	}

	// The resumed process runs a while (its renewal timer fired, it
	// campaigns again): the standby keeps leading, and the resumed process
	// never logs itself leader.
	time.Sleep(tm.retry + 500*time.Millisecond)
	if p, cur := s.leader(); p != next || cur.Token != nextTerm.Token {
		who := "nobody"
		if p != nil {
			who = p.id
		}
		s.fail("after the thaw %s leads (token %d), want %s still (token %d)", who, cur.Token, next.id, nextTerm.Token)
	}
	for _, tr := range s.report().Terms {
		if tr.PID == old.pid() && tr.Start > frozenAt {
			t.Errorf("the resumed process logged itself leader again (token %d) %v after SIGCONT", tr.Token, time.Duration(tr.Start-thawedAt))
		}
	}

	// (d) The checker, with the freeze as the end of the frozen process's
	// term: the loss it reported after the thaw came after the standby's
	// election, yet nothing ran in the process in between.
	s.stopAll()
	r := s.verify(history.Event{At: frozenAt, PID: old.pid(), Kind: history.Killed, Detail: "frozen by SIGSTOP"})
	if r.LeaderChanges() < 1 {
		t.Errorf("%d leader changes, want at least 1", r.LeaderChanges())
	}
}

// awaitStopped waits until every thread of pid is stopped (state T in
// /proc/PID/task/TID/stat).
func awaitStopped(pid int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		running, err := runningThreads(pid)
		if err == nil && running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not stopped after %v: %d thread(s) not in state T (%v)", within, running, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts pid's threads that are not stopped.
func runningThreads(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		// "tid (comm) S ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("/proc/%d/task/%s/stat: %q", pid, task.Name(), b)
		}
		if b[i+2] != 'T' {
			n++
		}
	}
	return n, nil
}
