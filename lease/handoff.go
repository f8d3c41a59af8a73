package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

// Hand-off: a leader gives the lease to a chosen candidate, which takes it
// in about two round trips instead of winning a race.
//
// The leader stops leading locally first (IsLeader 0), then writes, with a
// compare-and-swap on its last write, the hand-off record (handOffSpec):
// holder handOffHolder(target), so that plain client-go candidates see a
// live holder, renewed now, for the leader's lease duration, with no
// incarnation, HandOffAnnotation naming the target and HandOffAtAnnotation
// the renewTime (a write by anyone else changes the renewTime, and the
// record is no hand-off any more). Only the leader that stepped down writes
// it, over its own last write. Only the target acts on it (decide:
// actAcquire), with the compare-and-swap every acquisition makes, and the
// next fencing token. Every other candidate, ours or plain client-go, waits
// a lease duration from seeing it: that is the window in which only the
// target may take the lease. A target that does not take it is passed over
// after that window, so a dead target cannot block the service; HandOff
// itself releases the lease when its timeout passes first.

var (
	// ErrNotLeader: the call needs this process to lead the lease.
	ErrNotLeader = errors.New("not the leader of this lease")
	// ErrHandOffTimeout: the target did not take the lease in time.
	ErrHandOffTimeout = errors.New("hand-off timed out")
	// ErrHandedOff: the library handed the lease to another candidate on
	// its own (the preferred holder, or PolicyYieldToNewer).
	ErrHandedOff = errors.New("leadership handed off")
	// errReleasedInstead: a hand-off did not happen, and the lease was
	// released as a cancel releases it.
	errReleasedInstead = errors.New("the lease is released")
	// errReleaseFailed: a hand-off did not happen, and releasing the lease
	// failed too (it expires after its duration).
	errReleaseFailed = errors.New("releasing the lease failed")
)

// handOffHolderPrefix marks the holder of a hand-off record.
const handOffHolderPrefix = validate.HandOffHolderPrefix

func handOffHolder(to string) string { return handOffHolderPrefix + to }

// HandOffFailedAnnotation remembers, on the Lease, the last hand-off whose
// target did not take the lease ("<identity> <RFC 3339 time>"): hand-offs
// the library makes on its own skip that target until its candidate record
// is renewed after that time (it restarted), so a target that is not
// campaigning costs one hand-off timeout, not one per term.
const HandOffFailedAnnotation = "k8s-lease.io/hand-off-failed"

// HandOff ends this process's leadership of ns/name and hands the lease to
// the candidate identity to, then waits until to leads (nil) or timeout
// passes: the lease is then released normally, so that any candidate may
// take it, and ErrHandOffTimeout is returned. timeout bounds only that
// wait: the hand-off record's write, and the release should it fail, get
// the renew deadline (at most the request timeout) whatever timeout is. The election on the lease is
// over either way (WaitLost returns nil, as after a cancel). A target with
// no live candidate record is refused before anything changes (when the
// record can be read at all).
func (m *Manager) HandOff(ns, name, to string, timeout time.Duration) error {
	return m.HandOffID(ns, name, 0, to, timeout)
}

// HandOffID is HandOff for the election with that id only (0: whichever
// runs): a later election on the lease is not the caller's, so it is
// refused as no election.
func (m *Manager) HandOffID(ns, name string, id int64, to string, timeout time.Duration) error {
	if err := ValidateKey(ns, name); err != nil {
		return err
	}
	if err := ValidateIdentity(to); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if timeout <= 0 {
		return fmt.Errorf("%w: timeout: must be > 0", ErrInvalidArgument)
	}
	if _, err := m.client(); err != nil {
		return err
	}
	key := Key{ns, name}
	m.mu.Lock()
	e := m.elections.running[key]
	if e != nil && id != 0 && e.id != id {
		e = nil // a later election: not the caller's
	}
	m.mu.Unlock()
	switch {
	case e == nil:
		return fmt.Errorf("hand off lease %s: %w (%w)", key, ErrNotLeader, ErrNoElection)
	case e.identity == to:
		return fmt.Errorf("%w: target %q is this leader's own identity", ErrInvalidArgument, to)
	}
	if ok, _, _ := e.IsLeader(); !ok {
		return fmt.Errorf("hand off lease %s: %w", key, ErrNotLeader)
	}
	if err := m.requireCampaigning(key, to, false, term{}, time.Time{}, requestTimeout); err != nil {
		return err
	}
	// Registered, not forgotten yet: the election leaves the registry, as
	// a cancel's does, only if this hand-off ends it (forget). One that
	// ended meanwhile (a loss during the check above, a hand-off of the
	// library's own) stays registered, ended, so that WaitLost by its id
	// still tells why.
	ending, ok := m.claimEnd(e)
	if !ok {
		return fmt.Errorf("hand off lease %s: %w (the election ended meanwhile)", key, ErrNotLeader)
	}
	within := min(e.timing.RenewDeadline, requestTimeout) // the write's; timeout is the target's
	err := func() error {
		defer m.endDone(ending)
		defer func() {
			if p := recover(); p != nil {
				// As endElection: a claimed election is cancelled, or it
				// might lead on with the host told the call failed.
				_ = e.CancelWithin(within)
				if e.endReason() == nil {
					m.forget(e)
				}
				panic(p)
			}
		}()
		return m.handOffElection(e, to, within, timeout, nil, func() { m.forget(e) })
	}()
	e.awaitEndWrites() // the host may exit when HandOff returns
	return err
}

// forget removes e from the running elections if it is still there: ended
// by the host (a hand-off), as a cancel removes it.
func (m *Manager) forget(e *Election) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.elections.running[e.key] == e {
		delete(m.elections.running, e.key)
	}
}

// requireCampaigning refuses a target with no live candidate record (one
// read by name), one not renewed since failedAt (a hand-off to it that
// failed), or one that did not see the term (aliveInTerm; 0: any). When
// the record cannot be read (RBAC), a strict check refuses and a lenient
// one lets the hand-off go ahead (its timeout bounds it).
func (m *Manager) requireCampaigning(key Key, to string, strict bool, t term, failedAt time.Time, within time.Duration) error {
	client, err := m.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c, found, err := m.candidates.storeFor(client).Get(ctx, key.Namespace, key.Name, to)
	switch {
	case err != nil && strict:
		return fmt.Errorf("hand off lease %s: %w: cannot read %q's candidate record: %v", key, errTargetNotSeen, to, err)
	case err != nil:
		logf(LevelInfo, "lease %s: cannot check that %s campaigns (handing off all the same): %v", key, to, err)
		return nil
	case !found:
		return fmt.Errorf("hand off lease %s: %w: no candidate record for %q", key, errTargetNotSeen, to)
	case time.Since(c.RenewTime) > candidateTTL:
		return fmt.Errorf("hand off lease %s: %w: %q's candidate record was last renewed %v ago", key, errTargetNotSeen, to,
			time.Since(c.RenewTime).Round(time.Second))
	case !aliveInTerm(c, t):
		return fmt.Errorf("hand off lease %s: %w: %q's candidate record was written before this term (fencing token %d, it saw %d of Lease %q): it may have died since",
			key, errTargetNotSeen, to, t.token, c.SeenToken, c.SeenLease)
	case failedSince(c, failedAt):
		return fmt.Errorf("hand off lease %s: %w: a hand-off to %q failed at %s and its record is older", key, errTargetNotSeen, to,
			failedAt.Format(time.RFC3339))
	}
	return nil
}

// handOffElection hands e's lease to to, its record written within
// writeWithin (also the release should the write fail), and waits up to
// wait for it to lead. reason is what WaitLost reports: nil when the host
// asked for the hand-off. ended (nil: none) is called as this call ends
// the election, if it does. The caller has registered the end of e
// (claimEnd), so that Shutdown waits for it.
func (m *Manager) handOffElection(e *Election, to string, writeWithin, wait time.Duration, reason error, ended func()) error {
	key := e.key
	client, err := m.client()
	if err != nil {
		return err
	}
	// A share of the observer of our own, taken before the election gives
	// up its share: the observer then resumes (it pauses while we lead) and
	// shows the target taking the lease.
	var obs *observer
	func() {
		m.mu.Lock()
		defer m.mu.Unlock() // also on a panic: the Manager would be locked for ever
		injectPanic("handoff")
		obs = m.acquireObserverLocked(client, key, watchLife(0, client.FindsDeadConnections()), true)
	}()
	defer m.releaseObserver(key)
	notify := obs.subscribe()
	defer obs.unsubscribe(notify)

	handed, written, err := e.handOff(to, writeWithin, reason, ended)
	if err != nil {
		return err // its Event is recorded
	}
	err = m.awaitTarget(e, obs, notify, to, handed, written, wait)
	e.recordHandOff(to, err) // what happened in the end: taken, or released
	return err
}

// awaitTarget waits up to timeout for to to lead on the hand-off record
// handed (written: the record as written, nil when not known), and
// releases the record if it does not.
func (m *Manager) awaitTarget(e *Election, obs *observer, notify <-chan struct{}, to string, handed record, written *coordinationv1.Lease, timeout time.Duration) error {
	key := e.key
	// The target's time starts with the record: not with the call, whose
	// leader may first have waited for a renewal's answer (renewInline).
	deadline := m.clock.Now().Add(timeout)
	for {
		s := obs.snapshot()
		switch {
		case !s.synced || s.rec.handedOffTo(to) || s.rec.heldBy(e.identity, e.incarnation):
			// Not taken yet (or the observer has not caught up with our
			// write: it applied it, but a list may still be on its way).
		case s.rec.holder == to && s.rec.incarnation != "" && s.rec.token > handed.token:
			logf(LevelInfo, "lease %s: handed off to %s, who leads with token %d", key, to, s.rec.token)
			return nil
		default:
			return fmt.Errorf("hand off lease %s to %q: the lease changed before the target took it (holder now %q)", key, to, clip(s.rec.holder))
		}
		left := deadline.Sub(m.clock.Now())
		if left <= 0 {
			break
		}
		t := m.clock.NewTimer(left)
		select {
		case <-notify:
		case <-t.C():
		}
		t.Stop()
	}
	return e.releaseHandOff(handed, written, to, min(e.timing.RenewDeadline, requestTimeout), timeout)
}

// releaseHandOff releases the hand-off record handed (written: as written,
// nil when not known: it is read first), if it is still the current one,
// after its target did not take the lease within waited, so that anyone may
// take it now, and says what happened.
func (e *Election) releaseHandOff(handed record, written *coordinationv1.Lease, to string, timeout, waited time.Duration) error {
	failed := to + " " + time.Now().UTC().Format(time.RFC3339Nano)
	got, found, err := e.casWrite(written, timeout, "release after a hand-off to "+to,
		func(l *coordinationv1.Lease, now time.Time) {
			releaseSpec(l, now)
			l.Annotations[HandOffFailedAnnotation] = failed
		},
		// The same hand-off record, an annotation edited since: release
		// that. Not a record another writer took as its own (a client-go
		// candidate named like its holder renews it: see
		// HandOffAtAnnotation), whose live term this would end.
		func(r record) bool {
			return r.handedOffTo(to) && r.token == handed.token && r.handOffAt == handed.handOffAt
		})
	r := recordOf(found)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %q did not take lease %s within %v; %w: %v", ErrHandOffTimeout, to, e.key, waited, errReleaseFailed, err)
	case got != nil:
		return fmt.Errorf("%w: %q did not take lease %s within %v (is it campaigning?); %w", ErrHandOffTimeout, to, e.key, waited, errReleasedInstead)
	case r.holder == to && r.incarnation != "" && r.token > handed.token:
		return nil // taken at the last moment
	default:
		return fmt.Errorf("hand off lease %s to %q: the lease changed before the target took it (holder now %q); nothing to release",
			e.key, to, clip(r.holder))
	}
}

// handOffOnItsOwn is a hand-off the library decides (the preferred holder,
// PolicyYieldToNewer), on a goroutine of its own: the host learns of it
// from WaitLost (ErrHandedOff) and IsLeader, as of a loss, and the election
// stays registered, ended, as after a loss. It reports whether the lease
// was handed over. Only to a target whose record is read and live, that no
// earlier hand-off failed on (HandOffFailedAnnotation), and within a short
// timeout: a target that campaigns takes the lease in milliseconds.
func (m *Manager) handOffOnItsOwn(e *Election, to, why string) bool {
	if ok, _, _ := e.IsLeader(); !ok {
		return false
	}
	e.mu.Lock()
	failedAt, t := handOffFailedAt(e.term.written, to), e.termLocked()
	e.mu.Unlock()
	if err := m.requireCampaigning(e.key, to, true, t, failedAt, min(e.timing.RenewDeadline, requestTimeout)); err != nil {
		logf(LevelInfo, "lease %s: not handing off to %s (%s): %v", e.key, to, why, err)
		return false
	}
	ending, ok := m.claimEnd(e) // it stays registered, ended, as after a loss
	if !ok {
		return false // cancelled or shut down meanwhile
	}
	defer m.endDone(ending)
	reason := fmt.Errorf("%w to %s (%s)", ErrHandedOff, to, why)
	err := m.handOffElection(e, to, min(e.timing.RenewDeadline, requestTimeout), ownHandOffWait(e.timing), reason, nil)
	if err != nil {
		logf(LevelWarning, "lease %s: hand-off to %s (%s): %v", e.key, to, why, err)
	}
	return err == nil
}

// ownHandOffWait is how long a hand-off the library decides on its own (a
// policy, the preferred holder) waits for its target: a target that
// campaigns takes the lease in milliseconds, so one that has not within
// this is taken for gone, and the lease released.
func ownHandOffWait(t Timing) time.Duration { return min(t.RenewDeadline, time.Second) }

// failedSince reports a candidate a hand-off failed on at failedAt (zero:
// none) whose record was not written since: it has not campaigned again.
func failedSince(c Candidate, failedAt time.Time) bool {
	return !failedAt.IsZero() && !c.RenewTime.After(failedAt)
}

// handOffFailedAt is when a hand-off to to last failed, from the Lease.
func handOffFailedAt(l *coordinationv1.Lease, to string) time.Time {
	if l == nil {
		return time.Time{}
	}
	who, at, ok := strings.Cut(l.Annotations[HandOffFailedAnnotation], " ")
	if !ok || who != to {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}
	}
	return t
}

// bestOtherCandidate is the best live candidate but e itself that saw its
// term, listed within the time given, but one a hand-off already failed on
// (HandOffFailedAnnotation) whose record is older than that.
func (m *Manager) bestOtherCandidate(e *Election, within time.Duration) (string, bool) {
	cs, err := m.candidatesWithin(e.key.Namespace, e.key.Name, within)
	if err != nil {
		logf(LevelInfo, "lease %s: cannot list the candidates: %v", e.key, err)
		return "", false
	}
	e.mu.Lock()
	t, written := e.termLocked(), e.term.written
	e.mu.Unlock()
	cs = slices.DeleteFunc(cs, func(c Candidate) bool { return failedSince(c, handOffFailedAt(written, c.Identity)) })
	c, ok := bestCandidate(cs, e.identity, t, false, "", time.Now())
	return c.Identity, ok
}

// termLocked is the term e leads (or led); e.mu held.
func (e *Election) termLocked() term {
	t := term{token: e.term.token}
	if e.term.written != nil {
		t.lease = string(e.term.written.UID)
	}
	return t
}

// preferredRecheck: while the preferred holder does not campaign, the
// leader checks again at most this often (one read of its record).
const preferredRecheck = 10 * time.Second

// handOffState is what an election needs to hand off on its own.
type handOffState struct {
	// hook makes a hand-off the library decides (preferred holder,
	// PolicyYieldToNewer) and reports whether it happened; called on a
	// goroutine of its own.
	hook           func(to, why string) bool
	preferredTried string    // the preferred holder last acted on (e.mu)
	preferredAt    time.Time // and when
}

// preferredHolder is who an operator wants to lead: spec.preferredHolder
// where the API server keeps it, else PreferredHolderAnnotation.
func preferredHolder(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	if p := l.Spec.PreferredHolder; p != nil && *p != "" {
		return *p
	}
	return l.Annotations[PreferredHolderAnnotation]
}

// preferredHolderSeenLocked acts on the preferred holder named by a Lease
// this leader just wrote: a hand-off to it, on a goroutine of its own, at
// most once per preferredRecheck for the same name. e.mu held.
func (e *Election) preferredHolderSeenLocked(l *coordinationv1.Lease) {
	to := preferredHolder(l)
	if to == "" || to == e.identity || e.term.phase != phaseLeader {
		return
	}
	now := e.clock.Now()
	if to == e.handoff.preferredTried && now.Sub(e.handoff.preferredAt) < preferredRecheck {
		return
	}
	e.handoff.preferredTried, e.handoff.preferredAt = to, now
	go func() {
		defer logPanic(fmt.Sprintf("lease %s: hand-off to the preferred holder %s", e.key, to))
		e.handoff.hook(to, "the preferred holder")
	}()
}

// yieldToNewer follows the candidate records while this election leads
// and hands off once a candidate of a newer version campaigns and takes
// it (PolicyYieldToNewer). A preferred holder set by an operator wins: no
// yielding while one is named. Its own goroutine; it ends with the
// leadership.
func (e *Election) yieldToNewer() {
	defer logPanic(fmt.Sprintf("lease %s: following the candidates to yield to a newer version", e.key))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	retry := newBackoff(time.Second, 30*time.Second)
	for !e.Ended() {
		s := e.candidacy.store()
		lctx, lcancel := context.WithTimeout(ctx, requestTimeout)
		cs, rv, err := s.List(lctx, e.key.Namespace, e.key.Name)
		lcancel()
		if err == nil {
			e.mu.Lock()
			preferred, t := preferredHolder(e.term.written), e.termLocked()
			e.mu.Unlock()
			if c, ok := bestCandidate(cs, e.identity, t, true, e.opts.Version, time.Now()); ok && preferred == "" {
				if e.handoff.hook(c.Identity, "a newer version campaigns: "+c.Version) {
					return
				}
				err = errors.New("the newer candidate was not handed the lease")
			} else {
				var w watch.Interface
				if w, err = s.Watch(ctx, e.key.Namespace, e.key.Name, rv); err == nil {
					select {
					case <-e.ending.ended:
					case <-w.ResultChan():
					}
					w.Stop()
					retry.reset()
				}
			}
		}
		if err != nil {
			logf(LevelDebug, "lease %s: following the candidates: %v", e.key, err)
			select {
			case <-e.ending.ended:
			case <-e.clock.After(retry.next()):
			}
		}
	}
}

// handOff ends the leadership here (reason: what WaitLost reports) and
// writes the hand-off record to to, returning it (handed; written, the
// Lease as written, nil when the target already took it over). Only a
// leading election hands off. When the record cannot be written, the
// lease is released instead if it can be, and the Event of the end is
// recorded; after a hand-off record, the caller records it once the
// target took the lease or not. ended (nil: none) is called as the
// leadership ends here, if it does.
func (e *Election) handOff(to string, timeout time.Duration, reason error, ended func()) (handed record, written *coordinationv1.Lease, err error) {
	err = fmt.Errorf("hand off lease %s: %w (already ended)", e.key, ErrNotLeader)
	e.ending.once.Do(func() {
		e.boundWithdrawal(timeout)
		endedHere := e.end(reason) // false: lost meanwhile, nothing of ours to hand off
		if endedHere && ended != nil {
			ended()
		}
		e.ending.cancel()
		<-e.ending.runDone
		e.mu.Lock()
		held, token := e.term.written, e.term.token
		e.mu.Unlock()
		if !endedHere || held == nil {
			return
		}
		written, err = e.endTerm(held, timeout, "hand off", func(l *coordinationv1.Lease, now time.Time) {
			handOffSpec(l, to, e.timing, now)
		})
		switch {
		case err == nil && written == nil:
			err = fmt.Errorf("hand off lease %s: %w (the lease is no longer ours)", e.key, ErrNotLeader)
		case err != nil:
			// The write may have landed although its answer was lost: the
			// release reads the Lease after its conflict and finds the
			// hand-off record, which then stands (or its target already
			// leads on it).
			released, found, rerr := e.casWrite(held, timeout, "release", releaseSpec, e.holds)
			f := recordOf(found)
			switch {
			case rerr != nil:
				err = fmt.Errorf("%w; %w: %v", err, errReleaseFailed, rerr)
			case released != nil:
				e.stats.Released()
				err = fmt.Errorf("%w; %w", err, errReleasedInstead)
			case f.handedOffTo(to) && f.token == token:
				written, err = found, nil
			case f.holder == to && f.incarnation != "" && f.token > token:
				written, err = nil, nil // taken already
			default:
				err = fmt.Errorf("%w; the lease is no longer ours (holder now %q)", err, clip(f.holder))
			}
		}
		if err != nil {
			e.recordHandOff(to, err)
			return
		}
		handed = recordOf(written)
		handed.token = token // also when written is nil
		e.stats.HandedOff()
		logf(LevelInfo, "lease %s: %s handed the lease to %s", e.key, e.identity, to)
	})
	return handed, written, err
}

// recordHandOff records "<id> stopped leading: handed off to <to>".
func (e *Election) recordHandOff(to string, err error) {
	if !isClosed(e.elected) {
		return
	}
	token, uid := e.eventFacts()
	typ, msg := handOffEvent(e.identity, to, token, err)
	e.setEndEvent(e.recordEvent(uid, typ, msg))
}
