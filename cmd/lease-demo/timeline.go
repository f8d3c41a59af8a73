package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// timeline prints replica events as they happen, relative to the start, and
// lets the scenario wait for them.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	cond  *sync.Cond
	all   []event
	marks []mark // the signals the demo sent, for the picture
}

func newTimeline() *timeline {
	t := &timeline{start: time.Now()}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// quiet events are counted, not printed, to keep the timeline readable.
var quiet = map[string]bool{"holder": true, "campaigning": true}

func (t *timeline) add(ev event) {
	t.mu.Lock()
	t.all = append(t.all, ev)
	t.cond.Broadcast()
	t.mu.Unlock()
	if !quiet[ev.name] {
		t.print(ev.at, ev.identity, strings.ToUpper(ev.name), ev.detail)
	}
}

func (t *timeline) print(at time.Time, who, what, detail string) {
	fmt.Printf("  %+8.3fs  %-10s %-9s %s\n", at.Sub(t.start).Seconds(), who, what, detail)
}

func (t *timeline) note(who, what, detail string) { t.print(time.Now(), who, what, detail) }

// mark prints and keeps a signal sent (or a restart) at `at`.
func (t *timeline) mark(at time.Time, who, what, printed string) {
	t.mu.Lock()
	t.marks = append(t.marks, mark{at: at, identity: who, what: what})
	t.mu.Unlock()
	t.print(at, who, printed, "")
}

// picture writes the run so far as an SVG timeline to w.
func (t *timeline) picture(w io.Writer, gaps []gap, title string) error {
	t.mu.Lock()
	events, marks := slices.Clone(t.all), slices.Clone(t.marks)
	t.mu.Unlock()
	return writeSVG(w, t.start, time.Now(), events, marks, gaps, title)
}

// waitFor returns the first event after index from that matches, or an
// error after within.
func (t *timeline) waitFor(from int, within time.Duration, match func(event) bool) (event, int, error) {
	deadline := time.Now().Add(within)
	timer := time.AfterFunc(within, func() { t.mu.Lock(); t.cond.Broadcast(); t.mu.Unlock() })
	defer timer.Stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := from; ; {
		for ; i < len(t.all); i++ {
			if match(t.all[i]) {
				return t.all[i], i + 1, nil
			}
		}
		if time.Now().After(deadline) {
			return event{}, i, fmt.Errorf("no matching event within %v", within)
		}
		t.cond.Wait()
	}
}

func (t *timeline) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.all)
}

func (t *timeline) count(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, ev := range t.all {
		if ev.name == name {
			n++
		}
	}
	return n
}
