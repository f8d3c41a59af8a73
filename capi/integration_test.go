//go:build integration

package capi

import (
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// The C ABI end to end against a real API server, called from Go.
func TestABIAgainstRealAPIServer(t *testing.T) {
	var msg *cchar
	// A library of its own, as in a new process: the test begins with no
	// configuration loaded, also when run again (go test -count=N).
	prev := lib
	lib = newLib()
	t.Cleanup(func() {
		_ = lib.Shutdown(10 * time.Second)
		lib = prev
	})

	// Before a good configuration: the error names every source tried.
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")
	if rc := K8sLeaseInit(&msg); rc != -1 {
		t.Fatalf("Init with a missing kubeconfig = %d", rc)
	}
	if got := takeMsg(&msg); !strings.Contains(got, "in-cluster") || !strings.Contains(got, "KUBECONFIG=/nonexistent/kubeconfig") {
		t.Fatalf("Init error does not name the sources: %q", got)
	}
	// Every function initializes on first use, so each reports the same.
	if rc := K8sLeaseRunElection(cs("abi"), cs("l"), cs("id"), 5, 4, 1, &msg); rc != -1 || !strings.Contains(takeMsg(&msg), "KUBECONFIG=/nonexistent/kubeconfig") {
		t.Fatal("RunElection with no configuration did not name the sources tried")
	}

	srv, err := testenv.Start(os.Stderr, "--namespace", "abi")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(30 * time.Second); err != nil {
			t.Errorf("stop envtest-server: %v", err)
		}
	}()
	t.Setenv("KUBECONFIG", srv.Kubeconfig)
	// No K8sLeaseInit yet: the first call that needs the cluster loads it.
	if rc := K8sLeaseGetHolder(cs("abi"), cs("first-use"), nil, nil, &msg); rc != 1 {
		t.Fatalf("GetHolder before Init = %d (%q); want 1, the lease does not exist", rc, takeMsg(&msg))
	}
	for i := 0; i < 2; i++ { // idempotent
		if rc := K8sLeaseInit(&msg); rc != 0 {
			t.Fatalf("Init #%d: %q", i+1, takeMsg(&msg))
		}
	}

	ns, name := cs("abi"), cs("abi-lease")
	if rc := K8sLeaseRunElectionMs(ns, name, cs("go-abi"), 2000, 1500, 400, &msg); rc != 0 {
		t.Fatalf("RunElectionMs: %q", takeMsg(&msg))
	}
	var token, fencing, valid int64
	if rc := K8sLeaseWaitElected(ns, name, 10, ll(&token), &msg); rc != 0 || token < 1 {
		t.Fatalf("WaitElected = %d, token %d: %q", rc, token, takeMsg(&msg))
	}
	if rc := K8sLeaseIsLeader(ns, name, ll(&fencing), ll(&valid), &msg); rc != 1 || fencing != token || valid <= 0 || valid > 1500 {
		t.Fatalf("IsLeader = %d, token %d, validForMs %d", rc, fencing, valid)
	}
	var holder *cchar
	var holderToken int64
	if rc := K8sLeaseGetHolder(ns, name, &holder, ll(&holderToken), &msg); rc != 0 || goStr(holder) != "go-abi" || holderToken != token {
		t.Fatalf("GetHolder = %d, %q, %d: %q", rc, goStr(holder), holderToken, takeMsg(&msg))
	}
	K8sLeaseFree(unsafe.Pointer(holder))

	if rc := K8sLeaseCancelElection(ns, name, &msg); rc != 0 {
		t.Fatalf("CancelElection: %q", takeMsg(&msg))
	}
	if rc := K8sLeaseIsLeader(ns, name, nil, nil, nil); rc != 0 {
		t.Fatal("IsLeader after cancel")
	}
	holder = nil
	if rc := K8sLeaseGetHolder(ns, name, &holder, ll(&holderToken), &msg); rc != 0 || holder != nil || holderToken != token {
		t.Fatalf("GetHolder after release = %d, %q, %d", rc, goStr(holder), holderToken)
	}
	if rc := K8sLeaseGetHolder(ns, cs("never-created"), &holder, nil, &msg); rc != 1 {
		t.Fatalf("GetHolder of a missing lease = %d, want 1", rc)
	}
	if rc := K8sLeaseShutdown(5000, &msg); rc != 0 {
		t.Fatalf("Shutdown: %q", takeMsg(&msg))
	}
}

func ll(p *int64) *longlong { return (*longlong)(unsafe.Pointer(p)) }
