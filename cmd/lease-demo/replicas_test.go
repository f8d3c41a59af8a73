package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseEvent(t *testing.T) {
	tests := []struct {
		line                 string
		ok                   bool
		identity, name, rest string
	}{
		{"123 replica-0 elected token=2", true, "replica-0", "elected", "token=2"},
		{`9 replica-1 lost token=2 reason="renew deadline exceeded"`, true, "replica-1", "lost", `token=2 reason="renew deadline exceeded"`},
		{"5 replica-2 exit", true, "replica-2", "exit", ""},
		{"garbage", false, "", "", ""},
	}
	for _, tt := range tests {
		ev, ok := parseEvent(tt.line)
		if ok != tt.ok || ev.identity != tt.identity || ev.name != tt.name || ev.detail != tt.rest {
			t.Errorf("parseEvent(%q) = %+v, %v", tt.line, ev, ok)
		}
	}
}

func TestBesideSelf(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	if got := besideSelf(filepath.Base(self)); got != self {
		t.Errorf("besideSelf(own name) = %q, want %q", got, self)
	}
	if got := besideSelf("no-such-program"); got != "" {
		t.Errorf("besideSelf(missing) = %q", got)
	}
}
