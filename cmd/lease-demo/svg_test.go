package main

import (
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// svgText is every element's class and text of an SVG document, which
// must be well formed.
func svgText(t *testing.T, doc string) (classes map[string]int, texts []string) {
	t.Helper()
	classes = map[string]int{}
	d := xml.NewDecoder(strings.NewReader(doc))
	var inText bool
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return classes, texts
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					classes[a.Value]++
				}
			}
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
}

// A run as the demo sees one: three replicas, the first elected, killed,
// the second elected after a fail-over, restarted, the second SIGTERMed
// and the third elected after the hand-off.
func TestTheTimelinePictureShowsTheRunsTermsSignalsAndGaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	events := []event{
		{at(100), "replica-0", "started", ""}, {at(110), "replica-1", "started", ""}, {at(120), "replica-2", "started", ""},
		{at(400), "replica-0", "elected", "token=1"},
		{at(9410), "replica-1", "elected", "token=2"},
		{at(9500), "replica-0", "started", ""},
		{at(12500), "replica-1", "released", "token=2 reason=SIGTERM"},
		{at(12512), "replica-2", "elected", "token=3"},
		{at(12600), "replica-1", "exit", ""},
	}
	marks := []mark{{at(3400), "replica-0", "SIGKILL"}, {at(9450), "replica-0", "restarted"}, {at(12490), "replica-1", "SIGTERM"}}
	gaps := []gap{{at(3400), at(9410), "fail-over 6010 ms"}, {at(12490), at(12512), "hand-off 22 ms"}}
	var b strings.Builder
	if err := writeSVG(&b, t0, at(14000), events, marks, gaps, "k8s-lease demo"); err != nil {
		t.Fatal(err)
	}
	classes, texts := svgText(t, b.String())
	if classes["term"] != 3 || classes["candidacy"] != 4 || classes["mark"] != 3 || classes["gap"] != 2 {
		t.Errorf("terms %d, candidacies %d, marks %d, gaps %d; want 3, 4, 3, 2", classes["term"], classes["candidacy"], classes["mark"], classes["gap"])
	}
	for _, want := range []string{"token 1", "token 2", "token 3", "SIGKILL", "SIGTERM", "restarted", "fail-over 6010 ms", "hand-off 22 ms", "replica-0", "replica-2"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in the picture (texts: %q)", want, texts)
		}
	}
	candidacies, terms := rows(events, marks, at(14000))
	if got := terms[0]; got.identity != "replica-0" || !got.to.Equal(at(3400)) {
		t.Errorf("the killed leader's term: %+v; want it to end at the SIGKILL", got)
	}
	if len(candidacies) != 4 {
		t.Errorf("%d candidacies; want 4 (the restarted replica's two)", len(candidacies))
	}
}

func TestATimelineOfNoTimeIsRefused(t *testing.T) {
	t0 := time.Unix(1000, 0)
	if err := writeSVG(io.Discard, t0, t0, nil, nil, nil, "x"); err == nil {
		t.Fatal("a run of no time drawn")
	}
}
