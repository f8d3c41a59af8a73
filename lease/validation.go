package lease

import (
	"time"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

// The rules themselves live in internal/validate (fuzzed there, on a small
// build); these are the package's names for them.

// JitterFactor is client-go's leader-election jitter: client-go stretches
// its retry period by up to this factor, so the renew deadline must exceed
// retryPeriod × JitterFactor for a client-go candidate on the same Lease.
// Here it only bounds the timings: renewals move earlier, never later.
const JitterFactor = validate.JitterFactor

// Timing is the election timing, client-go's LeaseDuration, RenewDeadline
// and RetryPeriod.
type Timing struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// clip quotes a bad argument for an error message within a bounded size.
func clip(s string) string { return validate.Clip(s) }

func invalid(format string, args ...any) error { return validate.Invalid(format, args...) }

// ValidateKey checks a namespace and a Lease name against Kubernetes' rules
// (a DNS-1123 label and a DNS-1123 subdomain).
func ValidateKey(namespace, name string) error { return validate.Key(namespace, name) }

// ValidateIdentity checks a candidate identity: non-empty, printable, and of
// bounded length (1024 bytes).
func ValidateIdentity(identity string) error { return validate.Identity(identity) }

// TimingFromSeconds builds a Timing from whole seconds, refusing negative values.
func TimingFromSeconds(leaseDuration, renewDeadline, retryPeriod int) (Timing, error) {
	d, r, p, err := validate.Seconds(leaseDuration, renewDeadline, retryPeriod)
	return Timing{LeaseDuration: d, RenewDeadline: r, RetryPeriod: p}, err
}

// TimingFromMillis builds a Timing from milliseconds, refusing values that
// would overflow a time.Duration.
func TimingFromMillis(leaseDuration, renewDeadline, retryPeriod int64) (Timing, error) {
	d, r, p, err := validate.Millis(leaseDuration, renewDeadline, retryPeriod)
	return Timing{LeaseDuration: d, RenewDeadline: r, RetryPeriod: p}, err
}

// Validate applies client-go's rules plus the Lease's own: the lease duration
// is stored in whole seconds, so it must be a whole number of seconds >= 1 s.
func (t Timing) Validate() error {
	return validate.Durations(t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
}

// leaseDurationSeconds is the value written to the Lease.
func (t Timing) leaseDurationSeconds() int32 { return int32(t.LeaseDuration / time.Second) }

// Key names one Lease.
type Key struct {
	Namespace string
	Name      string
}

func (k Key) String() string { return k.Namespace + "/" + k.Name }
