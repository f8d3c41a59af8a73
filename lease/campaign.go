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

// decide is the candidate's rule, a pure function of what it observed, its
// monotonic now and its own lease duration. It never trusts the holder's
// wall clock: expiry is a full lease duration after this process saw the
// record change.
func decide(s snapshot, now time.Time, ownLeaseDuration time.Duration, self string) (action, time.Time) {
	switch {
	case !s.synced:
		return actWaitSync, time.Time{}
	case s.rec.handedOffTo(self) && !s.staleHandOff(now):
		// Handed to us by its leader, who stopped leading before writing
		// it: take it now (a compare-and-swap, as every acquisition).
		return actAcquire, time.Time{}
	case !s.rec.exists:
		// A deleted Lease whose holder may still be serving: wait out its
		// term before re-creating, so the old leader has surely stepped
		// down. The term is counted from the later of the holder's last
		// renewal seen and the deletion seen: renewals missed while the
		// watch was down came before the deletion.
		if s.lastHeld.exists && s.lastHeld.holder != "" {
			if until := latest(s.lastHeldAt, s.observedAt).Add(s.lastHeld.duration()); now.Before(until) {
				return actWait, until
			}
		}
		return actCreate, time.Time{}
	case s.rec.holder == "":
		// Released. A release that kept the holder's incarnation was not
		// written by the holder (ours removes it; a plain client-go
		// candidate that healed from a partition writes its release over a
		// fresh read of a Lease we hold): the holder may act until its next
		// renewal fails. That release landed after the holder's last
		// renewal, so a lease duration from its first sight is enough: the
		// holder's when this process saw its record, else (a fresh look,
		// or another incarnation's record) the longer of ours and that.
		if s.rec.incarnation != "" {
			d := ownLeaseDuration
			if s.lastHeld.exists && s.lastHeld.incarnation == s.rec.incarnation {
				d = max(d, s.lastHeld.duration())
			}
			if until := latest(s.lastHeldAt, s.observedAt).Add(d); now.Before(until) {
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

// staleHandOffAge: a hand-off record older than its term plus this, by the
// local wall clock, is not acted on at once (clocks may be that far apart).
const staleHandOffAge = time.Minute

// staleHandOff reports a hand-off record that cannot be the live one: this
// process saw a later term (a higher token), or, by the wall clock, it is
// older than its term and staleHandOffAge. Such a record was brought back
// whole (etcd restored from a backup, the Lease re-created from a dump) and
// its leader's successors may be serving: it is waited out like any
// holder's record. Only a shortcut is refused, so a skewed clock can only
// make a hand-off slower.
func (s snapshot) staleHandOff(now time.Time) bool {
	return s.rec.token < s.highestToken || now.Sub(s.rec.renewTime) > s.rec.duration()+staleHandOffAge
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
