package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
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
	// routed is closed once a new leader may serve: at the acquisition, or
	// after the first write of its endpoint when it publishes one
	// (endpoint.go). WaitElected waits for it.
	routed chan struct{}
	ended  chan struct{} // closed when leadership or candidacy ends

	mu         sync.Mutex
	phase      phase
	token      int64
	validUntil time.Time
	written    *coordinationv1.Lease // our last successful write, for compare-and-swap
	// unanswered is the last acquisition that failed without proof that
	// it did not land (campaign.go): a cancel with no write of ours
	// answered reads the Lease and releases it if it names us.
	unanswered record
	endErr     error // nil when ended by Cancel
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
	route          *route      // the endpoint it publishes while it leads (endpoint.go); nil: none
	// withdrawWithin bounds the endpoint's withdrawal before a release or a
	// hand-off (set by them, e.mu; > 0: the end is graceful, the endpoint
	// withdrawn first); 0: a loss, withdrawn within endpointTimeout.
	withdrawWithin time.Duration
	prevToken      int64 // the token of the term before this one on the Lease (0: none known)
	// redial closes the connections that went silent under a renewal
	// (client.go); nil: none.
	redial *redialer
	// trackAsync registers work that outlives the election's goroutine (a
	// withdrawal after a loss) with the Manager, whose Shutdown waits for
	// it or cancels it; the work runs under ctx and calls done. nil:
	// untracked.
	trackAsync func() (ctx context.Context, done func())
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
		elected: make(chan struct{}), routed: make(chan struct{}), ended: make(chan struct{}),
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
	// Whatever ended the term (a cancel, a hand-off, a loss, a panic), its
	// endpoint is withdrawn before the Lease is released or handed off:
	// those wait for this goroutine.
	defer e.endTermsEndpoint()
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
	if c := e.candidacy; c != nil {
		c.startOnce.Do(func() {
			c.mu.Lock()
			c.started, c.asked = true, e.obs.snapshot().highestToken
			c.mu.Unlock()
			go c.put()
		})
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
	case <-e.routed:
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
		e.awaitEndWrites() // a host that gives up and exits leaves no record behind
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
		e.boundWithdrawal(releaseTimeout)
		endedHere := e.end(nil) // false: already lost, nothing of ours to release
		e.cancel()
		<-e.runDone
		e.mu.Lock()
		held, mayHold := e.written, e.unanswered.exists
		e.mu.Unlock()
		if endedHere && (held != nil || mayHold) {
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
// held nil: no write of ours was answered, and the Lease is read first.
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
