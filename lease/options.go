package lease

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/k8s-lease/k8s-lease/lease/internal/candidates"
)

// Policy is what a leader does on its own (ElectionOptions.Policy).
type Policy int

const (
	// PolicyHandOffOnCancel: cancelling a leading election hands the lease
	// to the best live candidate (highest version, then priority) instead of
	// releasing it to a race; with none, or if it does not take it within
	// the renew deadline, the lease is released as usual.
	PolicyHandOffOnCancel Policy = 1 << iota
	// PolicyYieldToNewer: the leader hands off as soon as a candidate with a
	// newer version campaigns (to the best of those).
	PolicyYieldToNewer

	policyAll = PolicyHandOffOnCancel | PolicyYieldToNewer
)

// ElectionOptions are the optional parts of a candidacy.
type ElectionOptions struct {
	// Version is the candidate's version, semantic ("1.4.2" or "v1.4.2");
	// "" declares none (older than any).
	Version string
	// Priority orders candidates of one version: higher is preferred.
	Priority int32
	Policy   Policy
}

func (o ElectionOptions) validate() error {
	if o.Version != "" {
		if _, err := version.ParseSemantic(o.Version); err != nil {
			return fmt.Errorf("%w: version %s: must be a semantic version such as 1.4.2 or v1.4.2: %v", ErrInvalidArgument, clip(o.Version), err)
		}
	}
	if o.Policy&^policyAll != 0 {
		return fmt.Errorf("%w: policy %d: unknown flags %d", ErrInvalidArgument, o.Policy, o.Policy&^policyAll)
	}
	return nil
}

// PreferredHolderAnnotation on the Lease names the identity an operator
// wants to lead: the leader hands off to it while it campaigns. The API
// server keeps spec.preferredHolder only with the
// CoordinatedLeaderElection feature gate (off by default up to v1.37; it
// drops the field otherwise): either is honoured.
const PreferredHolderAnnotation = "k8s-lease.io/preferred-holder"

// Candidate is one live candidacy on a lease, as its record says.
type Candidate = candidates.Record

// better reports whether a is to be preferred over b: newer version, then
// higher priority, then (for a stable choice) the smaller identity.
func better(a, b Candidate) bool {
	if c := compareVersions(a.Version, b.Version); c != 0 {
		return c > 0
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Identity < b.Identity
}

// term is a leadership: the Lease object (its UID) and the fencing token.
type term struct {
	lease string
	token int64
}

// aliveInTerm reports whether c's record was written during the term t or
// a later one on the same Lease object (a zero t: any record). A candidate
// writes its record again when it sees a new term (candidacy.sawToken), so
// every live candidate's record names the current term within a watch
// event and a write of its beginning; a replica that died (SIGKILL, a node
// lost) before the term began cannot, and its record, live for
// candidateTTL, is passed over by the hand-offs the library decides on its
// own, also after the Lease was re-created and its tokens started again.
// A target that died during the term costs one hand-off's wait, in that
// term only. A candidate of a library version that wrote neither is never
// chosen by them.
func aliveInTerm(c Candidate, t term) bool {
	return t == term{} || (c.SeenLease == t.lease && c.SeenToken >= t.token)
}

// compareVersions compares semantic versions; "" (none) is the oldest.
// Both were validated when declared; a record edited by hand that does not
// parse sorts as none.
func compareVersions(a, b string) int {
	va, errA := version.ParseSemantic(a)
	vb, errB := version.ParseSemantic(b)
	switch {
	case errA != nil && errB != nil:
		return 0
	case errA != nil:
		return -1
	case errB != nil:
		return 1
	}
	switch {
	case va.LessThan(vb):
		return -1
	case vb.LessThan(va):
		return 1
	}
	return 0
}

// bestCandidate is the best live candidate but exclude that saw the term
// (its record names that token or a later one: see aliveInTerm), and
// whether there is one; with onlyNewer, only candidates of a version newer
// than own count.
func bestCandidate(cs []Candidate, exclude string, t term, onlyNewer bool, own string, now time.Time) (Candidate, bool) {
	var best Candidate
	found := false
	for _, c := range cs {
		if c.Identity == exclude || now.Sub(c.RenewTime) > candidateTTL || !aliveInTerm(c, t) {
			continue
		}
		if onlyNewer && compareVersions(c.Version, own) <= 0 {
			continue
		}
		if !found || better(c, best) {
			best, found = c, true
		}
	}
	return best, found
}
