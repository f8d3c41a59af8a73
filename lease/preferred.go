package lease

import (
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/k8s-lease/k8s-lease/lease/internal/candidates"
)

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

// bestCandidate is the best live candidate but exclude, and whether there is
// one; with onlyNewer, only candidates of a version newer than own count.
func bestCandidate(cs []Candidate, exclude string, onlyNewer bool, own string, now time.Time) (Candidate, bool) {
	var best Candidate
	found := false
	for _, c := range cs {
		if c.Identity == exclude || now.Sub(c.RenewTime) > candidateTTL {
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
