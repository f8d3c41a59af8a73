package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Whole-control-plane faults: the kube-apiserver envtest-server started is
// frozen (SIGSTOP/SIGCONT), or stopped and started again with the same
// command line, certificates and port, while etcd keeps its data.

// APIServerPID is the pid of the kube-apiserver currently serving: the
// child of envtest-server, or the one RestartAPIServer started.
func (s *Server) APIServerPID() (int, error) {
	if s.apiserver != nil {
		return s.apiserver.Process.Pid, nil
	}
	return childNamed(s.Cmd.Process.Pid, "kube-apiserver")
}

// FreezeAPIServer stops the kube-apiserver with SIGSTOP: connections stay
// open and requests are accepted by the kernel, but nothing is answered.
func (s *Server) FreezeAPIServer() error { return s.signalAPIServer(syscall.SIGSTOP) }

// ThawAPIServer resumes a frozen kube-apiserver.
func (s *Server) ThawAPIServer() error { return s.signalAPIServer(syscall.SIGCONT) }

func (s *Server) signalAPIServer(sig syscall.Signal) error {
	pid, err := s.APIServerPID()
	if err != nil {
		return err
	}
	return syscall.Kill(pid, sig)
}

// StopAPIServer terminates the kube-apiserver (SIGTERM, then SIGKILL after
// 20 s) and remembers how to start it again.
func (s *Server) StopAPIServer() error {
	pid, err := s.APIServerPID()
	if err != nil {
		return err
	}
	if s.apiserverArgv == nil {
		if s.apiserverArgv, err = procStrings(pid, "cmdline"); err != nil {
			return err
		}
		if s.apiserverEnv, err = procStrings(pid, "environ"); err != nil {
			return err
		}
	}
	_ = syscall.Kill(pid, syscall.SIGCONT) // a frozen one cannot exit
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	if s.apiserver != nil {
		err := waitDone(s.apiserverDone, pid, 20*time.Second)
		s.apiserver = nil
		return err
	}
	return waitGone(pid, 20*time.Second)
}

// StartAPIServer starts a kube-apiserver stopped by StopAPIServer again and
// waits (up to 60 s) until it answers /readyz.
func (s *Server) StartAPIServer() error {
	if s.apiserverArgv == nil {
		return fmt.Errorf("StartAPIServer: no kube-apiserver was stopped")
	}
	cmd := exec.Command(s.apiserverArgv[0], s.apiserverArgv[1:]...)
	cmd.Env = s.apiserverEnv
	// Killed if the test binary dies, so never orphaned. Pdeathsig follows
	// the forking *thread*, so that thread is locked and kept until the
	// kube-apiserver exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	s.apiserver, s.apiserverDone = cmd, done
	return s.waitReady(60 * time.Second)
}

func (s *Server) waitReady(timeout time.Duration) error {
	client, err := s.Client()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil && string(body) == "ok" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after %v: %v %s", timeout, err, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopRestarted ends a kube-apiserver this package started, before
// envtest-server removes its certificates.
func (s *Server) stopRestarted() {
	if s.apiserver == nil {
		return
	}
	pid := s.apiserver.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGCONT)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitDone(s.apiserverDone, pid, 20*time.Second) != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = waitDone(s.apiserverDone, pid, 5*time.Second)
	}
	s.apiserver = nil
}

func waitDone(done <-chan struct{}, pid int, timeout time.Duration) error {
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("pid %d did not exit within %v", pid, timeout)
	}
}

// waitGone waits until pid no longer exists (its parent reaped it).
func waitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return fmt.Errorf("pid %d did not exit within %v", pid, timeout)
}

func childNamed(ppid int, name string) (int, error) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// "<pid> (<comm>) <state> <ppid> ...": comm may hold spaces.
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if s[open+1:close] != name || len(fields) < 2 || fields[1] != strconv.Itoa(ppid) {
			continue
		}
		return strconv.Atoi(strings.TrimSpace(s[:open]))
	}
	return 0, fmt.Errorf("no %s process is a child of pid %d", name, ppid)
}

func procStrings(pid int, file string) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return nil, err
	}
	parts := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out, nil
}
