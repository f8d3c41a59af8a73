//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8s-lease/k8s-lease/internal/proctree"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// childPids lists the direct children of pid (the control plane processes).
func childPids(pid int) []int {
	var kids []int
	for _, p := range proctree.Children(pid) {
		kids = append(kids, p.PID)
	}
	return kids
}

func waitGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	if err := proctree.WaitGone(within, pids...); err != nil {
		t.Fatal(err)
	}
}

func TestServeLeaseAndStopCleanly(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // everything the server makes goes here
	srv, err := testenv.Start(os.Stderr, "--namespace", "one", "--namespace", "two")
	if err != nil {
		t.Fatal(err)
	}
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"one", "two"} {
		if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Fatalf("namespace %s not created: %v", ns, err)
		}
	}
	exerciseLease(t, client)
	kids := childPids(srv.Cmd.Process.Pid)
	if len(kids) < 2 {
		t.Fatalf("expected kube-apiserver and etcd children, found %v", kids)
	}
	start := time.Now()
	if err := srv.Stop(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	t.Logf("stopped in %v", time.Since(start))
	if _, err := os.Stat(srv.Kubeconfig); !os.IsNotExist(err) {
		t.Fatalf("kubeconfig %s not removed: %v", srv.Kubeconfig, err)
	}
	waitGone(t, kids, 5*time.Second)
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
}

func exerciseLease(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	leases := client.CoordinationV1().Leases("one")
	holder := "first"
	l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second := "second"
	l.Spec.HolderIdentity = &second
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := leases.Get(ctx, "l", metav1.GetOptions{})
	if err != nil || *got.Spec.HolderIdentity != "second" {
		t.Fatalf("read back %v, %v", got, err)
	}
}

// The parent (a shell here, a crashed C++ test in life) is SIGKILLed: the
// server must notice and stop by itself.
func TestStopsWhenParentDies(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	parent := exec.Command("bash", "-c", `"$0" --kubeconfig "$1" >/dev/null 2>&1 & echo $!; wait`, testenv.Binary(), kubeconfig)
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server never wrote its kubeconfig")
		}
		time.Sleep(100 * time.Millisecond)
	}
	kids := childPids(pid)
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitGone(t, append([]int{pid}, kids...), 30*time.Second)
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Fatalf("kubeconfig not removed after parent death: %v", err)
	}
}

func TestRefusesToStartWithoutAssets(t *testing.T) {
	cmd := exec.Command(testenv.Binary())
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit = %v, want non-zero", err)
	}
	if !strings.Contains(stderr.String(), "make envtest-assets") {
		t.Fatalf("message does not say what to run: %q", stderr.String())
	}
	cmd = exec.Command(testenv.Binary())
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+t.TempDir())
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "kube-apiserver is missing") {
		t.Fatalf("empty asset dir: %v, %q", err, stderr.String())
	}
}
