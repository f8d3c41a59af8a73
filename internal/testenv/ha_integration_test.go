//go:build integration

package testenv

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/proctree"
)

// Every handle of an HA bed, on one bed: the load balancer's pin and
// LandedOn, an etcd member killed and started again, the etcd leader
// frozen and thawed, an API server frozen, cut off from etcd (its watch
// cache goes stale) and healed, killed and started again; then Stop
// leaves no process behind, the restarted ones included.
func TestHAHandles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s := StartHA(t, Options{EtcdMembers: 3, APIServers: 2, Args: []string{"-namespace", "ha"}, Log: os.Stderr})
	if s.EtcdMembers() != 3 || s.APIServers() != 2 {
		t.Fatalf("bed has %d etcd members and %d API servers", s.EtcdMembers(), s.APIServers())
	}
	if err := s.EtcdMember(3).Freeze(); err == nil {
		t.Fatal("etcd member 3 of 3 frozen")
	}
	admin := createLease(t, s)
	pids := []int{s.Cmd.Process.Pid}
	for _, p := range proctree.Children(s.Cmd.Process.Pid) {
		pids = append(pids, p.PID)
	}

	t.Run("pin", func(t *testing.T) {
		for _, k := range []int{1, 0, 1} {
			if err := s.PinLB(k, 1); err != nil {
				t.Fatal(err)
			}
			client, local := recordingClient(t, s.Config)
			if _, err := readHolder(client, ""); err != nil {
				t.Fatal(err)
			}
			if got, err := s.LandedOn(local()); err != nil || got != k {
				t.Fatalf("pinned to %d, landed on %d (%v)", k, got, err)
			}
		}
	})

	t.Run("etcd member killed and started", func(t *testing.T) {
		leader := waitLeader(t, s)
		m := s.EtcdMember((leader + 1) % 3) // a follower
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		if pid, err := m.PID(); err == nil {
			t.Fatalf("%v still runs as pid %d", m, pid)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		if err := m.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		pid, _ := m.PID()
		pids = append(pids, pid)
		setHolder(t, admin, "b")
	})

	t.Run("etcd leader frozen and thawed", func(t *testing.T) {
		leader := waitLeader(t, s)
		m := s.EtcdMember(leader)
		if err := m.Freeze(); err != nil {
			t.Fatal(err)
		}
		next, err := s.WaitEtcdLeader(30 * time.Second)
		if thawErr := m.Thaw(); thawErr != nil {
			t.Fatal(thawErr)
		}
		if err != nil || next == leader {
			t.Fatalf("no other leader while member %d was frozen: %d, %v", leader, next, err)
		}
		if err := m.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		setHolder(t, admin, "c")
	})

	t.Run("API server frozen", func(t *testing.T) {
		if err := s.PinLB(1, 1); err != nil {
			t.Fatal(err)
		}
		onOne, _ := recordingClient(t, s.Config)
		if _, err := readHolder(onOne, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.APIServer(1).Freeze(); err != nil {
			t.Fatal(err)
		}
		_, frozenErr := readHolder(onOne, "")
		_, otherErr := readHolder(directClient(t, s, 0), "")
		if err := s.APIServer(1).Thaw(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(frozenErr, context.DeadlineExceeded) {
			t.Fatalf("a read on the frozen API server: %v, want a timeout", frozenErr)
		}
		if otherErr != nil {
			t.Fatalf("API server 0 while 1 was frozen: %v", otherErr)
		}
		if _, err := readHolder(onOne, ""); err != nil {
			t.Fatalf("after the thaw, on the same connection: %v", err)
		}
	})

	t.Run("API server cut off from etcd", func(t *testing.T) {
		one := directClient(t, s, 1)
		if err := s.CutFromEtcd(1); err != nil {
			t.Fatal(err)
		}
		setHolder(t, directClient(t, s, 0), "d")
		cached, cacheErr := readHolder(one, "0") // from its watch cache
		_, quorumErr := readHolder(one, "")      // from etcd
		if err := s.HealEtcd(1); err != nil {
			t.Fatal(err)
		}
		if cacheErr != nil || cached != "c" {
			t.Fatalf("cut-off API server's cache: %q, %v; want the stale holder c", cached, cacheErr)
		}
		if quorumErr == nil {
			t.Fatal("a quorum read on the cut-off API server succeeded")
		}
		eventually(t, 30*time.Second, func() error {
			got, err := readHolder(one, "0")
			if err == nil && got != "d" {
				err = errors.New("cache still has holder " + got)
			}
			return err
		})
	})

	t.Run("API server killed and started", func(t *testing.T) {
		a := s.APIServer(1)
		if err := a.Kill(); err != nil {
			t.Fatal(err)
		}
		if _, err := readHolder(directClient(t, s, 0), ""); err != nil {
			t.Fatalf("API server 0 while 1 is down: %v", err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		if err := a.WaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		pid, _ := a.PID()
		pids = append(pids, pid)
		if got, err := readHolder(directClient(t, s, 1), ""); err != nil || got != "d" {
			t.Fatalf("restarted API server reads %q, %v", got, err)
		}
	})

	stopLeavesNothing(t, s, tmp, pids)
}

// createLease creates Lease ha/l, held by "a", and returns the admin's
// client that did.
func createLease(t *testing.T, s *Server) kubernetes.Interface {
	t.Helper()
	admin, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	holder := "a"
	if _, err := admin.CoordinationV1().Leases("ha").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "l"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return admin
}

// recordingClient is a client of its own connections, and the local
// address of the last one it made.
func recordingClient(t *testing.T, base *rest.Config) (kubernetes.Interface, func() string) {
	t.Helper()
	cfg := rest.CopyConfig(base)
	var mu sync.Mutex
	var local string
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			local = c.LocalAddr().String()
			mu.Unlock()
		}
		return c, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, func() string { mu.Lock(); defer mu.Unlock(); return local }
}

func directClient(t *testing.T, s *Server, k int) kubernetes.Interface {
	t.Helper()
	cfg, err := s.APIServerConfig(k)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// readHolder reads Lease ha/l's holder at resourceVersion rv ("": from
// etcd; "0": from the API server's watch cache), within 3 s.
func readHolder(client kubernetes.Interface, rv string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l, err := client.CoordinationV1().Leases("ha").Get(ctx, "l", metav1.GetOptions{ResourceVersion: rv})
	if err != nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// setHolder writes Lease ha/l's holder, trying again for up to 30 s (an
// API server's etcd client leaves a dead or frozen member on its own time).
func setHolder(t *testing.T, client kubernetes.Interface, holder string) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := client.CoordinationV1().Leases("ha").Get(ctx, "l", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = &holder
		_, err = client.CoordinationV1().Leases("ha").Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

func waitLeader(t *testing.T, s *Server) int {
	t.Helper()
	leader, err := s.WaitEtcdLeader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

func eventually(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The handles on a single bed (what the fault suite uses): the API server
// frozen and thawed, the control plane stopped and started with its data,
// and the HA-only handles refused with a reason.
func TestSingleBedHandles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s := StartHA(t, Options{Args: []string{"-namespace", "ha"}})
	if s.Topology != nil || s.EtcdMembers() != 1 || s.APIServers() != 1 {
		t.Fatalf("a single bed with topology %v, %d members, %d API servers", s.Topology, s.EtcdMembers(), s.APIServers())
	}
	for _, err := range []error{s.CutFromEtcd(0), s.PinLB(0, 1)} {
		if err == nil || !strings.Contains(err.Error(), "needs an HA bed") {
			t.Fatalf("an HA handle on a single bed: %v", err)
		}
	}
	admin := createLease(t, s)
	pids := []int{s.Cmd.Process.Pid}
	for _, name := range []string{Etcd, KubeAPIServer} {
		pid, err := s.PID(name)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := s.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	_, frozenErr := readHolder(admin, "")
	if err := s.ThawAPIServer(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(frozenErr, context.DeadlineExceeded) {
		t.Fatalf("a read on the frozen API server: %v, want a timeout", frozenErr)
	}
	if err := s.StopControlPlane(); err != nil {
		t.Fatal(err)
	}
	if err := s.StartControlPlane(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Etcd, KubeAPIServer} {
		pid, err := s.PID(name)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if got, err := readHolder(admin, ""); err != nil || got != "a" {
		t.Fatalf("after the restart: %q, %v", got, err)
	}
	stopLeavesNothing(t, s, tmp, pids)
}

// stopLeavesNothing stops s and wants none of pids running and nothing
// left in tmp (the bed's TMPDIR).
func stopLeavesNothing(t *testing.T, s *Server, tmp string, pids []int) {
	t.Helper()
	if err := s.Stop(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := proctree.WaitGone(10*time.Second, pids...); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
}

// A bed whose etcd majority the test killed and started again (those
// members are then the test's children, not envtest-server's) stops
// cleanly: envtest-server's API server drains while etcd still has a
// quorum, so Stop returns no error and leaves nothing running.
func TestHAStopAfterMajorityRestarted(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s := StartHA(t, Options{EtcdMembers: 3, APIServers: 1, Args: []string{"-namespace", "ha"}})
	admin := createLease(t, s)
	pids := []int{s.Cmd.Process.Pid}
	for _, p := range proctree.Children(s.Cmd.Process.Pid) {
		pids = append(pids, p.PID)
	}
	for _, i := range []int{0, 1} {
		m := s.EtcdMember(i)
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		if err := m.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		pid, err := m.PID()
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if got, err := readHolder(admin, ""); err != nil || got != "a" {
		t.Fatalf("after the restarts: %q, %v", got, err)
	}
	stopped := time.Now()
	stopLeavesNothing(t, s, tmp, pids)
	t.Logf("stopped in %v", time.Since(stopped).Round(time.Millisecond))
}
