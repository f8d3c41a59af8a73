package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/internal/events"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Manager owns the client and every election, watch and observer of a
// process. All methods are safe for concurrent use.
type Manager struct {
	clock clock.WithDelayedExecution
	api   managerAPI

	mu          sync.Mutex
	elections   electionRegistry
	watches     watchRegistry    // holder.go
	observers   observerRegistry // observers.go
	ends        endings
	stats       map[Key]*leaseStats
	metricsSize atomic.Int64      // bytes of the last Metrics text, to size the next
	events      *events.Recorder  // Kubernetes Events on leadership changes (events.go)
	candidates  candidateRegistry // candidate records (candidates.go)
	firstRounds *gate             // admits elections to their first round (process.go)
}

// managerAPI is the Manager's client and how it is made.
type managerAPI struct {
	// initMu serializes loading the configuration (Init); the hook runs
	// first on every attempt (the C layer reads the host's environment).
	initMu   sync.Mutex
	initHook func() error

	kube   kubeapi.Client // m.mu
	redial *redialer      // closes kube's connections that went silent (client.go); m.mu
}

// electionRegistry is the Manager's elections; m.mu guards it.
type electionRegistry struct {
	running map[Key]*Election
	// replaced keeps, by id, the last ended elections that a new election
	// on the same lease replaced, so that an object holding the old id
	// still gets its outcome (at most maxReplacedElections, oldest dropped).
	replaced map[int64]*Election
	lastID   int64 // ids of elections and watches, unique in the process
}

// endings is the work of elections being ended or ended; m.mu guards it.
type endings struct {
	// elections holds the elections being ended (a cancel, a hand-off), by
	// a channel closed when that is done: Shutdown and a concurrent cancel
	// wait for them (claimEnd).
	elections map[chan struct{}]*Election
	// async holds work of ended elections still running (a withdrawal
	// after a loss: trackAsync), by a channel closed when it is done.
	async map[chan struct{}]context.CancelFunc
}

// NewManager returns a Manager using clk (nil: the real clock). It needs a
// client (SetClient) before elections or watches can start.
func NewManager(clk clock.WithDelayedExecution) *Manager {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Manager{clock: clk,
		elections: electionRegistry{running: map[Key]*Election{}, replaced: map[int64]*Election{}},
		watches:   watchRegistry{running: map[Key]*HolderWatch{}, stopping: map[Key][]*HolderWatch{}},
		observers: observerRegistry{leases: map[Key]*observedLease{}, highestToken: map[Key]int64{}},
		ends:      endings{elections: map[chan struct{}]*Election{}, async: map[chan struct{}]context.CancelFunc{}},
		stats:     map[Key]*leaseStats{}, firstRounds: firstRounds, events: newEventRecorder()}
}

// SetClient sets the client if none is set yet, and reports whether it did.
func (m *Manager) SetClient(c kubeapi.Client) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.api.kube != nil {
		return false
	}
	m.api.kube = c
	m.api.redial = &redialer{conns: c, urgent: c.Urgent()}
	return true
}

// SetInitHook sets a function that Init runs before loading the
// configuration, on every attempt; an error from it fails that attempt.
func (m *Manager) SetInitHook(hook func() error) {
	m.api.initMu.Lock()
	defer m.api.initMu.Unlock()
	m.api.initHook = hook
}

// Initialized reports whether a client is set.
func (m *Manager) Initialized() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.api.kube != nil
}

// client returns the client, initializing on first use (see Init): every
// function that needs the cluster works without an explicit Init, and a
// failed attempt is made again at the next call.
func (m *Manager) client() (kubeapi.Client, error) {
	m.mu.Lock()
	c := m.api.kube
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if _, err := m.Init(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.api.kube, nil
}

// RunElection starts a candidacy on ns/name without waiting for the network.
func (m *Manager) RunElection(ns, name, identity string, t Timing) (*Election, error) {
	return m.RunElectionWith(ns, name, identity, t, ElectionOptions{})
}

// RunElectionWith is RunElection with a declared version and priority and
// a leader policy (see ElectionOptions).
func (m *Manager) RunElectionWith(ns, name, identity string, t Timing, opts ElectionOptions) (*Election, error) {
	injectPanic("call")
	if err := ValidateKey(ns, name); err != nil {
		return nil, err
	}
	if err := ValidateIdentity(identity); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	client, err := m.client()
	if err != nil {
		return nil, err
	}
	key := Key{ns, name}
	m.mu.Lock()
	old := m.elections.running[key]
	if old != nil && !old.Ended() {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s (cancel it first)", ErrElectionExists, key)
	}
	if old != nil {
		m.keepReplacedLocked(old)
	}
	obs := m.acquireObserverLocked(client, key, watchLife(t.LeaseDuration, client.FindsDeadConnections()), false)
	obs.expectRenewalsEvery(t.RetryPeriod)
	var e *Election
	e = newElection(key, identity, t, opts, electionParts{
		leases: client.Leases(ns), urgentLeases: urgentLeases(client, ns), obs: obs, clock: m.clock, stats: m.statsLocked(key), events: m.events.Use(client),
		onEnd:       func() bool { return m.releaseObserver(key) },
		candidates:  &m.candidates,
		store:       func() candidateStore { return m.candidates.storeFor(client) }, // off the caller's thread: it may ask the server
		handOff:     func(to, why string) bool { return m.handOffOnItsOwn(e, to, why) },
		firstRounds: m.firstRounds, trackAsync: m.trackAsync, redial: m.api.redial,
	})
	m.statsLocked(key).CampaignStarted(t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
	e.id = m.nextIDLocked()
	m.elections.running[key] = e
	e.start()
	m.mu.Unlock()
	return e, nil
}

// Election returns the election on ns/name (running or ended), or nil.
func (m *Manager) Election(ns, name string) *Election {
	return m.ElectionID(ns, name, 0)
}

// ElectionID returns the election on ns/name with that id (0: whichever
// is there), also an ended one that a later election replaced; nil when
// there is none, or it was forgotten.
func (m *Manager) ElectionID(ns, name string, id int64) *Election {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.elections.running[Key{ns, name}]
	if id == 0 || (e != nil && e.id == id) {
		return e
	}
	if r := m.elections.replaced[id]; r != nil && r.key == (Key{ns, name}) {
		return r
	}
	return nil
}

// nextIDLocked returns a new election or watch id; m.mu held.
func (m *Manager) nextIDLocked() int64 {
	m.elections.lastID++
	return m.elections.lastID
}

// maxReplacedElections bounds electionRegistry.replaced.
const maxReplacedElections = 64

func (m *Manager) keepReplacedLocked(e *Election) {
	m.elections.replaced[e.id] = e
	for len(m.elections.replaced) > maxReplacedElections {
		oldest := e.id
		for id := range m.elections.replaced {
			oldest = min(oldest, id)
		}
		delete(m.elections.replaced, oldest)
	}
}

// CancelElection ends the election on ns/name (releasing a held lease) and
// forgets it. No election is not an error.
func (m *Manager) CancelElection(ns, name string) error {
	return m.CancelElectionID(ns, name, 0)
}

// CancelElectionID is CancelElection for the election with that id only
// (0: whichever runs): an object that started an election ends it and
// never a later one on the same lease. An id that no longer runs is not an
// error.
func (m *Manager) CancelElectionID(ns, name string, id int64) error {
	if err := ValidateKey(ns, name); err != nil {
		return err
	}
	key := Key{ns, name}
	m.mu.Lock()
	e := m.elections.running[key]
	if e != nil && id != 0 && e.id != id {
		e = nil // a later election: not the caller's
	}
	var ending chan struct{}
	var others []chan struct{}
	if e != nil {
		delete(m.elections.running, key)
		ending = m.beginEndLocked(e) // in the same step: Shutdown sees it running or ending
	} else {
		// Being ended by another call (a cancel, a hand-off): this one
		// returns once that is done too, as if it had ended it.
		for ch, x := range m.ends.elections {
			if x.key == key && (id == 0 || x.id == id) {
				others = append(others, ch)
			}
		}
	}
	m.mu.Unlock()
	if e == nil {
		for _, ch := range others {
			<-ch
		}
		return nil
	}
	err := func() error {
		defer m.endDone(ending)
		return m.endElection(e, min(e.timing.RenewDeadline, requestTimeout))
	}()
	e.awaitEndWrites() // the host may exit when CancelElection returns
	return err
}

// claimEnd registers the end of e (a hand-off), in the same step, under
// m.mu, as it checks that e is still the running election on its lease:
// Shutdown then finds e running, which it ends, and ending, which it waits
// for. A hand-off the host asked for removes e, as a cancel does, once it
// ends it (forget). endDone ends the registration.
func (m *Manager) claimEnd(e *Election) (ending chan struct{}, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.elections.running[e.key] != e {
		return nil, false
	}
	return m.beginEndLocked(e), true
}

// beginEndLocked registers e as being ended; m.mu held.
func (m *Manager) beginEndLocked(e *Election) chan struct{} {
	ch := make(chan struct{})
	m.ends.elections[ch] = e
	return ch
}

// endDone ends a registration of beginEndLocked.
func (m *Manager) endDone(ch chan struct{}) {
	m.mu.Lock()
	delete(m.ends.elections, ch)
	m.mu.Unlock()
	close(ch)
}

// endElection cancels e, already removed from m.elections, as a cancel or
// Shutdown does: with PolicyHandOffOnCancel a leader hands the lease to the
// best live candidate (released if it does not take it within timeout),
// else the lease is released.
//
// Its result is a cancel's: nil unless a release failed. The hand-off's own
// outcome (taken, released instead, lost meanwhile) is logged.
func (m *Manager) endElection(e *Election, timeout time.Duration) error {
	defer func() {
		if p := recover(); p != nil {
			_ = e.CancelWithin(timeout) // e is no longer registered: nothing else would ever end it
			panic(p)
		}
	}()
	if leading, _, _ := e.IsLeader(); leading && e.opts.Policy&PolicyHandOffOnCancel != 0 {
		start := m.clock.Now()
		if to, ok := m.bestOtherCandidate(e, timeout); ok && ValidateIdentity(to) == nil {
			if left := min(timeout-m.clock.Since(start), ownHandOffWait(e.timing)); left > 0 {
				err := m.handOffElection(e, to, timeout, left, nil, nil) // the caller registered e's end
				switch {
				case err == nil:
					return nil
				case errors.Is(err, errReleaseFailed):
					return err
				case errors.Is(err, errReleasedInstead) || errors.Is(err, ErrNotLeader):
					logf(LevelInfo, "lease %s: %v", e.key, err)
					return nil
				default:
					logf(LevelInfo, "lease %s: %v", e.key, err)
					if e.Ended() {
						return nil
					}
				}
			}
		}
	}
	return e.CancelWithin(timeout)
}

// Shutdown cancels every election (releasing held leases) and every watch,
// in parallel, stops the idle observers, and waits for them up to timeout.
// The Manager stays usable.
func (m *Manager) Shutdown(timeout time.Duration) error {
	start := time.Now()
	m.mu.Lock()
	elections := m.elections.running
	m.elections.running = map[Key]*Election{}
	var ending []chan struct{} // cancels and hand-offs begun before, and their elections
	var endingElections []*Election
	for ch, e := range m.ends.elections {
		ending = append(ending, ch)
		endingElections = append(endingElections, e)
	}
	ends := map[*Election]chan struct{}{} // this Shutdown's own, for a CancelElection racing it to wait for
	for _, e := range elections {
		ends[e] = m.beginEndLocked(e)
	}
	watches := m.watches.stopAllLocked()
	m.mu.Unlock()
	// Called from a holder callback, Shutdown must not wait for that
	// callback: it is the caller. Pinned so that the id stays the
	// caller's thread until the waits are over.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := int64(syscall.Gettid())

	var wg sync.WaitGroup
	errs := make(chan error, len(elections))
	for _, e := range elections {
		wg.Go(func() {
			defer m.endDone(ends[e])
			errs <- m.endElection(e, min(timeout, e.timing.RenewDeadline, requestTimeout))
		})
	}
	for _, w := range watches {
		wg.Go(func() { w.cancelAsSeenFrom(caller) })
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		for _, ch := range ending { // cancels and hand-offs in flight end (their Events recorded, observers given up)
			<-ch
		}
		m.stopIdleObservers() // after the elections, watches and hand-offs gave theirs up
		for _, e := range append(endingElections, slices.Collect(maps.Values(elections))...) {
			<-e.candidacy.record.done // candidate records deleted: nothing left behind when the host exits
		}
		m.mu.Lock()
		async := slices.Collect(maps.Keys(m.ends.async))
		m.mu.Unlock()
		for _, ch := range async { // endpoints withdrawn after losses
			<-ch
		}
		close(finished)
	}()
	select {
	case <-finished:
		m.events.Stop(start.Add(timeout)) // flushes the releases' Events, within the timeout
	case <-m.clock.After(timeout):
		m.cancelAsync() // best effort: a withdrawal after a loss is abandoned, not left running
		// The releases still running record their Events when they end:
		// stop the recorder after them, not before (it would start again).
		go func() {
			<-finished
			m.events.Stop(time.Now().Add(events.FlushMax))
		}()
		return fmt.Errorf("%w after %v (elections and watches are still being stopped)", ErrShutdownTimeout, timeout)
	}
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// stopIdleObservers stops every observer no election or watch uses.
func (m *Manager) stopIdleObservers() {
	m.mu.Lock()
	idle := map[Key]*observer{}
	for key, ol := range m.observers.leases {
		if ol.refs == 0 {
			idle[key] = m.forgetObserverLocked(key)
		}
	}
	m.mu.Unlock()
	for key, o := range idle {
		m.retire(key, o)
	}
}

// Init runs the init hook, loads the configuration (see LoadConfig) and
// sets the client, once; later calls succeed at once. It returns where the
// configuration came from. Every function that needs the cluster calls it
// on first use; calling it first only reports a configuration error early.
func (m *Manager) Init() (string, error) {
	m.api.initMu.Lock()
	defer m.api.initMu.Unlock()
	if m.Initialized() {
		return "already initialized", nil
	}
	if m.api.initHook != nil {
		if err := m.api.initHook(); err != nil {
			return "", err
		}
	}
	if err := m.events.LoadEnv(); err != nil { // K8S_LEASE_EVENTS, after the hook copied the host's environment
		return "", err
	}
	cfg, source, err := LoadConfig()
	if err != nil {
		return "", err
	}
	client, err := NewClient(cfg)
	if err != nil {
		return "", fmt.Errorf("create client from %s: %w", source, err)
	}
	m.SetClient(client)
	logf(LevelInfo, "using the cluster at %s, configuration from %s", cfg.Host, source)
	return source, nil
}

// requestContext bounds one API call made on behalf of a caller.
func requestContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), requestTimeout)
}

// trackAsync registers work of an election that outlives its goroutine,
// for Shutdown to wait for (and cancel, at its timeout): the work runs
// under ctx and calls done when it ended.
func (m *Manager) trackAsync() (ctx context.Context, done func()) {
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.ends.async[ch] = cancel
	m.mu.Unlock()
	return ctx, func() {
		m.mu.Lock()
		delete(m.ends.async, ch)
		m.mu.Unlock()
		cancel()
		close(ch)
	}
}

// cancelAsync cancels the tracked work still running and waits for it to
// return (it returns at once: its requests are cut short).
func (m *Manager) cancelAsync() {
	m.mu.Lock()
	running := maps.Clone(m.ends.async)
	m.mu.Unlock()
	for ch, cancel := range running {
		cancel()
		<-ch
	}
}
