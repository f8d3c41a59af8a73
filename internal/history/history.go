// Package history merges the event logs written by candidate processes (and
// by the test driving them) and checks the merged history for what a leader
// election must never show: two processes leading at once, a fencing token
// that does not rise, and a process still reporting IsLeader = 1 after it
// stepped down.
//
// A log is lines "<CLOCK_MONOTONIC ns> <pid> <event> <token> [detail...]".
// All processes of a test run on one host, so their monotonic clocks agree.
package history

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The events a history holds.
const (
	// Elected: K8sLeaseWaitElected returned 0 (token = fencing token).
	Elected = "elected"
	// On: the first K8sLeaseIsLeader = 1 of a term; At is taken before the
	// call, so the term started no later.
	On = "on"
	// Off: the last K8sLeaseIsLeader = 1 of a term; At is taken after the
	// call returned, so the process believed it led until then.
	Off = "off"
	// Lost: K8sLeaseWaitLost returned -1 (detail = reason).
	Lost = "lost"
	// Released: the process stepped down on its own (K8sLeaseCancelElection).
	Released = "released"
	// Killed: written by the test after the process was reaped.
	Killed = "killed"
	// Exit: the process is about to exit normally.
	Exit = "exit"
)

// Event is one line of a log.
type Event struct {
	At     int64 // CLOCK_MONOTONIC, ns
	PID    int
	Kind   string
	Token  int64
	Detail string
}

// Parse reads a log. A malformed line is an error naming it: a candidate
// that writes garbage is a bug, not something to skip.
func Parse(r io.Reader) ([]Event, error) {
	var events []Event
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		ev, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}

// ParseFile is Parse on a file.
func ParseFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

func parseLine(line string) (Event, error) {
	f := strings.SplitN(line, " ", 5)
	if len(f) < 4 {
		return Event{}, fmt.Errorf("want \"<ns> <pid> <event> <token> [detail]\"")
	}
	at, err1 := strconv.ParseInt(f[0], 10, 64)
	pid, err2 := strconv.Atoi(f[1])
	token, err3 := strconv.ParseInt(f[3], 10, 64)
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return Event{}, err
		}
	}
	ev := Event{At: at, PID: pid, Kind: f[2], Token: token}
	if len(f) == 5 {
		ev.Detail = f[4]
	}
	switch ev.Kind {
	case Elected, On, Off, Lost, Released, Killed, Exit, "start", "standby":
		return ev, nil
	}
	return Event{}, fmt.Errorf("unknown event %q", ev.Kind)
}

// Now is CLOCK_MONOTONIC in ns: the clock the candidates log with.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return ts.Nano()
}

// Append adds one event to a log shared by several processes (one write
// with O_APPEND, so lines never interleave).
func Append(path string, ev Event) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%d %d %s %d %s\n", ev.At, ev.PID, ev.Kind, ev.Token, ev.Detail)
	if _, err = f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
