package validate

import (
	"errors"
	"math"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// The fuzz targets compare each rule with an oracle written from the rules
// themselves (not from the rule's code), and require every refusal to be an
// ErrInvalidArgument whose message names the argument. `make fuzz` (or `go
// test -fuzz=FuzzX ./lease/internal/validate`) explores; the corpus in
// testdata/fuzz runs with every `go test`.

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	labelValue   = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	qualifiedKey = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

func isLabel(s string) bool     { return len(s) <= 63 && dnsLabel.MatchString(s) }
func isSubdomain(s string) bool { return len(s) <= 253 && dnsSubdomain.MatchString(s) }

func isLabelKey(s string) bool {
	prefix, name, hasPrefix := strings.Cut(s, "/")
	if !hasPrefix {
		name = prefix
	} else if prefix == "" || !isSubdomain(prefix) || strings.Contains(name, "/") {
		return false
	}
	return len(name) <= 63 && qualifiedKey.MatchString(name)
}

// refused checks the shape of a refusal: ErrInvalidArgument, and a message
// naming one of the arguments.
func refused(t *testing.T, err error, names ...string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("refusal %v is not ErrInvalidArgument", err)
	}
	if len(err.Error()) > 512 {
		t.Fatalf("refusal of %d bytes: a bad argument must not come back in full", len(err.Error()))
	}
	for _, n := range names {
		if strings.Contains(err.Error(), n) {
			return
		}
	}
	t.Fatalf("refusal %q names none of %q", err, names)
}

func FuzzKey(f *testing.F) {
	for _, s := range [][2]string{{"default", "lease"}, {"", "x"}, {"a", "a.b"}, {"A", "b"}, {"ns", "-x"}, {"ns", "x..y"}, {strings.Repeat("a", 63), strings.Repeat("b", 253)}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ns, name string) {
		err := Key(ns, name)
		want := isLabel(ns) && isSubdomain(name)
		if (err == nil) != want {
			t.Fatalf("Key(%q, %q) = %v, oracle says valid=%v", ns, name, err, want)
		}
		if err != nil {
			refused(t, err, "namespace", "lease name")
		}
	})
}

func FuzzIdentity(f *testing.F) {
	for _, s := range []string{"pod-0", "", "a\nb", "\xff", "ünï", "\ufffd", strings.Repeat("x", 1025), "tab\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := Identity(id)
		want := id != "" && len(id) <= 1024 && utf8.ValidString(id) &&
			strings.IndexFunc(id, func(r rune) bool { return unicode.IsControl(r) || r == utf8.RuneError }) < 0
		if (err == nil) != want {
			t.Fatalf("Identity(%q) = %v, oracle says valid=%v", id, err, want)
		}
		if err != nil {
			refused(t, err, "identity")
		}
	})
}

func FuzzMillis(f *testing.F) {
	f.Add(int64(15000), int64(10000), int64(2000))
	f.Add(int64(1000), int64(999), int64(800))
	f.Add(int64(1500), int64(1000), int64(100))
	f.Add(int64(-1), int64(0), int64(math.MaxInt64))
	f.Add(int64(math.MaxInt64), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, d, r, p int64) {
		lease, renew, retry, err := Millis(d, r, p)
		const maxMs = math.MaxInt32 * 1000
		want := p > 0 && r > 0 && d >= 1000 && d%1000 == 0 && d <= maxMs && d > r && float64(r) > 1.2*float64(p) &&
			r <= math.MaxInt64/int64(time.Millisecond) && p <= math.MaxInt64/int64(time.Millisecond)
		if (err == nil) != want {
			t.Fatalf("Millis(%d, %d, %d) = %v, oracle says valid=%v", d, r, p, err, want)
		}
		if err != nil {
			refused(t, err, "lease duration", "renew deadline", "retry period")
			return
		}
		if lease != time.Duration(d)*time.Millisecond || renew != time.Duration(r)*time.Millisecond ||
			retry != time.Duration(p)*time.Millisecond {
			t.Fatalf("Millis(%d, %d, %d) = %v, %v, %v: values changed", d, r, p, lease, renew, retry)
		}
	})
}

func FuzzSeconds(f *testing.F) {
	f.Add(15, 10, 2)
	f.Add(2, 1, 0)
	f.Add(math.MaxInt64/1000+1, 1, 1)
	f.Add(math.MaxInt32, math.MaxInt32-1, 1)
	f.Fuzz(func(t *testing.T, d, r, p int) {
		lease, renew, retry, err := Seconds(d, r, p)
		if err != nil {
			refused(t, err, "lease duration", "renew deadline", "retry period")
			return
		}
		// Accepted values are exactly what was asked for: no wrap-around.
		if lease != time.Duration(d)*time.Second || lease/time.Second != time.Duration(d) ||
			renew/time.Second != time.Duration(r) || retry/time.Second != time.Duration(p) {
			t.Fatalf("Seconds(%d, %d, %d) = %v, %v, %v", d, r, p, lease, renew, retry)
		}
		if Durations(lease, renew, retry) != nil {
			t.Fatalf("accepted timing %v, %v, %v does not validate", lease, renew, retry)
		}
	})
}

func FuzzPodLabelArguments(f *testing.F) {
	f.Add("default", "pod-0", "k8s-lease.io/leader", "true")
	f.Add("ns", "p", "a/b/c", "")
	f.Add("ns", "p", "/x", "-bad")
	f.Add("NS", "p", "x", strings.Repeat("v", 64))
	// Control bytes quote to four bytes each: CI found a 513-byte refusal here.
	f.Add("ns", "p", strings.Repeat("\x00", 63), strings.Repeat("\x7f", 63))
	f.Fuzz(func(t *testing.T, ns, pod, key, value string) {
		err := PodLabel(ns, pod, key)
		want := isLabel(ns) && isSubdomain(pod) && isLabelKey(key)
		if (err == nil) != want {
			t.Fatalf("PodLabel(%q, %q, %q) = %v, oracle says valid=%v", ns, pod, key, err, want)
		}
		if err != nil {
			refused(t, err, "namespace", "pod name", "label key")
		}
		verr := LabelValue(value)
		if vwant := len(value) <= 63 && labelValue.MatchString(value); (verr == nil) != vwant {
			t.Fatalf("LabelValue(%q) = %v, oracle says valid=%v", value, verr, vwant)
		}
		if verr != nil {
			refused(t, verr, "label value")
		}
	})
}

// The highest level is package lease's (maxLevel); the rule is the range.
const highestLevel = 12

func FuzzLogLevel(f *testing.F) {
	for _, l := range []int{-1, 0, 3, highestLevel, highestLevel + 1, math.MinInt32, math.MaxInt} {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, l int) {
		err := LogLevel(l, highestLevel)
		if (err == nil) != (l >= 0 && l <= highestLevel) {
			t.Fatalf("LogLevel(%d) = %v", l, err)
		}
		if err != nil {
			refused(t, err, "log level")
		}
	})
}

var serviceName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// endpointAddressOK is Endpoint's address rule on net.IP's reading (no
// zones there): IPv4-mapped is a 16-byte form written with a colon.
func endpointAddressOK(s string) bool {
	ip := net.ParseIP(s)
	return ip != nil && !(strings.Contains(s, ":") && ip.To4() != nil) &&
		!ip.IsUnspecified() && !ip.IsMulticast() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast()
}

func FuzzEndpoint(f *testing.F) {
	for _, s := range []struct {
		service, address string
		port             int
	}{
		{"db", "10.0.0.1", 5432}, {"db-primary", "2001:db8::1", 1}, {"a", "2001:DB8:0:0::0:1", 65535},
		{"", "10.0.0.1", 80}, {"1db", "10.0.0.1", 80}, {"db-", "10.0.0.1", 80}, {"Db", "10.0.0.1", 80},
		{strings.Repeat("a", 64), "10.0.0.1", 80}, {"db", "", 80}, {"db", "010.0.0.1", 80}, {"db", "10.0.0.1:80", 80},
		{"db", "fe80::1%eth0", 80}, {"db", "::ffff:10.0.0.1", 80}, {"db", "0.0.0.0", 80}, {"db", "::", 80},
		{"db", "224.0.0.1", 80}, {"db", "ff02::1", 80}, {"db", "127.0.0.1", 80}, {"db", "::1", 80},
		{"db", "169.254.1.1", 80}, {"db", "10.0.0.1", 0}, {"db", "10.0.0.1", 65536}, {"db", "10.0.0.1", -1},
		{"db", "1.2.3.4\n", 80}, {"db", "::1.2.3.4", 80},
	} {
		f.Add(s.service, s.address, s.port)
	}
	f.Fuzz(func(t *testing.T, service, address string, port int) {
		err := Endpoint(service, address, port)
		want := len(service) <= 63 && serviceName.MatchString(service) && endpointAddressOK(address) && port >= 1 && port <= 65535
		if (err == nil) != want {
			t.Fatalf("Endpoint(%q, %q, %d) = %v, oracle says valid=%v", service, address, port, err, want)
		}
		if err != nil {
			refused(t, err, "service", "address", "port")
			return
		}
		// An accepted address round-trips: its canonical form is accepted,
		// is the same address and of the same type.
		a, aerr := EndpointAddress(address)
		if aerr != nil {
			t.Fatalf("EndpointAddress(%q) = %v, Endpoint accepted it", address, aerr)
		}
		canonical := a.String()
		if err := Endpoint(service, canonical, port); err != nil {
			t.Fatalf("canonical form %q of %q refused: %v", canonical, address, err)
		}
		if !net.ParseIP(canonical).Equal(net.ParseIP(address)) {
			t.Fatalf("canonical form %q of %q is another address", canonical, address)
		}
		wantType := "IPv4"
		if strings.Contains(address, ":") {
			wantType = "IPv6"
		}
		if got, gotCanonical := AddressType(address), AddressType(canonical); got != wantType || gotCanonical != wantType {
			t.Fatalf("AddressType(%q) = %q, of %q %q, want %q", address, got, canonical, gotCanonical, wantType)
		}
	})
}
