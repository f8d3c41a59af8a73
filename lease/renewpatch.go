package lease

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// renewPatch is a JSON patch (RFC 6902) that renews a Lease only while it is
// exactly as we hold it: its "test" operations check holder, incarnation,
// token and duration, and the API server applies the patch atomically to the
// current object (no resourceVersion needed). That is compare-and-swap on
// what matters, without the resourceVersion chain that would make each
// renewal wait for the answer to the one before.
func renewPatch(identity, incarnation string, token int64, t Timing, now time.Time) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{
		{"test", "/spec/holderIdentity", identity},
		{"test", "/metadata/annotations/" + jsonPointerEscape(IncarnationAnnotation), incarnation},
		{"test", "/spec/leaseTransitions", token},
		{"test", "/spec/leaseDurationSeconds", t.leaseDurationSeconds()},
		{"replace", "/spec/renewTime", metav1.NewMicroTime(now)},
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("renewal patch: %w", err)
	}
	return b, nil
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}
