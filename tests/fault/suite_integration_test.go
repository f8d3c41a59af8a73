//go:build integration

// Package fault is the fault and abuse suite: several real candidate
// processes (tests/cpp/lease_candidate.cpp, a C++ host linking the shipped
// .so) compete for one Lease on a real API server while the test injects
// faults, and internal/history checks their merged logs.
//
// Every scenario has a Lease of its own, its own candidates and proxies, so
// most run in parallel (t.Parallel; `go test -parallel` bounds how many, as
// candidates at these fast timings are not idle). Go runs the others first,
// alone: those that stop or freeze the shared control plane or count its
// requests server-wide (controlplane_integration_test.go,
// conflicts_integration_test.go), and TestLatencyAndThrottling, whose
// margins (a leader keeps its lease through half a renew deadline of
// latency) assume the candidates get the CPU they ask for.
package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

const namespace = "fault"

var (
	server    *testenv.Server
	candidate string // the lease_candidate binary
	binDir    string // where the suite's programs are built

	// clientGoCandidate is $FAULT_CLIENTGO_CANDIDATE (make builds it before
	// the HA beds start), or tests/fault/clientgocandidate built once, at
	// the first scenario that runs one.
	clientGoCandidate = sync.OnceValues(func() (string, error) {
		if bin := os.Getenv("FAULT_CLIENTGO_CANDIDATE"); bin != "" {
			if _, err := os.Stat(bin); err != nil {
				return "", fmt.Errorf("FAULT_CLIENTGO_CANDIDATE: %w", err)
			}
			return bin, nil
		}
		out := filepath.Join(binDir, "clientgocandidate")
		cmd := exec.Command("go", "build", "-o", out, "./tests/fault/clientgocandidate")
		cmd.Dir = testenv.RepoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build the client-go candidate: %v\n%s", err, b)
		}
		return out, nil
	})
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunSuite(m, "the fault suite", namespace, func(dir string) (err error) {
		binDir = dir
		candidate, err = buildCandidate(dir)
		return err
	}, func(s *testenv.Server) error { server = s; return nil }))
}

// buildCandidate compiles the C++ candidate against the shipped library.
func buildCandidate(dir string) (string, error) {
	return testenv.BuildCxx(dir, filepath.Join("tests", "cpp", "lease_candidate.cpp"), "lease_candidate")
}
