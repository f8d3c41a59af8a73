// Package proctree reads processes from /proc: the children of a process,
// their names, command lines and CPU time. The test bed's control-plane
// processes are found this way (they are children of envtest-server), by
// envtest-server itself, by internal/testenv and by tests that check nothing
// is left running.
package proctree

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Proc is one process as /proc/<pid>/stat shows it.
type Proc struct {
	PID, PPID int
	// Comm is the executable's name, cut to 15 bytes by the kernel.
	Comm string
	// State is R, S, D, T (stopped, e.g. by SIGSTOP), Z (zombie), ...
	State string
	// UTime and STime are the CPU time spent in user and kernel mode, in
	// clock ticks (USER_HZ, 100 a second on Linux).
	UTime, STime uint64
}

// TicksPerSecond is USER_HZ: the unit of Proc.UTime and Proc.STime. It is
// 100 on every Linux architecture Go supports.
const TicksPerSecond = 100

// Read returns the process pid.
func Read(pid int) (Proc, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Proc{}, err
	}
	return parseStat(b)
}

// parseStat parses "<pid> (<comm>) <state> <ppid> ...": comm may hold
// spaces and parentheses, so it runs to the last ')'.
func parseStat(b []byte) (Proc, error) {
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return Proc{}, fmt.Errorf("proctree: malformed stat %q", b)
	}
	fields := strings.Fields(string(b[close+1:]))
	// state(3) ppid(4) ... utime(14) stime(15), counted from pid as 1.
	if len(fields) < 13 {
		return Proc{}, fmt.Errorf("proctree: short stat %q", b)
	}
	p := Proc{Comm: string(b[open+1 : close]), State: fields[0]}
	var err error
	if p.PID, err = strconv.Atoi(strings.TrimSpace(string(b[:open]))); err != nil {
		return Proc{}, fmt.Errorf("proctree: stat pid: %w", err)
	}
	if p.PPID, err = strconv.Atoi(fields[1]); err != nil {
		return Proc{}, fmt.Errorf("proctree: stat ppid: %w", err)
	}
	if p.UTime, err = strconv.ParseUint(fields[11], 10, 64); err != nil {
		return Proc{}, fmt.Errorf("proctree: stat utime: %w", err)
	}
	if p.STime, err = strconv.ParseUint(fields[12], 10, 64); err != nil {
		return Proc{}, fmt.Errorf("proctree: stat stime: %w", err)
	}
	return p, nil
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	p, err := Read(pid)
	return err == nil && p.State != "Z"
}

// Children lists the processes whose parent is ppid, by pid.
func Children(ppid int) []Proc {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []Proc
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		p, err := parseStat(b)
		if err == nil && p.PPID == ppid {
			kids = append(kids, p)
		}
	}
	slices.SortFunc(kids, func(a, b Proc) int { return a.PID - b.PID })
	return kids
}

// Child finds the child of ppid running the executable name whose command
// line holds every one of args (e.g. "--name=member-1"; none: any).
func Child(ppid int, name string, args ...string) (int, error) {
	for _, p := range Children(ppid) {
		if p.Comm != Comm(name) {
			continue
		}
		argv, err := Args(p.PID)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(args, func(a string) bool { return !slices.Contains(argv, a) }) {
			return p.PID, nil
		}
	}
	if len(args) > 0 {
		return 0, fmt.Errorf("no %s process with %s is a child of pid %d", name, strings.Join(args, " "), ppid)
	}
	return 0, fmt.Errorf("no %s process is a child of pid %d", name, ppid)
}

// Comm is name as /proc/<pid>/stat shows it (TASK_COMM_LEN - 1 bytes).
func Comm(name string) string {
	if len(name) > 15 {
		return name[:15]
	}
	return name
}

// Args is the command line of pid.
func Args(pid int) ([]string, error) { return nulStrings(pid, "cmdline") }

// Environ is the environment pid started with.
func Environ(pid int) ([]string, error) { return nulStrings(pid, "environ") }

func nulStrings(pid int, file string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
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

// WaitGone waits up to within until no pid of pids is alive (exited, or a
// zombie: its parent has yet to reap it).
func WaitGone(within time.Duration, pids ...int) error {
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for Alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d still runs %v later", pid, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
