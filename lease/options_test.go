package lease

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestElectionOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ElectionOptions
		want string // "" : valid
	}{
		{"none", ElectionOptions{}, ""},
		{"semantic version", ElectionOptions{Version: "v1.4.2", Priority: -3, Policy: PolicyHandOffOnCancel | PolicyYieldToNewer}, ""},
		{"not a version", ElectionOptions{Version: "latest"}, `version "latest"`},
		{"unknown policy flag", ElectionOptions{Policy: 8}, "unknown flags 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate = %v, want an invalid argument naming %s", err, tc.want)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0},
		{"v1.2.3", "1.2.3", 0},
		{"1.10.0", "1.9.9", 1},
		{"1.2.3", "1.2.4", -1},
		{"1.2.3-rc.1", "1.2.3", -1},
		{"1.0.0", "", 1},
		{"", "", 0},
		{"not-a-version", "0.0.1", -1},
	} {
		t.Run(tc.a+" vs "+tc.b, func(t *testing.T) {
			if got := compareVersions(tc.a, tc.b); got != tc.want {
				t.Fatalf("compareVersions = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBestCandidate(t *testing.T) {
	now := time.Unix(10000, 0)
	cs := []Candidate{
		{Identity: "old", Version: "1.0.0", Priority: 9, RenewTime: now},
		{Identity: "new-low", Version: "2.0.0", Priority: 1, RenewTime: now},
		{Identity: "new-high", Version: "2.0.0", Priority: 5, RenewTime: now},
		{Identity: "newest-stale", Version: "3.0.0", RenewTime: now.Add(-candidateTTL - time.Second)},
	}
	for _, tc := range []struct {
		name      string
		exclude   string
		onlyNewer bool
		own       string
		want      string
	}{
		{"newest live, then priority", "", false, "", "new-high"},
		{"never the excluded one", "new-high", false, "", "new-low"},
		{"only newer than own", "", true, "2.0.0", ""},
		{"newer than an old own version", "old", true, "1.0.0", "new-high"},
		{"own version none: any declared is newer", "", true, "", "new-high"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := bestCandidate(cs, tc.exclude, term{}, tc.onlyNewer, tc.own, now)
			if got := map[bool]string{true: c.Identity, false: ""}[ok]; got != tc.want {
				t.Fatalf("best = %q, want %q", got, tc.want)
			}
		})
	}
}

// A record counts as seen alive in a term only on that Lease object: after
// the Lease was re-created, its tokens start again below what a dead
// replica's record says it saw on the old one.
func TestAliveInTermNeedsTheSameLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Candidate
		t    term
		want bool
	}{
		{"saw this term", Candidate{SeenToken: 3, SeenLease: "uid-1"}, term{"uid-1", 3}, true},
		{"saw a later term", Candidate{SeenToken: 4, SeenLease: "uid-1"}, term{"uid-1", 3}, true},
		{"saw only an earlier term", Candidate{SeenToken: 2, SeenLease: "uid-1"}, term{"uid-1", 3}, false},
		{"saw a higher token on a Lease since re-created", Candidate{SeenToken: 50, SeenLease: "uid-old"}, term{"uid-new", 1}, false},
		{"a record of a version that writes neither", Candidate{}, term{"uid-1", 1}, false},
		{"no term asked (a hand-off the host names)", Candidate{}, term{}, true},
	} {
		if got := aliveInTerm(tc.c, tc.t); got != tc.want {
			t.Errorf("%s: aliveInTerm = %v; want %v", tc.name, got, tc.want)
		}
	}
}
