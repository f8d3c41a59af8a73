package capi

// One version: the VERSION file at the repository root. CMake reads it
// (project(VERSION), hence the pkg-config file and the find_package version
// file); what cannot read it is checked against it here: the Go constant
// (lease.Version: what K8sLeaseVersion returns and the user agent carries)
// and include/k8s_lease.h's macros. A release changes the three together.

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/k8s-lease/k8s-lease/lease"
)

func TestVersionIsTheVERSIONFile(t *testing.T) {
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)\n?$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("VERSION is %q: want one line MAJOR.MINOR.PATCH", b)
	}
	want := strings.TrimSpace(string(b))
	if lease.Version != want {
		t.Errorf("lease.Version (lease/client.go) is %q, VERSION is %q", lease.Version, want)
	}
	if got := goStr(K8sLeaseVersion()); got != want {
		t.Errorf("K8sLeaseVersion() = %q, VERSION is %q", got, want)
	}

	h, err := os.ReadFile("../include/k8s_lease.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ name, want string }{
		{"K8S_LEASE_VERSION", `"` + want + `"`},
		{"K8S_LEASE_VERSION_MAJOR", m[1]},
		{"K8S_LEASE_VERSION_MINOR", m[2]},
		{"K8S_LEASE_VERSION_PATCH", m[3]},
	} {
		var defs []string
		for _, m := range regexp.MustCompile(`(?m)^#define `+d.name+`[ \t]+(.*?)[ \t]*$`).FindAllStringSubmatch(string(h), -1) {
			defs = append(defs, m[1])
		}
		if len(defs) != 1 || defs[0] != d.want {
			t.Errorf("include/k8s_lease.h defines %s as %q, want %s (VERSION is %q)", d.name, defs, d.want, want)
		}
	}
}
