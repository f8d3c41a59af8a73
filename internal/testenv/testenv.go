// Package testenv launches cmd/envtest-server as a subprocess, exactly as a
// C++ test does, for Go tests that need a real API server.
package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8s-lease/k8s-lease/internal/topology"
)

// Server is a running envtest-server.
type Server struct {
	Cmd        *exec.Cmd
	Kubeconfig string
	Config     *rest.Config  // the admin's, through the load balancer on an HA bed
	exited     chan struct{} // closed when the process has exited
	exitErr    error         // its Wait error, once exited is closed

	// Topology is the HA bed's (nil on a single bed), and Control its
	// control endpoint.
	Topology *topology.Topology
	Control  topology.Control

	mu sync.Mutex
	// Control-plane processes stopped (and started again) by this package,
	// by Proc.key.
	restarted map[string]*component
}

// Options are the bed StartHA starts.
type Options struct {
	EtcdMembers int       // etcd members, one cluster (0: 1)
	APIServers  int       // kube-apiservers behind the load balancer (0: 1)
	Args        []string  // more envtest-server flags, e.g. "-namespace", "x"
	Log         io.Writer // envtest-server's stderr (nil: discarded)
}

// StartHA starts envtest-server with o's bed (with 1 and 1, the single
// bed Start starts), fails t if it cannot, and stops it (SIGTERM) when t
// ends.
func StartHA(t testing.TB, o Options) *Server {
	t.Helper()
	args := []string{"-etcd-members", strconv.Itoa(max(o.EtcdMembers, 1)), "-apiservers", strconv.Itoa(max(o.APIServers, 1))}
	s, err := Start(o.Log, append(args, o.Args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(60 * time.Second); err != nil {
			t.Errorf("stop envtest-server: %v", err)
		}
	})
	return s
}

// RepoRoot is the module root: found from this file's location, or (in a
// -trimpath build, where that is not a real path) by walking up from the
// working directory to go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	if filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	}
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// Binary is the path of the envtest-server built by `make envtest-server`
// (or $ENVTEST_SERVER).
func Binary() string {
	if p := os.Getenv("ENVTEST_SERVER"); p != "" {
		return p
	}
	return filepath.Join(RepoRoot(), "build", "bin", "envtest-server")
}

// startTimeout bounds envtest-server's start: above its own bounds (90 s
// for each control-plane process of an HA bed; envtest retries a single
// bed's start).
const startTimeout = 150 * time.Second

// Start launches envtest-server with args and waits (up to startTimeout)
// for the kubeconfig path on its stdout. Its stderr goes to logTo (nil: discarded).
func Start(logTo io.Writer, args ...string) (*Server, error) {
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s not built (run `make envtest-server`): %w", bin, err)
	}
	cmd := exec.Command(bin, args...)
	if logTo == nil {
		logTo = io.Discard
	}
	cmd.Stderr = logTo
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Cmd: cmd, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			return nil, fmt.Errorf("envtest-server exited before printing a kubeconfig: %v", s.Wait(30*time.Second))
		}
		s.Kubeconfig = strings.TrimSpace(line)
	case <-time.After(startTimeout):
		// SIGTERM first: a SIGKILLed envtest-server would leave its
		// control plane running.
		if s.Stop(2*time.Minute) != nil {
			_ = cmd.Process.Kill()
		}
		return nil, fmt.Errorf("envtest-server printed no kubeconfig within %v", startTimeout)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		_ = s.Stop(30 * time.Second)
		return nil, fmt.Errorf("load kubeconfig %s: %w", s.Kubeconfig, err)
	}
	s.Config = cfg
	switch t, err := topology.Read(topology.Path(s.Kubeconfig)); {
	case err == nil:
		s.Topology, s.Control = t, topology.Control{URL: t.Control}
	case !errors.Is(err, os.ErrNotExist):
		_ = s.Stop(30 * time.Second)
		return nil, err
	}
	return s, nil
}

// Client returns a new clientset for the server.
func (s *Server) Client() (kubernetes.Interface, error) { return kubernetes.NewForConfig(s.Config) }

// Stop ends the control plane (stopProcesses: API servers, then etcd
// members), sends envtest-server SIGTERM and waits up to timeout for a
// clean exit. Once the server has exited, Stop returns how it exited.
func (s *Server) Stop(timeout time.Duration) error {
	select {
	case <-s.exited:
		return s.exitErr
	default:
	}
	stopErr := s.stopProcesses()
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return errors.Join(stopErr, err)
	}
	return errors.Join(stopErr, s.Wait(timeout))
}

// Wait waits up to timeout for the server to exit and returns its error.
func (s *Server) Wait(timeout time.Duration) error {
	select {
	case <-s.exited:
		return s.exitErr
	case <-time.After(timeout):
		return fmt.Errorf("envtest-server did not exit within %v", timeout)
	}
}
