package lease

import "time"

// action is what a candidate should do next, decided from a snapshot.
type action int

const (
	actWaitSync action = iota // no state yet: wait for the observer
	actWait                   // wait until a time, or until the lease changes
	actCreate                 // the Lease does not exist: create it
	actAcquire                // the Lease is free or expired: take it over
)

func (a action) String() string {
	return [...]string{"wait-sync", "wait", "create", "acquire"}[a]
}

// decide is the candidate's rule, a pure function of what it observed and
// its monotonic now. It never trusts the holder's wall clock: expiry is a
// full lease duration after this process saw the record change.
func decide(s snapshot, now time.Time) (action, time.Time) {
	switch {
	case !s.synced:
		return actWaitSync, time.Time{}
	case !s.rec.exists:
		// A deleted Lease whose holder may still be serving: wait out its
		// term before re-creating, so the old leader has surely stepped down.
		if s.lastHeld.exists && s.lastHeld.holder != "" {
			if until := s.lastHeldAt.Add(s.lastHeld.duration()); now.Before(until) {
				return actWait, until
			}
		}
		return actCreate, time.Time{}
	case s.rec.holder == "":
		// Released. A release that kept the holder's incarnation was not
		// written by the holder (ours removes it; a plain client-go
		// candidate that healed from a partition writes its release over a
		// fresh read of a Lease we hold): the holder may act until its next
		// renewal fails, so its term is waited out.
		if s.rec.incarnation != "" && s.lastHeld.exists && s.lastHeld.holder != "" {
			if until := s.lastHeldAt.Add(s.lastHeld.duration()); now.Before(until) {
				return actWait, until
			}
		}
		return actAcquire, time.Time{}
	case now.Before(s.expiry()):
		return actWait, s.expiry()
	default:
		return actAcquire, time.Time{}
	}
}
