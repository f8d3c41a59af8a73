package validate

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Seconds refuses what it cannot convert exactly: a negative value large
// enough to wrap around when multiplied by 1000 came back as a valid
// duration (-18446744073709541 s became 10.616 s).
func TestSecondsRefusesWhatWrapsAround(t *testing.T) {
	for _, tc := range []struct {
		name          string
		lease, renew  int
		retry         int
		wantInMessage string
	}{
		{"renew deadline wraps to 10.616 s", 15, -18446744073709541, 2, "renew deadline"},
		{"lease duration, the most negative int", math.MinInt, 10, 2, "lease duration"},
		{"retry period just below the range", 15, 10, math.MinInt64/1000 - 1, "retry period"},
		{"too large", 15, 10, math.MaxInt64/1000 + 1, "retry period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, r, p, err := Seconds(tc.lease, tc.renew, tc.retry)
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Fatalf("Seconds(%d, %d, %d) = %v, %v, %v, %v; want a refusal naming the %s",
					tc.lease, tc.renew, tc.retry, l, r, p, err, tc.wantInMessage)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name, service, address string
		port                   int
		wantType               string // accepted: the address type
		wantInMessage          string // refused: what the message names
	}{
		{"IPv4", "db", "10.0.0.1", 5432, "IPv4", ""},
		{"IPv6", "db-primary", "2001:db8::1", 1, "IPv6", ""},
		{"IPv6 not canonical", "a1", "2001:DB8:0::1", 65535, "IPv6", ""},
		{"IPv4 embedded in IPv6 (not mapped)", "db", "64:ff9b::10.0.0.1", 80, "IPv6", ""},
		{"service empty", "", "10.0.0.1", 80, "", "service: must not be empty"},
		{"service starts with a digit", "1db", "10.0.0.1", 80, "", "service"},
		{"service upper case", "Db", "10.0.0.1", 80, "", "service"},
		{"service with a dot", "db.x", "10.0.0.1", 80, "", "service"},
		{"service of 64 characters", strings.Repeat("a", 64), "10.0.0.1", 80, "", "service"},
		{"address empty", "db", "", 80, "", "address: must not be empty"},
		{"address a name", "db", "db.example.com", 80, "", "must be an IPv4 or IPv6 address"},
		{"address with a port", "db", "10.0.0.1:80", 80, "", "must be an IPv4 or IPv6 address"},
		{"address with leading zeros", "db", "010.0.0.1", 80, "", "must be an IPv4 or IPv6 address"},
		{"address a CIDR", "db", "10.0.0.0/8", 80, "", "must be an IPv4 or IPv6 address"},
		{"address with a zone", "db", "fe80::1%eth0", 80, "", "must not have a zone"},
		{"address IPv4-mapped", "db", "::ffff:10.0.0.1", 80, "", "IPv4-mapped"},
		{"address 0.0.0.0", "db", "0.0.0.0", 80, "", "unspecified"},
		{"address ::", "db", "::", 80, "", "unspecified"},
		{"address multicast IPv4", "db", "239.1.1.1", 80, "", "multicast"},
		{"address multicast IPv6", "db", "ff05::2", 80, "", "multicast"},
		{"address loopback IPv4", "db", "127.0.0.2", 80, "", "loopback"},
		{"address loopback IPv6", "db", "::1", 80, "", "loopback"},
		{"address link-local IPv4", "db", "169.254.169.254", 80, "", "link-local"},
		{"address link-local IPv6", "db", "fe80::1", 80, "", "link-local"},
		{"port 0", "db", "10.0.0.1", 0, "", "port: must be 1..65535, got 0"},
		{"port 65536", "db", "10.0.0.1", 65536, "", "port"},
		{"port negative", "db", "10.0.0.1", -80, "", "port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Endpoint(tc.service, tc.address, tc.port)
			if tc.wantInMessage == "" {
				if err != nil {
					t.Fatalf("Endpoint(%q, %q, %d) = %v", tc.service, tc.address, tc.port, err)
				}
				if got := AddressType(tc.address); got != tc.wantType {
					t.Fatalf("AddressType(%q) = %q, want %q", tc.address, got, tc.wantType)
				}
				return
			}
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Fatalf("Endpoint(%q, %q, %d) = %v; want an ErrInvalidArgument naming %q",
					tc.service, tc.address, tc.port, err, tc.wantInMessage)
			}
		})
	}
	if got := AddressType("not an address"); got != "" {
		t.Fatalf("AddressType of a name = %q, want \"\"", got)
	}
}
