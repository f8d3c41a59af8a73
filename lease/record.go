package lease

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IncarnationAnnotation marks which running election wrote the Lease. Two
// processes with one identity differ in incarnation, so a restarted process
// cannot mistake its predecessor's still-valid lease for its own (client-go
// would renew it at once). Plain client-go candidates ignore it.
const IncarnationAnnotation = "k8s-lease.io/incarnation"

// HandOffAnnotation names the candidate a leader handed the Lease to
// (K8sLeaseHandOff). The hand-off record's holder is handOffHolder(target),
// with no incarnation, renewed at the hand-off, and HandOffAtAnnotation
// holding that renewTime: every other candidate (ours, and plain client-go)
// waits a lease duration from seeing it, and the target, if it campaigns,
// takes it at once with a compare-and-swap. Its own acquisition removes the
// annotations.
//
// A plain client-go candidate may have any identity, handOffHolder(target)
// included; it then takes the record as its own and renews it, and any
// client-go write keeps leaseTransitions (on a renewal) and every
// annotation. What no write but the hand-off leaves is a renewTime equal to
// HandOffAtAnnotation: every client-go write sets renewTime to its own now.
// So a record is a hand-off only while the two agree (record.handedOffTo).
const (
	HandOffAnnotation   = "k8s-lease.io/handed-off-to"
	HandOffAtAnnotation = "k8s-lease.io/handed-off-at"
)

// record is the part of a Lease that elections reason about.
type record struct {
	exists          bool
	holder          string
	token           int64 // spec.leaseTransitions: the fencing token
	durationSeconds int32
	incarnation     string
	handOffTo       string    // HandOffAnnotation
	handOffAt       string    // HandOffAtAnnotation
	renewTime       time.Time // holder's wall clock; only for first looks
	resourceVersion string
}

func recordOf(l *coordinationv1.Lease) record {
	if l == nil {
		return record{}
	}
	r := record{exists: true, resourceVersion: l.ResourceVersion, incarnation: l.Annotations[IncarnationAnnotation],
		handOffTo: l.Annotations[HandOffAnnotation], handOffAt: l.Annotations[HandOffAtAnnotation]}
	s := l.Spec
	if s.HolderIdentity != nil {
		r.holder = *s.HolderIdentity
	}
	if s.LeaseTransitions != nil {
		r.token = int64(*s.LeaseTransitions)
	}
	if s.LeaseDurationSeconds != nil {
		r.durationSeconds = *s.LeaseDurationSeconds
	}
	if s.RenewTime != nil {
		r.renewTime = s.RenewTime.Time
	}
	return r
}

func (r record) duration() time.Duration { return time.Duration(r.durationSeconds) * time.Second }

// sameSpec reports whether two records hold the same election record; a
// change resets the observer's clock, as client-go does with the raw record.
func (r record) sameSpec(o record) bool {
	return r.exists == o.exists && r.holder == o.holder && r.token == o.token &&
		r.durationSeconds == o.durationSeconds && r.renewTime.Equal(o.renewTime) &&
		r.incarnation == o.incarnation && r.handOffTo == o.handOffTo && r.handOffAt == o.handOffAt
}

// handedOffTo reports whether the record is a hand-off to identity that
// nobody has taken up yet: written by the hand-off and by no one since (see
// HandOffAtAnnotation).
func (r record) handedOffTo(identity string) bool {
	return r.exists && r.holder == handOffHolder(identity) && r.incarnation == "" && r.handOffTo == identity &&
		r.handOffAt != "" && r.handOffAt == microString(r.renewTime)
}

// microString is t as a Lease stores a MicroTime: RFC 3339 in UTC, to the
// microsecond.
func microString(t time.Time) string { return t.UTC().Format(metav1.RFC3339Micro) }

// handingOff reports whether the record is a hand-off nobody took up yet.
func (r record) handingOff() bool { return r.handOffTo != "" && r.handedOffTo(r.handOffTo) }

// isWrite reports whether the record is the write w (holder, incarnation,
// token and renewTime as a Lease stores it): a write of that candidacy at
// that instant, which no other writer makes.
func (r record) isWrite(w record) bool {
	return w.exists && w.incarnation != "" && r.heldBy(w.holder, w.incarnation) && r.token == w.token &&
		microString(r.renewTime) == microString(w.renewTime)
}

// heldBy reports whether the record names this identity and incarnation.
func (r record) heldBy(identity, incarnation string) bool {
	return r.exists && r.holder == identity && r.incarnation == incarnation
}

// rvNewer reports whether resource version a is newer than b. Resource
// versions are etcd revisions in every real apiserver; when one does not
// parse as a number the answer is "newer", which makes callers re-check.
func rvNewer(a, b string) bool {
	if b == "" {
		return true
	}
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}

// holdSpec writes a held record into l: our identity, incarnation, token and
// lease duration, renewed now.
func holdSpec(l *coordinationv1.Lease, identity, incarnation string, token int64, t Timing, now time.Time, acquired bool) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[IncarnationAnnotation] = incarnation
	delete(l.Annotations, HandOffAnnotation)
	delete(l.Annotations, HandOffAtAnnotation)
	holder := identity
	seconds := t.leaseDurationSeconds()
	transitions := int32(token)
	renew := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.LeaseTransitions = &transitions
	l.Spec.RenewTime = &renew
	if acquired || l.Spec.AcquireTime == nil {
		acquire := metav1.NewMicroTime(now)
		l.Spec.AcquireTime = &acquire
	}
}

// releaseSpec writes client-go's release record: no holder, a one-second
// lease, the token kept so that the next holder's token is greater.
func releaseSpec(l *coordinationv1.Lease, now time.Time) {
	holder := ""
	seconds := int32(1)
	renew := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.RenewTime = &renew
	l.Spec.AcquireTime = &renew
	delete(l.Annotations, IncarnationAnnotation)
	delete(l.Annotations, HandOffAnnotation)
	delete(l.Annotations, HandOffAtAnnotation)
}

// handOffSpec writes the hand-off record (see HandOffAnnotation): the
// target as holder, renewed now, for the leader's lease duration, with no
// incarnation; the token is kept, so the target's is the next.
func handOffSpec(l *coordinationv1.Lease, to string, t Timing, now time.Time) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	delete(l.Annotations, IncarnationAnnotation)
	l.Annotations[HandOffAnnotation] = to
	holder := handOffHolder(to)
	seconds := t.leaseDurationSeconds()
	renew := metav1.NewMicroTime(now)
	l.Annotations[HandOffAtAnnotation] = microString(now)
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.RenewTime = &renew
	l.Spec.AcquireTime = &renew
}

// nextToken is the fencing token for a new leadership: one more than the
// highest token this process has seen on the lease (the current record's, or
// an earlier one if the Lease was deleted and re-created), and at least 1, so
// tokens rise strictly across holders, releases and restarts.
func nextToken(current, highestSeen int64) (int64, error) {
	top := max(current, highestSeen, 0)
	if top >= math.MaxInt32 {
		return 0, errTokenExhausted
	}
	return top + 1, nil
}

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
