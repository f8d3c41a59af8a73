package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/history"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// The user-pattern table measures the library as our first user's master
// calls it (tests/cpp/lease_candidate.cpp --pattern poll: GetHolder polled
// every 200 ms, RunElection + WaitElected(10 s) when there is no holder,
// WaitLost as leader), not as our own campaign loop does: three replica
// processes on the shipped .so with the user's 5/3/1 s lease.
const userTimingFlag = "5000,3000,1000"

// replicas runs the user's replica processes on one lease and reads their
// shared history log.
type replicas struct {
	program, kubeconfig, lease, log string
	procs                           map[string]*exec.Cmd // by identity
}

func (r *replicas) start(id string) error {
	cmd := exec.Command(r.program, "--namespace", benchNamespace, "--lease", r.lease, "--identity", id,
		"--log", r.log, "--timing", userTimingFlag, "--pattern", "poll")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.kubeconfig)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	r.procs[id] = cmd
	return nil
}

// leader waits for an open term that began after `after` (CLOCK_MONOTONIC
// ns) and returns its identity and start.
func (r *replicas) leader(within time.Duration, after int64) (string, int64, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		events, err := history.ParseFile(r.log)
		if err == nil {
			rep := history.Check(events)
			if !rep.OK() {
				return "", 0, fmt.Errorf("history violations: %v", rep.Violations)
			}
			for i := len(rep.Terms) - 1; i >= 0; i-- {
				t := rep.Terms[i]
				if t.End == history.Open && t.Start > after {
					for id, cmd := range r.procs {
						if cmd.Process.Pid == t.PID {
							return id, t.Start, nil
						}
					}
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", 0, fmt.Errorf("no new leader within %v", within)
}

// stopLeader ends the leader's process (SIGKILL, or SIGTERM: release and
// exit) and restarts it as kubelet would; it returns when it was stopped.
func (r *replicas) stopLeader(id string, kill bool) (int64, error) {
	cmd := r.procs[id]
	at := history.Now()
	if kill {
		_ = cmd.Process.Kill()
	} else {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	_ = cmd.Wait()
	if kill {
		if err := history.Append(r.log, history.Event{At: history.Now(), PID: cmd.Process.Pid, Kind: history.Killed}); err != nil {
			return 0, err
		}
	}
	return at, r.start(id)
}

func (r *replicas) stopAll() {
	for _, cmd := range r.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}

// userPattern fills the user-pattern rows: Lease requests/s at the API
// server for 1 leader + 2 standbys over window, then kills and graceful
// stops of the leader, each followed by a restart.
func (b *bench) userPattern(program, kubeconfig string, window time.Duration, kills, terms int) error {
	dir, err := os.MkdirTemp("", "lease-bench-user-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r := &replicas{program: program, kubeconfig: kubeconfig, lease: b.leaseName("user"),
		log: filepath.Join(dir, "history.log"), procs: map[string]*exec.Cmd{}}
	defer r.stopAll()
	ids := []string{"replica-0", "replica-1", "replica-2"}
	for _, id := range ids {
		if err := r.start(id); err != nil {
			return err
		}
	}
	leader, start, err := r.leader(30*time.Second, 0)
	if err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // past the start-up lists and the first campaigns
	before, err := testenv.APIRequests(b.admin, "leases", "")
	if err != nil {
		return err
	}
	time.Sleep(window)
	after, err := testenv.APIRequests(b.admin, "leases", "")
	if err != nil {
		return err
	}
	b.add("user pattern: Lease requests/s at the API server, 1 leader + 2 standbys", ours, "req/s", (after-before)/window.Seconds())
	for i := 0; i < kills+terms; i++ {
		kill := i < kills
		at, err := r.stopLeader(leader, kill)
		if err != nil {
			return err
		}
		next, nextStart, err := r.leader(30*time.Second, start)
		if err != nil {
			return err
		}
		name := "user pattern: SIGTERM of the leader -> next leader"
		if kill {
			name = "user pattern: SIGKILL of the leader -> next leader"
		}
		b.add(name, ours, "ms", float64(nextStart-at)/1e6)
		progress("  %s: %s -> %s after %v", name, leader, next, time.Duration(nextStart-at).Round(time.Millisecond))
		leader, start = next, nextStart
		time.Sleep(time.Duration(300+100*(i%5)) * time.Millisecond) // not in step with the 1 s renewals
	}
	events, err := history.ParseFile(r.log)
	if err != nil {
		return err
	}
	if rep := history.Check(events); !rep.OK() {
		return fmt.Errorf("user pattern: history violations: %v", rep.Violations)
	}
	return nil
}
