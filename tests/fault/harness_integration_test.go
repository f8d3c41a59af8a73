//go:build integration

package fault

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8s-lease/k8s-lease/internal/faultproxy"
	"github.com/k8s-lease/k8s-lease/internal/history"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// timing is one set of candidate timings, in ms.
type timing struct{ lease, renew, retry time.Duration }

func (t timing) flag() string {
	return fmt.Sprintf("%d,%d,%d", t.lease.Milliseconds(), t.renew.Milliseconds(), t.retry.Milliseconds())
}

var (
	// steady: long enough for a frozen or partitioned leader to be told
	// apart from a slow one.
	steady = timing{4 * time.Second, 3 * time.Second, 500 * time.Millisecond}
	// quick: churn, as fast as a whole-second lease allows: a killed leader
	// is replaced a second after its last renewal, so 100 changes fit in
	// about a minute.
	quick = timing{time.Second, 700 * time.Millisecond, 200 * time.Millisecond}
)

var leaseSeq atomic.Int64

// scenario is one lease, its candidates and their shared history log.
type scenario struct {
	t      *testing.T
	lease  string
	log    string
	dir    string
	timing timing
	// bed is the control plane the candidates reach: the suite's server
	// unless newScenarioOn gave another (an HA bed).
	bed *testenv.Server
	// kubeconfig is the candidates' (their contexts chosen from it): the
	// bed's, whose user is the admin, unless set (asServiceAccount).
	kubeconfig string

	mu    sync.Mutex
	cands []*proc
}

// proc is one candidate process.
type proc struct {
	id     string
	cmd    *exec.Cmd
	proxy  *faultproxy.Proxy // nil: straight to the API server
	stderr *syncBuffer
	done   chan struct{}
	status error
	// clientGo: the plain client-go candidate (candOpts.clientGo).
	clientGo bool
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// lostFirst: p is a client-go candidate that exited because it lost a
// term (status 3), before or as a signal came.
func (p *proc) lostFirst() bool {
	var exit *exec.ExitError
	return p.clientGo && errors.As(p.status, &exit) && exit.ExitCode() == 3
}

func newScenario(t *testing.T, tm timing) *scenario { return newScenarioOn(t, tm, server) }

// newScenarioOn is newScenario with candidates on bed.
func newScenarioOn(t *testing.T, tm timing, bed *testenv.Server) *scenario {
	dir := t.TempDir()
	s := &scenario{t: t, lease: fmt.Sprintf("fault-%d-%d", time.Now().UnixNano()%1e6, leaseSeq.Add(1)),
		log: filepath.Join(dir, "history.log"), dir: dir, timing: tm, bed: bed, kubeconfig: bed.Kubeconfig}
	t.Cleanup(s.cleanup)
	return s
}

type candOpts struct {
	hold    string // "forever" (default) or "MIN-MAX" ms
	proxied bool
	poll    bool   // our first user's call pattern (lease_candidate --pattern poll)
	pod     string // the Pod whose leader label it keeps (poll only)
	// handoffTo: on SIGTERM the leader hands the lease to this candidate
	// (K8sLeaseHandOff) instead of releasing it.
	handoffTo string
	// version, priority and policy: K8sLeaseRunElectionWith's.
	version  string
	priority int
	policy   int
	// noShutdown: exit without K8sLeaseShutdown (lease_candidate --shutdown no).
	noShutdown bool
	// logLevel: K8sLeaseSetLogLevel's level, as a decimal ("": the
	// library's default, warnings).
	logLevel string
	// publish: "SERVICE=ADDRESS:PORT", the endpoint each candidacy publishes
	// (lease_candidate --publish).
	publish string
	// context: the kubeconfig context the candidate uses ("": the current
	// one; on an HA bed topology.APIServerContext(k) goes straight to API
	// server k, past the load balancer). Not with proxied.
	context string
	// clientGo: a plain client-go candidate (tests/fault/clientgocandidate,
	// built at its first use) instead of ours; only context, proxied and the
	// scenario's timing apply. It exits with status 3 when it loses a term.
	clientGo bool
}

// start launches a candidate with identity id.
func (s *scenario) start(id string, o candOpts) *proc {
	s.t.Helper()
	if o.hold == "" {
		o.hold = "forever"
	}
	kubeconfig := s.kubeconfig
	var proxy *faultproxy.Proxy
	if o.context != "" {
		kubeconfig = s.kubeconfigFor(id, o.context)
	}
	if o.proxied {
		var err error
		if proxy, err = faultproxy.NewForConfig(s.bed.Config); err != nil {
			s.t.Fatal(err)
		}
		kubeconfig = filepath.Join(s.dir, fmt.Sprintf("kubeconfig-%s-%d", id, time.Now().UnixNano()))
		if err := proxy.Kubeconfig(kubeconfig); err != nil {
			s.t.Fatal(err)
		}
	}
	args := []string{"--namespace", namespace, "--lease", s.lease, "--identity", id,
		"--log", s.log, "--timing", s.timing.flag()}
	bin := candidate
	if o.clientGo {
		var err error
		if bin, err = clientGoCandidate(); err != nil {
			s.t.Fatal(err)
		}
	} else {
		args = append(args, o.candidateFlags()...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(hostEnvWithout(), "KUBECONFIG="+kubeconfig)
	p := &proc{id: id, cmd: cmd, proxy: proxy, stderr: &syncBuffer{}, done: make(chan struct{}), clientGo: o.clientGo}
	s.launch(p, p.stderr)
	return p
}

// candidateFlags are lease_candidate's flags for o (the client-go
// candidate has none of them).
func (o candOpts) candidateFlags() []string {
	args := []string{"--hold", o.hold}
	if o.poll {
		args = append(args, "--pattern", "poll")
	}
	if o.pod != "" {
		args = append(args, "--pod", o.pod)
	}
	if o.handoffTo != "" {
		args = append(args, "--handoff-to", o.handoffTo)
	}
	if o.version != "" {
		args = append(args, "--version", o.version)
	}
	if o.noShutdown {
		args = append(args, "--shutdown", "no")
	}
	if o.publish != "" {
		args = append(args, "--publish", o.publish)
	}
	if o.logLevel != "" {
		args = append(args, "--log-level", o.logLevel)
	}
	if o.priority != 0 || o.policy != 0 {
		args = append(args, "--priority", strconv.Itoa(o.priority), "--policy", strconv.Itoa(o.policy))
	}
	return args
}

// kubeconfigFor writes a copy of the candidates' kubeconfig whose current
// context is context, for candidate id.
func (s *scenario) kubeconfigFor(id, context string) string {
	s.t.Helper()
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, ok := cfg.Contexts[context]; !ok {
		s.t.Fatalf("the bed's kubeconfig has no context %q", context)
	}
	cfg.CurrentContext = context
	path := filepath.Join(s.dir, fmt.Sprintf("kubeconfig-%s-%s-%d", id, context, time.Now().UnixNano()))
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// launch starts p's command with its stderr going to stderr, and counts p
// among the scenario's candidates.
func (s *scenario) launch(p *proc, stderr io.Writer) {
	s.t.Helper()
	p.cmd.Stderr = stderr
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { p.status = p.cmd.Wait(); close(p.done) }()
	s.mu.Lock()
	s.cands = append(s.cands, p)
	s.mu.Unlock()
}

// sigkill kills p and logs the kill, once it is reaped, at the time the
// signal was sent: its leadership, if any, ends there (a process killed
// runs no more code of its own, whenever the test gets to reap it; on a
// loaded machine that can be seconds later).
func (s *scenario) sigkill(p *proc) {
	s.t.Helper()
	_ = p.cmd.Process.Kill()
	at := history.Now()
	<-p.done
	if late := time.Duration(history.Now() - at); late > 300*time.Millisecond {
		s.t.Logf("%s (pid %d) reaped %v after its SIGKILL (a loaded machine)", p.id, p.pid(), late.Round(time.Millisecond))
	}
	if err := history.Append(s.log, history.Event{At: at, PID: p.pid(), Kind: history.Killed}); err != nil {
		s.t.Fatal(err)
	}
}

// sigterm asks p to release and exit, and requires a clean exit.
func (s *scenario) sigterm(p *proc) {
	s.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		s.sigkill(p)
		s.t.Fatalf("%s (pid %d) did not exit within 20 s of SIGTERM; stderr: %s", p.id, p.pid(), p.stderr)
	}
	if p.status != nil && !p.lostFirst() {
		s.t.Errorf("%s (pid %d) exited with %v; stderr: %s", p.id, p.pid(), p.status, p.stderr)
	}
}

// stopAll SIGTERMs every live candidate.
func (s *scenario) stopAll() {
	s.t.Helper()
	for _, p := range s.live() {
		s.sigterm(p)
	}
}

func (s *scenario) live() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var live []*proc
	for _, p := range s.cands {
		select {
		case <-p.done:
		default:
			live = append(live, p)
		}
	}
	return live
}

func (s *scenario) cleanup() {
	for _, p := range s.live() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	for _, p := range s.cands {
		if p.proxy != nil {
			p.proxy.Close()
		}
	}
}

// report reads and checks the history so far, with extra events (see
// verify).
func (s *scenario) report(extra ...history.Event) history.Report {
	s.t.Helper()
	events, err := history.ParseFile(s.log)
	if err != nil && !os.IsNotExist(err) {
		s.t.Fatal(err)
	}
	return history.Check(append(events, extra...))
}

// leader is the candidate whose term is open, or nil.
func (s *scenario) leader() (*proc, history.Term) {
	r := s.report()
	for i := len(r.Terms) - 1; i >= 0; i-- {
		if r.Terms[i].End == history.Open {
			return s.byPID(r.Terms[i].PID), r.Terms[i]
		}
	}
	return nil, history.Term{}
}

func (s *scenario) byPID(pid int) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.cands {
		if p.pid() == pid {
			return p
		}
	}
	return nil
}

// awaitLeader waits for an open term that began after `after` (mono ns).
func (s *scenario) awaitLeader(within time.Duration, after int64) (*proc, history.Term) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if p, term := s.leader(); p != nil && term.Start > after {
			return p, term
		}
		if time.Now().After(deadline) {
			s.fail("no leader elected within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitTermEnd waits until pid's term with token ends and returns it.
func (s *scenario) awaitTermEnd(within time.Duration, pid int, token int64) history.Term {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, term := range s.report().Terms {
			if term.PID == pid && term.Token == token && term.End != history.Open {
				return term
			}
		}
		if time.Now().After(deadline) {
			s.fail("pid %d (token %d) did not report the end of its leadership within %v", pid, token, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verify requires a clean history: no overlap, rising tokens, no IsLeader
// after a step-down. It returns the report for scenario-specific checks.
// extra are events that only the test can know of (the instant a frozen
// process stopped executing), checked with the log's and not written to it.
func (s *scenario) verify(extra ...history.Event) history.Report {
	s.t.Helper()
	r := s.report(extra...)
	for _, v := range r.Violations {
		s.t.Errorf("history: %s", v)
	}
	if !r.OK() {
		s.dumpLog()
	}
	s.t.Logf("history: %d leaderships, %d leader changes, %d violations", len(r.Terms), r.LeaderChanges(), len(r.Violations))
	return r
}

// fail dumps what the candidates said and stops the test.
func (s *scenario) fail(format string, args ...any) {
	s.t.Helper()
	s.dumpLog()
	s.t.Fatalf(format, args...)
}

func (s *scenario) dumpLog() {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	s.t.Logf("last history lines:\n%s", strings.Join(lines, "\n"))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.cands {
		if logged := p.stderr.String(); logged != "" {
			s.t.Logf("%s (pid %d) stderr (its last 8 KiB): %s", p.id, p.pid(), logged[max(0, len(logged)-8192):])
		}
	}
}

// syncBuffer is stderr of a candidate, written by exec's copier while the
// test may read it. It notes when each line came (the candidates do not
// stamp their lines), so a loss can be shown with what was logged before it.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial int // bytes of buf after its last complete line
	lines   []timedLine
}

// timedLine is a line of stderr and when it came: at on the wall clock,
// mono on history.Now's clock (the one the candidates' history uses).
type timedLine struct {
	at   time.Time
	mono int64
	text string
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	now, mono := time.Now(), history.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	all := b.buf.Bytes()
	rest := all[len(all)-len(p)-b.partial:]
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		b.lines = append(b.lines, timedLine{now, mono, string(rest[:i])})
		rest = rest[i+1:]
	}
	b.partial = len(rest)
	return len(p), nil
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// matching are the lines containing substr.
func (b *syncBuffer) matching(substr string) []timedLine {
	return b.linesWhere(func(l timedLine) bool { return strings.Contains(l.text, substr) })
}

// between are the lines that came from from to to (history.Now's clock).
func (b *syncBuffer) between(from, to int64) []timedLine {
	return b.linesWhere(func(l timedLine) bool { return l.mono >= from && l.mono <= to })
}

func (b *syncBuffer) linesWhere(keep func(timedLine) bool) []timedLine {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []timedLine
	for _, l := range b.lines {
		if keep(l) {
			out = append(out, l)
		}
	}
	return out
}

// hostEnvWithout is this process's environment without the variables that
// point a candidate at a cluster (KUBECONFIG, and KUBERNETES_* which the
// library's in-cluster path tries first): run inside a Pod, the suite's
// candidates must reach the test bed, never the real cluster.
func hostEnvWithout() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "KUBECONFIG" || strings.HasPrefix(k, "KUBERNETES_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
