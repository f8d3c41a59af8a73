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
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Server is a running envtest-server.
type Server struct {
	Cmd        *exec.Cmd
	Kubeconfig string
	Config     *rest.Config
	exited     chan error

	// Control-plane processes stopped (and started again) by this package.
	restarted map[string]*component
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

// Start launches envtest-server with args and waits (up to 60 s) for the
// kubeconfig path on its stdout. Its stderr goes to logTo (nil: discarded).
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
	s := &Server{Cmd: cmd, exited: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		s.exited <- cmd.Wait()
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			return nil, fmt.Errorf("envtest-server exited before printing a kubeconfig: %v", <-s.exited)
		}
		s.Kubeconfig = strings.TrimSpace(line)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return nil, errors.New("envtest-server printed no kubeconfig within 60 s")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		_ = s.Stop(30 * time.Second)
		return nil, fmt.Errorf("load kubeconfig %s: %w", s.Kubeconfig, err)
	}
	s.Config = cfg
	return s, nil
}

// Client returns a new clientset for the server.
func (s *Server) Client() (kubernetes.Interface, error) { return kubernetes.NewForConfig(s.Config) }

// Stop sends SIGTERM and waits up to timeout for a clean exit.
func (s *Server) Stop(timeout time.Duration) error {
	s.stopRestarted()
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	return s.Wait(timeout)
}

// Wait waits up to timeout for the server to exit and returns its error.
func (s *Server) Wait(timeout time.Duration) error {
	select {
	case err := <-s.exited:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("envtest-server did not exit within %v", timeout)
	}
}
