//go:build integration

package fault

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/history"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// Where rest.InClusterConfig reads the service account from.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// inClusterTiming: lease 3 s, renew deadline 2 s, retry 500 ms.
var inClusterTiming = timing{3 * time.Second, 2 * time.Second, 500 * time.Millisecond}

// The in-cluster configuration, for real: candidates (the C++ host linking
// the shipped .so) run each in a private mount namespace where
// /var/run/secrets/kubernetes.io/serviceaccount is a directory laid out as
// kubelet's atomic writer lays out a projected service-account volume (a
// bound token, the API server's CA, the namespace), with
// KUBERNETES_SERVICE_HOST/PORT set to the API server and no kubeconfig to
// fall back on. The ServiceAccount has deploy/rbac.yaml's rights only.
//
// While one leads, the token is rotated as kubelet does (new timestamped
// directory, ..data swapped atomically) and the old token is invalidated
// (the Secret it is bound to is deleted: 401 from then on). The leader must
// keep its leadership through several lease durations: same holder and
// fencing token in the Lease, renewTime advancing (so renewals succeed with
// the new token), no loss and no overlap in the history. client-go alone
// re-reads a BearerTokenFile only once a minute and not on a 401: without
// the library re-reading it on a 401 (NewClient), the leader loses the
// lease a renew deadline after the old token is refused.
func TestInClusterServiceAccountTokenRotation(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("this test needs unshare(1) from util-linux for a private mount namespace: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("this test mounts a tmpfs in a private mount namespace: it needs root (euid %d)", os.Geteuid())
	}
	// /var/run is usually a symlink to /run: the tmpfs goes over what it
	// resolves to.
	runDir, err := filepath.EvalSymlinks(filepath.Dir(filepath.Dir(filepath.Dir(serviceAccountDir))))
	if err != nil {
		t.Fatal(err)
	}
	requireHostUntouched(t, runDir)

	admin, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	sa, leaseName := applyRBACManifest(t, admin)
	wantUser := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, sa)

	first := newBoundToken(t, admin, sa)
	if user, err := whoami(first.token); err != nil || user != wantUser {
		t.Fatalf("the first bound token authenticates as %q (%v), want %q", user, err, wantUser)
	}
	dir := t.TempDir()
	if strings.HasPrefix(dir+"/", runDir+"/") {
		t.Fatalf("the temp dir %s is under %s, which the candidates' mount namespace hides: set TMPDIR elsewhere", dir, runDir)
	}
	vol := &projectedVolume{dir: filepath.Join(dir, "serviceaccount")}
	vol.write(t, map[string][]byte{"token": []byte(first.token), "ca.crt": server.Config.CAData, "namespace": []byte(namespace)})
	home := filepath.Join(dir, "home") // no .kube/config in it
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(server.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	env := inClusterEnv{unshare: unshare, runDir: runDir, saDir: vol.dir, home: home, host: u.Hostname(), port: u.Port()}

	s := newScenario(t, inClusterTiming)
	s.lease = leaseName // the one name the Role grants
	candArgs := func(id, lease, log string) []string {
		return []string{"--namespace", namespace, "--lease", lease, "--identity", id, "--log", log,
			"--timing", s.timing.flag(), "--hold", "forever"}
	}

	// Without KUBERNETES_SERVICE_HOST the same process finds no cluster: no
	// kubeconfig is within its reach, so the candidates below can only be
	// using the in-cluster configuration.
	ctrl := env.command(false, candArgs("no-service", leaseName, filepath.Join(dir, "no-service.log"))...)
	out, err := runWithin(ctrl, 20*time.Second)
	if err == nil || !strings.Contains(out, "in-cluster:") || !strings.Contains(out, filepath.Join(home, ".kube", "config")) {
		t.Fatalf("a candidate without KUBERNETES_SERVICE_HOST: %v, stderr %q; want an init error naming in-cluster and %s", err, out, filepath.Join(home, ".kube", "config"))
	}
	t.Logf("without KUBERNETES_SERVICE_HOST: %s", strings.TrimSpace(out))

	// On a lease the Role does not grant, the API server's refusal names
	// who the candidate is: the ServiceAccount.
	denied := s.startCommand("denied", env.command(true, candArgs("denied", "not-"+leaseName, filepath.Join(dir, "denied.log"))...))
	leaders := []*proc{
		s.startCommand("incluster-0", env.command(true, candArgs("incluster-0", leaseName, s.log)...)),
		s.startCommand("incluster-1", env.command(true, candArgs("incluster-1", leaseName, s.log)...)),
	}
	leader, term := s.awaitLeader(30*time.Second, 0)
	t.Logf("%s (pid %d) elected with token %d through the in-cluster configuration", leader.id, leader.pid(), term.Token)
	if l, err := admin.CoordinationV1().Leases(namespace).Get(context.Background(), leaseName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if holder := deref(l.Spec.HolderIdentity); holder != leader.id || int64(deref(l.Spec.LeaseTransitions)) != term.Token {
		t.Fatalf("lease holder %q token %d, want %s with token %d", holder, deref(l.Spec.LeaseTransitions), leader.id, term.Token)
	}
	refusal := fmt.Sprintf("User %q", wantUser)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(denied.stderr.String(), refusal); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.fail("the candidate on a lease the Role does not grant logged no refusal naming %s", refusal)
		}
	}
	t.Logf("on a lease the Role does not grant: %s", firstLineWith(denied.stderr.String(), refusal))
	s.sigterm(denied)

	samples := watchLease(t, admin, leaseName)
	time.Sleep(time.Second) // renewals with the first token

	// Rotation, as kubelet's atomic writer does it; then the old token dies.
	second := newBoundToken(t, admin, sa)
	if user, err := whoami(second.token); err != nil || user != wantUser {
		t.Fatalf("the second bound token authenticates as %q (%v), want %q", user, err, wantUser)
	}
	vol.write(t, map[string][]byte{"token": []byte(second.token), "ca.crt": server.Config.CAData, "namespace": []byte(namespace)})
	rotatedAt := time.Now()
	if user, err := whoami(first.token); err != nil || user != wantUser {
		t.Fatalf("the first token before its Secret is deleted: %q, %v", user, err)
	}
	if err := admin.CoreV1().Secrets(namespace).Delete(context.Background(), first.secret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	invalidatedAt := time.Now()
	// Service-account lookup must reject a token whose bound object is
	// gone; otherwise the old token stays good and the rotation proves
	// nothing. kube-apiserver caches a token's successful authentication
	// for 10 s (its TokenSuccessCacheTTL, no flag), so the old token may
	// still work that long after the deletion.
	const tokenCacheTTL = 10 * time.Second
	var deadAt time.Time
	for deadline := invalidatedAt.Add(tokenCacheTTL + 2*time.Second); deadAt.IsZero(); time.Sleep(20 * time.Millisecond) {
		_, err := whoami(first.token)
		switch {
		case apierrors.IsUnauthorized(err):
			deadAt = time.Now()
		case time.Now().After(deadline):
			t.Fatalf("the old token still authenticates (err %v) %v after the Secret it is bound to was deleted: the API server does not look bound objects up, so this test would prove nothing",
				err, time.Since(invalidatedAt).Round(time.Millisecond))
		}
	}
	t.Logf("token rotated; its old Secret deleted %v later; the old token got 401 %v after the deletion",
		invalidatedAt.Sub(rotatedAt).Round(time.Millisecond), deadAt.Sub(invalidatedAt).Round(time.Millisecond))

	// Several lease durations from the moment the old token is refused.
	window := 4 * s.timing.lease
	time.Sleep(time.Until(deadAt.Add(window)))
	got := samples.stop()

	// What the leader said about its renewals: every 401 is a warning line.
	unauthorized := leader.stderr.matching("Unauthorized")
	first401, last401 := time.Time{}, time.Time{}
	if len(unauthorized) > 0 {
		first401, last401 = unauthorized[0].at, unauthorized[len(unauthorized)-1].at
		t.Logf("the leader logged %d requests refused with 401, from %v to %v after the invalidation; first: %s", len(unauthorized),
			first401.Sub(invalidatedAt).Round(time.Millisecond), last401.Sub(invalidatedAt).Round(time.Millisecond), unauthorized[0].text)
	} else {
		t.Logf("the leader logged no request refused with 401")
	}
	for _, p := range leaders {
		if p != leader {
			if n := len(p.stderr.matching("Unauthorized")); n > 0 {
				t.Logf("the standby %s logged %d requests refused with 401", p.id, n)
			}
		}
	}

	// The leadership held: the same holder and token in the Lease, renewed
	// (renewTime advancing) with the new token after the old one died.
	for _, tm := range s.report().Terms {
		if tm.PID == leader.pid() && tm.Token == term.Token && tm.End != history.Open {
			lostAt := time.Duration(tm.Until() - monoOf(invalidatedAt))
			t.Errorf("the leadership of %s (token %d) ended %v after the old token was invalidated: %s %q",
				leader.id, term.Token, lostAt.Round(time.Millisecond), tm.EndKind, tm.Reason)
		}
	}
	var renewedAfter []time.Time // distinct renewTimes sent after the old token died
	var maxStale time.Duration
	var staleAt time.Time
	for _, sm := range got {
		if sm.at.Before(invalidatedAt) {
			continue
		}
		if sm.err != nil {
			t.Errorf("reading the lease %v after the invalidation: %v", sm.at.Sub(invalidatedAt).Round(time.Millisecond), sm.err)
			continue
		}
		if sm.holder != leader.id || sm.token != term.Token {
			t.Errorf("%v after the invalidation the lease is held by %q with token %d, want %s with token %d",
				sm.at.Sub(invalidatedAt).Round(time.Millisecond), sm.holder, sm.token, leader.id, term.Token)
			break
		}
		if stale := sm.at.Sub(sm.renew); stale > maxStale {
			maxStale, staleAt = stale, sm.at
		}
		if sm.renew.After(deadAt) && (len(renewedAfter) == 0 || sm.renew.After(renewedAfter[len(renewedAfter)-1])) {
			renewedAfter = append(renewedAfter, sm.renew)
		}
	}
	t.Logf("after the invalidation: %d renewals seen with the new token; renewTime at most %v old (%v after the invalidation)",
		len(renewedAfter), maxStale.Round(time.Millisecond), staleAt.Sub(invalidatedAt).Round(time.Millisecond))
	if len(renewedAfter) > 0 && !first401.IsZero() {
		var next time.Time
		for _, r := range renewedAfter {
			if r.After(first401) {
				next = r
				break
			}
		}
		if !next.IsZero() {
			t.Logf("the first successful renewal after the first 401 was sent %v after it", next.Sub(first401).Round(time.Millisecond))
		}
	}
	if maxStale >= s.timing.renew {
		t.Errorf("the lease's renewTime was %v old %v after the invalidation: renewals stopped for a renew deadline (%v)",
			maxStale.Round(time.Millisecond), staleAt.Sub(invalidatedAt).Round(time.Millisecond), s.timing.renew)
	}
	if want := int(window / s.timing.retry / 2); len(renewedAfter) < want {
		t.Errorf("only %d renewals with the new token in the %v after the old one died, want >= %d", len(renewedAfter), window, want)
	}
	if t.Failed() {
		s.dumpLog()
		t.Logf("lease samples after the invalidation:\n%s", formatSamples(got, invalidatedAt))
	}
	s.stopAll()
	s.verify()
}

// inClusterEnv runs a candidate as if in a Pod: in a private mount namespace
// with a tmpfs over /run (the host's stays as it is) in which
// secrets/kubernetes.io/serviceaccount points at saDir.
type inClusterEnv struct {
	unshare, runDir, saDir, home, host, port string
}

// inPodScript runs in the new mount namespace: $1 the run directory, $2 the
// service-account directory, then the command to exec (same pid).
const inPodScript = `set -e
mount -t tmpfs -o mode=0755,size=1m k8s-lease-incluster "$1"
mkdir -p "$1/secrets/kubernetes.io"
ln -s "$2" "$1/secrets/kubernetes.io/serviceaccount"
test -r ` + serviceAccountDir + `/token
shift 2
exec "$@"`

// command is the candidate with args in the namespace, with
// KUBERNETES_SERVICE_HOST/PORT (or without), with no KUBECONFIG and a HOME
// holding no kubeconfig.
func (e inClusterEnv) command(service bool, args ...string) *exec.Cmd {
	argv := append([]string{"-m", "--propagation", "private", "sh", "-c", inPodScript, "sh", e.runDir, e.saDir, candidate}, args...)
	cmd := exec.Command(e.unshare, argv...)
	for _, kv := range hostEnvWithout() {
		if !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+e.home)
	if service {
		cmd.Env = append(cmd.Env, "KUBERNETES_SERVICE_HOST="+e.host, "KUBERNETES_SERVICE_PORT="+e.port)
	}
	return cmd
}

// runWithin runs cmd to its end (killed after timeout) and returns its
// stderr and exit error.
func runWithin(cmd *exec.Cmd, timeout time.Duration) (string, error) {
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return stderr.String(), err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return stderr.String(), fmt.Errorf("still running after %v", timeout)
	}
}

// startCommand launches cmd as a candidate of the scenario (unshare and sh
// exec the candidate in the same process, so its pid is the candidate's).
func (s *scenario) startCommand(id string, cmd *exec.Cmd) *proc {
	s.t.Helper()
	p := &proc{id: id, cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	s.launch(p, p.stderr)
	return p
}

// projectedVolume is a directory written as kubelet's atomic writer
// writes a projected volume: the files in a timestamped directory, ..data a
// symlink to it, and each file a symlink to ..data/<file>.
type projectedVolume struct {
	dir string
	cur string // the timestamped directory ..data points to
}

// write publishes a new set of files atomically (..data_tmp renamed over
// ..data) and removes the previous timestamped directory.
func (v *projectedVolume) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ts, err := os.MkdirTemp(v.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v.cur != "" {
		if err := os.RemoveAll(v.cur); err != nil {
			t.Fatal(err)
		}
	}
	v.cur = ts
}

// boundToken is a ServiceAccount token bound to a Secret: deleting the
// Secret invalidates it.
type boundToken struct{ secret, token string }

func newBoundToken(t *testing.T, admin kubernetes.Interface, sa string) boundToken {
	t.Helper()
	ctx := context.Background()
	secret, err := admin.CoreV1().Secrets(namespace).Create(ctx,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "incluster-token-anchor-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Secrets(namespace).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	expiry := int64(600) // the shortest the API server grants
	tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s bound to secret %s: %v", sa, secret.Name, err)
	}
	return boundToken{secret: secret.Name, token: tr.Status.Token}
}

// whoami is the user a bearer token authenticates as (a SelfSubjectReview,
// over the same address and CA the candidates use).
func whoami(token string) (string, error) {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: server.Config.Host, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: server.Config.CAData}})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

// applyRBACManifest creates deploy/rbac.yaml's objects in the suite's
// namespace (those already there are kept) and returns the ServiceAccount
// and the one Lease name the Role grants.
func applyRBACManifest(t *testing.T, admin kubernetes.Interface) (sa, leaseName string) {
	t.Helper()
	objs, err := testenv.Manifest("rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			sa = o.Name
			_, err = admin.CoreV1().ServiceAccounts(namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			for _, r := range o.Rules {
				if len(r.ResourceNames) == 1 && len(r.Resources) == 1 && r.Resources[0] == "leases" {
					leaseName = r.ResourceNames[0]
				}
			}
			_, err = admin.RbacV1().Roles(namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			for i := range o.Subjects {
				o.Subjects[i].Namespace = namespace
			}
			_, err = admin.RbacV1().RoleBindings(namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected object %T in deploy/rbac.yaml", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("deploy/rbac.yaml: %v", err)
		}
	}
	if sa == "" || leaseName == "" {
		t.Fatalf("deploy/rbac.yaml: found ServiceAccount %q and granted Lease %q", sa, leaseName)
	}
	return sa, leaseName
}

// leaseSample is the Lease as read at one moment.
type leaseSample struct {
	at     time.Time
	holder string
	token  int64
	renew  time.Time
	err    error
}

type leaseWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	samples []leaseSample
}

// watchLease reads the Lease every 100 ms until stop.
func watchLease(t *testing.T, admin kubernetes.Interface, name string) *leaseWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &leaseWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			l, err := admin.CoordinationV1().Leases(namespace).Get(rctx, name, metav1.GetOptions{})
			rcancel()
			if ctx.Err() != nil {
				return
			}
			sm := leaseSample{at: time.Now(), err: err}
			if err == nil {
				sm.holder, sm.token = deref(l.Spec.HolderIdentity), int64(deref(l.Spec.LeaseTransitions))
				if l.Spec.RenewTime != nil {
					sm.renew = l.Spec.RenewTime.Time
				}
			}
			w.samples = append(w.samples, sm)
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// stop ends the reads and returns what was read.
func (w *leaseWatch) stop() []leaseSample {
	w.cancel()
	<-w.done
	return w.samples
}

func formatSamples(samples []leaseSample, since time.Time) string {
	var b strings.Builder
	var last time.Time
	for _, sm := range samples {
		if sm.at.Before(since) || (sm.err == nil && sm.renew.Equal(last)) {
			continue
		}
		last = sm.renew
		fmt.Fprintf(&b, "  +%v holder %q token %d renewTime +%v err %v\n", sm.at.Sub(since).Round(time.Millisecond),
			sm.holder, sm.token, sm.renew.Sub(since).Round(time.Millisecond), sm.err)
	}
	return b.String()
}

// monoOf converts a wall-clock instant of this process to the candidates'
// CLOCK_MONOTONIC ns (the history's clock).
func monoOf(at time.Time) int64 { return history.Now() - int64(time.Since(at)) }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func firstLineWith(text, substr string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}

// requireHostUntouched checks, after the test, that the host's
// service-account path is as it was and that no tmpfs of ours leaked into
// the host's mount table.
func requireHostUntouched(t *testing.T, runDir string) {
	path := filepath.Join(runDir, "secrets", "kubernetes.io", "serviceaccount")
	state := func() string {
		fi, err := os.Lstat(path)
		if err != nil {
			return "absent"
		}
		target, _ := os.Readlink(path)
		return fmt.Sprintf("%v %q", fi.Mode(), target)
	}
	before := state()
	t.Cleanup(func() {
		if after := state(); after != before {
			t.Errorf("the host's %s changed: %s before, %s after", path, before, after)
		}
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(b, []byte("k8s-lease-incluster")) {
			t.Errorf("the candidates' tmpfs appears in the host's mount table")
		}
	})
}
