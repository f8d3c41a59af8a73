package history

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		name  string
		log   string
		terms int
		want  []string // substrings of the violations, in order; none: clean
	}{
		{
			name: "clean hand-offs",
			log: `10 1 elected 1
11 1 on 1
20 1 off 1
21 1 released 1
30 2 on 2
31 2 elected 2
40 2 off 2
41 2 lost 2 renew deadline exceeded`,
			terms: 2,
		},
		{
			name: "overlap between two processes",
			log: `10 1 elected 1
30 1 released 1
25 2 elected 2
40 2 released 2`,
			terms: 2,
			want:  []string{"overlap: pid 1 (token 1, ended by released) and pid 2 (token 2) led together for 5ns"},
		},
		{
			name: "killed leader ends at its kill time",
			log: `10 1 elected 1
20 1 killed 0
21 2 elected 2`,
			terms: 2,
		},
		{
			name: "killed too late: the standby took over first",
			log: `10 1 elected 1
25 1 killed 0
21 2 elected 2`,
			terms: 2,
			want:  []string{"overlap: pid 1"},
		},
		{
			name: "a leader that never ends overlaps everyone after it",
			log: `10 1 elected 1
21 2 elected 2
30 2 released 2`,
			terms: 2,
			want:  []string{"until the end of the history"},
		},
		{
			name: "token must rise",
			log: `10 1 elected 3
20 1 released 3
30 2 elected 3
40 2 released 3`,
			terms: 2,
			want:  []string{"token did not rise: pid 1 had 3, then pid 2 got 3"},
		},
		{
			name: "token below 1",
			log: `10 1 elected 0
20 1 released 0`,
			terms: 1,
			want:  []string{"led with token 0"},
		},
		{
			name: "IsLeader after the term ended",
			log: `10 1 elected 1
20 1 lost 1 lease taken by another holder
27 1 off 1 25`,
			terms: 1,
			want:  []string{"pid 1 (token 1) reported IsLeader = 1 in a call begun 5ns after it logged lost"},
		},
		{
			name: "an IsLeader call straddling the loss is no violation",
			log: `10 1 elected 1
20 1 lost 1 renew deadline exceeded
21 1 off 1 19`,
			terms: 1,
		},
		{
			name: "a late IsLeader also overlaps the next leader",
			log: `10 1 elected 1
20 1 lost 1
22 2 elected 2
27 1 off 1
30 2 released 2`,
			terms: 2,
			want:  []string{"reported IsLeader = 1", "overlap: pid 1"},
		},
		{
			name: "same process re-elected with a new token is a new term",
			log: `10 1 elected 1
15 1 lost 1
16 1 on 2
20 1 released 2`,
			terms: 2,
		},
		{
			name: "a lost candidacy that never led is no term",
			log: `10 1 lost 0 forbidden
20 2 elected 1`,
			terms: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events, err := Parse(strings.NewReader(tc.log))
			if err != nil {
				t.Fatal(err)
			}
			r := Check(events)
			if len(r.Terms) != tc.terms {
				t.Errorf("terms = %d, want %d: %+v", len(r.Terms), tc.terms, r.Terms)
			}
			if len(r.Violations) != len(tc.want) {
				t.Fatalf("violations = %q, want %d matching %q", r.Violations, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(r.Violations[i], w) {
					t.Errorf("violation %d = %q, want it to contain %q", i, r.Violations[i], w)
				}
			}
			if r.OK() != (len(tc.want) == 0) {
				t.Errorf("OK() = %v with %d violations", r.OK(), len(r.Violations))
			}
		})
	}
}

func TestParseRejectsMalformedLines(t *testing.T) {
	for _, line := range []string{
		"10 1 elected",
		"x 1 elected 1",
		"10 y elected 1",
		"10 1 elected z",
		"10 1 crowned 1",
	} {
		if _, err := Parse(strings.NewReader("1 1 start 0\n" + line + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: err = %v, want an error naming line 2", line, err)
		}
	}
}

func TestLeaderChangesAndReasons(t *testing.T) {
	events, err := Parse(strings.NewReader(`10 1 elected 1
50 1 off 1
51 1 lost 1 renew deadline exceeded
60 2 elected 2
70 2 released 2
71 2 elected 3
80 2 released 3`))
	if err != nil {
		t.Fatal(err)
	}
	r := Check(events)
	if !r.OK() {
		t.Fatal(r.Violations)
	}
	if n := r.LeaderChanges(); n != 1 {
		t.Errorf("LeaderChanges = %d, want 1", n)
	}
	if r.Terms[0].Reason != "renew deadline exceeded" {
		t.Errorf("reason = %q", r.Terms[0].Reason)
	}
}

func TestAppendAndParseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.log")
	now := Now()
	for _, ev := range []Event{{At: now, PID: 7, Kind: Elected, Token: 1}, {At: now + 1, PID: 7, Kind: Lost, Token: 1, Detail: "lease deleted by another writer"}} {
		if err := Append(path, ev); err != nil {
			t.Fatal(err)
		}
	}
	events, err := ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[1].Detail != "lease deleted by another writer" || events[0].At != now {
		t.Fatalf("events = %+v", events)
	}
	if Now() < now {
		t.Fatal("monotonic clock went back")
	}
}
