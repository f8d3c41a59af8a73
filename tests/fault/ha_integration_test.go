//go:build integration

package fault

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/internal/history"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
	"github.com/k8s-lease/k8s-lease/internal/topology"
	"github.com/k8s-lease/k8s-lease/lease"
)

// Faults of a control plane shaped like production: three etcd members
// and two API servers behind a load balancer (testenv.StartHA), one bed
// per scenario. The five scenarios' candidates are ours; the soak mixes in
// plain client-go ones. Each scenario logs what the fault cost in
// one line `HA-FIGURE <scenario> <name>=<value> ...`.

// haTiming is our first user's 5/4/1 s: the renew deadline comfortably
// exceeds an etcd election (heartbeat 200 ms, election timeout 1 s: a
// killed etcd leader is replaced in 0.9 to 1.6 s).
var haTiming = timing{5 * time.Second, 4 * time.Second, time.Second}

// startHABed starts a 3-member, 2-API-server bed with the suite's
// namespace and more envtest-server flags args; its log is shown if the
// test fails.
func startHABed(t *testing.T, args ...string) *testenv.Server {
	t.Helper()
	log := &syncBuffer{}
	// Registered first, so it runs after StartHA's stop, whose failure it
	// then shows.
	t.Cleanup(func() {
		if t.Failed() {
			b := log.String()
			t.Logf("envtest-server log (last 6000 bytes):\n%s", b[max(0, len(b)-6000):])
		}
	})
	return testenv.StartHA(t, testenv.Options{EtcdMembers: 3, APIServers: 2, Args: append([]string{"-namespace", namespace}, args...), Log: log})
}

// directClient is the admin's client straight to API server k.
func directClient(t *testing.T, bed *testenv.Server, k int) kubernetes.Interface {
	t.Helper()
	cfg, err := bed.APIServerConfig(k)
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, cfg)
}

// figure logs a scenario's summary line: HA-FIGURE <scenario> k=v ...
func figure(t *testing.T, scenario string, kv ...any) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "HA-FIGURE %s", scenario)
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		if d, ok := v.(time.Duration); ok {
			v = d.Round(time.Millisecond)
		}
		fmt.Fprintf(&b, " %v=%v", kv[i], v)
	}
	t.Log(b.String())
}

// renewalGap is the longest time between two successive renewTimes the
// reads of the Lease showed (whoever held it), and how many distinct ones
// there were and how many reads failed.
func renewalGap(samples []leaseSample) (longest time.Duration, renewals, failed int) {
	var times []time.Time
	for _, sm := range samples {
		switch {
		case sm.err != nil:
			failed++
		case sm.holder != "" && !sm.renew.IsZero():
			times = append(times, sm.renew)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	times = slices.CompactFunc(times, func(a, b time.Time) bool { return a.Equal(b) })
	for i := 1; i < len(times); i++ {
		longest = max(longest, times[i].Sub(times[i-1]))
	}
	return longest, len(times), failed
}

// lastRenewal is the latest renewTime the reads showed under holder and
// token, on the history's clock (0: none).
func lastRenewal(samples []leaseSample, holder string, token int64) int64 {
	var last time.Time
	for _, sm := range samples {
		if sm.err == nil && sm.holder == holder && sm.token == token && sm.renew.After(last) {
			last = sm.renew
		}
	}
	if last.IsZero() {
		return 0
	}
	return monoOf(last)
}

// startThree starts three candidates, the first alone until it leads (so
// the leader is known to connect as the first's context says), and
// returns them with the leader's term.
func (s *scenario) startThree(prefix string, contexts [3]string) ([]*proc, history.Term) {
	s.t.Helper()
	first := s.start(prefix+"-0", candOpts{context: contexts[0]})
	p, term := s.awaitLeader(30*time.Second, 0)
	if p != first {
		s.fail("%s leads, want %s", p.id, first.id)
	}
	procs := []*proc{first}
	for i := 1; i < 3; i++ {
		procs = append(procs, s.start(fmt.Sprintf("%s-%d", prefix, i), candOpts{context: contexts[i]}))
	}
	return procs, term
}

// haScenario starts a bed, three candidates through its load balancer and
// reads of the Lease through API server 1, waits 2 s of renewals and
// returns the etcd leader's index.
func haScenario(t *testing.T, prefix string) (*testenv.Server, *scenario, history.Term, *leaseWatch, int) {
	t.Helper()
	bed := startHABed(t)
	s := newScenarioOn(t, haTiming, bed)
	_, term := s.startThree(prefix, [3]string{})
	samples := watchLease(t, directClient(t, bed, 1), s.lease)
	time.Sleep(2 * time.Second)
	leader, err := bed.WaitEtcdLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return bed, s, term, samples, leader
}

// once wraps an undo (thaw, heal) to run at most once: at its time, or
// deferred if the test stops first.
func once(t *testing.T, undo func() error) func() {
	done := false
	return func() {
		if !done {
			done = true
			if err := undo(); err != nil {
				t.Error(err)
			}
		}
	}
}

// sleepUntil sleeps until the history's clock reads at.
func sleepUntil(at int64) { time.Sleep(time.Duration(at - history.Now())) }

// stopAndVerify notes when the fault is over, SIGTERMs every candidate
// (the leader hands over as it releases) and checks the whole history; the
// report it returns holds only the terms begun before the stop.
func (s *scenario) stopAndVerify(extra ...history.Event) history.Report {
	s.t.Helper()
	stopAt := history.Now()
	s.stopAll()
	r := s.verify(extra...)
	r.Terms = slices.DeleteFunc(r.Terms, func(tr history.Term) bool { return tr.Start >= stopAt })
	return r
}

// requireOneTerm wants the first leader to have led throughout: one term,
// no leader change.
func requireOneTerm(t *testing.T, r history.Report, want history.Term) {
	t.Helper()
	if len(r.Terms) != 1 || r.Terms[0].PID != want.PID || r.Terms[0].Token != want.Token {
		t.Errorf("%d leaderships (%d leader changes), want only the first leader's (pid %d, token %d): %+v",
			len(r.Terms), r.LeaderChanges(), want.PID, want.Token, r.Terms)
	}
}

// 1. The etcd leader member is SIGKILLed while a leader renews, and
// started again 6 s later. etcd elects a new leader in 1 to 2 s (its
// election timeout, 1 s, randomized up to twice that). When that and a
// retry period fit in what the renew deadline had left at the kill (4 s
// from the last renewal), the leader must keep its lease: no leader
// change. Otherwise a change is allowed (reported; the checker still
// judges the history). The longest gap between two renewTimes, read every
// 100 ms through API server 1, is reported.
func TestHAEtcdLeaderKilled(t *testing.T) {
	t.Parallel()
	bed, s, term, samples, old := haScenario(t, "etcdkill")
	killAt := history.Now()
	if err := bed.EtcdMember(old).Kill(); err != nil {
		t.Fatal(err)
	}
	next, err := bed.WaitEtcdLeader(10 * time.Second)
	electedIn := time.Duration(history.Now() - killAt)
	if err != nil {
		t.Fatal(err)
	}
	sleepUntil(killAt + int64(6*time.Second))
	if err := bed.EtcdMember(old).Start(); err != nil {
		t.Fatal(err)
	}
	if err := bed.EtcdMember(old).WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	rejoinedIn := time.Duration(history.Now() - killAt)
	time.Sleep(3 * time.Second) // renewals with the member back
	got := samples.stop()
	gap, renewals, failed := renewalGap(got)
	r := s.stopAndVerify()

	// What the renew deadline had left at the kill: from the last renewal
	// sent before it.
	var lastBefore int64
	for _, sm := range got {
		if at := monoOf(sm.renew); sm.err == nil && sm.token == term.Token && at <= killAt {
			lastBefore = max(lastBefore, at)
		}
	}
	left := time.Duration(lastBefore + int64(s.timing.renew) - killAt)
	t.Logf("etcd member %d (leader) SIGKILLed with %v of the renew deadline left; member %d leads %v later; restarted and healthy %v after the kill; longest renewal gap %v (%d renewals read, %d reads failed)",
		old, left.Round(time.Millisecond), next, electedIn.Round(time.Millisecond), rejoinedIn.Round(time.Millisecond), gap.Round(time.Millisecond), renewals, failed)
	figure(t, "etcd-leader-killed", "etcd_election", electedIn, "deadline_left", left, "leader_changes", r.LeaderChanges(),
		"leaderships", len(r.Terms), "longest_renewal_gap", gap, "failed_reads", failed, "violations", len(r.Violations))
	if lastBefore == 0 {
		t.Fatal("no renewal read before the kill")
	}
	if electedIn+s.timing.retry < left {
		requireOneTerm(t, r, term)
	} else {
		t.Logf("etcd's election and a retry period (%v) did not fit in the %v left: a leader change is allowed",
			(electedIn + s.timing.retry).Round(time.Millisecond), left.Round(time.Millisecond))
	}
}

// apiServersOf lists the API servers the load balancer sent pid's open
// TCP connections to (its sockets, from /proc, matched by local address).
func apiServersOf(bed *testenv.Server, pid int) []int {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	var on []int
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || !inodes[f[9]] {
			continue
		}
		ip, port, ok := strings.Cut(f[1], ":")
		a, err1 := hex.DecodeString(ip)
		p, err2 := strconv.ParseUint(port, 16, 16)
		if !ok || err1 != nil || err2 != nil || len(a) != 4 {
			continue
		}
		local := fmt.Sprintf("%d.%d.%d.%d:%d", a[3], a[2], a[1], a[0], p)
		if k, err := bed.LandedOn(local); err == nil {
			on = append(on, k)
		}
	}
	return on
}

// 2. API server 0 is SIGSTOPped for 8 s (past the renew deadline and the
// lease duration) while the leader's connections are on it (the load
// balancer pinned to it while the leader started); the standbys go
// straight to API server 1. Either the leader keeps renewing (a new
// connection, which the load balancer may send to API server 1) or it
// reports the loss within renewDeadline + 1 s; a standby takes over no
// earlier than a lease duration after the leader's last renewal. Which
// happened and the leaderless time are reported.
func TestHAAPIServerFrozenUnderLeader(t *testing.T) {
	t.Parallel()
	bed := startHABed(t)
	s := newScenarioOn(t, haTiming, bed)
	if err := bed.PinLB(0, 1000); err != nil {
		t.Fatal(err)
	}
	direct1 := topology.APIServerContext(1)
	procs, term := s.startThree("apifreeze", [3]string{"", direct1, direct1})
	if err := bed.PinLB(0, 0); err != nil {
		t.Fatal(err)
	}
	leader := procs[0]
	before := apiServersOf(bed, leader.pid())
	if len(before) == 0 || slices.ContainsFunc(before, func(k int) bool { return k != 0 }) {
		s.fail("the leader's connections landed on API servers %v, want only 0", before)
	}
	samples := watchLease(t, directClient(t, bed, 1), s.lease)
	time.Sleep(2 * time.Second) // the standbys see renewals

	a := bed.APIServer(0)
	frozenAt := history.Now()
	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	thaw := once(t, a.Thaw)
	defer thaw()
	sleepUntil(frozenAt + int64(8*time.Second))
	during := apiServersOf(bed, leader.pid())
	thaw()
	thawedAt := history.Now()
	time.Sleep(3 * time.Second)
	got := samples.stop()
	gap, renewals, failed := renewalGap(got)
	r := s.stopAndVerify()

	outcome, leaderless := "kept", time.Duration(0)
	var lostAfter time.Duration
	for _, tr := range r.Terms {
		if tr.PID == term.PID && tr.Token == term.Token && tr.End != history.Open && tr.Until() < thawedAt {
			outcome = "lost"
			lostAfter = time.Duration(tr.Until() - frozenAt)
			if tr.EndKind != history.Lost || !strings.Contains(tr.Reason, "renew deadline exceeded") {
				t.Errorf("the leader's term ended by %s %q, want lost with \"renew deadline exceeded\"", tr.EndKind, tr.Reason)
			}
			if lostAfter > s.timing.renew+time.Second {
				t.Errorf("the leader reported the loss %v after the freeze, want within renewDeadline + 1 s", lostAfter)
			}
		}
	}
	var taker string
	if outcome == "lost" && len(r.Terms) > 1 {
		renewedAt := lastRenewal(got, leader.id, term.Token)
		next := r.Terms[1] // verify ordered them; the first is the leader's
		leaderless = time.Duration(next.Start - r.Terms[0].Until())
		taker = s.byPID(next.PID).id
		afterRenewal := time.Duration(next.Start - renewedAt)
		t.Logf("%s took over (token %d) %v after the freeze, %v after the leader's last renewal", taker, next.Token,
			time.Duration(next.Start-frozenAt).Round(time.Millisecond), afterRenewal.Round(time.Millisecond))
		if afterRenewal < s.timing.lease-10*time.Millisecond {
			t.Errorf("%s took over %v after the leader's last renewal, want >= leaseDuration %v", taker, afterRenewal, s.timing.lease)
		}
	}
	t.Logf("API server 0 frozen 8 s under the leader (connections on %v; during the freeze %v): %s; leader changes %d, longest renewal gap %v (%d renewals, %d failed reads)",
		before, during, outcome, r.LeaderChanges(), gap.Round(time.Millisecond), renewals, failed)
	figure(t, "apiserver-frozen", "outcome", outcome, "lost_after", lostAfter, "taken_by", taker, "leaderless", leaderless,
		"leader_changes", r.LeaderChanges(), "longest_renewal_gap", gap, "conns_before", fmt.Sprint(before),
		"conns_during", fmt.Sprint(during), "violations", len(r.Violations))
}

// holderSample is what an observer through one API server answered.
type holderSample struct {
	at     int64
	holder string
	token  int64
	err    error
}

// A standby behind a frozen API server still takes over a dead leader: the
// standbys' connections sit on API server 0 (the load balancer pinned
// while they started), the leader goes straight to API server 1, API
// server 0 is SIGSTOPped, and the leader is SIGKILLed 1 s later. The
// standbys' watches of the held Lease go quiet; after two retry periods
// they are relisted on connections dialled anew (round robin: API server 1
// or 0), and a standby leads a lease duration after the last renewal it
// saw. Reported: the takeover after the leader's last renewal (the bound
// to reach: leaseDuration + 2 retry periods); required: a standby leads
// while API server 0 is still frozen (within 20 s), never before a lease
// duration after the last renewal.
func TestHAStandbyBehindAFrozenAPIServerTakesOver(t *testing.T) {
	t.Parallel()
	bed := startHABed(t)
	s := newScenarioOn(t, haTiming, bed)
	if err := bed.PinLB(0, 1000); err != nil {
		t.Fatal(err)
	}
	procs, term := s.startThree("standbyfreeze", [3]string{topology.APIServerContext(1), "", ""})
	samples := watchLease(t, directClient(t, bed, 1), s.lease)
	time.Sleep(2 * time.Second) // the standbys see renewals
	if err := bed.PinLB(0, 0); err != nil {
		t.Fatal(err)
	}
	before := [2][]int{apiServersOf(bed, procs[1].pid()), apiServersOf(bed, procs[2].pid())}
	a := bed.APIServer(0)
	frozenAt := history.Now()
	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	thaw := once(t, a.Thaw)
	defer thaw()
	sleepUntil(frozenAt + int64(time.Second))
	s.sigkill(procs[0])
	next, nextTerm := s.awaitLeader(20*time.Second, term.Start) // API server 0 still frozen
	thaw()
	got := samples.stop()
	renewedAt := lastRenewal(got, procs[0].id, term.Token)
	r := s.stopAndVerify()
	after := time.Duration(nextTerm.Start - renewedAt)
	t.Logf("standbys on API servers %v and %v; API server 0 frozen, the leader killed 1 s later: %s led (token %d) %v after the leader's last renewal, %v after the freeze",
		before[0], before[1], next.id, nextTerm.Token, after.Round(time.Millisecond), time.Duration(nextTerm.Start-frozenAt).Round(time.Millisecond))
	figure(t, "standby-behind-frozen-apiserver", "takeover_after_last_renewal", after, "bound", s.timing.lease+2*s.timing.retry,
		"standbys_on", fmt.Sprint(before), "violations", len(r.Violations))
	if renewedAt == 0 {
		t.Fatal("no renewal of the leader was read")
	}
	if after < s.timing.lease-10*time.Millisecond {
		t.Errorf("%s took over %v after the leader's last renewal, want >= leaseDuration %v", next.id, after, s.timing.lease)
	}
}

// 3. A stale watch cache: API server 0 is cut off from etcd for 12 s
// (more than two lease durations) while the leader renews through API
// server 1. A standby straight on API server 0 sees no renewal for longer
// than a lease duration: it must not take over (its writes need etcd, and
// when the cut heals they carry a stale resourceVersion), and must back
// off. The requests API server 0 answered for leases (by code) and what
// GetHolder through it said meanwhile (an observer of the library in this
// process) are reported.
func TestHAStaleWatchCache(t *testing.T) {
	t.Parallel()
	bed := startHABed(t)
	s := newScenarioOn(t, haTiming, bed)
	procs, term := s.startThree("stale", [3]string{topology.APIServerContext(1), topology.APIServerContext(0), topology.APIServerContext(1)})
	standby := procs[1]
	onA := directClient(t, bed, 0)
	cfgA, err := bed.APIServerConfig(0)
	if err != nil {
		t.Fatal(err)
	}
	kubeA, err := lease.NewClient(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	observer := lease.NewManager(nil)
	observer.SetClient(kubeA)
	defer func() { _ = observer.Shutdown(5 * time.Second) }()
	if h, err := observer.GetHolder(namespace, s.lease); err != nil || h.Holder != procs[0].id {
		t.Fatalf("GetHolder through API server 0: %+v, %v; want %s", h, err, procs[0].id)
	}
	samples := watchLease(t, directClient(t, bed, 1), s.lease)
	time.Sleep(2 * time.Second)
	requests := func() (all, conflicts, ok float64) {
		t.Helper()
		var errs [3]error
		all, errs[0] = testenv.APIRequests(onA, "leases", "")
		conflicts, errs[1] = testenv.APIRequests(onA, "leases", "409")
		ok, errs[2] = testenv.APIRequests(onA, "leases", "200")
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return all, conflicts, ok
	}
	all0, conflicts0, ok0 := requests()

	cutAt := history.Now()
	if err := bed.CutFromEtcd(0); err != nil {
		t.Fatal(err)
	}
	heal := once(t, func() error { return bed.HealEtcd(0) })
	defer heal()
	var seen []holderSample
	for history.Now() < cutAt+int64(12*time.Second) {
		h, err := observer.GetHolder(namespace, s.lease)
		seen = append(seen, holderSample{history.Now(), h.Holder, h.Token, err})
		time.Sleep(250 * time.Millisecond)
	}
	all1, conflicts1, ok1 := requests()
	heal()
	time.Sleep(5 * time.Second) // the held writes are forwarded; the cache catches up
	all2, conflicts2, ok2 := requests()
	h, hErr := observer.GetHolder(namespace, s.lease)
	gap, _, _ := renewalGap(samples.stop())
	r := s.stopAndVerify()

	var asLeader, asNone, asErr int
	var firstNone time.Duration
	for _, sm := range seen {
		switch {
		case sm.err != nil:
			asErr++
		case sm.holder == "":
			if asNone == 0 {
				firstNone = time.Duration(sm.at - cutAt)
			}
			asNone++
		case sm.holder == procs[0].id && sm.token == term.Token:
			asLeader++
		}
	}
	t.Logf("API server 0 cut off from etcd for 12 s: GetHolder through it said the leader %d times, no holder %d times (first %v after the cut), an error %d times, of %d; after the heal: %+v, %v",
		asLeader, asNone, firstNone.Round(time.Millisecond), asErr, len(seen), h, hErr)
	t.Logf("lease requests answered by API server 0: during the cut %v (409: %v, 200: %v); within 5 s of the heal %v (409: %v, 200: %v)",
		all1-all0, conflicts1-conflicts0, ok1-ok0, all2-all1, conflicts2-conflicts1, ok2-ok1)
	t.Logf("standby %s stderr: %q", standby.id, standby.stderr)
	figure(t, "stale-watch-cache", "leader_changes", r.LeaderChanges(), "standby_elected", slices.ContainsFunc(r.Terms, func(tr history.Term) bool { return tr.PID == standby.pid() }),
		"a_requests_cut", all1-all0, "a_409_cut", conflicts1-conflicts0, "a_requests_heal5s", all2-all1, "a_409_heal5s", conflicts2-conflicts1,
		"getholder_leader", asLeader, "getholder_none", asNone, "getholder_err", asErr, "first_none_after", firstNone,
		"longest_renewal_gap", gap, "violations", len(r.Violations))
	requireOneTerm(t, r, term)
	// Backing off: at most a few requests a retry period from the standby
	// (and the observer), not a storm.
	if budget := 4 * float64((12+5)*time.Second/s.timing.retry); all2-all0 > budget {
		t.Errorf("API server 0 answered %v lease requests in the 17 s of the cut and after, want <= %v", all2-all0, budget)
	}
}

// 4. An etcd follower is frozen (SIGSTOP) for 10 s: quorum holds, the
// leader keeps its lease (no leader change); the renewal gaps are
// reported, not judged: the reads that sample renewTime go through an API
// server whose requests to the frozen member hang too, so a gap they show
// can span renewals they missed (one showed 4.0 s while the leader, by its
// own history, never lapsed).
func TestHAEtcdFollowerFrozen(t *testing.T) {
	t.Parallel()
	_, s, term, samples, leader := haScenario(t, "follower")
	m := s.bed.EtcdMember((leader + 1) % 3)
	frozenAt := history.Now()
	if err := m.Freeze(); err != nil {
		t.Fatal(err)
	}
	thaw := once(t, m.Thaw)
	defer thaw()
	sleepUntil(frozenAt + int64(10*time.Second))
	thaw()
	time.Sleep(2 * time.Second)
	gap, renewals, failed := renewalGap(samples.stop())
	r := s.stopAndVerify()
	t.Logf("etcd member %d (a follower of %d) frozen 10 s: %d leader changes, longest renewal gap %v (%d renewals, %d failed reads)",
		m.Index, leader, r.LeaderChanges(), gap.Round(time.Millisecond), renewals, failed)
	figure(t, "etcd-follower-frozen", "leader_changes", r.LeaderChanges(), "leaderships", len(r.Terms),
		"longest_renewal_gap", gap, "failed_reads", failed, "violations", len(r.Violations))
	requireOneTerm(t, r, term)
}

// 5. etcd loses quorum for 10 s (its leader and a follower frozen): the
// leader reports the loss within renewDeadline + 1 s, nobody leads from
// then until quorum returns, and a leader is elected within a lease
// duration after it does. The leaderless time is reported.
func TestHAEtcdQuorumLost(t *testing.T) {
	t.Parallel()
	bed, s, term, samples, leader := haScenario(t, "quorum")
	frozen := []testenv.Proc{bed.EtcdMember(leader), bed.EtcdMember((leader + 1) % 3)}
	frozenAt := history.Now()
	for _, m := range frozen {
		if err := m.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	thaw := once(t, func() error { return errors.Join(frozen[0].Thaw(), frozen[1].Thaw()) })
	defer thaw()
	ended := s.awaitTermEnd(s.timing.renew+3*time.Second, term.PID, term.Token)
	s.requireStepDown(ended, frozenAt)
	sleepUntil(frozenAt + int64(10*time.Second))
	thawedAt := history.Now()
	thaw()
	quorumBack, err := bed.WaitEtcdLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	quorumAt := history.Now()
	next, nextTerm := s.awaitLeader(s.timing.lease+s.timing.renew+20*time.Second, frozenAt)
	time.Sleep(time.Second)
	samples.stop()
	r := s.stopAndVerify()

	graceEnd := frozenAt + int64(s.timing.renew+time.Second)
	for _, tr := range r.Terms {
		if tr.Start < thawedAt && tr.Until() > graceEnd {
			t.Errorf("pid %d (token %d) led without quorum: from +%v to +%v after the freeze", tr.PID, tr.Token,
				time.Duration(tr.Start-frozenAt), time.Duration(tr.Until()-frozenAt))
		}
	}
	resumed := time.Duration(nextTerm.Start - quorumAt)
	leaderless := time.Duration(nextTerm.Start - ended.Until())
	t.Logf("etcd members %d and %d frozen 10 s: the leader stepped down %v after; etcd member %d leads %v after the thaw; %s (token %d) elected %v after that; leaderless %v",
		frozen[0].Index, frozen[1].Index, time.Duration(ended.Until()-frozenAt).Round(time.Millisecond), quorumBack,
		time.Duration(quorumAt-thawedAt).Round(time.Millisecond), next.id, nextTerm.Token, resumed.Round(time.Millisecond),
		leaderless.Round(time.Millisecond))
	figure(t, "etcd-quorum-lost", "step_down_after", time.Duration(ended.Until()-frozenAt), "quorum_after_thaw", time.Duration(quorumAt-thawedAt),
		"resumed_after_quorum", resumed, "leaderless", leaderless, "leaderships", len(r.Terms), "leader_changes", r.LeaderChanges(), "violations", len(r.Violations))
	// A candidate whose API watch broke lists the Lease again and, seeing
	// its record anew, waits a lease duration from that sight (the rule
	// that keeps a stale view from taking over; docs/guarantees.md), then
	// acquires on its next retry tick.
	if bound := s.timing.lease + s.timing.retry; resumed > bound {
		t.Errorf("a leader was elected %v after quorum returned, want within leaseDuration + retryPeriod %v", resumed, bound)
	}
}

// The HA soak: five candidates, three of ours and two plain client-go
// ones (tests/fault/clientgocandidate), through the load balancer and
// straight at each API server, while a nemesis, drawn at random with a
// printed seed (FAULT_SOAK_HA_SEED replays one), SIGKILLs, SIGTERMs and
// SIGSTOPs candidates, freezes, kills and restarts etcd members and API
// servers, restarts every API server in turn gracefully (an upgrade) and
// floods one with a noisy tenant's requests (floodBed, noisyTenant), one
// fault at a time; the history checker judges the whole run. The
// candidates run as deploy/rbac.yaml's ServiceAccount, with
// deploy/flowschema.yaml applied, as in production.
// FAULT_SOAK_HA_MINUTES (default 2; `make soak-ha` sets SOAK).
//
// A client-go candidate is SIGSTOPped only briefly (at most leaseDuration -
// renewDeadline - retryPeriod - 200 ms): client-go's leading context has
// no deadline of its own, so a process thawed after its lease ran out may
// act as leader until its renew loop notices, and its log could not show
// when it stopped acting. Ours are also stopped past their lease: their
// IsLeader answers from the local clock, and the checker judges every
// answer after the thaw. The blame for a leaderless interval or a loss
// goes to the last fault begun before it (a quiet round is no fault),
// within a lease duration and a renew deadline of that fault's end.
func TestHASoak(t *testing.T) {
	t.Parallel()
	minutes := envInt(t, "FAULT_SOAK_HA_MINUTES", 2)
	seed := time.Now().UnixNano()
	if v := os.Getenv("FAULT_SOAK_HA_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("FAULT_SOAK_HA_SEED=%q: %v", v, err)
		}
	}
	t.Logf("HA soak: seed %d (FAULT_SOAK_HA_SEED=%d replays the draws), %d minutes", seed, seed, minutes)
	rng := rand.New(rand.NewSource(seed))
	bed := floodBed(t)
	s := newScenarioOn(t, steady, bed)
	// As in production: deploy/rbac.yaml's ServiceAccount (APF does not
	// exempt it) and deploy/flowschema.yaml, on its Lease; ours named as
	// its replicas, whose candidate records it grants.
	s.lease = asServiceAccount(t, bed, s)
	applyFlowSchema(t, bed, s.kubeconfig)
	// Who holds deploy/flowschema.yaml's level's seats, all along: shown
	// beside each spurious loss of ours.
	seats := watchSeats(t, bed, "leader-election")
	// The noisy tenant floods API server 0: the bed's API server 1 queues
	// a flood this size (391 waiting, 0 rejected, measured) past the 15 s
	// a flood lasts at most, where API server 0 answers 429 at once.
	tenant := newNoisyTenant(t, bed, 0)
	ids := []string{s.lease + "-0", s.lease + "-1", "client-go-0", s.lease + "-2", "client-go-1"}
	// Ours log every request, its status and latency (client-go's -v 6),
	// so that a spurious loss can be read from what its process sent.
	const everyRequest = "9"
	opts := map[string]candOpts{
		ids[0]: {logLevel: everyRequest}, ids[1]: {logLevel: everyRequest}, ids[2]: {clientGo: true},
		ids[3]: {context: topology.APIServerContext(0), logLevel: everyRequest},
		ids[4]: {context: topology.APIServerContext(1), clientGo: true},
	}
	// One of ours creates the Lease, alone: a client-go creator starts it
	// at leaseTransitions 0, below the tokens we promise (>= 1).
	procs := map[string]*proc{ids[0]: s.start(ids[0], opts[ids[0]])}
	s.awaitLeader(30*time.Second, 0)
	for _, id := range ids[1:] {
		procs[id] = s.start(id, opts[id])
	}

	var extra []history.Event // the instants long-frozen candidates stopped
	var floods []floodAnswers // what each flood got
	var faults []soakFault    // each recorded once it is over
	// done records a fault once over; apiserver is the API server it made
	// unreachable (allAPIServers: each in turn; noAPIServer: none).
	done := func(kind string, start int64, apiserver ...int) {
		f := soakFault{kind: kind, start: start, end: history.Now(), apiserver: noAPIServer}
		if len(apiserver) > 0 {
			f.apiserver = apiserver[0]
		}
		faults = append(faults, f)
	}
	restarts := 0
	// restartExited starts again a client-go candidate that exited after
	// losing a term (status 3), as a Deployment would; any other exit
	// the nemesis did not cause fails the run.
	restartExited := func() {
		for _, id := range ids {
			p := procs[id]
			select {
			case <-p.done:
			default:
				continue
			}
			if !p.lostFirst() {
				t.Fatalf("%s (pid %d) exited on its own with %v; stderr: %s", id, p.pid(), p.status, p.stderr)
			}
			restarts++
			procs[id] = s.start(id, opts[id])
		}
	}
	exited := func(p *proc) bool {
		select {
		case <-p.done:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}
	pick := func() *proc {
		if leader, _ := s.leader(); leader != nil && rng.Intn(2) == 0 {
			return leader
		}
		live := s.live()
		return live[rng.Intn(len(live))]
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int63n(int64(hi-lo))) }
	stopFor := func(p testenv.Proc, d time.Duration, kill bool) {
		t.Helper()
		var err error
		if kill {
			err = p.Kill()
		} else {
			err = p.Freeze()
		}
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		time.Sleep(d)
		if kill {
			if err = p.Start(); err == nil {
				err = p.WaitReady(60 * time.Second)
			}
		} else {
			err = p.Thaw()
		}
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
	}
	end := time.Now().Add(time.Duration(minutes) * time.Minute)
	for time.Now().Before(end) {
		restartExited()
		switch n := rng.Intn(10); n {
		case 0, 1: // the leader, or anyone, SIGKILLed or SIGTERMed and restarted
			p := pick()
			start := history.Now()
			if n == 0 {
				s.sigkill(p)
			} else {
				s.sigterm(p)
			}
			procs[p.id] = s.start(p.id, opts[p.id])
			done(map[bool]string{true: "cand-sigkill", false: "cand-sigterm"}[n == 0], start)
		case 2: // a candidate SIGSTOPped: shorter than leaseDuration - renewDeadline, or past its lease
			p := pick()
			if exited(p) {
				continue // a client-go candidate that lost just now: restarted next round
			}
			long := !p.clientGo && rng.Intn(2) == 0
			d := between(100*time.Millisecond, s.timing.lease-s.timing.renew-200*time.Millisecond)
			switch {
			case long:
				d = between(s.timing.lease+time.Second, s.timing.lease+4*time.Second)
			case p.clientGo:
				d = between(100*time.Millisecond, s.timing.lease-s.timing.renew-s.timing.retry-200*time.Millisecond)
			}
			start := history.Now()
			err := syscall.Kill(p.pid(), syscall.SIGSTOP)
			if err == nil {
				err = awaitStopped(p.pid(), 5*time.Second)
			}
			if err != nil && exited(p) {
				continue // it exited first: no fault
			}
			if err != nil {
				t.Fatal(err)
			}
			if long { // nothing runs in it from here: its term, if any, ends here
				extra = append(extra, history.Event{At: history.Now(), PID: p.pid(), Kind: history.Killed, Detail: "frozen by SIGSTOP"})
			}
			time.Sleep(d)
			if err := syscall.Kill(p.pid(), syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			done(map[bool]string{true: "cand-sigstop-long", false: "cand-sigstop-short"}[long], start)
		case 3, 4, 5, 6: // an etcd member or an API server frozen or killed, then thawed or started again
			var p testenv.Proc
			kind, apiserver := "apiserver", noAPIServer
			var election func() etcdElection
			if n < 5 {
				k := rng.Intn(3)
				p, kind = bed.EtcdMember(k), "etcd"
				if leader, err := bed.EtcdLeader(); err == nil && leader == k {
					election = watchEtcdElection(bed, k) // the stall this fault causes
				}
			} else {
				apiserver = rng.Intn(2)
				p = bed.APIServer(apiserver)
			}
			kill := n == 4 || n == 6
			start := history.Now()
			stopFor(p, between(time.Second, 8*time.Second), kill)
			if !kill && p.Name == testenv.Etcd { // a killed one is ready already (stopFor)
				if err := p.WaitReady(30 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			done(kind+map[bool]string{false: "-freeze", true: "-kill"}[kill], start, apiserver)
			if election != nil {
				faults[len(faults)-1].election = election()
			}
		case 7:
			done("quiet", history.Now())
		case 8: // every API server restarted in turn, gracefully (SIGTERM), as an upgrade does
			start := history.Now()
			for k := range bed.APIServers() {
				p := bed.APIServer(k)
				err := p.Stop()
				if err == nil {
					err = p.Start()
				}
				if err == nil {
					err = p.WaitReady(90 * time.Second)
				}
				if err != nil {
					t.Fatalf("%v: %v", p, err)
				}
			}
			done("apiserver-rolling-restart", start, allAPIServers)
		case 9: // a noisy tenant floods API server 0 until its level answers 429
			start := history.Now()
			answers := tenant.flood(t, 400, between(5*time.Second, 15*time.Second))
			if !answers.overloaded() {
				t.Logf("a flood of API server 0 did not overload its level: %v", answers)
			}
			floods = append(floods, answers)
			done("flood", start, 0)
		}
		time.Sleep(between(500*time.Millisecond, 3*time.Second))
	}
	restartExited()
	_, last := s.awaitLeader(s.timing.lease+s.timing.renew+30*time.Second, 0)
	r := s.stopAndVerify(extra...)
	clientGoPIDs, pinned := map[int]bool{}, map[int]int{}
	s.mu.Lock()
	for _, p := range s.cands {
		if p.clientGo {
			clientGoPIDs[p.pid()] = true
		}
		for k := range bed.APIServers() {
			if opts[p.id].context == topology.APIServerContext(k) {
				pinned[p.pid()] = k
			}
		}
	}
	s.mu.Unlock()
	sum := summarizeSoak(r, faults, clientGoPIDs, pinned, s.timing.lease+s.timing.renew)
	count := map[string]int{}
	for _, f := range faults {
		count[f.kind]++
	}
	kinds := slices.Sorted(maps.Keys(count))
	rejected, queued := 0, 0
	for _, f := range floods {
		if f.byCode[http.StatusTooManyRequests] > 0 {
			rejected++
		} else if f.waiting > 0 {
			queued++
		}
	}
	if len(floods) > 0 {
		t.Logf("floods: %d, answered 429 in %d, held in workload-low's queues (no 429) in %d", len(floods), rejected, queued)
	}
	kv := []any{"seed", seed, "minutes", minutes}
	for _, k := range kinds {
		kv = append(kv, k, count[k])
	}
	t.Logf("HA soak: %d faults %v; %d leaderships (%d by client-go), %d leader changes, longest leaderless %v, %d client-go restarts after a loss, last leader's token %d",
		len(faults), count, len(r.Terms), sum.clientGoTerms, r.LeaderChanges(), sum.longest.Round(time.Millisecond), restarts, last.Token)
	for _, k := range slices.Sorted(maps.Keys(sum.leaderless)) {
		d := sum.leaderless[k]
		figure(t, "soak-leaderless", "after", k, "n", len(d), "p50", quantile(d, 0.5), "max", slices.Max(d))
	}
	perHour := func(n int) string { return fmt.Sprintf("%.1f", float64(n)*60/float64(minutes)) }
	for _, k := range slices.Sorted(maps.Keys(sum.spurious)) {
		figure(t, "soak-spurious", "during", k, "ours", sum.spurious[k][0], "client_go", sum.spurious[k][1])
	}
	seats.close()
	for _, id := range []string{ids[0], ids[1], ids[3]} { // what there is to read at a loss
		t.Logf("%s (pid %d) logged %d lines, %d of them answers to renewals (PATCH)", id, procs[id].pid(),
			len(procs[id].stderr.matching("")), len(procs[id].stderr.matching(`verb="PATCH"`)))
	}
	for _, tr := range r.Terms { // why each of ours was lost: what its process logged, and who held the seats
		if tr.End == history.Open || tr.EndKind != history.Lost || clientGoPIDs[tr.PID] || sum.notSpurious[[2]int64{int64(tr.PID), tr.Token}] {
			continue
		}
		p := s.byPID(tr.PID)
		f := sum.lostIn[[2]int64{int64(tr.PID), tr.Token}]
		in := fmt.Sprintf("%s, %v after it began", f.kind, time.Duration(tr.End-f.start).Round(time.Millisecond))
		if e := f.election; e.leader != 0 {
			in += fmt.Sprintf(" (it stopped etcd's leader; etcd had one again %v after it began)", time.Duration(e.leader-f.start).Round(time.Millisecond))
		}
		const before = 5 * time.Second
		var logged strings.Builder
		for _, l := range p.stderr.between(tr.End-int64(before), tr.End+int64(500*time.Millisecond)) {
			fmt.Fprintf(&logged, "  %+.3fs %s\n", time.Duration(l.mono-tr.End).Seconds(), l.text)
		}
		t.Logf("a spurious loss of ours: %s (pid %d, token %d) at +%v, in %s (which began %+.3fs from the loss): %s\nits process's log from %v before the loss (times from the loss):\n%sthe seats of APF's level leader-election meanwhile:\n%s",
			p.id, tr.PID, tr.Token, time.Duration(tr.End-r.Terms[0].Start).Round(time.Millisecond), in, time.Duration(f.start-tr.End).Seconds(), tr.Reason,
			before, logged.String(), seats.between(tr.End-int64(before), tr.End, tr.End))
	}
	for _, k := range slices.Sorted(maps.Keys(sum.elections)) {
		d := sum.elections[k]
		figure(t, "soak-etcd-election", "after", k, "n", len(d), "p50", quantile(d, 0.5), "max", slices.Max(d),
			"lost_ours", sum.etcdLeaderless[k][0], "lost_client_go", sum.etcdLeaderless[k][1])
	}
	for _, tr := range r.Terms { // the terms that ended while etcd had no leader, and how long it had none
		if tr.End == history.Open || tr.EndKind != history.Lost {
			continue
		}
		if f := sum.lostIn[[2]int64{int64(tr.PID), tr.Token}]; f.leaderlessAt(tr.End) {
			e := f.election
			t.Logf("lost while etcd had no leader: pid %d (token %d, client-go %v) ended %v after the %s, etcd still had none %v after it, and one %v after it",
				tr.PID, tr.Token, clientGoPIDs[tr.PID], time.Duration(tr.End-f.start).Round(time.Millisecond), f.kind,
				time.Duration(e.noLeader-f.start).Round(time.Millisecond), time.Duration(e.leader-f.start).Round(time.Millisecond))
		}
	}
	figure(t, "soak", append(kv, "faults", len(faults), "leaderships", len(r.Terms), "client_go_leaderships", sum.clientGoTerms,
		"leader_changes", r.LeaderChanges(), "longest_leaderless", sum.longest,
		"spurious_ours", sum.spuriousOurs, "spurious_ours_per_hour", perHour(sum.spuriousOurs),
		"spurious_client_go", sum.spuriousClientGo, "spurious_client_go_per_hour", perHour(sum.spuriousClientGo),
		"violations", len(r.Violations))...)
	// make soak-ha writes its table into the benchmarks page, once the
	// checker found nothing.
	if page := os.Getenv("FAULT_SOAK_HA_PAGE"); page != "" && !t.Failed() {
		line := fmt.Sprintf("Measured %s on %s; `make soak-ha SOAK=%d`: seed %d, %d minutes, %d faults, %d leaderships (%d of them client-go's), %d leader changes, %d violations.",
			time.Now().UTC().Format("2006-01-02"), machine(), minutes, seed, minutes, len(faults), len(r.Terms), sum.clientGoTerms,
			r.LeaderChanges(), len(r.Violations))
		if err := replaceTable(page, "soak-ha", line+"\n\n"+sum.table(count, minutes)); err != nil {
			t.Error(err)
		} else {
			t.Logf("%s: the table of soak-ha written", page)
		}
	}
}

// table is the soak's markdown table: per fault kind, how many were
// injected, the leaderless intervals after them and the spurious losses
// during them, then all together.
func (sum soakSummary) table(count map[string]int, minutes int) string {
	var b strings.Builder
	b.WriteString("| fault | injected | leaderless intervals after it | leaderless p50 | leaderless max | spurious losses, ours | spurious losses, client-go | lost straight at the faulted API server, ours / client-go | etcd's leader stopped: etcd without a leader, p50 / max | lost while etcd had no leader, ours / client-go |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	kinds := map[string]bool{}
	for k := range count {
		kinds[k] = true
	}
	for k := range sum.leaderless {
		kinds[k] = true
	}
	for k := range sum.spurious {
		kinds[k] = true
	}
	for k := range sum.pinned {
		kinds[k] = true
	}
	for k := range sum.etcdLeaderless {
		kinds[k] = true
	}
	seconds := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	var all, allElections []time.Duration
	var pinned, etcdLeaderless [2]int
	stalls := func(d []time.Duration) string {
		if len(d) == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s (%d)", seconds(quantile(d, 0.5)), seconds(slices.Max(d)), len(d))
	}
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		d := sum.leaderless[k]
		all = append(all, d...)
		p50, most := "–", "–"
		if len(d) > 0 {
			p50, most = seconds(quantile(d, 0.5)), seconds(slices.Max(d))
		}
		injected := strconv.Itoa(count[k])
		if k == "none" {
			injected = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %d | %d | %d / %d | %s | %d / %d |\n", k, injected, len(d), p50, most, sum.spurious[k][0], sum.spurious[k][1],
			sum.pinned[k][0], sum.pinned[k][1], stalls(sum.elections[k]), sum.etcdLeaderless[k][0], sum.etcdLeaderless[k][1])
		allElections = append(allElections, sum.elections[k]...)
		for i := range 2 {
			pinned[i] += sum.pinned[k][i]
			etcdLeaderless[i] += sum.etcdLeaderless[k][i]
		}
	}
	faults := 0
	for _, n := range count {
		faults += n
	}
	p50, most := "–", "–"
	if len(all) > 0 {
		p50, most = seconds(quantile(all, 0.5)), seconds(slices.Max(all))
	}
	perHour := func(n int) string { return fmt.Sprintf("%d (%.1f an hour)", n, float64(n)*60/float64(minutes)) }
	fmt.Fprintf(&b, "| all | %d | %d | %s | %s | %s | %s | %d / %d | %s | %d / %d |\n", faults, len(all), p50, most, perHour(sum.spuriousOurs), perHour(sum.spuriousClientGo),
		pinned[0], pinned[1], stalls(allElections), etcdLeaderless[0], etcdLeaderless[1])
	return b.String()
}

// replaceTable puts table between the benchmarks page's markers of
// section (cmd/lease-bench/page.go writes the rest of the page and keeps
// what is between them).
func replaceTable(page, section, table string) error {
	data, err := os.ReadFile(page)
	if err != nil {
		return err
	}
	begin, end := "<!-- table of "+section+" -->\n", "<!-- end of table of "+section+" -->"
	before, rest, ok := strings.Cut(string(data), begin)
	if !ok {
		return fmt.Errorf("%s has no %q", page, strings.TrimSpace(begin))
	}
	_, after, ok := strings.Cut(rest, end)
	if !ok {
		return fmt.Errorf("%s has no %q", page, end)
	}
	return os.WriteFile(page, []byte(before+begin+table+end+after), 0o644)
}

// machine is the cores and memory of this machine, as the benchmarks
// page names them.
func machine() string {
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			var kb int64
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				mem = fmt.Sprintf(", %d GiB", (kb+512*1024)/(1024*1024))
				break
			}
		}
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%d cores%s (%s)", runtime.NumCPU(), mem, host)
}

// soakFault is one fault the soak's nemesis injected, on the history's
// clock: from its first signal to the end of its recovery.
type soakFault struct {
	kind       string
	start, end int64
	apiserver  int // the API server it made unreachable, allAPIServers or noAPIServer
	// election: when etcd had a leader again, if the fault froze or
	// killed its leader; zero otherwise.
	election etcdElection
}

// etcdElection brackets the instant etcd elected a leader after its
// leader stopped (history's clock): it had none at noLeader (the last
// round of asking in which every member still running answered, and none
// led), and had one at leader.
type etcdElection struct{ noLeader, leader int64 }

// leaderlessAt reports whether etcd was known to have no leader still at
// at, because f stopped its leader.
func (f soakFault) leaderlessAt(at int64) bool {
	return f.election.noLeader != 0 && at <= f.election.noLeader
}

// watchEtcdElection asks the etcd members other than stopped, every 20 ms
// from now, whether they lead, until one does or 30 s have passed; the
// function returned waits for the answer (zero if no member led).
func watchEtcdElection(bed *testenv.Server, stopped int) func() etcdElection {
	ch := make(chan etcdElection, 1)
	go func() {
		var e etcdElection
		defer func() { ch <- e }()
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			asked, answered, led := history.Now(), 0, false
			for i := range bed.EtcdMembers() {
				if i == stopped {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				leads, err := bed.EtcdMemberLeads(ctx, i)
				cancel()
				if err == nil {
					answered++
					led = led || leads
				}
			}
			switch {
			case led:
				e.leader = history.Now()
				return
			case answered == bed.EtcdMembers()-1:
				e.noLeader = asked
			}
		}
		e = etcdElection{}
	}()
	return func() etcdElection { return <-ch }
}

const (
	noAPIServer   = -1
	allAPIServers = -2
)

// soakSummary is what the soak's faults cost.
type soakSummary struct {
	// leaderless: the leaderless intervals by the fault they followed
	// (the last fault begun before the previous term ended, if it ended
	// no longer than the attribution window ago; else "none").
	leaderless map[string][]time.Duration
	longest    time.Duration
	// spurious: terms that ended lost (not killed, frozen, terminated or
	// exited) by the fault they happened in, [ours, client-go]; such a
	// loss is a leadership change the leader's own process did not cause.
	spurious                       map[string][2]int
	spuriousOurs, spuriousClientGo int
	// pinned: terms lost by a candidate that goes straight at one API
	// server (no load balancer) while a fault made that one unreachable,
	// by fault, [ours, client-go]: nothing can keep those (a replica
	// reaches the API servers through a Service), so they are not
	// spurious.
	pinned map[string][2]int
	// etcdLeaderless: terms that ended while etcd still had no leader
	// (its leader frozen or killed), by fault, [ours, client-go]: without
	// a leader etcd commits no write, so no renewal could have kept them;
	// not spurious either. A term ends at its deadline or after it, so
	// one that ended before etcd's last instant without a leader had its
	// deadline in the stall.
	etcdLeaderless map[string][2]int
	notSpurious    map[[2]int64]bool // pinned or etcdLeaderless, by pid and token
	// lostIn: the fault each lost term is counted against, by pid and token.
	lostIn map[[2]int64]soakFault
	// elections: how long etcd had no leader after each fault that froze
	// or killed its leader (up to the first answer that named one), by
	// fault.
	elections     map[string][]time.Duration
	clientGoTerms int
}

// summarizeSoak attributes the report's leaderless intervals and
// spurious losses to the faults; window is how long after its end a fault
// is still blamed (a lease duration and a renew deadline).
func summarizeSoak(r history.Report, faults []soakFault, clientGo map[int]bool, pinned map[int]int, window time.Duration) soakSummary {
	sum := soakSummary{leaderless: map[string][]time.Duration{}, spurious: map[string][2]int{}, pinned: map[string][2]int{},
		etcdLeaderless: map[string][2]int{}, notSpurious: map[[2]int64]bool{}, elections: map[string][]time.Duration{}, lostIn: map[[2]int64]soakFault{}}
	for _, f := range faults {
		if f.election.leader != 0 {
			sum.elections[f.kind] = append(sum.elections[f.kind], time.Duration(f.election.leader-f.start))
		}
	}
	blamed := func(at int64) soakFault {
		for i := len(faults) - 1; i >= 0; i-- {
			if f := faults[i]; f.kind != "quiet" && f.start <= at {
				if f.end+int64(window) >= at {
					return f
				}
				break
			}
		}
		return soakFault{kind: "none", apiserver: noAPIServer}
	}
	blame := func(at int64) string { return blamed(at).kind }
	for i, tr := range r.Terms {
		if clientGo[tr.PID] {
			sum.clientGoTerms++
		}
		if tr.End != history.Open && tr.EndKind == history.Lost {
			f := blamed(tr.End)
			k := f.kind
			sum.lostIn[[2]int64{int64(tr.PID), tr.Token}] = f
			impl := map[bool]int{false: 0, true: 1}[clientGo[tr.PID]]
			if on, ok := pinned[tr.PID]; ok && (f.apiserver == on || f.apiserver == allAPIServers) {
				c := sum.pinned[k]
				c[impl]++
				sum.pinned[k] = c
				sum.notSpurious[[2]int64{int64(tr.PID), tr.Token}] = true
			} else if f.leaderlessAt(tr.End) {
				c := sum.etcdLeaderless[k]
				c[impl]++
				sum.etcdLeaderless[k] = c
				sum.notSpurious[[2]int64{int64(tr.PID), tr.Token}] = true
			} else {
				c := sum.spurious[k]
				c[impl]++
				sum.spurious[k] = c
				if impl == 1 {
					sum.spuriousClientGo++
				} else {
					sum.spuriousOurs++
				}
			}
		}
		if i == 0 {
			continue
		}
		prev := r.Terms[i-1]
		if gap := time.Duration(tr.Start - prev.Until()); gap > 0 {
			k := blame(prev.Until())
			sum.leaderless[k] = append(sum.leaderless[k], gap)
			sum.longest = max(sum.longest, gap)
		}
	}
	return sum
}

// quantile is the q-quantile (nearest rank: the ceil(q*n)-th smallest)
// of d, which is not empty.
func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Sorted(slices.Values(d))
	return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
}

// The soak's judge of losses: a term that ended while etcd still had no
// leader is not spurious (no write could have kept it); one that ended
// after etcd's last instant without a leader is, as is one in a fault that
// left etcd's leader alone; one straight at the API server a fault took
// away is not.
func TestSoakSummaryTellsLossesApart(t *testing.T) {
	const s = int64(time.Second)
	faults := []soakFault{
		{kind: "etcd-freeze", start: 10 * s, end: 16 * s, apiserver: noAPIServer, election: etcdElection{noLeader: 12 * s, leader: 12*s + s/50}},
		{kind: "etcd-freeze", start: 30 * s, end: 36 * s, apiserver: noAPIServer}, // a follower
		{kind: "apiserver-freeze", start: 50 * s, end: 56 * s, apiserver: 0},
	}
	lost := func(pid int, token, start, end int64) history.Term {
		return history.Term{PID: pid, Token: token, Start: start, End: end, EndKind: history.Lost}
	}
	r := history.Report{Terms: []history.Term{
		lost(1, 1, 1*s, 12*s),        // at etcd's last instant without a leader: not spurious
		lost(2, 2, 12*s, 12*s+s/100), // after it (a term begun in the stall is not the point): spurious
		lost(3, 3, 13*s, 32*s),       // a follower frozen: spurious
		lost(4, 4, 33*s, 52*s),       // straight at the frozen API server: pinned
		lost(5, 5, 53*s, 54*s),       // client-go, through the load balancer: spurious
		{PID: 1, Token: 6, Start: 55 * s, End: history.Open},
	}}
	sum := summarizeSoak(r, faults, map[int]bool{5: true}, map[int]int{4: 0}, 5*time.Second)
	if got := sum.etcdLeaderless["etcd-freeze"]; got != [2]int{1, 0} {
		t.Errorf("lost while etcd had no leader: %v, want [1 0]", got)
	}
	if got := sum.spurious["etcd-freeze"]; got != [2]int{2, 0} {
		t.Errorf("spurious at etcd freezes: %v, want [2 0]", got)
	}
	if got := sum.pinned["apiserver-freeze"]; got != [2]int{1, 0} {
		t.Errorf("pinned at API server freezes: %v, want [1 0]", got)
	}
	if sum.spuriousOurs != 2 || sum.spuriousClientGo != 1 {
		t.Errorf("spurious: ours %d, client-go %d; want 2 and 1", sum.spuriousOurs, sum.spuriousClientGo)
	}
	if !sum.notSpurious[[2]int64{1, 1}] || !sum.notSpurious[[2]int64{4, 4}] || sum.notSpurious[[2]int64{2, 2}] {
		t.Errorf("not spurious: %v, want pid 1 and 4 only", sum.notSpurious)
	}
	if f := sum.lostIn[[2]int64{3, 3}]; f.kind != "etcd-freeze" || f.start != 30*s {
		t.Errorf("pid 3's loss counted against %+v, want the follower's freeze at 30 s", f)
	}
	if d := sum.elections["etcd-freeze"]; len(d) != 1 || d[0] != 2*time.Second+time.Second/50 {
		t.Errorf("etcd without a leader: %v, want [2.02s]", d)
	}
	table := sum.table(map[string]int{"etcd-freeze": 2, "apiserver-freeze": 1}, 60)
	if !strings.Contains(table, "| etcd-freeze | 2 |") || !strings.Contains(table, "| 2.02 s / 2.02 s (1) | 1 / 0 |") {
		t.Errorf("the table does not show the election and the loss it caused:\n%s", table)
	}
}

// seatWatch samples, every 250 ms on each API server, the requests API
// Priority and Fairness holds in one priority level (executing, seated, or
// waiting in its queues), from the admin's client, which APF exempts: a
// spurious loss can then be shown beside who held the level's seats on the
// way to it.
type seatWatch struct {
	level string
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	got   []seatSample
}

// seatSample is one answer of an API server's APF (or why there was none).
type seatSample struct {
	mono      int64 // history.Now's clock, when asked
	apiserver int
	executing []string // "verb resource/name for 1.2s"
	waiting   []string
	err       error
}

func watchSeats(t *testing.T, bed *testenv.Server, level string) *seatWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &seatWatch{level: level, stop: cancel}
	for k := range bed.APIServers() {
		admin := directClient(t, bed, k)
		w.wg.Go(func() {
			for tick := time.NewTicker(250 * time.Millisecond); ctx.Err() == nil; {
				s := w.sample(ctx, admin, k)
				w.mu.Lock()
				w.got = append(w.got, s)
				w.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
	}
	t.Cleanup(w.close)
	return w
}

func (w *seatWatch) close() {
	w.stop()
	w.wg.Wait()
}

// sample reads /debug/api_priority_and_fairness/dump_requests with the
// requests' details; its rows are comma-separated: PriorityLevelName,
// FlowSchemaName, QueueIndex, RequestIndexInQueue (-1: executing),
// FlowDistingsher, ArriveTime, InitialSeats, FinalSeats,
// AdditionalLatency, StartTime, UserName, Verb, APIPath, Namespace, Name,
// APIVersion, Resource, SubResource.
func (w *seatWatch) sample(ctx context.Context, admin kubernetes.Interface, k int) seatSample {
	s := seatSample{mono: history.Now(), apiserver: k}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, err := admin.Discovery().RESTClient().Get().AbsPath("/debug/api_priority_and_fairness/dump_requests").
		Param("includeRequestDetails", "1").DoRaw(ctx)
	if err != nil {
		s.err = err
		return s
	}
	now := time.Now()
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if len(f) < 17 || f[0] != w.level {
			continue
		}
		executing := f[3] == "-1"
		since := f[5] // arrival: how long it has waited
		if executing {
			since = f[9] // start: how long it has held its seat
		}
		held := "?"
		if at, err := time.Parse(time.RFC3339Nano, since); err == nil {
			held = now.Sub(at).Round(10 * time.Millisecond).String()
		}
		r := fmt.Sprintf("%s %s/%s for %s", f[11], f[16], f[14], held)
		if executing {
			s.executing = append(s.executing, r)
		} else {
			s.waiting = append(s.waiting, r)
		}
	}
	return s
}

// between describes the samples asked from from to to, one line each,
// times relative to ref.
func (w *seatWatch) between(from, to, ref int64) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, s := range w.got {
		if s.mono < from || s.mono > to {
			continue
		}
		fmt.Fprintf(&b, "  %+.2fs API server %d: ", time.Duration(s.mono-ref).Seconds(), s.apiserver)
		if s.err != nil {
			fmt.Fprintf(&b, "no answer: %v\n", s.err)
			continue
		}
		fmt.Fprintf(&b, "%d executing %v, %d waiting %v\n", len(s.executing), s.executing, len(s.waiting), s.waiting)
	}
	return b.String()
}
