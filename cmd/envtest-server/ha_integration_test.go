//go:build integration

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8s-lease/k8s-lease/internal/proctree"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
	"github.com/k8s-lease/k8s-lease/internal/topology"
)

// The HA bed as a test in any language sees it: its processes, the
// kubeconfig's contexts, a Lease through the load balancer, the loss of
// the etcd leader, and a SIGTERM that leaves nothing behind.
func TestHABedServesThroughLoadBalancer(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // everything the server makes goes here
	started := time.Now()
	srv, err := testenv.Start(os.Stderr, "-etcd-members", "3", "-apiservers", "2", "-namespace", "one")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 etcd members and 2 kube-apiservers ready in %v", time.Since(started).Round(time.Millisecond))
	pid := srv.Cmd.Process.Pid
	defer srv.Stop(60 * time.Second)
	if srv.Topology == nil {
		t.Fatalf("no topology at %s", topology.Path(srv.Kubeconfig))
	}
	if got := countByName(proctree.Children(pid)); got != "etcd=3 kube-apiserver=2" {
		t.Fatalf("children of envtest-server: %s, want etcd=3 kube-apiserver=2", got)
	}
	if srv.Config.Host != srv.Topology.LoadBalancer {
		t.Fatalf("kubeconfig points at %s, not the load balancer %s", srv.Config.Host, srv.Topology.LoadBalancer)
	}
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	exerciseLease(t, client) // holder "second"
	direct := make([]kubernetes.Interface, 2)
	for k := range direct {
		direct[k] = contextClient(t, srv.Kubeconfig, topology.APIServerContext(k), srv.Topology.APIServers[k].URL)
		expectHolder(t, direct[k], "second")
	}

	leader, err := srv.WaitEtcdLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.EtcdMember(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	next, err := srv.WaitEtcdLeader(30 * time.Second)
	if err != nil || next == leader {
		t.Fatalf("no new etcd leader after member %d was killed: %d, %v", leader, next, err)
	}
	t.Logf("etcd member %d killed (the leader); member %d leads %v later", leader, next, time.Since(killed).Round(time.Millisecond))
	setHolder(t, client, "third", 30*time.Second)
	t.Logf("a write through the load balancer succeeded %v after the kill", time.Since(killed).Round(time.Millisecond))
	for k := range direct {
		expectHolder(t, direct[k], "third")
	}

	procs := append(childPids(pid), pid)
	stopped := time.Now()
	if err := srv.Stop(60 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	t.Logf("stopped in %v", time.Since(stopped).Round(time.Millisecond))
	waitGone(t, procs, 10*time.Second)
	for _, f := range []string{srv.Kubeconfig, topology.Path(srv.Kubeconfig)} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", f, err)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
}

// The idle CPU and start time of the single and the HA bed, for the
// record: a measurement, not a check (the machine is shared), run only
// when ENVTEST_MEASURE_IDLE=1.
func TestIdleCPU(t *testing.T) {
	if os.Getenv("ENVTEST_MEASURE_IDLE") != "1" {
		t.Skip("a 2-minute measurement: set ENVTEST_MEASURE_IDLE=1")
	}
	const settle, window = 20 * time.Second, 30 * time.Second
	for _, bed := range [][]string{{"-etcd-members", "1", "-apiservers", "1"}, {"-etcd-members", "3", "-apiservers", "2"}} {
		t.Setenv("TMPDIR", t.TempDir())
		started := time.Now()
		srv, err := testenv.Start(nil, bed...)
		if err != nil {
			t.Fatal(err)
		}
		ready := time.Since(started)
		time.Sleep(settle)
		pid := srv.Cmd.Process.Pid
		before := cpuTicks(pid)
		time.Sleep(window)
		after := cpuTicks(pid)
		if err := srv.Stop(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		var total uint64
		var each []string
		for _, name := range slices.Sorted(maps.Keys(after)) {
			ticks := after[name] - before[name]
			total += ticks
			each = append(each, fmt.Sprintf("%s %.2f s", name, float64(ticks)/proctree.TicksPerSecond))
		}
		cpu := float64(total) / proctree.TicksPerSecond
		t.Logf("%s: ready in %v; idle CPU %.2f s in %v (%.1f%% of one core): %s", strings.Join(bed, " "),
			ready.Round(time.Millisecond), cpu, window, 100*cpu/window.Seconds(), strings.Join(each, ", "))
	}
}

// cpuTicks is utime+stime of pid and of each of its children, by
// "name[pid]".
func cpuTicks(pid int) map[string]uint64 {
	out := map[string]uint64{}
	procs := proctree.Children(pid)
	if p, err := proctree.Read(pid); err == nil {
		procs = append(procs, p)
	}
	for _, p := range procs {
		out[fmt.Sprintf("%s[%d]", p.Comm, p.PID)] = p.UTime + p.STime
	}
	return out
}

// countByName is "name=count ..." of procs, by name.
func countByName(procs []proctree.Proc) string {
	counts := map[string]int{}
	for _, p := range procs {
		counts[p.Comm]++
	}
	var out []string
	for _, name := range []string{"etcd", "kube-apiserver"} {
		out = append(out, fmt.Sprintf("%s=%d", name, counts[name]))
		delete(counts, name)
	}
	for name, n := range counts {
		out = append(out, fmt.Sprintf("%s=%d", name, n))
	}
	return strings.Join(out, " ")
}

// contextClient is a client for one context of the kubeconfig, as kubectl
// --context would use it, checked to reach host.
func contextClient(t *testing.T, kubeconfig, context, host string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		t.Fatalf("context %s: %v", context, err)
	}
	if cfg.Host != host {
		t.Fatalf("context %s reaches %s, want %s", context, cfg.Host, host)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// expectHolder reads Lease one/l (a quorum read: from etcd) and wants its
// holder to be holder.
func expectHolder(t *testing.T, client kubernetes.Interface, holder string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := client.CoordinationV1().Leases("one").Get(ctx, "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *l.Spec.HolderIdentity; got != holder {
		t.Fatalf("holder %q, want %q", got, holder)
	}
}

// setHolder sets Lease one/l's holder, trying again for up to within (the
// API servers' etcd clients leave a dead member on their own time).
func setHolder(t *testing.T, client kubernetes.Interface, holder string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := client.CoordinationV1().Leases("one").Get(ctx, "l", metav1.GetOptions{})
		if err == nil {
			l.Spec.HolderIdentity = &holder
			_, err = client.CoordinationV1().Leases("one").Update(ctx, l, metav1.UpdateOptions{})
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("set holder %q: %v", holder, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
