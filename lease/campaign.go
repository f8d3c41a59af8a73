package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// action is what a candidate should do next, decided from a snapshot.
type action int

const (
	actWaitSync action = iota // no state yet: wait for the observer
	actWait                   // wait until a time, or until the lease changes
	actCreate                 // the Lease does not exist: create it
	actAcquire                // the Lease is free or expired: take it over
	actAdopt                  // it names this very candidacy: lead on it
)

func (a action) String() string {
	return [...]string{"wait-sync", "wait", "create", "acquire", "adopt"}[a]
}

// decide is the candidate's rule, a pure function of what it observed, its
// monotonic now, its own lease duration and identity, and the acquisition
// of its own that failed without proof that it did not land (unanswered).
// It never trusts the holder's wall clock: expiry is a full lease duration
// after this process saw the record change.
func decide(s snapshot, now time.Time, ownLeaseDuration time.Duration, self string, unanswered record) (action, time.Time) {
	switch {
	case !s.synced:
		return actWaitSync, time.Time{}
	case s.rec.isWrite(unanswered) && s.rec.holder == self && s.rec.token >= s.highestToken:
		// That acquisition landed (its answer was lost, or a resend of it
		// was refused): only this candidacy writes its incarnation and
		// that renewTime. Lead on it (a compare-and-swap over it, with
		// its token) instead of waiting out our own record, as client-go
		// adopts a record naming it; not once a later term was seen (the
		// record came back, by a restore, while another may lead).
		return actAdopt, time.Time{}
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

// waitFor sleeps until the lease changes, until is reached (zero: no
// deadline), or the election is cancelled (false).
func (e *Election) waitFor(notify <-chan struct{}, until time.Time) bool {
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := e.clock.NewTimer(until.Sub(e.clock.Now()))
		defer t.Stop()
		timeout = t.C()
	}
	select {
	case <-e.ctx.Done():
		return false
	case <-notify:
	case <-timeout:
	}
	return true
}

// campaign runs until this election holds the Lease or is cancelled (nil),
// or an error no retry can cure (invalid, token exhausted) ends it. Errors an
// operator cures while the process runs (forbidden: RBAC missing;
// unauthorized: a bad or rotated token; the namespace missing) are reported
// at once and retried with capped backoff (fixRetryMax), so the candidate is
// elected without a restart once the cluster is fixed.
func (e *Election) campaign(notify <-chan struct{}, started time.Time) error {
	retry := newBackoff(e.timing.RetryPeriod/4, e.timing.RetryPeriod)
	fixRetry := newBackoff(min(e.timing.RetryPeriod, fixRetryMax), fixRetryMax)
	var freeSince time.Time // when this campaign last judged the lease free
	landed := 0             // acquisitions in a row that landed and were refused or unanswered
	for e.ctx.Err() == nil {
		snap := e.obs.snapshot()
		e.clearStaleRoute(snap) // the endpoint of a term the Lease no longer shows (endpoint.go)
		// An error the shared observer met before this campaign (say a
		// GetHolder before RBAC was applied) is not this campaign's: wait
		// for the observer's next try. The observer retries by itself.
		if !snap.synced && snap.err != nil && !snap.errAt.Before(started) {
			if permanent(snap.err) {
				return fmt.Errorf("cannot read lease %s: %w", e.key, snap.err)
			}
			if needsFix(snap.err, false) {
				e.blocked(fmt.Errorf("cannot read lease %s: %w", e.key, snap.err))
			}
		}
		act, until := decide(snap, e.clock.Now(), e.timing.LeaseDuration, e.identity, e.unansweredWrite(snap))
		if act == actWait || act == actWaitSync && snap.err != nil {
			e.recordCandidacy() // a standby now: its record costs the campaign nothing
			e.leaveFirstRound()
		}
		if act == actWait {
			// Another holder is the reason now: earlier errors are not.
			e.clearAPIErr()
			fixRetry.reset()
			e.candidacy.record.sawToken(snap.highestToken) // a new term: tell its leader we are alive in it
		}
		if act == actWaitSync || act == actWait {
			freeSince = time.Time{}
			if !e.waitFor(notify, until) {
				return nil
			}
			continue
		}
		if freeSince.IsZero() {
			freeSince = e.clock.Now()
		}
		err := e.acquire(snap, act, started, freeSince)
		e.leaveFirstRound()
		if err == nil {
			return nil
		}
		if permanent(err) {
			return fmt.Errorf("cannot write lease %s: %w", e.key, err)
		}
		if e.ctx.Err() != nil {
			return nil // cancelled (renewBeforeAnnouncing): Cancel releases what landed
		}
		delay := e.retryDelay(err, act, snap, retry, fixRetry)
		if s := e.obs.snapshot(); s.synced && s.rec.isWrite(e.unansweredWrite(s)) {
			// It landed: adopted at once the first time; when that keeps
			// landing unanswered (a proxy that forwards, then fails), no
			// faster than the backoff, whatever the watch reports.
			if landed++; landed > 1 {
				if !e.sleep(retry.next()) {
					return nil
				}
				continue
			}
			delay = 0
		} else {
			landed = 0
		}
		if !e.waitFor(notify, e.clock.Now().Add(delay)) {
			return nil
		}
	}
	return nil
}

// retryDelay is how long campaign waits after an acquisition failed with
// err (not permanent), and what it learns of the Lease meanwhile.
func (e *Election) retryDelay(err error, act action, snap snapshot, retry, fixRetry *backoff) time.Duration {
	delay := retry.next()
	switch {
	case needsFix(err, act == actCreate):
		e.blocked(fmt.Errorf("cannot write lease %s: %w", e.key, err))
		delay = fixRetry.next()
	case apierrors.IsNotFound(err) && act != actCreate:
		// The Lease was deleted since the snapshot: learn it (the
		// watch may lag or be down), and decide again at once on
		// that: the last holder's term is waited out before the
		// Lease is created again.
		e.setAPIErr(err)
		if e.refresh(snap.rec.resourceVersion) {
			delay = 0
		}
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		// Someone else wrote first. Our snapshot is stale (its watch
		// may lag by seconds after an outage): learn the current
		// Lease now, so the next decision is made on it, instead of
		// resending the same doomed write. Back off only when that
		// taught nothing new.
		e.setAPIErr(err)
		e.stats.Conflict()
		if e.refresh(snap.rec.resourceVersion) {
			delay = 0
		}
	default:
		e.setAPIErr(err)
		if !errors.Is(err, errNoTimeToServe) {
			e.stats.APIError()
		}
		logf(LevelWarning, "lease %s: %s could not acquire: %v", e.key, e.identity, err)
		if outcomeUnknown(err) {
			e.refresh(snap.rec.resourceVersion) // it may have landed: decide on what the Lease says now
		}
	}
	return delay
}

// sleep waits d, or until the election is cancelled (false); unlike
// waitFor, a change of the Lease does not end it.
func (e *Election) sleep(d time.Duration) bool {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// unansweredWrite is the last acquisition of this candidacy that failed
// without proof that it did not land (exists false: none), or, when s
// shows it, the renewal sent after it before announcing the term, which
// failed the same way (renewBeforeAnnouncing): either is a write only
// this candidacy makes.
func (e *Election) unansweredWrite(s snapshot) record {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.rec.isWrite(e.term.unansweredRenewal) {
		return e.term.unansweredRenewal
	}
	return e.term.unanswered
}

// leaveFirstRound gives back this election's place in firstRounds (once).
func (e *Election) leaveFirstRound() {
	if e.firstRound.over != nil {
		e.firstRound.over()
	}
}

// fixRetryMax caps the backoff of a candidate blocked by an error only an
// operator can cure: at most this long after the fix, it is elected.
const fixRetryMax = 8 * time.Second

// blocked reports an error that keeps the candidate out until an operator
// fixes the cluster: counted, kept for WaitElected's timeout message, and
// logged as an error when it first appears or changes (not on every retry).
func (e *Election) blocked(err error) {
	e.stats.APIError()
	e.mu.Lock()
	same := e.term.lastAPIErr != nil && e.term.lastAPIErr.Error() == err.Error()
	e.term.lastAPIErr = err
	e.mu.Unlock()
	if !same {
		logf(LevelError, "lease %s: %s cannot campaign until this is fixed (retrying at most every %v): %v",
			e.key, e.identity, fixRetryMax, err)
	}
}

// refresh reads the Lease into the observer after a lost compare-and-swap
// and reports whether the snapshot moved past resource version seen.
func (e *Election) refresh(seen string) bool {
	ctx, cancel := context.WithTimeout(e.ctx, min(requestTimeout, e.timing.RenewDeadline))
	defer cancel()
	e.stats.ObserverRequest()
	sent := e.obs.seqNow()
	cur, err := e.api.leases.Get(ctx, e.key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		e.obs.applyGone(sent)
	case err != nil:
		logf(LevelInfo, "lease %s: re-reading after a conflict: %v", e.key, err)
	default:
		e.obs.applyRead(cur, cur.ResourceVersion, sent) // a quorum read: the truth, also at an older version
	}
	s := e.obs.snapshot()
	return s.synced && s.rec.resourceVersion != seen
}

// renewBeforeAnnouncing renews a term whose acquisition (got, with token)
// was answered with less than a retry period of its validity left (it
// counts from the send: an API server or etcd member that stalled it),
// and returns the validity the renewal gives. Announced as it was, the
// host would serve for milliseconds and then be told it lost (traced in
// the soak: answered 2982 ms into a 3 s renew deadline, lost 10 ms after
// "elected"). Nothing is announced until this answers in time; before
// that the Lease is held but nobody serves, which is safe. The renewal is
// urgent and goes as an urgent leader's do (the urgent pool: the client's
// connection may hang where the acquisition did); a cancel cuts it short
// (the release's compare-and-swap re-reads a Lease it changed).
//
// If it fails, or is itself answered with less than a retry period left,
// the term is not announced and the campaign goes on: its next round
// adopts the Lease (decide's actAdopt) when it shows the acquisition or
// this renewal (unansweredWrite), both writes only this candidacy makes.
//
// Only what needs a fix (403, 401) is wrapped, so that the campaign
// reports it as for an acquisition; a refused test (422, Invalid: another
// writer changed the Lease) or a 404 (deleted since) is news of the Lease
// for the next round, not a request of ours that is wrong (permanent) nor
// a namespace missing (needsFix on a create).
func (e *Election) renewBeforeAnnouncing(got *coordinationv1.Lease, token int64, acquiredWith time.Duration) (time.Time, error) {
	patch, err := newRenewPatch(e.identity, e.incarnation, token, e.timing)
	if err != nil {
		return time.Time{}, err
	}
	sent := e.clock.Now()
	ctx, cancel := context.WithTimeout(e.ctx, min(requestTimeout, e.timing.RenewDeadline))
	defer cancel()
	e.api.redial.urgencyBegins()
	defer e.api.redial.urgencyOver()
	leases, throughUrgent := e.api.urgentLeases(sent, e.timing.RetryPeriod)
	r := e.renewal(ctx, leases, patch, sent)
	switch why := "lease " + e.key.String() + ": renewal before announcing unanswered"; {
	case r.err == nil:
		e.obs.apply(r.got, r.got.ResourceVersion)
	case !outcomeUnknown(r.err) || e.ctx.Err() != nil:
	case throughUrgent:
		e.api.redial.closeSilentUrgent(sent, e.clock.Now(), e.timing.RetryPeriod, why)
	default:
		e.api.redial.closeSilent(sent, e.clock.Now(), e.timing.RetryPeriod, why)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	why := fmt.Sprintf("acquisition answered with %v of its validity left", acquiredWith.Round(time.Millisecond))
	if r.err != nil {
		e.term.unanswered, e.term.unansweredRenewal = recordOf(got), record{}
		if outcomeUnknown(r.err) {
			landed := got.DeepCopy()
			renewTime := metav1.NewMicroTime(sent)
			landed.Spec.RenewTime = &renewTime
			e.term.unansweredRenewal = recordOf(landed)
		}
		if apierrors.IsForbidden(r.err) || apierrors.IsUnauthorized(r.err) {
			return time.Time{}, fmt.Errorf("%s; the renewal sent before announcing the term failed: %w", why, r.err)
		}
		return time.Time{}, fmt.Errorf("%s; the renewal sent before announcing the term failed: %v", why, r.err)
	}
	e.term.written = r.got
	validUntil := sent.Add(e.timing.RenewDeadline)
	if left := validUntil.Sub(e.clock.Now()); left < e.timing.RetryPeriod {
		e.term.unanswered, e.term.unansweredRenewal = recordOf(r.got), record{}
		return time.Time{}, fmt.Errorf("%w: %s, and the renewal sent before announcing the term with %v", errNoTimeToServe, why, left.Round(time.Millisecond))
	}
	return validUntil, nil
}

// errNoTimeToServe: a write succeeded, too late to give the term a retry
// period of validity (renewBeforeAnnouncing); no API error.
var errNoTimeToServe = errors.New("no time to serve")

// outcomeUnknown reports a write error that does not say whether the write
// landed: no answer (a timeout, a connection lost) or a server error. (A
// conflict does not prove it either: client-go sends a write again after a
// 429 or a 5xx with Retry-After, and the first may have landed.)
func outcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	return err != nil && (!errors.As(err, &status) || status.Status().Code >= 500)
}

// permanent reports errors that neither retrying nor fixing the cluster
// will cure: the request itself is wrong.
func permanent(err error) bool {
	return err != nil && (apierrors.IsInvalid(err) || errors.Is(err, errTokenExhausted))
}

// needsFix reports errors that last until an operator acts: RBAC missing
// (forbidden), credentials refused (unauthorized), or, on create, the
// namespace missing (not found).
func needsFix(err error, creating bool) bool {
	return err != nil && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		(creating && apierrors.IsNotFound(err)))
}

// clearAPIErr forgets the last API error once it is no longer why the
// election is where it is (a request succeeded, or another holder is the
// reason to wait), so a cured 403 is not reported as a cause later.
func (e *Election) clearAPIErr() {
	e.mu.Lock()
	e.term.lastAPIErr = nil
	e.mu.Unlock()
}

// lastAPIError is the last error an API request of this election met, or nil.
func (e *Election) lastAPIError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term.lastAPIErr
}

func (e *Election) setAPIErr(err error) {
	e.mu.Lock()
	e.term.lastAPIErr = err
	e.mu.Unlock()
}

// acquire takes the Lease over (or creates it, or adopts it) with a
// compare-and-swap on the observed resource version and the next fencing
// token (adopting: the token of our record). The campaign's start and when
// it judged the lease free time the metrics.
func (e *Election) acquire(snap snapshot, act action, started, freeSince time.Time) error {
	create := act == actCreate
	token, err := nextToken(snap.rec.token, snap.highestToken)
	prev := snap.rec.token // the term before this one: its endpoint is the one to replace
	if act == actAdopt {
		token, err, prev = snap.rec.token, nil, snap.lastHeld.token
	}
	if err != nil {
		return err
	}
	var l *coordinationv1.Lease
	if create {
		if snap.lastHeld.exists || snap.highestToken > 0 {
			// The token cannot outlive the object: storage fenced with it
			// sees the sequence start again above what this process saw.
			logf(LevelWarning, "lease %s: re-creating the Lease, which was deleted; its fencing token restarts at %d (the highest this process saw was %d): a Lease in use must not be deleted",
				e.key, token, snap.highestToken)
		}
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.key.Name, Namespace: e.key.Namespace}}
	} else {
		l = snap.lease.DeepCopy()
	}
	sent := e.clock.Now()
	holdSpec(l, e.identity, e.incarnation, token, e.timing, sent, true)
	// A cancel does not cut the write short: its outcome would be unknown
	// and a landed one never released, leaving the lease held for a full
	// lease duration. It ends by its own timeout, and Cancel (which waits
	// for this goroutine) releases what landed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), min(requestTimeout, e.timing.RenewDeadline))
	defer cancel()
	var got *coordinationv1.Lease
	if create {
		got, err = e.api.leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		got, err = e.api.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		// It may have landed (see outcomeUnknown): adopted if the Lease
		// shows it (decide), released by a cancel if it does (Cancel).
		e.mu.Lock()
		e.term.unanswered, e.term.unansweredRenewal = recordOf(l), record{}
		e.mu.Unlock()
		if outcomeUnknown(err) {
			// Unanswered: its connection may hang on a frozen API server,
			// and the next try would wait on it too.
			e.api.redial.closeSilent(sent, e.clock.Now(), e.timing.RetryPeriod, "lease "+e.key.String()+": acquisition unanswered")
		}
		return err
	}
	e.obs.apply(got, got.ResourceVersion)
	e.mu.Lock()
	e.term.written = got // even if cancelled meanwhile: Cancel then releases it
	e.term.unanswered, e.term.unansweredRenewal = record{}, record{}
	if e.term.phase != phaseCandidate {
		e.mu.Unlock()
		return nil
	}
	validUntil := sent.Add(e.timing.RenewDeadline)
	if left := validUntil.Sub(e.clock.Now()); left < e.timing.RetryPeriod {
		e.mu.Unlock()
		if validUntil, err = e.renewBeforeAnnouncing(got, token, left); err != nil {
			return err
		}
		e.mu.Lock()
		if e.term.phase != phaseCandidate {
			e.mu.Unlock()
			return nil
		}
	}
	defer e.mu.Unlock()
	e.term.phase, e.term.token = phaseLeader, token
	if !create {
		e.term.prevToken = prev
	}
	e.term.lastAPIErr = nil // this term's renewals report their own
	e.term.validUntil = validUntil
	e.stats.Elected(e.clock.Since(freeSince), e.clock.Since(started))
	close(e.elected)
	if !e.startPublishingLocked(e.endpoint.routed) {
		close(e.endpoint.routed)
	}
	e.obs.pauseWhileLeading(e)
	logf(LevelInfo, "lease %s: %s elected, token %d", e.key, e.identity, token)
	return nil
}
