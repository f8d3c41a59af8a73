package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/k8s-lease/k8s-lease/lease/internal/endpoints"
	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Leader-only routing. While an election leads, the Service it names has
// one endpoint, the leader's, in an EndpointSlice of ours
// (lease/internal/endpoints). The slice carries the fencing token of the
// term that wrote it, and every write is a compare-and-swap that refuses a
// slice with a higher token: once a new leader's write has landed, no
// write of an older term can land after it (its update conflicts, its read
// shows the higher token), so traffic never goes back to a resumed or
// partitioned predecessor. The write goes out right after the acquisition,
// on a goroutine of its own (renewals never wait for it), and WaitElected
// returns after its first attempt: a leader starts serving once the
// Service routes to it. A graceful end (a cancel, Shutdown, a hand-off)
// withdraws the endpoint before the Lease is released, so that no request
// reaches a leader that stopped; a loss withdraws it too, best effort (a
// dead or cut-off leader's endpoint stays until the next leader's write
// replaces it). Failures of these writes never change the election: they
// are retried, logged, counted and reported as Events on the Lease.
//
// A leader killed with its endpoint published is followed by a term that
// may publish nothing (a plain client-go candidate, one of ours without
// an endpoint, a token below the slice's after the Lease's
// leaseTransitions were lowered), or by no term (the Lease deleted). So a
// candidate of ours with an endpoint, as a standby, checks the slice
// against each term the Lease shows (clearStaleRoute, once per term) and
// empties the slice of a term that record no longer shows, by a
// compare-and-swap that never touches the current term's. A leader whose
// write is refused while it leads does the same: no later term can have
// written the slice, its token is stale.

// endpointStore is where an election publishes the address it serves at.
type endpointStore interface {
	// Publish makes the Service's slice list exactly p's endpoint, unless a
	// later term (a higher token) wrote it: endpoints.ErrSuperseded.
	Publish(ctx context.Context, p endpoints.Publication) error
	// Withdraw removes p's endpoint if the slice still carries p's term.
	Withdraw(ctx context.Context, p endpoints.Publication) error
	// RetireStale empties the Service's slice if the term that wrote it is
	// over by the Lease's record (seen: the term the caller saw; nil: none).
	RetireStale(ctx context.Context, namespace, service, lease, self string, seen *endpoints.Term) (endpoints.Retired, error)
}

// ErrEndpointExists: the election already publishes another endpoint.
var ErrEndpointExists = errors.New("the election already publishes an endpoint")

// Endpoint is what an election publishes: the Service and the leader's
// address and port.
type Endpoint struct {
	Service string
	Address string
	Port    int
}

// endpointState is an election's part in its endpoint.
type endpointState struct {
	// routed is closed once a new leader may serve: at the acquisition, or
	// after the first write of its endpoint when it publishes one.
	// WaitElected waits for it.
	routed chan struct{}
	route  *route // the endpoint it publishes while it leads; nil: none
	// withdrawWithin bounds the endpoint's withdrawal before a release or a
	// hand-off (set by them, e.mu; > 0: the end is graceful, the endpoint
	// withdrawn first); 0: a loss, withdrawn within endpointTimeout.
	withdrawWithin time.Duration
	// trackAsync registers work that outlives the election's goroutine (a
	// withdrawal after a loss) with the Manager, whose Shutdown waits for
	// it or cancels it; the work runs under ctx and calls done.
	trackAsync func() (ctx context.Context, done func())
}

// route is an election's endpoint and the publisher of its current term;
// its fields are guarded by the election's mu.
type route struct {
	store    endpointStore
	endpoint Endpoint
	term     endpoints.Publication // the term being published (Token 0: none yet)
	stop     context.CancelFunc    // ends the publisher's retries
	done     chan struct{}         // closed when the publisher returned
	ended    bool                  // the term was withdrawn, or ended without one
	// A standby's check of the slice (clearStaleRoute): the term the Lease
	// showed when the last check was made, whether one was, and whether
	// one runs.
	checked   shownTerm
	checkedOK bool
	checking  bool
	// refused is the last refusal reported as an Event (superseded): the
	// same one again is counted and logged, not another Event, so that a
	// retry every 30 s does not spend the Lease's Event budget, which its
	// loss Event shares.
	refused string
}

// shownTerm is the term a snapshot of the Lease shows (gone: no Lease).
type shownTerm struct {
	gone bool
	term endpoints.Term
}

func termShown(s snapshot) shownTerm {
	if !s.rec.exists {
		return shownTerm{gone: true}
	}
	t := endpoints.Term{Token: s.rec.token, Holder: s.rec.holder}
	if s.lease != nil {
		t.LeaseUID = s.lease.UID
	}
	return shownTerm{term: t}
}

// PublishEndpoint makes the Service service in ns route to address:port
// while the election on ns/name with that id (0: whichever runs) leads:
// from its acquisition (WaitElected returns after the first write), until
// it ends. Called on a leading election, it writes the endpoint at once and
// returns after that first attempt. One endpoint per election: the same
// one again is a no-op, another is ErrEndpointExists. Failed writes are
// retried and reported (logs, stats, Events), not returned.
func (m *Manager) PublishEndpoint(ns, name string, id int64, ep Endpoint) error {
	if err := ValidateKey(ns, name); err != nil {
		return err
	}
	if id < 0 {
		return fmt.Errorf("%w: election id: must be >= 0, got %d", ErrInvalidArgument, id)
	}
	if err := validate.Endpoint(ep.Service, ep.Address, ep.Port); err != nil {
		return err
	}
	client, err := m.client()
	if err != nil {
		return err
	}
	e := m.ElectionID(ns, name, id)
	if e == nil || e.Ended() {
		return fmt.Errorf("publish an endpoint for lease %s: %w", Key{ns, name}, ErrNoElection)
	}
	return e.publishEndpoint(endpoints.Store{Client: client}, ep)
}

func (e *Election) publishEndpoint(store endpointStore, ep Endpoint) error {
	snap := e.obs.snapshot() // a standby checks the slice against it
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.term.phase == phaseEnded:
		return fmt.Errorf("publish an endpoint for lease %s: %w (it ended)", e.key, ErrNoElection)
	case e.endpoint.route != nil && e.endpoint.route.endpoint == ep:
		return nil
	case e.endpoint.route != nil:
		old := e.endpoint.route.endpoint
		return fmt.Errorf("%w: %s:%d for Service %s (asked for %s:%d for Service %s)", ErrEndpointExists,
			old.Address, old.Port, old.Service, ep.Address, ep.Port, ep.Service)
	}
	e.endpoint.route = &route{store: store, endpoint: ep}
	if !e.validLocked() {
		// A candidate (it publishes when elected), or a term that lapsed:
		// it never publishes. A candidate checks the slice at once.
		start := e.beginStaleCheckLocked(snap)
		e.mu.Unlock()
		start()
		e.mu.Lock()
		return nil
	}
	// It leads already (a free Lease can be taken before the host, which
	// needs the id, gets here): the host's WaitElected may return at once,
	// so this call waits for the first write in its place.
	first := make(chan struct{})
	e.startPublishingLocked(first)
	e.mu.Unlock()
	<-first
	e.mu.Lock()
	return nil
}

// startPublishingLocked starts the publisher of this term's endpoint, if
// the election has one; first (nil: none) is closed after its first
// attempt. e.mu held, the election leading.
func (e *Election) startPublishingLocked(first chan struct{}) bool {
	r := e.endpoint.route
	if r == nil || r.done != nil {
		return false
	}
	r.term = endpoints.Publication{Namespace: e.key.Namespace, Service: r.endpoint.Service, Lease: e.key.Name,
		Identity: e.identity, Address: r.endpoint.Address, Port: int32(r.endpoint.Port), Token: e.term.token}
	if e.term.written != nil {
		r.term.LeaseUID = e.term.written.UID
	}
	r.term.PrevToken = e.term.prevToken
	ctx, stop := context.WithCancel(context.Background())
	r.stop, r.done = stop, make(chan struct{})
	go e.publish(ctx, r.store, r.term, first, r.done)
	return true
}

// publish writes the term's endpoint until a write succeeds, a later term
// wrote the slice, the term's validity ended, or the term ends (ctx). A
// write in flight when the term ends is cut short: should it land all the
// same, the withdrawal's compare-and-swap (an update on the version it
// read, or an empty slice of the term taking the name) makes it fail or
// undoes it.
func (e *Election) publish(ctx context.Context, store endpointStore, p endpoints.Publication, first, done chan struct{}) {
	defer close(done)
	tried := func() {
		if first != nil {
			close(first)
			first = nil
		}
	}
	defer tried()
	b := newBackoff(time.Second, 30*time.Second)
	for {
		e.mu.Lock()
		valid := e.validLocked()
		e.mu.Unlock()
		if !valid || ctx.Err() != nil {
			return // no longer leader: a write now could route to a process that must not serve
		}
		err := e.publishOnce(ctx, store, p)
		switch {
		case err == nil:
			e.stats.EndpointWritten()
			logf(LevelInfo, "lease %s: Service %s/%s routes to %s at %s:%d (token %d)", e.key, p.Namespace, p.Service,
				p.Identity, p.Address, p.Port, p.Token)
			return
		case ctx.Err() != nil:
			return
		case errors.Is(err, endpoints.ErrSuperseded):
			tried() // WaitElected does not wait for a stale slice's removal
			if !e.superseded(ctx, store, p, err) {
				return
			}
		default:
			e.stats.EndpointFailed()
			logf(LevelWarning, "lease %s: routing Service %s/%s to %s at %s:%d failed (retrying; leadership is unaffected): %v",
				e.key, p.Namespace, p.Service, p.Identity, p.Address, p.Port, err)
			e.recordEndpointFailure(p, err)
		}
		tried()
		t := e.clock.NewTimer(b.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// superseded reports a write of p refused because the slice carries a
// higher token (counted, logged, a Warning Event), and whether to retry.
// A term that no longer leads stops: a later term wrote the slice. One
// that still leads retries, as no later term can exist while it lasts:
// the slice's token is stale (the Lease's leaseTransitions were lowered, by
// a manifest applied again, or it was written by hand), and its endpoint
// is no leader's, so it is emptied first (its token kept: it never falls).
// The retries route to this leader once the stale slice is deleted.
func (e *Election) superseded(ctx context.Context, store endpointStore, p endpoints.Publication, err error) (retry bool) {
	e.stats.EndpointSuperseded()
	// A leader whose Lease was deleted and re-created is refused by the
	// slice of the Lease that exists now, whose leader may live: it steps
	// down at its next renewal, and must not advise deleting that slice.
	recreated := errors.Is(err, endpoints.ErrLeaseRecreated)
	e.mu.Lock()
	leads := e.validLocked() && !recreated
	e.mu.Unlock()
	msg := fmt.Sprintf("%s's endpoint %s:%d for Service %s (token %d) was refused: %v", p.Identity, p.Address, p.Port, p.Service, p.Token, err)
	if leads {
		msg += fmt.Sprintf("; it leads, so no later leader wrote the slice: its token is stale (was the Lease's leaseTransitions lowered?); "+
			"delete EndpointSlice %s/%s to route to %s (retrying)", p.Namespace, endpoints.SliceName(p.Service), p.Identity)
	}
	logf(LevelWarning, "lease %s: %s", e.key, msg)
	e.mu.Lock()
	report := e.endpoint.route != nil && e.endpoint.route.refused != msg
	if report {
		e.endpoint.route.refused = msg
	}
	e.mu.Unlock()
	if report {
		_, uid := e.eventFacts()
		e.recordEvent(uid, kubeapi.EventTypeWarning, msg)
	}
	if !leads || ctx.Err() != nil {
		return false
	}
	e.retireStale(ctx, store, p.Service, "", &endpoints.Term{LeaseUID: p.LeaseUID, Token: p.Token, Holder: p.Identity})
	return true
}

// clearStaleRoute is the candidate loop's look at each snapshot s of the
// Lease: a standby with an endpoint checks the slice once per term the
// Lease shows (and again after a check that failed), on a goroutine of its
// own, and empties it when the term that wrote it is over by the Lease's
// record (retireStale): its leader died without withdrawing, and the
// current holder publishes nothing.
func (e *Election) clearStaleRoute(s snapshot) {
	e.mu.Lock()
	start := e.beginStaleCheckLocked(s)
	e.mu.Unlock()
	start()
}

// beginStaleCheckLocked marks the check of the slice against the term s
// shows as running, when one is due, and returns what starts it, to call
// without e.mu (the Manager tracks it, under its own lock); e.mu held.
func (e *Election) beginStaleCheckLocked(s snapshot) (start func()) {
	r := e.endpoint.route
	seen := termShown(s)
	if !s.synced || r == nil || e.term.phase != phaseCandidate || r.checking || (r.checkedOK && r.checked == seen) {
		return func() {}
	}
	if s.rec.exists && (s.rec.holder == "" || s.rec.handingOff()) {
		// Released or handed off: ours withdraw first, and a candidate
		// takes the Lease next. The check waits for that term.
		return func() {}
	}
	r.checking = true
	return func() {
		ctx, done := e.endpoint.trackAsync() // Shutdown waits for it, or cancels it
		// It ends with the candidacy too, and one registered after the
		// candidacy ended (a Shutdown may have gathered the work before)
		// does nothing.
		ctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(e.ctx, cancel)
		var hint *endpoints.Term
		if !seen.gone {
			hint = &seen.term
		}
		go func() {
			defer done()
			defer cancel()
			defer stop()
			// A Lease that names this candidacy by the time it reads it is
			// its own publisher's to write (it was elected meanwhile).
			checked := e.ctx.Err() == nil && e.retireStale(ctx, r.store, r.endpoint.Service, e.identity, hint)
			e.mu.Lock()
			r.checking = false
			if checked {
				r.checked, r.checkedOK = seen, true
			}
			e.mu.Unlock()
			if checked {
				// The Lease may show another term by now, which the
				// candidate loop saw while this check ran and skipped.
				e.clearStaleRoute(e.obs.snapshot())
			}
		}()
	}
}

// retireStale empties the slice of service when the term that wrote it is
// over by the Lease's record (endpoints.Store.RetireStale; seen is the
// term this election believes current; a Lease held by self is left to
// its publisher, "": none), within one endpoint timeout, and reports it:
// counted, logged and a Warning Event. checked is false when the check
// could not be made.
func (e *Election) retireStale(ctx context.Context, store endpointStore, service, self string, seen *endpoints.Term) (checked bool) {
	defer func() {
		if p := recover(); p != nil {
			logf(LevelError, "lease %s: checking Service %s's EndpointSlice for an ended term's endpoint: %v", e.key, service, panicError(p))
			checked = false
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, e.endpointTimeout())
	defer cancel()
	got, err := store.RetireStale(ctx, e.key.Namespace, service, e.key.Name, self, seen)
	if err != nil {
		logf(LevelInfo, "lease %s: checking Service %s/%s's EndpointSlice for an ended term's endpoint: %v", e.key, e.key.Namespace, service, err)
		return false
	}
	if !got.Emptied {
		return true
	}
	e.stats.StaleEndpointCleared()
	now := fmt.Sprintf("the Lease shows token %d held by %q", got.Now.Token, got.Now.Holder)
	if got.LeaseGone {
		now = "the Lease is gone"
	}
	msg := fmt.Sprintf("%s emptied EndpointSlice %s/%s: it routed to %v, the endpoint of %s (token %d), whose term is over (%s) and who never withdrew it",
		e.identity, e.key.Namespace, endpoints.SliceName(service), got.Addresses, got.Holder, got.Token, now)
	logf(LevelWarning, "lease %s: %s", e.key, msg)
	e.recordEvent(got.Now.LeaseUID, kubeapi.EventTypeWarning, msg)
	return true
}

// publishOnce is one write of the slice, a panic in it an error (the
// publisher retries).
func (e *Election) publishOnce(ctx context.Context, store endpointStore, p endpoints.Publication) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	injectPanic("publish")
	wctx, cancel := context.WithTimeout(ctx, e.endpointTimeout())
	defer cancel()
	return store.Publish(wctx, p)
}

// validLocked: the election leads and its guarantee holds now (IsLeader);
// e.mu held.
func (e *Election) validLocked() bool {
	return e.term.phase == phaseLeader && e.clock.Now().Before(e.term.validUntil)
}

// endpointTimeout bounds one write of the slice.
func (e *Election) endpointTimeout() time.Duration {
	return min(requestTimeout, e.timing.RenewDeadline)
}

// withdrawEndpoint ends the term's publishing: the publisher stops (a
// write in flight is cut short) and the endpoint is removed if the slice
// still carries this term, within timeout (and within withdrawWithin, set
// by a cancel or hand-off: half of what it may take, the release or the
// hand-off record gets the rest). Called on the election's goroutine once
// leadership ended locally: before the Lease is released or handed off,
// which wait for that goroutine; after a loss, on a goroutine of its own
// (endTermsEndpoint), under parent (cancelled by Shutdown at its timeout).
func (e *Election) withdrawEndpoint(parent context.Context, timeout time.Duration) {
	e.mu.Lock()
	r := e.endpoint.route
	if r == nil || r.ended {
		e.mu.Unlock()
		return
	}
	r.ended = true
	stop, done, term := r.stop, r.done, r.term
	if e.endpoint.withdrawWithin > 0 {
		timeout = min(timeout, e.endpoint.withdrawWithin)
	}
	e.mu.Unlock()
	if done == nil {
		return // never led
	}
	stop() // a write in flight returns at once
	<-done
	defer func() { // it runs on the election's goroutine, after containPanic
		if p := recover(); p != nil {
			logf(LevelError, "lease %s: withdrawing the endpoint of Service %s: %v", e.key, term.Service, panicError(p))
		}
	}()
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	if err := r.store.Withdraw(ctx, term); err != nil {
		e.stats.EndpointFailed()
		logf(LevelWarning, "lease %s: withdrawing %s's endpoint from Service %s/%s failed (the next leader's replaces it): %v",
			e.key, term.Identity, term.Namespace, term.Service, err)
		return
	}
	logf(LevelInfo, "lease %s: Service %s/%s no longer routes to %s", e.key, term.Namespace, term.Service, term.Identity)
}

// recordEndpointFailure reports a failed write of the slice as a Warning
// Event on the Lease (the Events' spam filter bounds their rate).
func (e *Election) recordEndpointFailure(p endpoints.Publication, err error) {
	_, uid := e.eventFacts()
	e.recordEvent(uid, kubeapi.EventTypeWarning, fmt.Sprintf("%s could not route Service %s to %s:%d (token %d; retrying): %v",
		p.Identity, p.Service, p.Address, p.Port, p.Token, err))
}

// endTermsEndpoint withdraws the endpoint as the election's goroutine ends:
// there, before a release or hand-off (they wait for that goroutine), or,
// after a loss or a contained panic, on a goroutine of its own, so that
// the observer, which the goroutine resumes next, is not held back (best
// effort: a later term's slice is never touched).
func (e *Election) endTermsEndpoint() {
	e.mu.Lock()
	graceful := e.endpoint.withdrawWithin > 0 // a cancel or a hand-off ends it (boundWithdrawal)
	hasRoute := e.endpoint.route != nil
	e.mu.Unlock()
	switch {
	case !hasRoute:
		return
	case graceful:
		e.withdrawEndpoint(context.Background(), e.endpointTimeout())
		return
	}
	ctx, done := e.endpoint.trackAsync() // Shutdown waits for it, or cancels it
	go func() {
		defer done()
		e.withdrawEndpoint(ctx, e.endpointTimeout())
	}()
}

// boundWithdrawal gives the endpoint's withdrawal half of within, the time
// an ending (a release, a hand-off record) may take; at least a nanosecond,
// so that withdrawWithin > 0 says the end is graceful.
func (e *Election) boundWithdrawal(within time.Duration) {
	e.mu.Lock()
	e.endpoint.withdrawWithin = max(within/2, time.Nanosecond)
	e.mu.Unlock()
}
