//go:build integration

package lease

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// applyManifest creates the objects of deploy/<file> in the test namespace
// (validated only, with dryRun). They keep the manifest's names, so they
// are deleted when the test ends: a second run on the same API server
// (go test -count=2) creates them again.
func applyManifest(t *testing.T, file string, dryRun bool) {
	t.Helper()
	objs, err := testenv.Manifest(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range objs {
		var remove func()
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			api := itAdmin.CoreV1().ServiceAccounts(itNamespace)
			_, err = api.Create(ctx, o, opts)
			remove = func() { removeWhenDone[*corev1.ServiceAccount](t, api, "serviceaccount", o.Name) }
		case *rbacv1.Role:
			api := itAdmin.RbacV1().Roles(itNamespace)
			_, err = api.Create(ctx, o, opts)
			remove = func() { removeWhenDone[*rbacv1.Role](t, api, "role", o.Name) }
		case *rbacv1.RoleBinding:
			o.Subjects[0].Namespace = itNamespace
			api := itAdmin.RbacV1().RoleBindings(itNamespace)
			_, err = api.Create(ctx, o, opts)
			remove = func() { removeWhenDone[*rbacv1.RoleBinding](t, api, "rolebinding", o.Name) }
		case *appsv1.StatefulSet:
			api := itAdmin.AppsV1().StatefulSets(itNamespace)
			_, err = api.Create(ctx, o, opts)
			remove = func() { removeWhenDone[*appsv1.StatefulSet](t, api, "statefulset", o.Name) }
		case *policyv1.PodDisruptionBudget:
			api := itAdmin.PolicyV1().PodDisruptionBudgets(itNamespace)
			_, err = api.Create(ctx, o, opts)
			remove = func() { removeWhenDone[*policyv1.PodDisruptionBudget](t, api, "poddisruptionbudget", o.Name) }
		case *corev1.Service:
			api := itAdmin.CoreV1().Services(itNamespace)
			_, err = api.Create(ctx, o, opts)
			remove = func() { removeWhenDone[*corev1.Service](t, api, "service", o.Name) }
		case *flowcontrolv1.FlowSchema: // cluster-scoped: it names the namespace itself
			if o, err = testenv.FlowSchema(itNamespace); err != nil {
				t.Fatal(err)
			}
			api := itAdmin.FlowcontrolV1().FlowSchemas()
			_, err = api.Create(ctx, o, opts)
			remove = func() { removeWhenDone[*flowcontrolv1.FlowSchema](t, api, "flowschema", o.Name) }
		default:
			t.Fatalf("unexpected object %T in deploy/%s", obj, file)
		}
		if err != nil {
			t.Fatalf("deploy/%s: %v", file, err)
		}
		if !dryRun {
			remove()
		}
	}
}

// namedAPI is the part of a typed client removeWhenDone uses.
type namedAPI[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// removeWhenDone deletes the object name when the test ends (after the
// cleanups registered later: the processes using it stop first) and waits
// until it is gone, so that the next run can create it again under its
// fixed name. Nothing here has finalizers, and an unscheduled Pod is
// deleted at once: 10 s is plenty even on a loaded machine.
func removeWhenDone[T any](t *testing.T, api namedAPI[T], kind, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		zero := int64(0)
		if err := api.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", kind, name, err)
			return
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, err := api.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s %s not deleted within 10 s: %v", kind, name, err)
				return
			}
		}
	})
}

// The example StatefulSet and Services are accepted by a real API server.
func TestDeployManifestsAreValid(t *testing.T) {
	applyManifest(t, "statefulset.yaml", true)
}

// serviceAccountConfig is a client config authenticated by a bound token of
// the ServiceAccount, with no client certificate.
func serviceAccountConfig(t *testing.T, sa string) *rest.Config {
	t.Helper()
	expiry := int64(3600)
	tr, err := itAdmin.CoreV1().ServiceAccounts(itNamespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	return &rest.Config{Host: itServer.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: itServer.Config.CAData}}
}

// The least-privilege manifests of deploy/ are enough for election, watch
// and the pod label; anything beyond them fails fast with "forbidden".
// It runs at the highest log verbosity, which logs every request and
// response: no token or key material may appear in what is logged.
func TestLeastPrivilegeRBAC(t *testing.T) {
	applyManifest(t, "rbac.yaml", false)
	createPod(t, "rbac-pod")
	removeWhenDone[*corev1.Pod](t, itAdmin.CoreV1().Pods(itNamespace), "pod", "rbac-pod")
	// The Leases keep their names too (metadata-master is the one the Role
	// grants), and so do their candidate records: those of sa-replica stay
	// after its candidacies (the Role grants create of any Lease, delete of
	// none of them), and so may another-lease. Removed after the processes
	// below shut down (cleanups run last first).
	for _, name := range []string{"metadata-master", candidateRecordName("metadata-master", "sa-replica"),
		"verbose-admin", candidateRecordName("verbose-admin", "admin"),
		"another-lease", candidateRecordName("another-lease", "sa-replica")} {
		removeWhenDone[*coordinationv1.Lease](t, itAdmin.CoordinationV1().Leases(itNamespace), "lease", name)
	}
	saConfig := serviceAccountConfig(t, "metadata-master")
	logs := captureLogs(t, maxLevel)
	defer logs.requireNoSecrets(t, saConfig.BearerToken, itServer.Config.KeyData)
	m := newProcessWithConfig(t, saConfig)
	admin := newProcessWithConfig(t, itServer.Config) // client-certificate auth
	if e, err := admin.RunElection(itNamespace, "verbose-admin", "admin", fastTiming); err != nil {
		t.Fatal(err)
	} else {
		mustElect(t, e, 10*time.Second)
	}

	e, err := m.RunElection(itNamespace, "metadata-master", "sa-replica", fastTiming)
	if err != nil {
		t.Fatal(err)
	}
	mustElect(t, e, 10*time.Second)
	// The secrets check (deferred) covers the requests above and the watch
	// below. The refused candidacies after it run at the default level:
	// client-go's debugging round tripper (klog -v 9) reads a timing field
	// without its lock, a race of its own that the race detector reported
	// once while those candidacies retried.
	seen := make(chan HolderState, 10)
	if _, err := m.WatchHolder(itNamespace, "metadata-master", func(s HolderState) { seen <- s }); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-seen:
		if s.Holder != "sa-replica" {
			t.Fatalf("watch saw %+v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no watch callback as the ServiceAccount")
	}
	if err := m.SetPodLabel(itNamespace, "rbac-pod", "k8s-lease.io/leader", "true"); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePodLabel(itNamespace, "rbac-pod", "k8s-lease.io/leader"); err != nil {
		t.Fatal(err)
	}

	flushLogs()
	if err := SetLogLevel(LevelWarning); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ns, name string }{{"default", "metadata-master"}, {itNamespace, "another-lease"}} {
		other, err := m.RunElection(tc.ns, tc.name, "sa-replica", fastTiming)
		if err != nil {
			t.Fatal(err)
		}
		// Not elected, and told why (TestCandidateHealsAfterFix shows the
		// candidacy heals once the Role exists).
		_, err = other.WaitElected(2 * time.Second)
		if err == nil || !strings.Contains(err.Error(), "last API error") || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("%s/%s: WaitElected = %v, want a timeout naming a forbidden error", tc.ns, tc.name, err)
		}
		t.Logf("%s/%s refused: %v", tc.ns, tc.name, err)
	}
}

type logCapture struct {
	mu  sync.Mutex
	buf strings.Builder
}

// captureLogs routes the library's and client-go's logs at level into a
// buffer for the rest of the test.
func captureLogs(t *testing.T, level Level) *logCapture {
	c := &logCapture{}
	SetLogSink(func(_ Level, msg string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.buf.WriteString(msg)
		c.buf.WriteByte('\n')
	})
	if err := SetLogLevel(level); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = SetLogLevel(LevelWarning)
		SetLogSink(nil)
	})
	return c
}

// requireNoSecrets fails if the bearer token, its signature, or any line of
// the client key's PEM body was logged; and if the logs are too thin to
// prove anything (no request logged).
func (c *logCapture) requireNoSecrets(t *testing.T, token string, keyPEM []byte) {
	t.Helper()
	flushLogs()
	c.mu.Lock()
	logs := c.buf.String()
	c.mu.Unlock()
	if !strings.Contains(logs, "curl -v -X") || !strings.Contains(logs, "Response Body") {
		t.Fatalf("verbose logs show no request and response (%d bytes): the check would prove nothing", len(logs))
	}
	// client-go logs the header, masked: proof the token passed the logger.
	if !strings.Contains(logs, "Authorization: Bearer <masked>") {
		t.Fatal("no masked Authorization header logged: the token check would prove nothing")
	}
	secrets := map[string]string{"bearer token": token}
	if parts := strings.Split(token, "."); len(parts) == 3 {
		secrets["token signature"] = parts[2]
	}
	for i, line := range strings.Split(string(keyPEM), "\n") {
		if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
			secrets[fmt.Sprintf("client key line %d", i)] = line
		}
	}
	if len(secrets) < 3 {
		t.Fatalf("found only %d secrets to look for", len(secrets))
	}
	for what, secret := range secrets {
		if secret != "" && strings.Contains(logs, secret) {
			t.Errorf("the %s appears in the logs", what)
		}
	}
	if strings.Contains(logs, "PRIVATE KEY") {
		t.Error("a private key appears in the logs")
	}
	t.Logf("%d bytes of logs at level %d: none of %d secrets found", len(logs), maxLevel, len(secrets))
}

// An error only an operator can cure - RBAC missing (403), credentials
// refused (401), the namespace missing (404 on create) - is reported at
// once (an error log, the stats, WaitElected's timeout message) and
// retried, and the candidate is elected without a restart once it is fixed.
func TestCandidateHealsAfterFix(t *testing.T) {
	ctx := context.Background()
	n := itSeq.Add(1)
	for _, tc := range []struct {
		name string
		want string // in the reported error
		// setup returns the candidate's client config, the namespace it
		// campaigns in, and the operator's fix.
		setup func(t *testing.T) (cfg *rest.Config, ns string, fix func(t *testing.T))
	}{
		{"403 until the Role is applied", "forbidden", func(t *testing.T) (*rest.Config, string, func(*testing.T)) {
			sa := fmt.Sprintf("heal-403-%d", n)
			createServiceAccount(t, sa)
			return serviceAccountConfig(t, sa), itNamespace, func(t *testing.T) { grantLeases(t, sa) }
		}},
		{"401 until the token file holds a valid token", "Unauthorized", func(t *testing.T) (*rest.Config, string, func(*testing.T)) {
			sa := fmt.Sprintf("heal-401-%d", n)
			createServiceAccount(t, sa)
			grantLeases(t, sa)
			valid := serviceAccountConfig(t, sa).BearerToken
			file := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte("not-a-token"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := &rest.Config{Host: itServer.Config.Host, BearerTokenFile: file,
				TLSClientConfig: rest.TLSClientConfig{CAData: itServer.Config.CAData}}
			return cfg, itNamespace, func(t *testing.T) {
				// Written as kubelet does: a new file renamed over the old.
				tmp := file + ".new"
				if err := os.WriteFile(tmp, []byte(valid), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, file); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"404 until the namespace exists", "not found", func(t *testing.T) (*rest.Config, string, func(*testing.T)) {
			ns := fmt.Sprintf("heal-ns-%d", n)
			return itServer.Config, ns, func(t *testing.T) {
				if _, err := itAdmin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ns, fix := tc.setup(t)
			logs := captureLogs(t, LevelWarning)
			m := newProcessWithConfig(t, cfg)
			name := leaseName(t)

			// A WaitElected that times out names the last API error.
			first, err := m.RunElection(ns, name, "healer", fastTiming)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := first.WaitElected(2 * time.Second); err == nil || !errors.Is(err, ErrWaitTimeout) ||
				!strings.Contains(err.Error(), "last API error") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WaitElected = %v, want a timeout naming the last API error (%q)", err, tc.want)
			}

			// A new candidacy in the same process keeps retrying, and
			// reports the error at once in the log and the stats.
			start := time.Now()
			e, err := m.RunElection(ns, name, "healer", fastTiming)
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "the error in the stats", func() bool {
				for _, s := range m.Stats() {
					if s.Name == name && s.Election != nil && s.Election.APIErrors > 0 &&
						strings.Contains(s.Election.LastAPIError, tc.want) && s.Election.Running {
						return true
					}
				}
				return false
			})
			eventually(t, 5*time.Second, "an error log", func() bool {
				flushLogs()
				logs.mu.Lock()
				defer logs.mu.Unlock()
				return strings.Contains(logs.buf.String(), "cannot campaign until this is fixed") &&
					strings.Contains(logs.buf.String(), tc.want)
			})
			reported := time.Since(start)
			if e.Ended() {
				t.Fatalf("the candidacy ended: %v", e.endReason())
			}
			fix(t)
			fixed := time.Now()
			mustElect(t, e, fixRetryMax+5*time.Second)
			t.Logf("reported within %v; elected %v after the fix", reported.Round(time.Millisecond), time.Since(fixed).Round(time.Millisecond))
		})
	}
}

func createServiceAccount(t *testing.T, name string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: itNamespace}}
	if _, err := itAdmin.CoreV1().ServiceAccounts(itNamespace).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantLeases gives the ServiceAccount every verb an election uses on
// leases in the test namespace.
func grantLeases(t *testing.T, sa string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: itNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}}}
	if _, err := itAdmin.RbacV1().Roles(itNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bindRole(t, sa)
}

// bindRole binds the Role named sa to the ServiceAccount sa.
func bindRole(t *testing.T, sa string) {
	t.Helper()
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: itNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: itNamespace}}}
	if _, err := itAdmin.RbacV1().RoleBindings(itNamespace).Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// flowOf records, per request method, the FlowSchema and priority level
// (their UIDs) API Priority and Fairness classified the last request in:
// the API server names them in every answer.
type flowOf struct {
	mu   sync.Mutex
	seen map[string][2]string
}

func (f *flowOf) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			f.mu.Lock()
			f.seen[req.Method] = [2]string{resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")}
			f.mu.Unlock()
		}
		return resp, err
	})
}

func (f *flowOf) of(method string) [2]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[method]
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// The FlowSchema of deploy/ puts the candidates' Lease requests, renewals
// (a JSON patch) included, in the priority level leader-election; without
// it they are the ServiceAccount's like any other request
// (service-accounts, workload-low), which another tenant can fill.
func TestFlowSchemaPutsTheCandidatesLeaseRequestsInLeaderElection(t *testing.T) {
	applyManifest(t, "rbac.yaml", false)
	flows := &flowOf{seen: map[string][2]string{}}
	cfg := serviceAccountConfig(t, "metadata-master")
	cfg.WrapTransport = flows.wrap
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leases := sa.CoordinationV1().Leases(itNamespace)
	renewal := []byte(`[{"op":"test","path":"/metadata/name","value":"metadata-master"}]`)
	send := func() {
		_, _ = leases.Get(ctx, "metadata-master", metav1.GetOptions{}) // found or not: classified all the same
		_, _ = leases.Patch(ctx, "metadata-master", types.JSONPatchType, renewal, metav1.PatchOptions{})
	}
	uid := func(what string, get func() (metav1.Object, error)) string {
		t.Helper()
		o, err := get()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return string(o.GetUID())
	}
	fc := itAdmin.FlowcontrolV1()
	serviceAccounts := uid("FlowSchema service-accounts", func() (metav1.Object, error) {
		return fc.FlowSchemas().Get(ctx, "service-accounts", metav1.GetOptions{})
	})
	leaderElection := uid("PriorityLevelConfiguration leader-election", func() (metav1.Object, error) {
		return fc.PriorityLevelConfigurations().Get(ctx, "leader-election", metav1.GetOptions{})
	})
	send()
	if got := flows.of(http.MethodPatch); got[0] != serviceAccounts {
		t.Fatalf("without the FlowSchema a renewal is classified in FlowSchema %q; want service-accounts (%s): the negative control", got[0], serviceAccounts)
	}
	applyManifest(t, "flowschema.yaml", false)
	ours := uid("FlowSchema metadata-master-leader-election", func() (metav1.Object, error) {
		return fc.FlowSchemas().Get(ctx, "metadata-master-leader-election", metav1.GetOptions{})
	})
	eventually(t, 30*time.Second, "the API server classifying by the new FlowSchema", func() bool {
		send()
		return flows.of(http.MethodPatch)[0] == ours
	})
	t.Logf("FlowSchema UIDs: service-accounts %s, ours %s; priority level leader-election %s; last GET in %v, PATCH in %v",
		serviceAccounts, ours, leaderElection, flows.of(http.MethodGet), flows.of(http.MethodPatch))
	for _, m := range []string{http.MethodGet, http.MethodPatch} {
		if got := flows.of(m); got != [2]string{ours, leaderElection} {
			t.Errorf("%s of the Lease by the candidates' ServiceAccount: FlowSchema %s, priority level %s; want %s, leader-election (%s)",
				m, got[0], got[1], ours, leaderElection)
		}
	}
}
