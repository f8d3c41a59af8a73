package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Hand-off: a leader gives the lease to a chosen candidate, which takes it
// in about two round trips instead of winning a race.
//
// The leader stops leading locally first (IsLeader 0), then writes, with a
// compare-and-swap on its last write, the hand-off record (handOffSpec):
// the target as holder, renewed now, for the leader's lease duration, with
// no incarnation and HandOffAnnotation naming the target. Only the target
// acts on it (decide: actAcquire), with the compare-and-swap every
// acquisition makes, and the next fencing token. Every other candidate, ours
// or plain client-go, sees a live holder and waits a lease duration from
// seeing it: that is the window in which only the target may take the
// lease. A target that does not take it is passed over after that window,
// so a dead target cannot block the service; HandOff itself releases the
// lease when its timeout passes first.

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
)

// HandOff ends this process's leadership of ns/name and hands the lease to
// the candidate identity to, then waits until to leads (nil) or timeout
// passes: the lease is then released normally, so that any candidate may
// take it, and ErrHandOffTimeout is returned. The election on the lease is
// over either way (WaitLost returns nil, as after a cancel). A target with
// no live candidate record is refused before anything changes (when the
// records can be read at all).
func (m *Manager) HandOff(ns, name, to string, timeout time.Duration) error {
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
	e := m.elections[key]
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
	if err := m.requireCampaigning(key, to); err != nil {
		return err
	}
	if !m.forgetElection(e) {
		return fmt.Errorf("hand off lease %s: %w (the election ended meanwhile)", key, ErrNotLeader)
	}
	return m.handOffElection(e, to, timeout, nil)
}

// requireCampaigning refuses a target with no live candidate record (one
// read by name). When the record cannot be read (RBAC), the hand-off goes
// ahead: the timeout bounds it.
func (m *Manager) requireCampaigning(key Key, to string) error {
	client, err := m.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(withNS(context.Background(), key.Namespace), requestTimeout)
	defer cancel()
	c, found, err := m.candidates.storeFor(client).get(ctx, key.Name, to)
	switch {
	case err != nil:
		logf(LevelInfo, "lease %s: cannot check that %s campaigns (handing off all the same): %v", key, to, err)
		return nil
	case !found:
		return fmt.Errorf("hand off lease %s: %w: no candidate record for %q", key, errTargetNotSeen, to)
	case time.Since(c.RenewTime) > candidateTTL:
		return fmt.Errorf("hand off lease %s: %w: %q's candidate record was last renewed %v ago", key, errTargetNotSeen, to,
			time.Since(c.RenewTime).Round(time.Second))
	}
	return nil
}

// forgetElection removes e from the running elections, as a cancel does,
// and reports whether it was still there.
func (m *Manager) forgetElection(e *Election) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.elections[e.key] != e {
		return false
	}
	delete(m.elections, e.key)
	return true
}

// handOffElection hands e's lease to to and waits up to timeout for it to
// lead; e is no longer in m.elections. reason is what WaitLost reports: nil
// when the host asked for the hand-off.
func (m *Manager) handOffElection(e *Election, to string, timeout time.Duration, reason error) error {
	key := e.key
	client, err := m.client()
	if err != nil {
		return err
	}
	// A share of the observer of our own, taken before the election gives
	// up its share: the observer then resumes (it pauses while we lead) and
	// shows the target taking the lease.
	m.mu.Lock()
	obs := m.acquireObserverLocked(client, key, defaultResync)
	m.mu.Unlock()
	defer m.releaseObserver(key)
	notify := obs.subscribe()
	defer obs.unsubscribe(notify)

	deadline := m.clock.Now().Add(timeout)
	written, err := e.handOff(to, min(timeout, e.timing.RenewDeadline, requestTimeout), reason)
	if err != nil {
		return err
	}
	handed := recordOf(written)
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
	// The target did not take it: release the hand-off record (if it is
	// still the current one), so that anyone may take the lease now.
	if _, err := e.endTerm(written, min(e.timing.RenewDeadline, requestTimeout), "release after a hand-off to "+to, releaseSpec); err != nil {
		return fmt.Errorf("%w: %q did not take lease %s within %v, and releasing it failed: %v", ErrHandOffTimeout, to, key, timeout, err)
	}
	return fmt.Errorf("%w: %q did not take lease %s within %v (is it campaigning?); %w", ErrHandOffTimeout, to, key, timeout, errReleasedInstead)
}

// handOffOnItsOwn is a hand-off the library decides (the preferred holder,
// PolicyYieldToNewer), on a goroutine of its own: the host learns of it
// from WaitLost (ErrHandedOff) and IsLeader, as of a loss.
func (m *Manager) handOffOnItsOwn(e *Election, to, why string) {
	if ok, _, _ := e.IsLeader(); !ok {
		return
	}
	if err := m.requireCampaigning(e.key, to); err != nil {
		logf(LevelInfo, "lease %s: not handing off to %s (%s): %v", e.key, to, why, err)
		return
	}
	if !m.forgetElection(e) {
		return
	}
	reason := fmt.Errorf("%w to %s (%s)", ErrHandedOff, to, why)
	if err := m.handOffElection(e, to, e.timing.LeaseDuration, reason); err != nil {
		logf(LevelWarning, "lease %s: hand-off to %s (%s): %v", e.key, to, why, err)
	}
}

// bestOtherCandidate is the best live candidate but e itself.
func (m *Manager) bestOtherCandidate(e *Election) (string, bool) {
	cs, err := m.Candidates(e.key.Namespace, e.key.Name)
	if err != nil {
		logf(LevelInfo, "lease %s: cannot list the candidates: %v", e.key, err)
		return "", false
	}
	c, ok := bestCandidate(cs, e.identity, false, "", time.Now())
	return c.Identity, ok
}

// preferredRecheck: while the preferred holder does not campaign, the
// leader checks again at most this often (one list of the records).
const preferredRecheck = 10 * time.Second

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

// preferredHolderSeen acts on the preferred holder named by a Lease this
// leader just wrote: a hand-off to it, on a goroutine of its own, at most
// once per preferredRecheck for the same name. e.mu held.
func (e *Election) preferredHolderSeenLocked(l *coordinationv1.Lease) {
	to := preferredHolder(l)
	if to == "" || to == e.identity || e.handOffHook == nil || e.phase != phaseLeader {
		return
	}
	now := e.clock.Now()
	if to == e.preferredTried && now.Sub(e.preferredAt) < preferredRecheck {
		return
	}
	e.preferredTried, e.preferredAt = to, now
	go e.handOffHook(to, "the preferred holder")
}

// yieldToNewer follows the candidate records while this election leads
// and hands off once a candidate of a newer version campaigns
// (PolicyYieldToNewer). Its own goroutine; it ends with the leadership.
func (e *Election) yieldToNewer() {
	ctx, cancel := context.WithCancel(withNS(context.Background(), e.key.Namespace))
	defer cancel()
	retry := newBackoff(time.Second, 30*time.Second)
	for {
		lctx, lcancel := context.WithTimeout(ctx, requestTimeout)
		cs, err := e.store.list(lctx, e.key.Name)
		lcancel()
		if err == nil {
			if c, ok := bestCandidate(cs, e.identity, true, e.opts.Version, time.Now()); ok {
				e.handOffHook(c.Identity, "a newer version campaigns: "+c.Version)
				return
			}
			var w watch.Interface
			if w, err = e.store.watch(ctx, e.key.Name); err == nil {
				select {
				case <-e.ended:
				case <-w.ResultChan():
				}
				w.Stop()
				retry.reset()
			}
		}
		if err != nil {
			logf(LevelDebug, "lease %s: following the candidates: %v", e.key, err)
			select {
			case <-e.ended:
			case <-e.clock.After(retry.next()):
			}
		}
		if e.Ended() {
			return
		}
	}
}

// handOff ends the leadership here (reason: what WaitLost reports) and
// writes the hand-off record to to, returning it. Only a leading election
// hands off. When the record cannot be written, the lease is released
// instead if it can be.
func (e *Election) handOff(to string, timeout time.Duration, reason error) (*coordinationv1.Lease, error) {
	var written *coordinationv1.Lease
	err := fmt.Errorf("hand off lease %s: %w (already ended)", e.key, ErrNotLeader)
	e.cancelOnce.Do(func() {
		endedHere := e.end(reason) // false: lost meanwhile, nothing of ours to hand off
		e.cancel()
		<-e.runDone
		e.mu.Lock()
		held := e.written
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
			if rerr := e.release(held, timeout); rerr != nil {
				err = fmt.Errorf("%w; releasing it failed too: %v", err, rerr)
			} else {
				err = fmt.Errorf("%w; %w", err, errReleasedInstead)
			}
		default:
			e.stats.handOffs.Add(1)
			logf(LevelInfo, "lease %s: %s handed the lease to %s", e.key, e.identity, to)
		}
		e.recordHandOff(to, err)
	})
	return written, err
}

// recordHandOff records "<id> stopped leading: handed off to <to>".
func (e *Election) recordHandOff(to string, err error) {
	if e.events == nil || !isClosed(e.elected) {
		return
	}
	token, uid := e.eventFacts()
	typ, why := corev1.EventTypeNormal, "handed off to "+to
	if err != nil {
		typ, why = corev1.EventTypeWarning, fmt.Sprintf("hand-off to %s failed (the lease expires after its duration): %v", to, err)
	}
	e.events.record(e.key, uid, e.identity, typ, fmt.Sprintf("%s stopped leading: %s (fencing token %d)", e.identity, why, token))
}
