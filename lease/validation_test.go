package lease

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		ns, name string
		wantErr  string // substring; "" means valid
	}{
		{"default", "my-lease", ""},
		{"default", "a.b.c", ""},
		{"", "x", "namespace: must not be empty"},
		{"Default", "x", `namespace "Default"`},
		{"with.dot", "x", `namespace "with.dot"`},
		{strings.Repeat("n", 64), "x", "namespace"},
		{"default", "", "lease name: must not be empty"},
		{"default", "UPPER", `lease name "UPPER"`},
		{"default", "-lead", `lease name "-lead"`},
		{"default", strings.Repeat("a", 254), "lease name"},
		{"default", "a/b", `lease name "a/b"`},
	}
	for _, tt := range tests {
		err := ValidateKey(tt.ns, tt.name)
		checkValidation(t, "ValidateKey("+tt.ns+", "+tt.name+")", err, tt.wantErr)
	}
}

func TestValidateIdentity(t *testing.T) {
	tests := []struct {
		identity, wantErr string
	}{
		{"pod-0_10.0.0.1", ""},
		{"ünïcode ok", ""},
		{"", "identity: must not be empty"},
		{"tab\there", "control characters"},
		{"nl\n", "control characters"},
		{"bad\xffutf8", "invalid UTF-8"},
		{strings.Repeat("x", validate.MaxIdentityLen+1), "at most 1024 bytes"},
		// The hand-off record's holder names: reserved for the library.
		{"k8s-lease.io/hand-off:b", `must not start with "k8s-lease.io/hand-off:"`},
		{"k8s-lease.io/hand-off", ""},
	}
	for _, tt := range tests {
		checkValidation(t, "ValidateIdentity("+tt.identity+")", ValidateIdentity(tt.identity), tt.wantErr)
	}
}

func TestTimingFromMillis(t *testing.T) {
	tests := []struct {
		name           string
		lease, renew   int64
		retry          int64
		wantErr        string
		wantDurSeconds int32
	}{
		{"client-go defaults", 15000, 10000, 2000, "", 15},
		{"fast", 1000, 500, 100, "", 1},
		{"zero retry", 5000, 4000, 0, "retry period: must be > 0", 0},
		{"negative lease", -1, 4000, 1000, "lease duration: must be > 0", 0},
		{"zero renew", 5000, 0, 1000, "renew deadline: must be > 0", 0},
		{"sub-second lease", 900, 500, 100, "lease duration: must be >= 1s", 0},
		{"fractional lease", 1500, 1000, 100, "whole number of seconds", 0},
		{"lease not above renew", 5000, 5000, 1000, "must be greater than renew deadline", 0},
		{"renew not above jitter", 5000, 1200, 1000, "must be greater than 1.2 x retry period", 0},
		{"overflow", math.MaxInt64, 1000, 100, "overflows a duration", 0},
		{"too long for int32 seconds", (math.MaxInt32 + 1) * 1000, 1000, 100, "must be at most", 0},
	}
	for _, tt := range tests {
		tm, err := TimingFromMillis(tt.lease, tt.renew, tt.retry)
		checkValidation(t, tt.name, err, tt.wantErr)
		if err == nil && tm.leaseDurationSeconds() != tt.wantDurSeconds {
			t.Errorf("%s: leaseDurationSeconds = %d, want %d", tt.name, tm.leaseDurationSeconds(), tt.wantDurSeconds)
		}
	}
}

func TestTimingFromSeconds(t *testing.T) {
	if _, err := TimingFromSeconds(15, 10, 2); err != nil {
		t.Fatal(err)
	}
	checkValidation(t, "10/10/2", func() error { _, err := TimingFromSeconds(10, 10, 2); return err }(), "greater than renew deadline")
	checkValidation(t, "negative", func() error { _, err := TimingFromSeconds(-5, 4, 1); return err }(), "must be > 0")
	tm, _ := TimingFromSeconds(5, 4, 1)
	if tm.LeaseDuration != 5*time.Second || tm.RenewDeadline != 4*time.Second || tm.RetryPeriod != time.Second {
		t.Fatalf("TimingFromSeconds(5,4,1) = %+v", tm)
	}
}

func checkValidation(t *testing.T, what string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s: unexpected error %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want error containing %q", what, want)
		return
	}
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %q, want ErrInvalidArgument containing %q", what, err, want)
	}
}

func TestClipBoundsQuotedLength(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"short text comes back whole", "pod-0", `"pod-0"`},
		{"exactly the budget", strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `"`},
		{"long text is cut", strings.Repeat("a", 1000), `"` + strings.Repeat("a", 64) + `"... (1000 bytes)`},
		{"control bytes count quoted", strings.Repeat("\x00", 64), `"` + strings.Repeat(`\x00`, 16) + `"... (64 bytes)`},
		{"a cut rune is escaped, not split", "é" + strings.Repeat("\x01", 40), `"é` + strings.Repeat(`\x01`, 15) + `"... (42 bytes)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := clip(c.in)
			if got != c.want {
				t.Fatalf("clip = %s, want %s", got, c.want)
			}
			if q := strings.TrimSuffix(got, got[strings.LastIndex(got, `"`)+1:]); len(q) > validate.ClipBudget+2 {
				t.Fatalf("quoted part %d bytes > %d", len(q), validate.ClipBudget+2)
			}
		})
	}
}
