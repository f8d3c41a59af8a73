package main

import (
	"bytes"
	"encoding/xml"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateCommittedPage = flag.Bool("update", false, "rewrite docs/benchmarks.md with page.go's text (its tables kept)")

const committedPage = "../../docs/benchmarks.md"

var (
	runA = runInfo{date: "2026-01-02", machine: "2 cores, 24 GiB (a)", versions: "k8s-lease 0.1.0, client-go v0.37.2, kube-apiserver v1.37.2, go1.26.8", command: "make bench"}
	runB = runInfo{date: "2026-02-03", machine: "4 cores, 8 GiB (b)", versions: "k8s-lease 0.2.0, client-go v0.38.0, kube-apiserver v1.38.0, go1.27.0", command: "make bench BENCH_FLAGS=-only=abi"}
)

// rowsOf is one row per section, with a value of v.
func rowsOf(v float64, sections ...string) []series {
	var rows []series
	for _, s := range sections {
		rows = append(rows, series{Section: s, Name: s + " row", Impl: string(ours), Unit: "ms", Samples: []float64{v}})
	}
	return rows
}

// tableOf is what the page holds between the markers of section.
func tableOf(t *testing.T, page, section string) string {
	t.Helper()
	table, ok := pageTables(page)[section]
	if !ok {
		t.Fatalf("no table of %s in:\n%s", section, page)
	}
	return table
}

func TestPageSectionsAreTheBenchSections(t *testing.T) {
	var names []string
	for _, s := range pageSections {
		if s.title == "" || s.read == "" {
			t.Errorf("section %s has no title or no text", s.name)
		}
		if s.writtenBy == "" {
			names = append(names, s.name)
		}
	}
	if !slices.Equal(names, sectionNames) {
		t.Errorf("page sections %v, bench sections %v", names, sectionNames)
	}
}

func TestNewPage(t *testing.T) {
	page, updated := updatePage("", runA, rowsOf(12.5, "handoff", "scale"))
	if first, _, _ := strings.Cut(page, "\n"); first != pageHeader {
		t.Errorf("first line %q, want %q", first, pageHeader)
	}
	if !slices.Equal(updated, []string{"handoff", "scale"}) {
		t.Errorf("updated %v", updated)
	}
	want := runA.line() + "\n\n" + table(rowsOf(12.5, "handoff")) + pictureLink("handoff")
	if got := tableOf(t, page, "handoff"); got != want {
		t.Errorf("table of handoff:\n%s\nwant:\n%s", got, want)
	}
	if got := tableOf(t, page, "abi"); !strings.HasPrefix(got, "Not measured yet: `make bench BENCH_FLAGS=-only=abi`") {
		t.Errorf("a section never run has %q", got)
	}
	for _, s := range pageSections {
		if !strings.Contains(page, "\n## "+s.title+" (`"+s.name+"`)\n\n"+s.read+"\n") {
			t.Errorf("no heading and text of %s", s.name)
		}
	}
}

func TestSomeSectionsReplaceOnlyTheirTables(t *testing.T) {
	old, _ := updatePage("", runA, rowsOf(1, sectionNames...))
	page, updated := updatePage(old, runB, rowsOf(2, "abi", "user"))
	if !slices.Equal(updated, []string{"abi", "user"}) {
		t.Errorf("updated %v", updated)
	}
	for _, s := range sectionNames {
		got := tableOf(t, page, s)
		want := tableOf(t, old, s)
		if s == "abi" || s == "user" {
			want = sectionTable(runB, rowsOf(2, s))
		}
		if got != want {
			t.Errorf("table of %s:\n%s\nwant:\n%s", s, got, want)
		}
	}
	if again, _ := updatePage(page, runA, nil); again != page {
		t.Errorf("a run without rows changed the page:\n%s", again)
	}
}

// The page's text is page.go's: an edit of the page itself goes at the
// next run, its tables stay.
func TestPageTextIsPageGos(t *testing.T) {
	want, _ := updatePage("", runA, rowsOf(3, "steady"))
	edited := strings.Replace(want, "How to read a table", "How to read a table (edited by hand)", 1)
	edited = strings.Replace(edited, "## Steady-state requests", "## Steady", 1)
	if got, _ := updatePage(edited, runB, nil); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestWritePage(t *testing.T) {
	dir := t.TempDir()
	page, quick := filepath.Join(dir, "docs", "benchmarks.md"), filepath.Join(dir, "build", "quick.md")
	if _, err := writePage(page, page, runA, rowsOf(1, "elected")); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// A -quick run reads the page and writes elsewhere.
	if _, err := writePage(page, quick, runB, rowsOf(2, "abi")); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(page); string(again) != string(written) {
		t.Error("a write to another file changed the page")
	}
	q, err := os.ReadFile(quick)
	if err != nil {
		t.Fatal(err)
	}
	if tableOf(t, string(q), "elected") != tableOf(t, string(written), "elected") ||
		tableOf(t, string(q), "abi") != sectionTable(runB, rowsOf(2, "abi")) {
		t.Errorf("quick page:\n%s", q)
	}
}

func TestRunCommand(t *testing.T) {
	for _, tt := range []struct {
		o    options
		want string
	}{
		{options{}, "make bench"},
		{options{only: "scale"}, "make bench BENCH_FLAGS=-only=scale"},
		{options{quick: true, only: "abi,user"}, "make bench BENCH_FLAGS='-quick -only=abi,user'"},
	} {
		if got := tt.o.command(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.o, got, tt.want)
		}
	}
}

// docs/benchmarks.md is what page.go writes: after an edit of page.go's
// text, `go test ./cmd/lease-bench -run TestCommittedPage -update`
// rewrites it (its tables kept).
func TestCommittedPage(t *testing.T) {
	data, err := os.ReadFile(committedPage)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := updatePage(string(data), runInfo{}, nil)
	if *updateCommittedPage {
		if err := os.WriteFile(committedPage, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if page != string(data) {
		t.Errorf("%s is not page.go's page: run go test ./cmd/lease-bench -run TestCommittedPage -update", committedPage)
	}
	tables := pageTables(page)
	for _, s := range pageSections {
		if table := tables[s.name]; !strings.HasPrefix(table, "Measured ") {
			t.Errorf("%s: no measured table of %s: %q", committedPage, s.name, table)
		}
	}
}

func TestSamples(t *testing.T) {
	if n := (options{}).samples(30, 3); n != 30 {
		t.Errorf("a run: %d, want 30", n)
	}
	if n := (options{quick: true}).samples(30, 3); n != 3 {
		t.Errorf("a -quick run: %d, want 3", n)
	}
}

// A drawn section's table links its picture, written beside the page:
// well-formed SVG with every sample a dot and each p50 labelled as the
// table writes it.
func TestADrawnSectionGetsItsPicture(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "docs", "benchmarks.md")
	rows := []series{
		{Section: "handoff", Name: "graceful hand-off", Impl: string(ours), Unit: "ms", Samples: []float64{9.5, 10.2, 11, 20.4}},
		{Section: "handoff", Name: "graceful hand-off", Impl: string(clientGo), Unit: "ms", Samples: []float64{745, 1616, 3047}},
	}
	if _, err := writePage(page, page, runA, append(rows, rowsOf(1, "elected")...)); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if table := tableOf(t, string(written), "handoff"); !strings.Contains(table, "images/bench-handoff.svg") {
		t.Errorf("the handoff table does not link its picture:\n%s", table)
	}
	if table := tableOf(t, string(written), "elected"); strings.Contains(table, "images/") {
		t.Errorf("an undrawn section links a picture:\n%s", table)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "docs", "images", "bench-handoff.svg"))
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg))
	var dots int
	var labels []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && strings.HasPrefix(a.Value, "sample") {
					dots++
				}
				if a.Name.Local == "class" && a.Value == "p50-label" {
					var text string
					if err := d.DecodeElement(&text, &se); err != nil {
						t.Fatal(err)
					}
					labels = append(labels, text)
				}
			}
		}
	}
	if dots != 7 {
		t.Errorf("%d dots; want every sample (7)", dots)
	}
	for _, want := range []string{"p50 " + num(rows[0].quantile(0.5)), "p50 " + num(rows[1].quantile(0.5))} {
		if !slices.Contains(labels, want) {
			t.Errorf("labels %q lack %q", labels, want)
		}
	}
}
