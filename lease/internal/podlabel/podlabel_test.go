package podlabel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

type recordedPatch struct {
	ns, pod, patch string
	err            error
}

func (r *recordedPatch) PatchPod(_ context.Context, ns, pod string, patch []byte) error {
	r.ns, r.pod, r.patch = ns, pod, string(patch)
	return r.err
}

// A value sets the label, nil removes it (a JSON null in a merge patch).
func TestPatchSendsOneLabel(t *testing.T) {
	value := "true"
	for _, tc := range []struct {
		name  string
		value *string
		want  string
	}{
		{"set", &value, `{"metadata":{"labels":{"k8s-lease.io/leader":"true"}}}`},
		{"remove", nil, `{"metadata":{"labels":{"k8s-lease.io/leader":null}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recordedPatch{}
			if err := Patch(t.Context(), r, "ns", "p", "k8s-lease.io/leader", tc.value); err != nil {
				t.Fatal(err)
			}
			if r.ns != "ns" || r.pod != "p" || r.patch != tc.want {
				t.Fatalf("patched %s/%s with %s, want ns/p with %s", r.ns, r.pod, r.patch, tc.want)
			}
		})
	}
}

// A failed patch names the label and the Pod, and keeps the API error.
func TestPatchErrorNamesLabelAndPod(t *testing.T) {
	apiErr := errors.New("pods \"p\" not found")
	err := Patch(t.Context(), &recordedPatch{err: apiErr}, "ns", "p", "k", nil)
	if !errors.Is(err, apiErr) || !strings.Contains(err.Error(), `label "k" on pod ns/p`) {
		t.Fatalf("err = %v", err)
	}
}

// A removal has no value to check; a bad value or key is refused.
func TestCheck(t *testing.T) {
	bad, good := "bad value!", "v"
	for _, tc := range []struct {
		name  string
		key   string
		value *string
		ok    bool
	}{
		{"set", "k", &good, true}, {"remove", "k", nil, true},
		{"bad value", "k", &bad, false}, {"bad key", "bad key", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check("ns", "p", tc.key, tc.value)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, validate.ErrInvalidArgument)) {
				t.Fatalf("Check(%q, %v) = %v, want ok=%v", tc.key, tc.value, err, tc.ok)
			}
		})
	}
}
