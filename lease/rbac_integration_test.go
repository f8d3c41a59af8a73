//go:build integration

package lease

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// applyManifest creates the objects of deploy/<file> in the test namespace
// (validated only, with dryRun).
func applyManifest(t *testing.T, file string, dryRun bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", file))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = itAdmin.CoreV1().ServiceAccounts(itNamespace).Create(ctx, o, opts)
		case *rbacv1.Role:
			_, err = itAdmin.RbacV1().Roles(itNamespace).Create(ctx, o, opts)
		case *rbacv1.RoleBinding:
			o.Subjects[0].Namespace = itNamespace
			_, err = itAdmin.RbacV1().RoleBindings(itNamespace).Create(ctx, o, opts)
		case *appsv1.StatefulSet:
			_, err = itAdmin.AppsV1().StatefulSets(itNamespace).Create(ctx, o, opts)
		case *corev1.Service:
			_, err = itAdmin.CoreV1().Services(itNamespace).Create(ctx, o, opts)
		default:
			t.Fatalf("unexpected object %T in deploy/%s", obj, file)
		}
		if err != nil {
			t.Fatalf("deploy/%s: %v", file, err)
		}
	}
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

	for _, tc := range []struct{ ns, name string }{{"default", "metadata-master"}, {itNamespace, "another-lease"}} {
		start := time.Now()
		other, err := m.RunElection(tc.ns, tc.name, "sa-replica", fastTiming)
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.WaitElected(30 * time.Second)
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("%s/%s: WaitElected = %v, want a forbidden error", tc.ns, tc.name, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("%s/%s: forbidden reported after %v, want fast", tc.ns, tc.name, took)
		}
		if lost := other.WaitLost(); lost == nil || errors.Is(lost, ErrCancelled) {
			t.Fatalf("WaitLost after a forbidden candidacy = %v", lost)
		}
		t.Logf("%s/%s refused in %v: %v", tc.ns, tc.name, time.Since(start).Round(time.Millisecond), err)
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
