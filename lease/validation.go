package lease

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// JitterFactor is client-go's leader-election jitter: the retry period is
// stretched by up to this factor, so the renew deadline must exceed it.
const JitterFactor = 1.2

// maxIdentityLen bounds identities so that a Lease stays far below etcd's
// object size limit.
const maxIdentityLen = 1024

// Timing is the election timing, client-go's LeaseDuration, RenewDeadline
// and RetryPeriod.
type Timing struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// clipBudget bounds the quoted argument in an error message. Quoting can
// quadruple a byte (\x00), so the budget is on the quoted text, not the input.
const clipBudget = 64

// clip quotes a bad argument for an error message, cut so that its quoted
// form stays within clipBudget bytes: a megabyte of garbage, or 64 bytes of
// control characters, must not come back in full.
func clip(s string) string {
	if len(s) <= clipBudget { // a longer s cannot fit once quoted: do not quote all of it
		if q := strconv.Quote(s); len(q) <= clipBudget+2 {
			return q
		}
	}
	keep := min(len(s), clipBudget)
	for keep > 0 && len(strconv.Quote(s[:keep])) > clipBudget+2 {
		keep--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:keep]), len(s))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// ValidateKey checks a namespace and a Lease name against Kubernetes' rules
// (a DNS-1123 label and a DNS-1123 subdomain).
func ValidateKey(namespace, name string) error {
	if namespace == "" {
		return invalid("namespace: must not be empty")
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return invalid("namespace %s: %s", clip(namespace), errs[0])
	}
	if name == "" {
		return invalid("lease name: must not be empty")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return invalid("lease name %s: %s", clip(name), errs[0])
	}
	return nil
}

// ValidateIdentity checks a candidate identity: non-empty, printable, and of
// bounded length.
func ValidateIdentity(identity string) error {
	if identity == "" {
		return invalid("identity: must not be empty")
	}
	if len(identity) > maxIdentityLen {
		return invalid("identity: must be at most %d bytes, got %d", maxIdentityLen, len(identity))
	}
	for i, r := range identity {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return invalid("identity: must not contain control characters or invalid UTF-8 (byte %d)", i)
		}
	}
	return nil
}

// TimingFromSeconds builds a Timing from whole seconds, refusing negative values.
func TimingFromSeconds(leaseDuration, renewDeadline, retryPeriod int) (Timing, error) {
	ms := func(name string, s int) (int64, error) {
		if s > math.MaxInt64/1000 {
			return 0, invalid("%s: %d s overflows a duration", name, s)
		}
		return int64(s) * 1000, nil
	}
	d, err := ms("lease duration", leaseDuration)
	if err != nil {
		return Timing{}, err
	}
	r, err := ms("renew deadline", renewDeadline)
	if err != nil {
		return Timing{}, err
	}
	p, err := ms("retry period", retryPeriod)
	if err != nil {
		return Timing{}, err
	}
	return TimingFromMillis(d, r, p)
}

// TimingFromMillis builds a Timing from milliseconds, refusing values that
// would overflow a time.Duration.
func TimingFromMillis(leaseDuration, renewDeadline, retryPeriod int64) (Timing, error) {
	const maxMs = math.MaxInt64 / int64(time.Millisecond)
	fields := []struct {
		name string
		ms   int64
	}{{"lease duration", leaseDuration}, {"renew deadline", renewDeadline}, {"retry period", retryPeriod}}
	for _, f := range fields {
		if f.ms <= 0 {
			return Timing{}, invalid("%s: must be > 0, got %d ms", f.name, f.ms)
		}
		if f.ms > maxMs {
			return Timing{}, invalid("%s: %d ms overflows a duration", f.name, f.ms)
		}
	}
	t := Timing{
		LeaseDuration: time.Duration(leaseDuration) * time.Millisecond,
		RenewDeadline: time.Duration(renewDeadline) * time.Millisecond,
		RetryPeriod:   time.Duration(retryPeriod) * time.Millisecond,
	}
	return t, t.Validate()
}

// maxLeaseDuration keeps LeaseDurationSeconds within the Lease's int32 field.
const maxLeaseDuration = math.MaxInt32 * time.Second

// Validate applies client-go's rules plus the Lease's own: the lease duration
// is stored in whole seconds, so it must be a whole number of seconds >= 1 s.
func (t Timing) Validate() error {
	switch {
	case t.RetryPeriod <= 0:
		return invalid("retry period: must be > 0, got %v", t.RetryPeriod)
	case t.LeaseDuration < time.Second:
		return invalid("lease duration: must be >= 1s (the Lease stores whole seconds), got %v", t.LeaseDuration)
	case t.LeaseDuration%time.Second != 0:
		return invalid("lease duration: must be a whole number of seconds (the Lease stores seconds), got %v", t.LeaseDuration)
	case t.LeaseDuration > maxLeaseDuration:
		return invalid("lease duration: must be at most %v, got %v", maxLeaseDuration, t.LeaseDuration)
	case t.LeaseDuration <= t.RenewDeadline:
		return invalid("lease duration (%v) must be greater than renew deadline (%v)", t.LeaseDuration, t.RenewDeadline)
	case float64(t.RenewDeadline) <= JitterFactor*float64(t.RetryPeriod):
		return invalid("renew deadline (%v) must be greater than %.1f x retry period (%v)", t.RenewDeadline, JitterFactor, t.RetryPeriod)
	}
	return nil
}

// leaseDurationSeconds is the value written to the Lease.
func (t Timing) leaseDurationSeconds() int32 { return int32(t.LeaseDuration / time.Second) }
