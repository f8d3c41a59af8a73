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
//
// The tests are fixed for a term, so they are encoded once; each renewal
// only appends its renewTime (at 1000 elections, encoding the whole patch
// by reflection was a tenth of the library's CPU).
type renewPatch struct {
	tests []byte // the JSON array of the test operations, without its closing ']'
}

func newRenewPatch(identity, incarnation string, token int64, t Timing) (renewPatch, error) {
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
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return renewPatch{}, fmt.Errorf("renewal patch: %w", err)
	}
	return renewPatch{tests: b[:len(b)-1]}, nil
}

// at is the patch that sets renewTime to now, encoded as metav1.MicroTime
// encodes it (UTC, microseconds).
func (p renewPatch) at(now time.Time) []byte {
	const replace = `,{"op":"replace","path":"/spec/renewTime","value":"`
	b := make([]byte, 0, len(p.tests)+len(replace)+len(metav1.RFC3339Micro)+8)
	b = append(b, p.tests...)
	b = append(b, replace...)
	b = now.UTC().AppendFormat(b, metav1.RFC3339Micro)
	return append(b, `"}]`...)
}

var jsonPointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string { return jsonPointerEscaper.Replace(key) }
