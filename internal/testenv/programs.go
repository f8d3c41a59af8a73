package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/topology"
)

// BuildCxx compiles the C++ program source (a path in the repository, e.g.
// examples/ha_server.cpp) into dir/name against the library `make lib`
// built, or the one in $K8S_LEASE_LIB_DIR, with $CXX (default g++): the
// suites run the shipped library as a host would.
func BuildCxx(dir, source, name string) (string, error) {
	root := RepoRoot()
	libDir := os.Getenv("K8S_LEASE_LIB_DIR")
	if libDir == "" {
		libDir = filepath.Join(root, "build")
	}
	if _, err := os.Stat(filepath.Join(libDir, "libk8s_lease_wrapper.so")); err != nil {
		return "", fmt.Errorf("%s runs the shipped library: run `make lib` first (%v)", source, err)
	}
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(cxx, "-std=c++17", "-O2", "-pthread", "-I", filepath.Join(root, "include"),
		filepath.Join(root, source), "-o", out,
		"-L", libDir, "-lk8s_lease_wrapper", "-Wl,-rpath,"+libDir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s with %s: %v\n%s", source, cxx, err, b)
	}
	return out, nil
}

// FreePort is a TCP port free on loopback now, outside the ephemeral
// range, so that a program restarted on it finds it free again (see
// topology.FreePorts).
func FreePort() (int, error) {
	ports, err := topology.FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// RunSuite runs a suite's tests (m) on a bed of its own, for TestMain to
// pass to os.Exit: prepare gets a scratch directory (removed after), then
// the bed starts with namespace and started receives it (an error from it
// skips m), m runs, and the bed stops. suite names the suite in the errors
// it prints.
func RunSuite(m *testing.M, suite, namespace string, prepare func(dir string) error, started func(*Server) error) int {
	dir, err := os.MkdirTemp("", "k8s-lease-"+namespace+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := prepare(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := Start(os.Stderr, "--namespace", namespace)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s needs a real API server: %v\n", suite, err)
		return 1
	}
	code := 1
	if err := started(s); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", suite, err)
	} else {
		code = m.Run()
	}
	if err := s.Stop(30 * time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest-server:", err)
		code = 1
	}
	return code
}
