package main

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"time"
)

// The picture of a run: one row per replica on one time axis, its
// candidacies (from its start to its exit or kill) as a thin grey bar, its
// terms (from elected to released, lost, killed or exited) as a thick bar
// labelled with the fencing token, the signals the demo sent as marks, and
// each measured gap (from a signal to the next leader's election) as a
// bracket labelled with its milliseconds.

// mark is a signal the demo sent a replica.
type mark struct {
	at       time.Time
	identity string
	what     string // "SIGKILL", "SIGTERM", "restarted"
}

// gap is a measured interval the picture labels.
type gap struct {
	from, to time.Time
	label    string
}

// span is one bar of a row.
type span struct {
	identity string
	from, to time.Time
	label    string // a term's "token N"; "" for a candidacy
}

// rows turns the replicas' events and the marks into candidacies and terms,
// closing what is open at end.
func rows(events []event, marks []mark, end time.Time) (candidacies, terms []span) {
	type open struct {
		candidacy, term *span
	}
	state := map[string]*open{}
	get := func(id string) *open {
		if state[id] == nil {
			state[id] = &open{}
		}
		return state[id]
	}
	closeTerm := func(o *open, at time.Time) {
		if o.term != nil {
			o.term.to = at
			terms = append(terms, *o.term)
			o.term = nil
		}
	}
	closeCandidacy := func(o *open, at time.Time) {
		closeTerm(o, at)
		if o.candidacy != nil {
			o.candidacy.to = at
			candidacies = append(candidacies, *o.candidacy)
			o.candidacy = nil
		}
	}
	type step struct {
		at   time.Time
		id   string
		name string
		info string
	}
	var steps []step
	for _, ev := range events {
		steps = append(steps, step{ev.at, ev.identity, ev.name, ev.detail})
	}
	for _, m := range marks {
		if m.what == "SIGKILL" { // nothing runs in it from here
			steps = append(steps, step{m.at, m.identity, "killed", ""})
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	for _, s := range steps {
		o := get(s.id)
		switch s.name {
		case "started":
			closeCandidacy(o, s.at)
			o.candidacy = &span{identity: s.id, from: s.at}
		case "elected":
			closeTerm(o, s.at)
			o.term = &span{identity: s.id, from: s.at, label: "token " + tokenOf(s.info)}
		case "released", "lost":
			closeTerm(o, s.at)
		case "exit", "killed":
			closeCandidacy(o, s.at)
		}
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range state {
			if !yield(id) {
				return
			}
		}
	}) {
		closeCandidacy(state[id], end)
	}
	return candidacies, terms
}

// tokenOf is the N of "token=N ..." ("?" if absent).
func tokenOf(detail string) string {
	for _, f := range strings.Fields(detail) {
		if v, ok := strings.CutPrefix(f, "token="); ok {
			return v
		}
	}
	return "?"
}

// writeSVG draws the run from start to end.
func writeSVG(w io.Writer, start, end time.Time, events []event, marks []mark, gaps []gap, title string) error {
	candidacies, terms := rows(events, marks, end)
	var ids []string
	for _, s := range append(slices.Clone(candidacies), terms...) {
		if !slices.Contains(ids, s.identity) {
			ids = append(ids, s.identity)
		}
	}
	slices.Sort(ids)
	const (
		left, right, top = 110.0, 140.0, 60.0
		rowH, width      = 56.0, 960.0
	)
	total := end.Sub(start).Seconds()
	if total <= 0 {
		return fmt.Errorf("a run of %v has nothing to draw", end.Sub(start))
	}
	x := func(t time.Time) float64 { return left + (width-left-right)*t.Sub(start).Seconds()/total }
	y := func(id string) float64 { return top + rowH*float64(slices.Index(ids, id)) }
	axisY := top + rowH*float64(len(ids)) + 10
	height := axisY + 40 + 22*float64(len(gaps))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="13">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for _, id := range ids {
		fmt.Fprintf(&b, `<text x="10" y="%.1f" class="replica">%s</text>`+"\n", y(id)+24, html.EscapeString(id))
	}
	for _, s := range candidacies {
		fmt.Fprintf(&b, `<rect class="candidacy" x="%.1f" y="%.1f" width="%.1f" height="6" fill="#c8c8c8"/>`+"\n",
			x(s.from), y(s.identity)+17, max(x(s.to)-x(s.from), 1))
	}
	for _, s := range terms {
		fmt.Fprintf(&b, `<rect class="term" x="%.1f" y="%.1f" width="%.1f" height="20" fill="#2e7d32"/>`+"\n",
			x(s.from), y(s.identity)+10, max(x(s.to)-x(s.from), 1))
		// Inside the bar when it fits (about 8 px a character), else after it.
		lx, fill := x(s.from)+4, "white"
		if x(s.to)-x(s.from) < 8*float64(len(s.label))+8 {
			lx, fill = max(x(s.to), x(s.from)+1)+4, "#2e7d32"
		}
		fmt.Fprintf(&b, `<text class="term-label" x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", lx, y(s.identity)+25, fill, html.EscapeString(s.label))
	}
	for _, m := range marks {
		color := map[string]string{"SIGKILL": "#c62828", "SIGTERM": "#ef6c00"}[m.what]
		if color == "" {
			color = "#1565c0"
		}
		fmt.Fprintf(&b, `<line class="mark" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n",
			x(m.at), x(m.at), y(m.identity)+4, y(m.identity)+36, color)
		fmt.Fprintf(&b, `<text class="mark-label" x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", x(m.at)+3, y(m.identity)+48, color, html.EscapeString(m.what))
	}
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, width-right, axisY, axisY)
	for s := 0.0; s <= total; s += tickEvery(total) {
		tx := left + (width-left-right)*s/total
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/><text x="%.1f" y="%.1f" text-anchor="middle">%.0f s</text>`+"\n",
			tx, tx, axisY, axisY+5, tx, axisY+20, s)
	}
	for i, g := range gaps {
		gy := axisY + 40 + 22*float64(i)
		fmt.Fprintf(&b, `<line class="gap" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#6a1b9a" stroke-width="2"/>`+"\n", x(g.from), x(g.to), gy, gy)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#6a1b9a" stroke-dasharray="3,3"/>`+"\n", x(g.from), x(g.from), top, gy)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#6a1b9a" stroke-dasharray="3,3"/>`+"\n", x(g.to), x(g.to), top, gy)
		fmt.Fprintf(&b, `<text class="gap-label" x="%.1f" y="%.1f" fill="#6a1b9a">%s</text>`+"\n", x(g.to)+6, gy+4, html.EscapeString(g.label))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// tickEvery is a round tick interval giving about ten ticks over total
// seconds.
func tickEvery(total float64) float64 {
	for _, t := range []float64{1, 2, 5, 10, 20, 30, 60} {
		if total/t <= 12 {
			return t
		}
	}
	return 120
}
