// Package validate holds the rules the library's arguments must meet, each
// a pure function that names the offending argument in its error. It is
// its own package, with only apimachinery's validation below it, so that
// fuzzing it instruments a small build instead of client-go (make fuzz).
package validate

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalidArgument: an argument broke a rule; nothing was sent. Package
// lease exports the same error.
var ErrInvalidArgument = errors.New("invalid argument")

// JitterFactor is client-go's leader-election jitter: client-go stretches
// its retry period by up to this factor, so the renew deadline must exceed
// retryPeriod × JitterFactor for a client-go candidate on the same Lease.
// Here it only bounds the timings: renewals move earlier, never later.
const JitterFactor = 1.2

// MaxIdentityLen bounds identities so that a Lease stays far below etcd's
// object size limit.
const MaxIdentityLen = 1024

// ClipBudget bounds the quoted argument in an error message. Quoting can
// quadruple a byte (\x00), so the budget is on the quoted text, not the input.
const ClipBudget = 64

// Clip quotes a bad argument for an error message, cut so that its quoted
// form stays within ClipBudget bytes: a megabyte of garbage, or 64 bytes of
// control characters, must not come back in full.
func Clip(s string) string {
	if len(s) <= ClipBudget { // a longer s cannot fit once quoted: do not quote all of it
		if q := strconv.Quote(s); len(q) <= ClipBudget+2 {
			return q
		}
	}
	keep := min(len(s), ClipBudget)
	for keep > 0 && len(strconv.Quote(s[:keep])) > ClipBudget+2 {
		keep--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:keep]), len(s))
}

// Invalid is an ErrInvalidArgument with its detail.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Key checks a namespace and a Lease name against Kubernetes' rules (a
// DNS-1123 label and a DNS-1123 subdomain).
func Key(namespace, name string) error {
	if namespace == "" {
		return Invalid("namespace: must not be empty")
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return Invalid("namespace %s: %s", Clip(namespace), errs[0])
	}
	if name == "" {
		return Invalid("lease name: must not be empty")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return Invalid("lease name %s: %s", Clip(name), errs[0])
	}
	return nil
}

// Identity checks a candidate identity: non-empty, printable, and of
// bounded length.
func Identity(identity string) error {
	if identity == "" {
		return Invalid("identity: must not be empty")
	}
	if len(identity) > MaxIdentityLen {
		return Invalid("identity: must be at most %d bytes, got %d", MaxIdentityLen, len(identity))
	}
	for i, r := range identity {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return Invalid("identity: must not contain control characters or invalid UTF-8 (byte %d)", i)
		}
	}
	if strings.HasPrefix(identity, HandOffHolderPrefix) {
		return Invalid("identity: must not start with %q (the holder of a hand-off record)", HandOffHolderPrefix)
	}
	return nil
}

// HandOffHolderPrefix begins the holder name of a hand-off record (see
// package lease): no candidate of ours may have such an identity.
const HandOffHolderPrefix = "k8s-lease.io/hand-off:"

// Seconds converts an election timing given in whole seconds, refusing
// negative values and overflow, and checks it as Durations does.
func Seconds(leaseDuration, renewDeadline, retryPeriod int) (lease, renew, retry time.Duration, err error) {
	ms := func(name string, s int) (int64, error) {
		if s < 0 { // checked here: a large negative s wraps around below
			return 0, Invalid("%s: must be > 0, got %d s", name, s)
		}
		if s > math.MaxInt64/1000 {
			return 0, Invalid("%s: %d s overflows a duration", name, s)
		}
		return int64(s) * 1000, nil
	}
	var d, r, p int64
	if d, err = ms("lease duration", leaseDuration); err != nil {
		return 0, 0, 0, err
	}
	if r, err = ms("renew deadline", renewDeadline); err != nil {
		return 0, 0, 0, err
	}
	if p, err = ms("retry period", retryPeriod); err != nil {
		return 0, 0, 0, err
	}
	return Millis(d, r, p)
}

// Millis converts an election timing given in milliseconds, refusing
// values that would overflow a time.Duration, and checks it as Durations
// does.
func Millis(leaseDuration, renewDeadline, retryPeriod int64) (lease, renew, retry time.Duration, err error) {
	const maxMs = math.MaxInt64 / int64(time.Millisecond)
	fields := []struct {
		name string
		ms   int64
	}{{"lease duration", leaseDuration}, {"renew deadline", renewDeadline}, {"retry period", retryPeriod}}
	for _, f := range fields {
		if f.ms <= 0 {
			return 0, 0, 0, Invalid("%s: must be > 0, got %d ms", f.name, f.ms)
		}
		if f.ms > maxMs {
			return 0, 0, 0, Invalid("%s: %d ms overflows a duration", f.name, f.ms)
		}
	}
	lease = time.Duration(leaseDuration) * time.Millisecond
	renew = time.Duration(renewDeadline) * time.Millisecond
	retry = time.Duration(retryPeriod) * time.Millisecond
	return lease, renew, retry, Durations(lease, renew, retry)
}

// MaxLeaseDuration keeps LeaseDurationSeconds within the Lease's int32 field.
const MaxLeaseDuration = math.MaxInt32 * time.Second

// Durations applies client-go's rules to an election timing plus the
// Lease's own: the lease duration is stored in whole seconds, so it must be
// a whole number of seconds >= 1 s.
func Durations(lease, renew, retry time.Duration) error {
	switch {
	case retry <= 0:
		return Invalid("retry period: must be > 0, got %v", retry)
	case lease < time.Second:
		return Invalid("lease duration: must be >= 1s (the Lease stores whole seconds), got %v", lease)
	case lease%time.Second != 0:
		return Invalid("lease duration: must be a whole number of seconds (the Lease stores seconds), got %v", lease)
	case lease > MaxLeaseDuration:
		return Invalid("lease duration: must be at most %v, got %v", MaxLeaseDuration, lease)
	case lease <= renew:
		return Invalid("lease duration (%v) must be greater than renew deadline (%v)", lease, renew)
	case float64(renew) <= JitterFactor*float64(retry):
		return Invalid("renew deadline (%v) must be greater than %.1f x retry period (%v)", renew, JitterFactor, retry)
	}
	return nil
}

// PodLabel checks the Pod and label key a label is set on or removed from.
func PodLabel(ns, pod, key string) error {
	if errs := validation.IsDNS1123Label(ns); ns == "" || len(errs) > 0 {
		return Invalid("namespace %s: must be a DNS-1123 label", Clip(ns))
	}
	if errs := validation.IsDNS1123Subdomain(pod); pod == "" || len(errs) > 0 {
		return Invalid("pod name %s: must be a DNS-1123 subdomain", Clip(pod))
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return Invalid("label key %s: %s", Clip(key), errs[0])
	}
	return nil
}

// LabelValue checks a label's value.
func LabelValue(value string) error {
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return Invalid("label value %s: %s", Clip(value), errs[0])
	}
	return nil
}

// LogLevel checks a log level: 0 (errors) to highest.
func LogLevel(level, highest int) error {
	if level < 0 || level > highest {
		return Invalid("log level: must be 0..%d, got %d", highest, level)
	}
	return nil
}

// Endpoint checks a leader's published endpoint: service, the name of a
// Service (a DNS-1035 label: lowercase alphanumerics and '-', starting with
// a letter, at most 63 characters); address, an IPv4 address in dotted
// decimal or an IPv6 address; port, 1..65535.
//
// The address must be one an EndpointSlice may list and a client can reach:
// no zone (fe80::1%eth0), not unspecified (0.0.0.0, ::), not multicast, and,
// as the API server refuses them in a slice, not loopback (127.0.0.0/8,
// ::1) nor link-local (169.254.0.0/16, fe80::/10). An IPv4-mapped IPv6
// address (::ffff:10.0.0.1) is refused, not normalized: written so it is an
// IPv4 endpoint in an IPv6 slice, which an IPv4-only node cannot route; the
// caller writes 10.0.0.1. An accepted address may be in any form netip
// reads (2001:DB8::1); the slice lists its canonical form (netip's String).
func Endpoint(service, address string, port int) error {
	if err := Service(service); err != nil {
		return err
	}
	if _, err := EndpointAddress(address); err != nil {
		return err
	}
	if port < 1 || port > math.MaxUint16 {
		return Invalid("port: must be 1..65535, got %d", port)
	}
	return nil
}

// Service checks the name of a Service: a DNS-1035 label.
func Service(service string) error {
	if service == "" {
		return Invalid("service: must not be empty")
	}
	if errs := validation.IsDNS1035Label(service); len(errs) > 0 {
		return Invalid("service %s: must be a Service name (DNS-1035 label): %s", Clip(service), errs[0])
	}
	return nil
}

// EndpointAddress parses an endpoint's address under Endpoint's rules.
func EndpointAddress(address string) (netip.Addr, error) {
	if address == "" {
		return netip.Addr{}, Invalid("address: must not be empty")
	}
	a, err := netip.ParseAddr(address)
	if err != nil {
		return netip.Addr{}, Invalid("address %s: must be an IPv4 or IPv6 address", Clip(address))
	}
	var rule string
	switch {
	case a.Zone() != "":
		rule = "must not have a zone"
	case a.Is4In6():
		rule = "must not be an IPv4-mapped IPv6 address (write the IPv4 address)"
	case a.IsUnspecified():
		rule = "must not be unspecified"
	case a.IsMulticast():
		rule = "must not be a multicast address"
	case a.IsLoopback():
		rule = "must not be a loopback address"
	case a.IsLinkLocalUnicast():
		rule = "must not be a link-local address"
	default:
		return a, nil
	}
	return netip.Addr{}, Invalid("address %s: %s", Clip(address), rule)
}

// AddressType is the EndpointSlice addressType of an address Endpoint
// accepts: "IPv4" or "IPv6"; "" for what is not an IP address.
func AddressType(address string) string {
	a, err := netip.ParseAddr(address)
	switch {
	case err != nil:
		return ""
	case a.Is4():
		return "IPv4"
	default:
		return "IPv6"
	}
}
