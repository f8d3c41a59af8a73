package candidates

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

func TestCandidateRecordNames(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, tc := range []struct{ lease, identity string }{{"l", "pod-0"}, {long, "pod-0"}, {"l", strings.Repeat("x", 1000)}} {
		t.Run(validate.Clip(tc.lease)+"/"+validate.Clip(tc.identity), func(t *testing.T) {
			name := RecordName(tc.lease, tc.identity)
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Fatalf("%q: %v", name, errs)
			}
			if RecordName(tc.lease, tc.identity+"x") == name {
				t.Fatal("two identities, one record name")
			}
			if errs := validation.IsValidLabelValue(ofValue(tc.lease)); len(errs) > 0 {
				t.Fatalf("label value: %v", errs)
			}
		})
	}
}
