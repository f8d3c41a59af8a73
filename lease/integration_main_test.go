//go:build integration

package lease

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

const itNamespace = "lease-it"

var (
	itServer *testenv.Server
	itAdmin  kubernetes.Interface
	itSeq    atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunSuite(m, "the lease integration tests", itNamespace, func(string) error {
		SetLogSink(nil) // client-go's klog through the library's quiet default
		return nil
	}, func(srv *testenv.Server) (err error) {
		itServer = srv
		itAdmin, err = srv.Client()
		return err
	}))
}

// fastTiming keeps tests short: 2 s lease, 1.5 s renew deadline, 0.4 s retry.
var fastTiming = Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 400 * time.Millisecond}

// leaseName returns a Lease name unique to this test run.
func leaseName(t *testing.T) string {
	return fmt.Sprintf("it-%d-%d", time.Now().UnixNano()%1e6, itSeq.Add(1))
}

// newProcess is a Manager with its own client connection, standing in for
// one process of a replicated server.
func newProcess(t *testing.T) *Manager {
	t.Helper()
	return newProcessWithConfig(t, itServer.Config)
}

func newProcessWithConfig(t *testing.T, cfg *rest.Config) *Manager {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext // a connection of its own
	client, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(nil)
	m.SetClient(client)
	t.Cleanup(func() {
		if err := m.Shutdown(10 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return m
}

func mustRun(t *testing.T, m *Manager, name, identity string) *Election {
	t.Helper()
	e, err := m.RunElection(itNamespace, name, identity, fastTiming)
	if err != nil {
		t.Fatalf("RunElection(%s, %s): %v", name, identity, err)
	}
	return e
}

func mustElect(t *testing.T, e *Election, within time.Duration) int64 {
	t.Helper()
	token, err := e.WaitElected(within)
	if err != nil {
		t.Fatalf("%s not elected within %v: %v", e.identity, within, err)
	}
	return token
}

// crash stops an election's goroutine without releasing the Lease, as a
// killed process would.
func crash(e *Election) {
	e.end(fmt.Errorf("crashed by test"))
	e.ending.cancel()
	<-e.ending.runDone
}

func getLease(t *testing.T, name string) record {
	t.Helper()
	l, err := itAdmin.CoordinationV1().Leases(itNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return recordOf(l)
}

func createPod(t *testing.T, name string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: itNamespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}}}
	if _, err := itAdmin.CoreV1().Pods(itNamespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func metav1ObjectMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: itNamespace}
}
