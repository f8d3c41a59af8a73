package main

// The exports themselves are tested in package capi. Here: the standalone
// library's own export, and that the three lists of the ABI's functions
// agree: what package capi exports, what this package's preamble declares
// (so the generated header declares it), and what the hand-written headers,
// include/k8s_lease.h and include/k8s_lease_compat.h, declare: each
// function in one of them. (`make header-check` checks the types, on the
// built library.)

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestStandalone(t *testing.T) {
	if got := K8sLeaseStandalone(); got != 1 {
		t.Fatalf("K8sLeaseStandalone() = %d, want 1", got)
	}
}

// names returns the sorted, distinct first submatches of re in the files.
func names(t *testing.T, re *regexp.Regexp, files ...string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestEveryExportIsDeclared(t *testing.T) {
	var capiFiles []string
	matches, err := filepath.Glob("capi/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range matches {
		if !strings.HasSuffix(f, "_test.go") {
			capiFiles = append(capiFiles, f)
		}
	}
	exported := names(t, regexp.MustCompile(`(?m)^//export (\w+)$`), capiFiles...)
	if len(exported) < 20 {
		t.Fatalf("package capi exports only %v", exported)
	}
	preamble := names(t, regexp.MustCompile(`(?m)^extern [\w* ]*?\b(K8s\w+)\(`), "k8s_lease_wrapper.go")
	if !slices.Equal(preamble, exported) {
		t.Errorf("k8s_lease_wrapper.go's preamble declares\n  %v\npackage capi exports\n  %v", preamble, exported)
	}
	declared := regexp.MustCompile(`(?m)^(?:int|void|(?:const )?char\*) (K8s\w+)\(`)
	family := names(t, declared, "include/k8s_lease.h")
	compat := names(t, declared, "include/k8s_lease_compat.h")
	public := slices.Sorted(slices.Values(append(slices.Clone(family), compat...)))
	want := slices.Sorted(slices.Values(append(slices.Clone(exported), "K8sLeaseStandalone")))
	if !slices.Equal(public, want) {
		t.Errorf("include/k8s_lease.h and include/k8s_lease_compat.h declare\n  %v\nthe standalone library exports\n  %v", public, want)
	}
	for _, f := range family {
		if slices.Contains(compat, f) {
			t.Errorf("%s is declared in both include/k8s_lease.h and include/k8s_lease_compat.h", f)
		}
	}
	// The main header's target: one form per operation.
	if len(family) > 20 {
		t.Errorf("include/k8s_lease.h declares %d functions, more than 20: %v", len(family), family)
	}
}
