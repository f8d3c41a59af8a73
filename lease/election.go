package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
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
	opts        ElectionOptions
	api         leaseAPI // its Lease client (client.go)
	obs         *observer
	clock       clock.WithDelayedExecution
	stats       metricsSink
	events      eventSink // Kubernetes Events on leadership changes (events.go)

	ctx     context.Context
	elected chan struct{} // closed on becoming leader

	mu   sync.Mutex
	term termState // e.mu

	handoff    handOffState    // handoff.go
	endpoint   endpointState   // endpoint.go
	candidacy  candidacyState  // candidates.go
	firstRound firstRoundState // process.go
	ending     ending
}

// termState is the election's own state; e.mu guards it.
type termState struct {
	phase      phase
	token      int64
	validUntil time.Time
	written    *coordinationv1.Lease // our last successful write, for compare-and-swap
	// unanswered is the last acquisition that failed without proof that
	// it did not land (campaign.go): a cancel with no write of ours
	// answered reads the Lease and releases it if it names us.
	unanswered record
	// unansweredRenewal is the renewal sent before announcing a term
	// (renewBeforeAnnouncing) that failed without proof that it did not
	// land, as it would show on the Lease.
	unansweredRenewal record
	lastAPIErr        error
	prevToken         int64 // the token of the term before this one on the Lease (0: none known)
}

// ending is how an election ends: a cancel, or the first reason of end.
type ending struct {
	cancel  context.CancelFunc // of Election.ctx
	once    sync.Once          // of CancelWithin and handOff
	runDone chan struct{}      // closed when run's goroutine has exited
	ended   chan struct{}      // closed when leadership or candidacy ends
	err     error              // nil when ended by Cancel (e.mu)
	// event is closed once the Event ending the term is written (events.go).
	event <-chan struct{}
	onEnd func() (stillUsed bool) // releases the observer; called once, when the run ends
}

func newIncarnation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// electionParts are what an election uses besides its own state: the
// Manager passes its own (manager.go). newElection puts an inert part in
// place of each optional one left out, so that no field of an Election is
// nil because a unit test built it.
type electionParts struct {
	leases kubeapi.Leases             // required
	obs    *observer                  // nil: one of its own on leases, not started (a test that runs the election passes one it started)
	clock  clock.WithDelayedExecution // nil: the real clock
	stats  metricsSink                // nil: counters of its own
	events eventSink                  // nil: no Events
	// onEnd gives up the election's share of obs as its run ends and
	// reports whether others still use it (nil: nobody else does).
	onEnd func() (stillUsed bool)
	// candidates and store keep the candidacy's record (nil: records are
	// kept nowhere, noCandidateStore).
	candidates *candidateRegistry
	store      func() candidateStore
	// handOff hands the lease over on the library's own decision (the
	// preferred holder, the policies; nil: it declines).
	handOff func(to, why string) bool
	// firstRounds admits the first rounds of the process's elections a few
	// at a time (nil: a gate of its own, of one place).
	firstRounds *gate
	// trackAsync registers work that outlives the run with the Manager's
	// Shutdown (nil: untracked, under the background context).
	trackAsync func() (ctx context.Context, done func())
	// redial closes the connections a renewal found silent (nil: it closes
	// none; a nil *redialer is inert).
	redial *redialer
	// urgentLeases: the Lease through the client's urgent pool (see
	// redialer; nil: none).
	urgentLeases kubeapi.Leases
}

// urgentLeases is namespace's Leases through c's urgent pool, nil if it
// has none.
func urgentLeases(c kubeapi.Client, namespace string) kubeapi.Leases {
	if u := c.Urgent(); u != nil {
		return u.Leases(namespace)
	}
	return nil
}

// newElection builds an election on key for identity; start runs it.
func newElection(key Key, identity string, t Timing, opts ElectionOptions, p electionParts) *Election {
	if p.leases == nil {
		panic("newElection: no Lease client")
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.stats == nil {
		p.stats = &leaseStats{}
	}
	if p.obs == nil {
		p.obs = newObserver(p.leases, key.Name, p.clock, watchLife(t.LeaseDuration, false), 0, p.stats)
	}
	if p.events == nil {
		p.events = noEvents{}
	}
	if p.onEnd == nil {
		p.onEnd = func() bool { return false }
	}
	if p.candidates == nil {
		p.candidates = &candidateRegistry{}
	}
	if p.store == nil {
		p.store = func() candidateStore { return noCandidateStore{} }
	}
	if p.handOff == nil {
		p.handOff = func(to, why string) bool { return false }
	}
	if p.firstRounds == nil {
		p.firstRounds = newGate(1)
	}
	if p.trackAsync == nil {
		p.trackAsync = func() (context.Context, func()) { return context.Background(), func() {} }
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Election{
		key: key, identity: identity, incarnation: newIncarnation(), timing: t, opts: opts,
		api: leaseAPI{leases: p.leases, urgent: p.urgentLeases, redial: p.redial}, obs: p.obs, clock: p.clock, stats: p.stats, events: p.events,
		ctx: ctx, elected: make(chan struct{}),
		handoff:    handOffState{hook: p.handOff},
		endpoint:   endpointState{routed: make(chan struct{}), trackAsync: p.trackAsync},
		candidacy:  candidacyState{store: p.store},
		firstRound: firstRoundState{gate: p.firstRounds},
		ending:     ending{cancel: cancel, runDone: make(chan struct{}), ended: make(chan struct{}), onEnd: p.onEnd},
	}
	e.candidacy.record = newCandidacy(e, p.candidates)
	return e
}

func (e *Election) start() { go e.run() }

func (e *Election) run() {
	defer close(e.ending.runDone)
	defer e.candidacy.record.end() // the record goes with the candidacy
	// The share is given up first: an observer nobody else uses is not
	// resumed (no list) until it is used again.
	defer func() { e.obs.leadingEnded(e, e.ending.onEnd()) }()
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
	leave, ok := e.firstRound.gate.enter(e.ctx.Done())
	if !ok {
		return // cancelled before its first round
	}
	e.firstRound.over = leave
	defer leave()
	e.firstRound.admitted.Store(true)
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
	if e.opts.Policy&PolicyYieldToNewer != 0 {
		go e.yieldToNewer()
	}
	if reason := e.lead(); reason != nil && e.end(reason) {
		e.stats.Lost(lossReason(reason))
		logf(LevelWarning, "lease %s: %s lost leadership (token %d): %v", e.key, e.identity, e.term.token, reason)
	}
}

// recordCandidacy starts writing the candidate record, once: when the
// candidacy first waits as a standby or is elected, so that the write (and
// the first discovery) never competes with an acquisition.
func (e *Election) recordCandidacy() {
	c := e.candidacy.record
	c.startOnce.Do(func() {
		c.mu.Lock()
		c.started, c.asked = true, e.obs.snapshot().highestToken
		c.mu.Unlock()
		go c.put()
	})
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
	if e.term.phase == phaseEnded {
		return false
	}
	e.term.phase = phaseEnded
	e.ending.err = reason
	close(e.ending.ended)
	return true
}

// IsLeader reports whether leadership is guaranteed now, with the fencing
// token and how long the guarantee lasts without a further renewal.
func (e *Election) IsLeader() (bool, int64, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term.phase != phaseLeader {
		return false, 0, 0
	}
	left := e.term.validUntil.Sub(e.clock.Now())
	if left <= 0 {
		return false, 0, 0
	}
	return true, e.term.token, left
}

// Ended reports whether the election is over.
func (e *Election) Ended() bool {
	select {
	case <-e.ending.ended:
		return true
	default:
		return false
	}
}

// endReason is why the election ended: nil after Cancel.
func (e *Election) endReason() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ending.err
}

// WaitElected blocks until this election leads (returning its token), ends,
// or timeout passes; on timeout the candidacy is cancelled. A term is
// announced with at least a retry period of validity left (see
// renewBeforeAnnouncing).
func (e *Election) WaitElected(timeout time.Duration) (int64, error) {
	timer := e.clock.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.endpoint.routed:
	case <-e.ending.ended:
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
		if !e.firstRound.admitted.Load() {
			return 0, fmt.Errorf("%w after %v; candidacy cancelled before its first request: it waited for its turn among "+
				"the elections this process was starting (%d at a time)", ErrWaitTimeout, timeout, cap(e.firstRound.gate.slots))
		}
		if last := e.lastAPIError(); last != nil {
			return 0, fmt.Errorf("%w after %v; candidacy cancelled; last API error: %v", ErrWaitTimeout, timeout, last)
		}
		return 0, fmt.Errorf("%w after %v; candidacy cancelled", ErrWaitTimeout, timeout)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term.phase == phaseLeader {
		return e.term.token, nil
	}
	if e.ending.err == nil {
		return 0, ErrCancelled
	}
	if e.term.token == 0 {
		return 0, fmt.Errorf("candidacy ended: %w", e.ending.err)
	}
	return 0, fmt.Errorf("leadership lost: %w", e.ending.err)
}

// WaitLost blocks until leadership (or the candidacy) ends: nil when
// cancelled, else the reason.
func (e *Election) WaitLost() error {
	<-e.ending.ended
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
	e.ending.once.Do(func() {
		e.boundWithdrawal(releaseTimeout)
		endedHere := e.end(nil) // false: already lost, nothing of ours to release
		e.ending.cancel()
		<-e.ending.runDone
		e.mu.Lock()
		held, mayHold := e.term.written, e.term.unanswered.exists
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
func (e *Election) Done() <-chan struct{} { return e.ending.runDone }
