package lease

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
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
