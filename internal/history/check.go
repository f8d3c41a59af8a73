package history

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"
)

// Open marks the end of a term still running when the history ends.
const Open = int64(math.MaxInt64)

// Term is one leadership of one process.
type Term struct {
	PID     int
	Token   int64
	Start   int64  // first of elected / first IsLeader = 1
	End     int64  // lost / released / killed / exit, or Open
	EndKind string // the event that ended it
	Reason  string // detail of a lost event
	LastOn  int64  // when the last IsLeader = 1 call returned (0: none logged)
	// LastOnBegan is when that call began: a call that began after the
	// logged end and still said 1 is a violation; one that straddled the
	// end is not.
	LastOnBegan int64
}

// Until is when the process last acted as leader: its end, or a later
// IsLeader = 1 (which is itself a violation).
func (t Term) Until() int64 {
	if t.LastOn > t.End {
		return t.LastOn
	}
	return t.End
}

// Report is the outcome of Check.
type Report struct {
	Terms      []Term // by start
	Violations []string
}

// OK reports whether the history shows no violation.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Terms splits a history into leadership terms, sorted by start.
func Terms(events []Event) []Term {
	sorted := append([]Event(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At < sorted[j].At })
	open := map[int]*Term{}
	last := map[int]*Term{} // the latest closed term of a pid, for a late "off"
	var terms []*Term
	closeTerm := func(pid int, at int64, kind, reason string) {
		t := open[pid]
		if t == nil {
			return
		}
		t.End, t.EndKind, t.Reason = at, kind, reason
		delete(open, pid)
		last[pid] = t
	}
	for _, ev := range sorted {
		switch ev.Kind {
		case Elected, On:
			if t := open[ev.PID]; t != nil && t.Token != ev.Token {
				closeTerm(ev.PID, ev.At, "token changed", "")
			}
			if open[ev.PID] == nil {
				t := &Term{PID: ev.PID, Token: ev.Token, Start: ev.At, End: Open}
				open[ev.PID] = t
				terms = append(terms, t)
			}
		case Off:
			t := open[ev.PID]
			if t == nil {
				if t = last[ev.PID]; t == nil || t.Token != ev.Token {
					continue
				}
			}
			t.LastOn, t.LastOnBegan = ev.At, ev.At
			if began, err := strconv.ParseInt(ev.Detail, 10, 64); err == nil && began <= ev.At {
				t.LastOnBegan = began
			}
		case Lost, Released, Killed, Exit:
			closeTerm(ev.PID, ev.At, ev.Kind, ev.Detail)
		}
	}
	out := make([]Term, len(terms))
	for i, t := range terms {
		out[i] = *t
	}
	return out
}

// Check finds every overlap of two processes' terms, every token that does
// not rise from one term to the next, and every IsLeader = 1 reported after
// the process had logged the end of its term.
func Check(events []Event) Report {
	r := Report{Terms: Terms(events)}
	var prev *Term
	var latest *Term // the term reaching furthest so far
	for i := range r.Terms {
		t := &r.Terms[i]
		if t.Token < 1 {
			r.fail("pid %d led with token %d (< 1)", t.PID, t.Token)
		}
		if t.LastOnBegan > t.End {
			r.fail("pid %d (token %d) reported IsLeader = 1 in a call begun %s after it logged %s",
				t.PID, t.Token, ms(t.LastOnBegan-t.End), t.EndKind)
		}
		if latest != nil && t.Start < latest.Until() && latest.PID != t.PID {
			r.fail("overlap: pid %d (token %d, ended by %s) and pid %d (token %d) led together for %s",
				latest.PID, latest.Token, latest.EndKind, t.PID, t.Token, span(t.Start, latest.Until()))
		}
		if prev != nil && t.Token <= prev.Token {
			r.fail("token did not rise: pid %d had %d, then pid %d got %d", prev.PID, prev.Token, t.PID, t.Token)
		}
		prev = t
		if latest == nil || t.Until() > latest.Until() {
			latest = t
		}
	}
	return r
}

// LeaderChanges counts the terms whose process differs from the previous
// term's.
func (r Report) LeaderChanges() int {
	n := 0
	for i := 1; i < len(r.Terms); i++ {
		if r.Terms[i].PID != r.Terms[i-1].PID {
			n++
		}
	}
	return n
}

func (r *Report) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

func ms(ns int64) string { return time.Duration(ns).String() }

func span(from, to int64) string {
	if to == Open {
		return "until the end of the history"
	}
	return ms(to - from)
}
