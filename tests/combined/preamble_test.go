// Package combined tests embedded/k8s_lease_wrapper.go, the wrapper file
// for a combined build (run.sh builds one library from it and
// testdata/etcd_wrapper.go, as our first user does). Here: that its
// preamble cannot drift from the root k8s_lease_wrapper.go's.
package combined

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// preamble returns the cgo preamble of the Go file at path: the comment
// right before import "C".
func preamble(t *testing.T, path string) (file, pre string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\n/\*\n(.*?)\*/\nimport "C"\n`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("%s: no /* ... */ preamble right before import \"C\"", path)
	}
	return string(b), m[1]
}

// TestEmbeddedPreambleIsTheRootOne: the embedded file's preamble is the
// root file's verbatim (the declarations of every function of package
// capi), followed only by the declaration of its own hidden export; and the
// file defines neither main nor K8sLeaseStandalone.
func TestEmbeddedPreambleIsTheRootOne(t *testing.T) {
	_, root := preamble(t, "../../k8s_lease_wrapper.go")
	file, embedded := preamble(t, "../../embedded/k8s_lease_wrapper.go")
	rest, ok := strings.CutPrefix(embedded, root)
	if !ok {
		t.Fatalf("embedded/k8s_lease_wrapper.go's preamble does not start with the root k8s_lease_wrapper.go's preamble, verbatim:\n--- root\n%s--- embedded\n%s", root, embedded)
	}
	decls := regexp.MustCompile(`(?m)^extern [\w* ]+\(.*$`).FindAllString(rest, -1)
	const anchor = `extern int k8s_lease_embedded_anchor(void) __attribute__((visibility("hidden")));`
	if len(decls) != 1 || decls[0] != anchor {
		t.Errorf("after the root preamble, embedded/k8s_lease_wrapper.go declares %q, want only %q", decls, anchor)
	}
	exports := regexp.MustCompile(`(?m)^//export (\w+)$`).FindAllStringSubmatch(file, -1)
	if len(exports) != 1 || exports[0][1] != "k8s_lease_embedded_anchor" {
		t.Errorf("embedded/k8s_lease_wrapper.go exports %q, want only k8s_lease_embedded_anchor", exports)
	}
	if regexp.MustCompile(`(?m)^func main\(`).MatchString(file) {
		t.Error("embedded/k8s_lease_wrapper.go defines main: the other file of the build does")
	}
	if !strings.HasPrefix(file, "//go:build k8s_lease_embedded\n") {
		t.Error(`embedded/k8s_lease_wrapper.go must start with "//go:build k8s_lease_embedded" (not "ignore": go mod tidy must see its imports in the user's module)`)
	}
	if !strings.Contains(file, "\nimport _ \"github.com/k8s-lease/k8s-lease/capi\"") {
		t.Error("embedded/k8s_lease_wrapper.go does not import package capi")
	}
}
