//go:build integration

package monitoring

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/internal/faultproxy"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

const (
	namespace = "monitoring"
	replicas  = 3
	// scale: promtool seconds per real second. The replicas run at
	// client-go's timings divided by scale; their scrapes, a second
	// apart, are given to promtool scale seconds apart.
	scale = 5
	tick  = time.Second
)

// The replicas' timings: client-go's 15 s / 10 s / 2 s divided by scale.
var timings = []string{"LEASE_DURATION_MS=3000", "RENEW_DEADLINE_MS=2000", "RETRY_PERIOD_MS=400"}

var (
	server   *testenv.Server
	haServer string // examples/ha_server.cpp, built against the shipped library
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunSuite(m, "the monitoring tests", namespace, func(dir string) (err error) {
		haServer, err = testenv.BuildCxx(dir, filepath.Join("examples", "ha_server.cpp"), "ha_server")
		return err
	}, func(s *testenv.Server) error { server = s; return nil }))
}

// phase is one recorded scenario: three replicas on a lease of their own
// behind a proxy of their own, driven by drive, and what the alert rules
// must say of its recording. Every alert not in fire or may must stay
// silent throughout.
type phase struct {
	name  string
	drive func(s *scenario) error
	fire  []string // each fired at some point
	may   []string // not asserted: the run decides (reported)
}

var phases = []phase{
	{name: "quiet", drive: func(s *scenario) error {
		time.Sleep(20 * time.Second)
		return nil
	}},
	{name: "crash", drive: func(s *scenario) error {
		// SIGKILL the leader; kubelet restarts it 2 s later.
		time.Sleep(4 * time.Second)
		r, err := s.leader()
		if err != nil {
			return err
		}
		s.signal(r, syscall.SIGKILL)
		if err := s.waitExit(r); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		if err := s.start(r); err != nil {
			return err
		}
		if _, err := s.waitLeader(""); err != nil {
			return err
		}
		time.Sleep(12 * time.Second)
		return nil
	}},
	{name: "release-on-sigterm", drive: func(s *scenario) error {
		// A rolling update's step: the leader releases and is replaced.
		time.Sleep(4 * time.Second)
		if err := s.restartLeader(time.Second); err != nil {
			return err
		}
		time.Sleep(12 * time.Second)
		return nil
	}},
	{name: "flapping", fire: []string{"K8sLeaseFlapping"}, drive: func(s *scenario) error {
		// Five releases in a row, each leader restarted at once.
		time.Sleep(3 * time.Second)
		for range 5 {
			if err := s.restartLeader(0); err != nil {
				return err
			}
			time.Sleep(time.Second)
		}
		time.Sleep(5 * time.Second)
		return nil
	}},
	{name: "slow-api-server", fire: []string{"K8sLeaseRenewalsSlow"}, may: []string{"K8sLeaseAPIErrors"}, drive: func(s *scenario) error {
		// Every request answered 0.7 s late: well within the renew
		// deadline (2 s), above half the slack (0.8 s) at p99.
		time.Sleep(3 * time.Second)
		s.proxy.SetLatency(700 * time.Millisecond)
		time.Sleep(24 * time.Second)
		s.proxy.SetLatency(0)
		time.Sleep(2 * time.Second)
		return nil
	}},
	{name: "throttled-429", fire: []string{"K8sLeaseAPIThrottled", "K8sLeaseNoLeader", "K8sLeaseLeadershipLost"},
		may: []string{"K8sLeaseAPIErrors"}, drive: func(s *scenario) error {
			// Every request answered 429 for 30 s (150 s at client-go's
			// timings), as API Priority and Fairness does to a flooded
			// priority level.
			time.Sleep(3 * time.Second)
			s.proxy.Throttle(http.StatusTooManyRequests, time.Second, -1)
			time.Sleep(30 * time.Second)
			s.proxy.Throttle(0, 0, 0)
			if _, err := s.waitLeader(""); err != nil {
				return err
			}
			time.Sleep(4 * time.Second)
			return nil
		}},
	{name: "frozen-api-server", fire: []string{"K8sLeaseNoLeader", "K8sLeaseLeadershipLost", "K8sLeaseAPIErrors"}, drive: func(s *scenario) error {
		// The only API server answers nothing for 45 s (225 s at
		// client-go's timings): the leader's term ends at its renew
		// deadline and nobody can take over.
		time.Sleep(3 * time.Second)
		s.proxy.BlackHole()
		time.Sleep(45 * time.Second)
		s.proxy.Heal()
		if _, err := s.waitLeader(""); err != nil {
			return err
		}
		time.Sleep(5 * time.Second)
		return nil
	}},
	{name: "replica-down", fire: []string{"K8sLeaseCandidatesMissing"}, drive: func(s *scenario) error {
		// A standby stops and is not replaced (a Pod that cannot be
		// scheduled) for 45 s: 225 s at client-go's timings.
		time.Sleep(3 * time.Second)
		leader, err := s.leader()
		if err != nil {
			return err
		}
		for _, r := range s.replicas {
			if r != leader {
				s.signal(r, syscall.SIGTERM)
				if err := s.waitExit(r); err != nil {
					return err
				}
				break
			}
		}
		time.Sleep(45 * time.Second)
		return nil
	}},
	{name: "all-down", fire: []string{"K8sLeaseNoCandidates"}, drive: func(s *scenario) error {
		time.Sleep(3 * time.Second)
		for _, r := range s.replicas {
			s.signal(r, syscall.SIGTERM)
		}
		for _, r := range s.replicas {
			if err := s.waitExit(r); err != nil {
				return err
			}
		}
		time.Sleep(20 * time.Second)
		return nil
	}},
}

// recordings runs every phase once, at the same time (each on a lease,
// replicas and a proxy of its own), and returns their recordings by name.
var recordings = sync.OnceValues(func() (map[string]*Recording, error) {
	out := map[string]*Recording{}
	errs := make([]error, len(phases))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, ph := range phases {
		wg.Go(func() {
			rec, err := record(ph)
			if err != nil {
				errs[i] = fmt.Errorf("phase %s: %w", ph.name, err)
				return
			}
			mu.Lock()
			out[ph.name] = rec
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
})

// rulesAndRecordings are the shipped rules and every phase's recording.
func rulesAndRecordings(t *testing.T) (RuleFile, map[string]*Recording) {
	t.Helper()
	rules, err := LoadRules(rulesPath())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := recordings()
	if err != nil {
		t.Fatal(err)
	}
	return rules, recs
}

// TestAlertsOnRecordedRuns: in each recorded phase, the alerts it names
// fire and every other alert stays silent throughout.
func TestAlertsOnRecordedRuns(t *testing.T) {
	rules, recs := rulesAndRecordings(t)
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			rec := recs[ph.name]
			var fired, silent []string
			group := TestGroup{Name: ph.name, Interval: Seconds(scale), InputSeries: rec.InputSeries()}
			alerts := rules.Alerts()
			for _, alert := range alerts {
				if slices.Contains(ph.may, alert) {
					continue
				}
				want := slices.Contains(ph.fire, alert)
				group.PromQLExprTest = append(group.PromQLExprTest, firedTest(alert, rec, want))
				if want {
					fired = append(fired, alert)
				} else {
					silent = append(silent, alert)
				}
			}
			for _, a := range ph.fire {
				if !slices.Contains(alerts, a) {
					t.Fatalf("phase %s expects %s, which the rules file does not have", ph.name, a)
				}
			}
			if _, err := RunRuleTests(t.TempDir(), ph.name+".yaml", ruleTest(group)); err != nil {
				t.Fatalf("%v\n(%d ticks of %d s; fire %v, silent %v)", err, rec.Ticks(), scale, fired, silent)
			}
			report := fmt.Sprintf("%s (%d s recorded, %d s at client-go's timings): fired %v; silent throughout %v",
				ph.name, rec.Ticks(), rec.Ticks()*scale, fired, silent)
			for _, alert := range ph.may {
				report += fmt.Sprintf("; %s (not asserted) fired: %v", alert, hasFired(t, alert, rec, group.InputSeries))
			}
			t.Log(report)
		})
	}
}

// TestAlertRulesNameOnlyRecordedSeries: every metric and label the rules
// refer to is in the replicas' scrapes (a renamed metric would leave an
// alert that can never fire).
func TestAlertRulesNameOnlyRecordedSeries(t *testing.T) {
	rules, recs := rulesAndRecordings(t)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			checkNames(t, r.Alert, r.Expr, recs)
		}
	}
}

// TestDashboardQueriesOnRecordedRuns: every query of dashboard.json
// parses, names only metrics and labels the scrapes contain, and returns
// series on the quiet phase's recording.
func TestDashboardQueriesOnRecordedRuns(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(Dir(testenv.RepoRoot()), "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	recs, err := recordings()
	if err != nil {
		t.Fatal(err)
	}
	quiet := recs["quiet"]
	group := TestGroup{Name: "dashboard", Interval: Seconds(scale), InputSeries: quiet.InputSeries()}
	queries := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			expr := grafanaExpr(target.Expr)
			checkNames(t, "panel "+p.Title, expr, recs)
			group.PromQLExprTest = append(group.PromQLExprTest, ExprTest{
				Expr:       "clamp_max(count(" + expr + "), 1)",
				EvalTime:   Seconds((quiet.Ticks() - 1) * scale),
				ExpSamples: []ExpSample{{Labels: "{}", Value: 1}},
			})
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		// label_values(metric, label): Grafana's, not PromQL.
		if m, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
			metric, label, _ := strings.Cut(strings.TrimSuffix(m, ")"), ",")
			if !quiet.Has(strings.TrimSpace(metric)) || !quiet.HasLabel(strings.TrimSpace(label)) {
				t.Errorf("variable %s: %s names what no scrape has", v.Name, v.Definition)
			}
		}
	}
	if _, err := RunRuleTests(t.TempDir(), "dashboard.yaml", ruleTest(group)); err != nil {
		t.Fatalf("a dashboard query returns nothing on the quiet phase, or does not parse: %v", err)
	}
	t.Logf("%d queries of %d panels parse and return series", queries, len(dash.Panels))
}

// grafanaExpr replaces the dashboard's variables as Grafana would: every
// lease and namespace, and a rate interval of a minute.
func grafanaExpr(expr string) string {
	return strings.NewReplacer(`"$lease"`, `".+"`, `"$namespace"`, `".+"`, "$__rate_interval", "1m").Replace(expr)
}

func checkNames(t *testing.T, what, expr string, recs map[string]*Recording) {
	t.Helper()
	metrics, labels := Names(expr)
	has := func(f func(*Recording) bool) bool {
		for _, r := range recs {
			if f(r) {
				return true
			}
		}
		return false
	}
	for _, m := range metrics {
		if !has(func(r *Recording) bool { return r.Has(m) }) {
			t.Errorf("%s: metric %s is in no scrape of the recorded runs", what, m)
		}
	}
	for _, l := range labels {
		if !has(func(r *Recording) bool { return r.HasLabel(l) }) {
			t.Errorf("%s: label %s is in no scrape of the recorded runs", what, l)
		}
	}
}

// ruleTest is a test file of the shipped rules with one group.
func ruleTest(g TestGroup) TestFile {
	return TestFile{RuleFiles: []string{rulesPath()},
		EvaluationInterval: Seconds(scale), Tests: []TestGroup{g}}
}

// firedTest expects alert to have fired (want) or not at some evaluation
// of the recording.
func firedTest(alert string, rec *Recording, want bool) ExprTest {
	e := ExprTest{
		Expr: fmt.Sprintf(`clamp_max(count(max_over_time(ALERTS{alertname=%q,alertstate="firing"}[%ds])), 1)`,
			alert, rec.Ticks()*scale),
		EvalTime:   Seconds((rec.Ticks() - 1) * scale),
		ExpSamples: []ExpSample{},
	}
	if want {
		e.ExpSamples = []ExpSample{{Labels: "{}", Value: 1}}
	}
	return e
}

// hasFired tells whether alert fired at some evaluation of rec (series:
// its input series).
func hasFired(t *testing.T, alert string, rec *Recording, series []InputSeries) bool {
	group := TestGroup{Name: alert, Interval: Seconds(scale), InputSeries: series,
		PromQLExprTest: []ExprTest{firedTest(alert, rec, true)}}
	_, err := RunRuleTests(t.TempDir(), "may.yaml", ruleTest(group))
	return err == nil
}

// scenario is one phase's run: its lease, replicas, proxy and recording.
type scenario struct {
	name, lease string
	proxy       *faultproxy.Proxy
	kubeconfig  string
	replicas    []*replica
	dir         string

	mu     sync.Mutex
	events []event // the replicas' stdout events, in arrival order
}

type replica struct {
	id, pod string
	port    int
	cmd     *exec.Cmd
	done    chan struct{}
	stderr  bytes.Buffer
}

type event struct{ id, name string }

// record runs ph and returns its recording.
func record(ph phase) (*Recording, error) {
	dir, err := os.MkdirTemp("", "k8s-lease-monitoring-"+ph.name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s := &scenario{name: ph.name, lease: "alerts-" + ph.name, dir: dir}
	if s.proxy, err = faultproxy.NewForConfig(server.Config); err != nil {
		return nil, err
	}
	defer s.proxy.Close()
	s.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := s.proxy.Kubeconfig(s.kubeconfig); err != nil {
		return nil, err
	}
	if err := createPods(ph.name); err != nil {
		return nil, err
	}
	for i := range replicas {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		r := &replica{id: fmt.Sprintf("%s-%d", ph.name, i), pod: fmt.Sprintf("%s-%d", ph.name, i), port: port}
		s.replicas = append(s.replicas, r)
	}

	rec := NewRecording()
	stop, recorded := make(chan struct{}), make(chan error, 1)
	go func() { recorded <- s.scrapeEvery(rec, stop) }()
	defer s.stopAll()
	for _, r := range s.replicas {
		if err := s.start(r); err != nil {
			close(stop)
			<-recorded
			return nil, err
		}
	}
	err = func() error {
		if _, err := s.waitLeader(""); err != nil {
			return err
		}
		return ph.drive(s)
	}()
	close(stop)
	if rerr := <-recorded; err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, s.diagnostics())
	}
	return rec, nil
}

// scrapeEvery scrapes every replica at each tick until stop, as one
// Prometheus job would (a failed scrape makes the target's series stale).
func (s *scenario) scrapeEvery(rec *Recording, stop <-chan struct{}) error {
	client := &http.Client{Timeout: 900 * time.Millisecond}
	start := time.Now()
	for n := 0; ; {
		select {
		case <-stop:
			return nil
		case <-time.After(time.Until(start.Add(time.Duration(n) * tick))):
		}
		type scraped struct {
			r    *replica
			body []byte
			err  error
		}
		results := make([]scraped, len(s.replicas))
		var wg sync.WaitGroup
		for i, r := range s.replicas {
			wg.Go(func() {
				body, err := scrape(client, r.port)
				results[i] = scraped{r, body, err}
			})
		}
		wg.Wait()
		for _, res := range results {
			target := map[string]string{"job": "k8s-lease", "namespace": namespace, "pod": res.r.pod,
				"instance": "127.0.0.1:" + strconv.Itoa(res.r.port)}
			if err := rec.Add(n, res.r.pod, target, bytes.NewReader(res.body), res.err); err != nil {
				return err
			}
		}
		// The next tick not yet begun (a slow round skips ticks, as a
		// scrape that overruns its interval does).
		n = int(time.Since(start)/tick) + 1
	}
}

func scrape(client *http.Client, port int) ([]byte, error) {
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s: %s", resp.Status, body)
	}
	return body, nil
}

// start launches r's process (again, after it exited).
func (s *scenario) start(r *replica) error {
	cmd := exec.Command(haServer, namespace, s.lease, r.id, r.pod)
	cmd.Env = append(envWithout("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
		"LEASE_DURATION_MS", "RENEW_DEADLINE_MS", "RETRY_PERIOD_MS", "HEALTH_PORT", "LEADER_SERVICE"),
		append(timings, "KUBECONFIG="+s.kubeconfig, "HEALTH_PORT="+strconv.Itoa(r.port))...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	r.stderr.Reset()
	cmd.Stderr = &r.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.id, err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	// Before its own "started": the last run's "elected" is over.
	s.mu.Lock()
	s.events = append(s.events, event{r.id, "started"})
	s.mu.Unlock()
	go func(done chan struct{}) {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// <monotonic ms> <identity> <event> [detail]
			if f := strings.Fields(sc.Text()); len(f) >= 3 {
				s.mu.Lock()
				s.events = append(s.events, event{f[1], f[2]})
				s.mu.Unlock()
			}
		}
		_ = cmd.Wait()
		close(done)
	}(r.done)
	return nil
}

func (s *scenario) alive(r *replica) bool {
	if r.done == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// leadership: the events that say whether a replica leads ("elected"
// does; the others end or precede a term).
var leadership = map[string]bool{"started": true, "campaigning": true, "elected": true, "lost": true, "released": true, "exit": true}

// current is the replica that leads by its own events, or nil.
func (s *scenario) current() *replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.replicas {
		if !s.alive(r) {
			continue
		}
		for i := len(s.events) - 1; i >= 0; i-- {
			if ev := s.events[i]; ev.id == r.id && leadership[ev.name] {
				if ev.name == "elected" {
					return r
				}
				break
			}
		}
	}
	return nil
}

func (s *scenario) leader() (*replica, error) {
	if r := s.current(); r != nil {
		return r, nil
	}
	return nil, errors.New("no replica leads")
}

// waitLeader waits up to 20 s for a replica other than except to lead.
func (s *scenario) waitLeader(except string) (*replica, error) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if r := s.current(); r != nil && r.id != except {
			return r, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("no replica (but %q) was elected within 20 s", except)
}

// restartLeader sends the leader SIGTERM (it releases the lease), waits
// for another replica to lead and restarts it after pause.
func (s *scenario) restartLeader(pause time.Duration) error {
	r, err := s.leader()
	if err != nil {
		return err
	}
	s.signal(r, syscall.SIGTERM)
	if _, err := s.waitLeader(r.id); err != nil {
		return err
	}
	if err := s.waitExit(r); err != nil {
		return err
	}
	time.Sleep(pause)
	return s.start(r)
}

func (s *scenario) signal(r *replica, sig syscall.Signal) {
	if s.alive(r) {
		_ = r.cmd.Process.Signal(sig)
	}
}

func (s *scenario) waitExit(r *replica) error {
	select {
	case <-r.done:
		return nil
	case <-time.After(15 * time.Second):
		return fmt.Errorf("%s did not exit within 15 s of its signal", r.id)
	}
}

// stopAll ends every replica still running: SIGTERM, then SIGKILL.
func (s *scenario) stopAll() {
	for _, r := range s.replicas {
		s.signal(r, syscall.SIGTERM)
	}
	for _, r := range s.replicas {
		if r.done == nil {
			continue
		}
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	}
}

func (s *scenario) diagnostics() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "events of lease %s:", s.lease)
	for _, ev := range s.events {
		if ev.name != "holder" {
			fmt.Fprintf(&b, " %s:%s", ev.id, ev.name)
		}
	}
	for _, r := range s.replicas {
		if r.stderr.Len() > 0 {
			fmt.Fprintf(&b, "\nstderr of %s (last run):\n%s", r.id, tail(r.stderr.String(), 2000))
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// createPods makes the Pods the replicas label (never scheduled: the bed
// has no nodes).
func createPods(phase string) error {
	client, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range replicas {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", phase, i), Namespace: namespace},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "example.invalid/ha-server"}}}}
		if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// envWithout is this process's environment without the named variables.
func envWithout(names ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}
