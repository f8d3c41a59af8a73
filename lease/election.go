package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

type phase int

const (
	phaseCandidate phase = iota
	phaseLeader
	phaseEnded
)

// Election is one candidacy on one Lease, and at most one term of
// leadership: after the term ends (loss or cancel) a new Election is needed.
//
// Leadership is guaranteed locally until (send time of the last successful
// write) + RenewDeadline on the monotonic clock: a competitor can take over
// only a full LeaseDuration after it saw that write, and LeaseDuration >
// RenewDeadline.
type Election struct {
	id          int64 // unique in the process (Manager.CancelElectionID)
	key         Key
	identity    string
	incarnation string
	timing      Timing
	leases      kubeapi.Leases
	obs         *observer
	clock       clock.Clock
	onEnd       func() (stillUsed bool) // releases the observer; called once, when the run ends
	stats       metricsSink

	ctx     context.Context
	cancel  context.CancelFunc
	runDone chan struct{}
	elected chan struct{} // closed on becoming leader
	ended   chan struct{} // closed when leadership or candidacy ends

	mu         sync.Mutex
	phase      phase
	token      int64
	validUntil time.Time
	written    *coordinationv1.Lease // our last successful write, for compare-and-swap
	endErr     error                 // nil when ended by Cancel
	lastAPIErr error
	endEvent   <-chan struct{} // closed once the Event ending the term is written (events.go)
	cancelOnce sync.Once
	events     eventSink // Kubernetes Events on leadership changes (events.go); nil: none
	opts       ElectionOptions
	// candidateStore gives the store of candidate records (candidates.go);
	// nil in unit tests that build elections by hand.
	candidateStore func() candidateStore
	// handOffHook makes a hand-off the library decides (preferred holder,
	// PolicyYieldToNewer) and reports whether it happened; called on a
	// goroutine of its own; nil: none.
	handOffHook    func(to, why string) bool
	candidacy      *candidacy // its candidate record (candidates.go); nil: none
	preferredTried string     // the preferred holder last acted on (e.mu)
	preferredAt    time.Time  // and when
	// firstRounds admits the election to its first round; firstRoundOver
	// leaves it once that round has an outcome (run's goroutine only). nil:
	// no gate (unit tests that build elections by hand).
	firstRounds    *gate
	firstRoundOver func()
	admitted       atomic.Bool // past firstRounds: it has sent or may send requests
}

func newIncarnation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newElection(key Key, identity string, t Timing, leases kubeapi.Leases, obs *observer, clk clock.Clock, stats metricsSink, onEnd func() bool) *Election {
	ctx, cancel := context.WithCancel(context.Background())
	return &Election{
		key: key, identity: identity, incarnation: newIncarnation(), timing: t,
		leases: leases, obs: obs, clock: clk, onEnd: onEnd, stats: stats,
		ctx: ctx, cancel: cancel, runDone: make(chan struct{}),
		elected: make(chan struct{}), ended: make(chan struct{}),
	}
}

func (e *Election) start() { go e.run() }

func (e *Election) run() {
	defer close(e.runDone)
	defer func() {
		if e.candidacy != nil {
			e.candidacy.end() // the record goes with the candidacy
		}
	}()
	// The share is given up first: an observer nobody else uses is not
	// resumed (no list) until it is used again.
	defer func() { e.obs.leadingEnded(e, e.onEnd()) }()
	notify := e.obs.subscribe()
	defer e.obs.unsubscribe(notify)
	defer e.recordLoss() // after containPanic: a contained panic's end is recorded too
	defer e.containPanic()
	injectPanic("campaign")
	started := e.clock.Now() // the campaign's time includes its wait for a place
	if e.firstRounds != nil {
		leave, ok := e.firstRounds.enter(e.ctx.Done())
		if !ok {
			return // cancelled before its first round
		}
		e.firstRoundOver = leave
		defer leave()
	}
	e.admitted.Store(true)
	if e.ctx.Err() != nil {
		return // cancelled meanwhile (enter may pick a free place over a cancel)
	}
	e.obs.start() // its list is this election's first request
	if err := e.campaign(notify, started); err != nil {
		if e.end(err) {
			logf(LevelError, "lease %s: %s gives up its candidacy: %v", e.key, e.identity, err)
		}
		return
	}
	e.recordElected() // also if cancelled since: its release is recorded too
	if e.ctx.Err() != nil {
		return
	}
	e.recordCandidacy() // elected: written after the acquisition, not beside it
	if e.opts.Policy&PolicyYieldToNewer != 0 && e.candidateStore != nil && e.handOffHook != nil {
		go e.yieldToNewer()
	}
	if reason := e.lead(); reason != nil && e.end(reason) {
		e.stats.Lost(lossReason(reason))
		logf(LevelWarning, "lease %s: %s lost leadership (token %d): %v", e.key, e.identity, e.token, reason)
	}
}

// recordCandidacy starts writing the candidate record, once: when the
// candidacy first waits as a standby or is elected, so that the write (and
// the first discovery) never competes with an acquisition.
func (e *Election) recordCandidacy() {
	if e.candidacy != nil {
		e.candidacy.startOnce.Do(func() { go e.candidacy.put() })
	}
}

// containPanic ends the election with ErrInternal instead of letting a
// panic kill the host; the Lease is not released (it expires), which is safe.
func (e *Election) containPanic() {
	if p := recover(); p != nil {
		err := panicError(p)
		if e.end(err) {
			logf(LevelError, "lease %s: %s: %v", e.key, e.identity, err)
		}
	}
}

// end finishes the election with reason (nil: cancelled); only the first
// call counts. Local leadership ends here, before any release is written.
func (e *Election) end(reason error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.phase == phaseEnded {
		return false
	}
	e.phase = phaseEnded
	e.endErr = reason
	close(e.ended)
	return true
}

// IsLeader reports whether leadership is guaranteed now, with the fencing
// token and how long the guarantee lasts without a further renewal.
func (e *Election) IsLeader() (bool, int64, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.phase != phaseLeader {
		return false, 0, 0
	}
	left := e.validUntil.Sub(e.clock.Now())
	if left <= 0 {
		return false, 0, 0
	}
	return true, e.token, left
}

// Ended reports whether the election is over.
func (e *Election) Ended() bool {
	select {
	case <-e.ended:
		return true
	default:
		return false
	}
}

// endReason is why the election ended: nil after Cancel.
func (e *Election) endReason() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.endErr
}

// WaitElected blocks until this election leads (returning its token), ends,
// or timeout passes; on timeout the candidacy is cancelled.
func (e *Election) WaitElected(timeout time.Duration) (int64, error) {
	timer := e.clock.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.elected:
	case <-e.ended:
	case <-timer.C():
		// Being elected, or ending, at the same moment wins over the
		// timeout: it happened first, and the end has its own reason.
		if ok, token, _ := e.IsLeader(); ok {
			return token, nil
		}
		if e.Ended() {
			break
		}
		_ = e.Cancel()
		if !e.admitted.Load() {
			return 0, fmt.Errorf("%w after %v; candidacy cancelled before its first request: it waited for its turn among "+
				"the elections this process was starting (%d at a time)", ErrWaitTimeout, timeout, cap(e.firstRounds.slots))
		}
		if last := e.lastAPIError(); last != nil {
			return 0, fmt.Errorf("%w after %v; candidacy cancelled; last API error: %v", ErrWaitTimeout, timeout, last)
		}
		return 0, fmt.Errorf("%w after %v; candidacy cancelled", ErrWaitTimeout, timeout)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.phase == phaseLeader {
		return e.token, nil
	}
	if e.endErr == nil {
		return 0, ErrCancelled
	}
	if e.token == 0 {
		return 0, fmt.Errorf("candidacy ended: %w", e.endErr)
	}
	return 0, fmt.Errorf("leadership lost: %w", e.endErr)
}

// WaitLost blocks until leadership (or the candidacy) ends: nil when
// cancelled, else the reason.
func (e *Election) WaitLost() error {
	<-e.ended
	return e.endReason()
}

// Cancel ends the election: leadership ends locally first, then, if it led,
// the Lease is released (holder cleared) within the renew deadline (at most
// the request timeout), after the answer to a renewal on its way (at most
// inlineCut, see lead). Idempotent; later calls return nil at once.
func (e *Election) Cancel() error {
	return e.CancelWithin(min(e.timing.RenewDeadline, requestTimeout))
}

// CancelWithin is Cancel with an explicit bound on the release.
func (e *Election) CancelWithin(releaseTimeout time.Duration) error {
	var err error
	e.cancelOnce.Do(func() {
		endedHere := e.end(nil) // false: already lost, nothing of ours to release
		e.cancel()
		<-e.runDone
		e.mu.Lock()
		held := e.written
		e.mu.Unlock()
		if endedHere && held != nil {
			err = e.safeRelease(held, releaseTimeout)
		}
		e.recordRelease(endedHere, err)
	})
	return err
}

// ID is the election's id, unique in the process.
func (e *Election) ID() int64 { return e.id }

// safeRelease is release with a panic turned into an error: Shutdown
// releases on goroutines of its own, where a panic would kill the host.
func (e *Election) safeRelease(held *coordinationv1.Lease, timeout time.Duration) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("release lease %s: %w", e.key, panicError(p))
		}
	}()
	injectPanic("release")
	return e.release(held, timeout)
}

// Done is closed when the election's goroutine has exited.
func (e *Election) Done() <-chan struct{} { return e.runDone }

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
	for e.ctx.Err() == nil {
		snap := e.obs.snapshot()
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
		act, until := decide(snap, e.clock.Now(), e.timing.LeaseDuration, e.identity)
		if act == actWait || act == actWaitSync && snap.err != nil {
			e.recordCandidacy() // a standby now: its record costs the campaign nothing
			e.leaveFirstRound()
		}
		if act == actWait {
			// Another holder is the reason now: earlier errors are not.
			e.clearAPIErr()
			fixRetry.reset()
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
		err := e.acquire(snap, act == actCreate, started, freeSince)
		e.leaveFirstRound()
		if err == nil {
			return nil
		}
		if permanent(err) {
			return fmt.Errorf("cannot write lease %s: %w", e.key, err)
		}
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
			e.stats.APIError()
			logf(LevelWarning, "lease %s: %s could not acquire: %v", e.key, e.identity, err)
		}
		if !e.waitFor(notify, e.clock.Now().Add(delay)) {
			return nil
		}
	}
	return nil
}

// leaveFirstRound gives back this election's place in firstRounds (once).
func (e *Election) leaveFirstRound() {
	if e.firstRoundOver != nil {
		e.firstRoundOver()
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
	same := e.lastAPIErr != nil && e.lastAPIErr.Error() == err.Error()
	e.lastAPIErr = err
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
	cur, err := e.leases.Get(ctx, e.key.Name, metav1.GetOptions{})
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
	e.lastAPIErr = nil
	e.mu.Unlock()
}

// lastAPIError is the last error an API request of this election met, or nil.
func (e *Election) lastAPIError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastAPIErr
}

func (e *Election) setAPIErr(err error) {
	e.mu.Lock()
	e.lastAPIErr = err
	e.mu.Unlock()
}

// acquire takes the Lease over (or creates it) with a compare-and-swap on
// the observed resource version and the next fencing token. The campaign's
// start and when it judged the lease free time the metrics.
func (e *Election) acquire(snap snapshot, create bool, started, freeSince time.Time) error {
	token, err := nextToken(snap.rec.token, snap.highestToken)
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
		got, err = e.leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		got, err = e.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	e.obs.apply(got, got.ResourceVersion)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.written = got // even if cancelled meanwhile: Cancel then releases it
	if e.phase != phaseCandidate {
		return nil
	}
	e.phase, e.token = phaseLeader, token
	e.lastAPIErr = nil // this term's renewals report their own
	e.validUntil = sent.Add(e.timing.RenewDeadline)
	e.stats.Elected(e.clock.Since(freeSince), e.clock.Since(started))
	close(e.elected)
	e.obs.pauseWhileLeading(e)
	logf(LevelInfo, "lease %s: %s elected, token %d", e.key, e.identity, token)
	return nil
}
