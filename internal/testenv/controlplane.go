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
// frozen (SIGSTOP/SIGCONT), or the control plane (kube-apiserver and etcd)
// is stopped and started again with the same command lines, certificates,
// ports and etcd data.

// The control-plane processes, in the order they start.
const (
	Etcd          = "etcd"
	KubeAPIServer = "kube-apiserver"
)

// component is a control-plane process this package restarted (or will).
type component struct {
	argv, env []string
	cmd       *exec.Cmd // nil while stopped, or while envtest-server's runs
	done      chan struct{}
}

// PID is the pid of the named control-plane process currently running: the
// child of envtest-server, or the one StartControlPlane started.
func (s *Server) PID(name string) (int, error) {
	if c := s.restarted[name]; c != nil && c.cmd != nil {
		return c.cmd.Process.Pid, nil
	}
	return childNamed(s.Cmd.Process.Pid, name)
}

// FreezeAPIServer stops the kube-apiserver with SIGSTOP: connections stay
// open and requests are accepted by the kernel, but nothing is answered.
func (s *Server) FreezeAPIServer() error { return s.signal(KubeAPIServer, syscall.SIGSTOP) }

// ThawAPIServer resumes a frozen kube-apiserver.
func (s *Server) ThawAPIServer() error { return s.signal(KubeAPIServer, syscall.SIGCONT) }

func (s *Server) signal(name string, sig syscall.Signal) error {
	pid, err := s.PID(name)
	if err != nil {
		return err
	}
	return syscall.Kill(pid, sig)
}

// StopControlPlane terminates kube-apiserver, then etcd (SIGTERM; SIGKILL
// after 20 s each), remembering how to start them again.
func (s *Server) StopControlPlane() error {
	for _, name := range []string{KubeAPIServer, Etcd} {
		if err := s.stop(name); err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
	}
	return nil
}

// StartControlPlane starts etcd, then kube-apiserver, as they ran before
// StopControlPlane, and waits (up to 60 s) until the API server answers
// /readyz.
func (s *Server) StartControlPlane() error {
	for _, name := range []string{Etcd, KubeAPIServer} {
		if err := s.start(name); err != nil {
			return err
		}
	}
	return s.waitReady(60 * time.Second)
}

func (s *Server) stop(name string) error {
	pid, err := s.PID(name)
	if err != nil {
		return err
	}
	if s.restarted == nil {
		s.restarted = map[string]*component{}
	}
	c := s.restarted[name]
	if c == nil {
		c = &component{}
		if c.argv, err = procStrings(pid, "cmdline"); err != nil {
			return err
		}
		if c.env, err = procStrings(pid, "environ"); err != nil {
			return err
		}
		s.restarted[name] = c
	}
	_ = syscall.Kill(pid, syscall.SIGCONT) // a frozen one cannot exit
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	if c.cmd == nil { // envtest-server's child: it reaps it
		return waitGone(pid, 20*time.Second)
	}
	err = waitDone(c.done, pid, 20*time.Second)
	c.cmd = nil
	return err
}

func (s *Server) start(name string) error {
	c := s.restarted[name]
	if c == nil || c.cmd != nil {
		return fmt.Errorf("start %s: it was not stopped", name)
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = c.env
	// Killed if the test binary dies, so never orphaned. Pdeathsig follows
	// the forking *thread*, so that thread is locked and kept until the
	// process exits.
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
		return fmt.Errorf("restart %s: %w", name, err)
	}
	c.cmd, c.done = cmd, done
	return nil
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

// stopRestarted ends the processes this package started (API server
// first), before envtest-server removes their certificates and data.
func (s *Server) stopRestarted() {
	for _, name := range []string{KubeAPIServer, Etcd} {
		c := s.restarted[name]
		if c == nil || c.cmd == nil {
			continue
		}
		pid := c.cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if waitDone(c.done, pid, 20*time.Second) != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = waitDone(c.done, pid, 5*time.Second)
		}
		c.cmd = nil
	}
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
		// "<pid> (<comm>) <state> <ppid> ...": comm may hold spaces (and
		// is cut to 15 bytes).
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if s[open+1:close] != truncComm(name) || len(fields) < 2 || fields[1] != strconv.Itoa(ppid) {
			continue
		}
		return strconv.Atoi(strings.TrimSpace(s[:open]))
	}
	return 0, fmt.Errorf("no %s process is a child of pid %d", name, ppid)
}

// truncComm is name as /proc/<pid>/stat shows it (TASK_COMM_LEN - 1 bytes).
func truncComm(name string) string {
	if len(name) > 15 {
		return name[:15]
	}
	return name
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
