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

// watchLife bounds how long a watch on a Lease runs before it is renewed;
// leaseDuration 0 is a watch not tied to an election (GetHolder,
// WatchHolder, a hand-off's wait). Each renewal of a watch is one request:
// a standby's whole steady load.
//
// What the bound is for: a connection that dies silently. Where the
// transport finds one by itself (pings), the watch's end only bounds a
// server that keeps a watch open but stops sending on it, so the watch can
// be long: eight lease durations within [1 min, 10 min], 2 min when not
// tied to an election. client-go's HTTP/2 transport pings after 30 s
// without a frame and gives up 15 s later. Without pings (HTTP/1.1: a
// plain http:// server, DISABLE_HTTP2, a custom transport), the watch's end
// is what finds a dead connection, and meanwhile a standby sees no
// renewals (it tries to take the lease and fails its compare-and-swap; a
// holder watch reports the holder gone): two lease durations within
// [10 s, 5 min], 30 s when not tied to an election.
func watchLife(leaseDuration time.Duration, pings bool) time.Duration {
	switch {
	case pings && leaseDuration == 0:
		return 2 * time.Minute
	case pings:
		return min(max(8*leaseDuration, time.Minute), 10*time.Minute)
	case leaseDuration == 0:
		return 30 * time.Second
	default:
		return min(max(2*leaseDuration, 10*time.Second), 5*time.Minute)
	}
}

// An observer that no election or holder watch uses is kept while callers
// keep asking about its lease (GetHolder), so that polling answers locally
// and a later campaign inherits what was observed. It is stopped once
// idleObserverTimeout has passed since its last use (the reaper looks every
// half of it, so it lives at most 1.5 times that), and at most
// maxIdleObservers are kept: asking about one more stops the one used
// longest ago. A caller asking about many names therefore costs a bounded
// number of watches.
const (
	idleObserverTimeout = time.Minute
	maxIdleObservers    = 64
)

// maxRememberedLeases bounds the leases whose counters and highest fencing
// token are kept after nothing uses them any more: past it, those of leases
// with no election, watch or observer are dropped (their counters restart
// at 0, and a re-created Lease's token is then bounded only by the Lease
// itself).
const maxRememberedLeases = 4096

// Manager owns the client and every election, watch and observer of a
// process. All methods are safe for concurrent use.
type Manager struct {
	clock clock.Clock

	// initMu serializes loading the configuration (Init); the hook runs
	// first on every attempt (the C layer reads the host's environment).
	initMu   sync.Mutex
	initHook func() error

	mu        sync.Mutex
	kube      kubeapi.Client
	elections map[Key]*Election
	watches   map[Key]*HolderWatch
	// stopping holds cancelled watches until their goroutine ends, so that
	// every canceller can find and wait for them (not just the first).
	stopping  map[Key][]*HolderWatch
	observers map[Key]*observedLease
	reaping   bool  // a reaper goroutine runs (see idleObserverTimeout)
	lastID    int64 // ids of elections and watches, unique in the process
	// replaced keeps, by id, the last ended elections that a new election
	// on the same lease replaced, so that an object holding the old id
	// still gets its outcome (at most maxReplacedElections, oldest dropped).
	replaced map[int64]*Election
	// highestToken remembers, per lease, the highest fencing token seen,
	// beyond the life of its observer (a Lease deleted and re-created must
	// not hand out a smaller token).
	highestToken map[Key]int64
	stats        map[Key]*leaseStats
	events       *events.Recorder  // Kubernetes Events on leadership changes (events.go)
	candidates   candidateRegistry // candidate records (candidates.go)
	// ending holds the elections being ended (a cancel, a hand-off), by a
	// channel closed when that is done: Shutdown and a concurrent cancel
	// wait for them (claimEnd).
	ending      map[chan struct{}]*Election
	metricsSize atomic.Int64 // bytes of the last Metrics text, to size the next
	firstRounds *gate        // admits elections to their first round (firstrounds.go)
}

// observedLease is a shared observer: refs counts the elections and holder
// watches using it; with none it is idle, and lastUsed (the last GetHolder,
// or when the last user gave it up) decides when it is stopped.
type observedLease struct {
	obs      *observer
	refs     int
	lastUsed time.Time
}

// NewManager returns a Manager using clk (nil: the real clock). It needs a
// client (SetClient) before elections or watches can start.
func NewManager(clk clock.Clock) *Manager {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Manager{clock: clk, elections: map[Key]*Election{}, watches: map[Key]*HolderWatch{}, stopping: map[Key][]*HolderWatch{}, replaced: map[int64]*Election{},
		observers: map[Key]*observedLease{}, highestToken: map[Key]int64{}, stats: map[Key]*leaseStats{},
		ending: map[chan struct{}]*Election{}, firstRounds: firstRounds, events: newEventRecorder()}
}

// SetClient sets the client if none is set yet, and reports whether it did.
func (m *Manager) SetClient(c kubeapi.Client) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kube != nil {
		return false
	}
	m.kube = c
	return true
}

// SetInitHook sets a function that Init runs before loading the
// configuration, on every attempt; an error from it fails that attempt.
func (m *Manager) SetInitHook(hook func() error) {
	m.initMu.Lock()
	defer m.initMu.Unlock()
	m.initHook = hook
}

// Initialized reports whether a client is set.
func (m *Manager) Initialized() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kube != nil
}

// client returns the client, initializing on first use (see Init): every
// function that needs the cluster works without an explicit Init, and a
// failed attempt is made again at the next call.
func (m *Manager) client() (kubeapi.Client, error) {
	m.mu.Lock()
	c := m.kube
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if _, err := m.Init(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kube, nil
}

// observeLocked returns the shared observer of key, starting it (or
// resuming its follow loop) if needed and start is set; m.mu held. An
// observer with no election or watch is idle: see idleObserverTimeout.
func (m *Manager) observeLocked(client kubeapi.Client, key Key, resync time.Duration, start bool) *observedLease {
	ol := m.observers[key]
	if ol == nil {
		m.evictIdleLocked(maxIdleObservers - 1)
		leases := client.Leases(key.Namespace)
		ol = &observedLease{obs: newObserver(leases, key.Name, m.clock, resync, m.highestToken[key], m.statsLocked(key))}
		m.observers[key] = ol
	} else {
		ol.obs.lowerResync(resync)
	}
	if start {
		ol.obs.start() // no-op while it runs, or while an election of ours leads
	}
	ol.lastUsed = m.clock.Now()
	return ol
}

// acquireObserverLocked returns the shared observer of key for an election
// or a holder watch, started when start is set (an election starts it
// itself, once admitted to its first round: see firstRounds); each call
// must be paired with releaseObserver. m.mu held.
func (m *Manager) acquireObserverLocked(client kubeapi.Client, key Key, resync time.Duration, start bool) *observer {
	ol := m.observeLocked(client, key, resync, start)
	ol.refs++
	return ol.obs
}

// releaseObserver gives up a share of key's observer and reports whether
// another election or watch still uses it. The last share leaves it idle,
// still following the lease until the reaper stops it.
func (m *Manager) releaseObserver(key Key) (stillUsed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ol := m.observers[key]
	if ol == nil {
		return false
	}
	ol.refs--
	ol.lastUsed = m.clock.Now()
	if ol.refs > 0 {
		return true
	}
	m.evictIdleLocked(maxIdleObservers)
	m.scheduleReapLocked()
	return false
}

// evictIdleLocked retires the idle observer used longest ago when more than
// keep are idle; m.mu held.
func (m *Manager) evictIdleLocked(keep int) {
	idle := 0
	var oldest Key
	var oldestAt time.Time
	for key, ol := range m.observers {
		if ol.refs > 0 {
			continue
		}
		idle++
		if oldestAt.IsZero() || ol.lastUsed.Before(oldestAt) {
			oldest, oldestAt = key, ol.lastUsed
		}
	}
	if idle > keep {
		obs := m.forgetObserverLocked(oldest)
		go m.retire(oldest, obs) // the caller need not wait for another lease's loop
	}
}

// forgetObserverLocked removes key's observer, and drops the lease's
// counters when nothing but GetHolder ever used it (so that asking about
// many names does not grow memory); m.mu held. The caller then retires it.
func (m *Manager) forgetObserverLocked(key Key) *observer {
	ol := m.observers[key]
	delete(m.observers, key)
	m.keepHighestTokenLocked(key, ol.obs)
	if s := m.stats[key]; s != nil && s.UnusedByElectionsAndWatches() && m.elections[key] == nil && m.watches[key] == nil {
		delete(m.stats, key)
	}
	m.pruneRememberedLocked()
	return ol.obs
}

// pruneRememberedLocked drops the counters and highest tokens of unused
// leases while more than maxRememberedLeases are kept; m.mu held.
func (m *Manager) pruneRememberedLocked() {
	for key := range m.stats {
		if len(m.stats) <= maxRememberedLeases && len(m.highestToken) <= maxRememberedLeases {
			return
		}
		if m.observers[key] == nil && m.elections[key] == nil && m.watches[key] == nil && len(m.stopping[key]) == 0 {
			delete(m.stats, key)
			delete(m.highestToken, key)
		}
	}
	for key := range m.highestToken {
		if len(m.highestToken) <= maxRememberedLeases {
			return
		}
		if m.stats[key] == nil {
			delete(m.highestToken, key)
		}
	}
}

// retire stops a forgotten observer and keeps its highest token again: it
// may have seen a higher one between being forgotten and stopped.
func (m *Manager) retire(key Key, obs *observer) {
	obs.stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keepHighestTokenLocked(key, obs)
}

// keepHighestTokenLocked remembers the highest fencing token obs saw, for
// leases an election or watch of this process used (a Lease deleted and
// re-created must not hand out a smaller token to our elections); m.mu held.
func (m *Manager) keepHighestTokenLocked(key Key, obs *observer) {
	s := m.stats[key]
	if s == nil || s.UnusedByElectionsAndWatches() {
		return
	}
	if tok := max(m.highestToken[key], obs.snapshot().highestToken); tok > 0 {
		m.highestToken[key] = tok
	}
}

// scheduleReapLocked starts the reaper unless it runs; m.mu held.
func (m *Manager) scheduleReapLocked() {
	if m.reaping {
		return
	}
	m.reaping = true
	go m.reap()
}

// reap retires idle observers unused for idleObserverTimeout, looking
// every half of it, and ends when none is idle.
func (m *Manager) reap() {
	for {
		<-m.clock.After(idleObserverTimeout / 2)
		if !m.reapOnce() {
			return
		}
	}
}

// reapOnce retires the observers idle for too long and reports whether
// others are still idle. A panic ends the reaper (a later idle observer
// starts another) without leaving the lock held.
func (m *Manager) reapOnce() (more bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			logf(LevelError, "idle lease observers: %v", panicError(p))
			more = false
		}
		if !more {
			m.reaping = false
		}
	}()
	now := m.clock.Now()
	for key, ol := range m.observers {
		switch {
		case ol.refs > 0:
		case now.Sub(ol.lastUsed) >= idleObserverTimeout:
			go m.retire(key, m.forgetObserverLocked(key))
		default:
			more = true
		}
	}
	return more
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
	old := m.elections[key]
	if old != nil && !old.Ended() {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s (cancel it first)", ErrElectionExists, key)
	}
	if old != nil {
		m.keepReplacedLocked(old)
	}
	obs := m.acquireObserverLocked(client, key, watchLife(t.LeaseDuration, client.FindsDeadConnections()), false)
	e := newElection(key, identity, t, client.Leases(ns), obs, m.clock, m.statsLocked(key),
		func() bool { return m.releaseObserver(key) })
	m.statsLocked(key).CampaignStarted()
	e.id = m.nextIDLocked()
	e.events = m.events.Use(client)
	e.opts = opts
	e.candidateStore = func() candidateStore { return m.candidates.storeFor(client) } // off the caller's thread: it may ask the server
	e.handOffHook = func(to, why string) bool { return m.handOffOnItsOwn(e, to, why) }
	e.candidacy = newCandidacy(e, &m.candidates)
	e.firstRounds = m.firstRounds
	m.elections[key] = e
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
	e := m.elections[Key{ns, name}]
	if id == 0 || (e != nil && e.id == id) {
		return e
	}
	if r := m.replaced[id]; r != nil && r.key == (Key{ns, name}) {
		return r
	}
	return nil
}

// nextIDLocked returns a new election or watch id; m.mu held.
func (m *Manager) nextIDLocked() int64 {
	m.lastID++
	return m.lastID
}

// maxReplacedElections bounds Manager.replaced.
const maxReplacedElections = 64

func (m *Manager) keepReplacedLocked(e *Election) {
	m.replaced[e.id] = e
	for len(m.replaced) > maxReplacedElections {
		oldest := e.id
		for id := range m.replaced {
			oldest = min(oldest, id)
		}
		delete(m.replaced, oldest)
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
	e := m.elections[key]
	if e != nil && id != 0 && e.id != id {
		e = nil // a later election: not the caller's
	}
	var ending chan struct{}
	var others []chan struct{}
	if e != nil {
		delete(m.elections, key)
		ending = m.beginEndLocked(e) // in the same step: Shutdown sees it running or ending
	} else {
		// Being ended by another call (a cancel, a hand-off): this one
		// returns once that is done too, as if it had ended it.
		for ch, x := range m.ending {
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
	e.awaitEndEvent() // the host may exit when CancelElection returns
	return err
}

// claimEnd registers the end of e (a hand-off), in the same step, under
// m.mu, as it checks that e is still the running election on its lease and
// (with forget) removes it, as a cancel does: Shutdown then finds e either
// running, which it ends, or ending, which it waits for, never neither.
// endDone ends the registration.
func (m *Manager) claimEnd(e *Election, forget bool) (ending chan struct{}, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.elections[e.key] != e {
		return nil, false
	}
	if forget {
		delete(m.elections, e.key)
	}
	return m.beginEndLocked(e), true
}

// beginEndLocked registers e as being ended; m.mu held.
func (m *Manager) beginEndLocked(e *Election) chan struct{} {
	ch := make(chan struct{})
	m.ending[ch] = e
	return ch
}

// endDone ends a registration of beginEndLocked.
func (m *Manager) endDone(ch chan struct{}) {
	m.mu.Lock()
	delete(m.ending, ch)
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
			left := timeout - m.clock.Since(start)
			if left > 0 {
				err := m.handOffElection(e, to, left, nil) // the caller registered e's end
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

// WatchHolder starts a holder watch on ns/name.
func (m *Manager) WatchHolder(ns, name string, cb func(HolderState)) (*HolderWatch, error) {
	if err := ValidateKey(ns, name); err != nil {
		return nil, err
	}
	if cb == nil {
		return nil, fmt.Errorf("%w: callback: must not be NULL", ErrInvalidArgument)
	}
	client, err := m.client()
	if err != nil {
		return nil, err
	}
	key := Key{ns, name}
	m.mu.Lock()
	if m.watches[key] != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s (cancel it first)", ErrWatchExists, key)
	}
	obs := m.acquireObserverLocked(client, key, watchLife(0, client.FindsDeadConnections()), true)
	stats := m.statsLocked(key)
	stats.WatchStarted()
	var w *HolderWatch
	w = newHolderWatch(key, obs, m.clock, func(s HolderState) { stats.WatchCallback(); cb(s) },
		func() { m.releaseObserver(key); m.watchEnded(key, w) })
	w.id = m.nextIDLocked()
	m.watches[key] = w
	w.start()
	m.mu.Unlock()
	return w, nil
}

// CancelWatch stops the watch on ns/name and waits, as HolderWatch.Cancel
// does, for it and for every watch on the lease still being stopped, so
// that concurrent cancellers all return only once no callback runs. No
// watch is not an error.
func (m *Manager) CancelWatch(ns, name string) error {
	return m.CancelWatchID(ns, name, 0)
}

// CancelWatchID is CancelWatch for the watch with that id only (0:
// whichever runs), and waits for that one alone: an object that started a
// watch stops it and never a later one on the same lease. An id that no
// longer runs is not an error.
func (m *Manager) CancelWatchID(ns, name string, id int64) error {
	if err := ValidateKey(ns, name); err != nil {
		return err
	}
	key := Key{ns, name}
	m.mu.Lock()
	if w := m.watches[key]; w != nil && (id == 0 || w.id == id) {
		delete(m.watches, key)
		m.stopping[key] = append(m.stopping[key], w)
	}
	var pending []*HolderWatch
	for _, w := range m.stopping[key] {
		if id == 0 || w.id == id {
			pending = append(pending, w)
		}
	}
	m.mu.Unlock()
	for _, w := range pending {
		w.Cancel()
	}
	return nil
}

// watchEnded forgets a stopped watch once its goroutine is over.
func (m *Manager) watchEnded(key Key, w *HolderWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watches[key] == w {
		delete(m.watches, key) // ended by itself (a contained panic)
	}
	rest := m.stopping[key][:0]
	for _, s := range m.stopping[key] {
		if s != w {
			rest = append(rest, s)
		}
	}
	if len(rest) == 0 {
		delete(m.stopping, key)
	} else {
		m.stopping[key] = rest
	}
}

// Shutdown cancels every election (releasing held leases) and every watch,
// in parallel, stops the idle observers, and waits for them up to timeout.
// The Manager stays usable.
func (m *Manager) Shutdown(timeout time.Duration) error {
	start := time.Now()
	m.mu.Lock()
	elections := m.elections
	m.elections = map[Key]*Election{}
	var ending []chan struct{} // cancels and hand-offs begun before, and their elections
	var endingElections []*Election
	for ch, e := range m.ending {
		ending = append(ending, ch)
		endingElections = append(endingElections, e)
	}
	ends := map[*Election]chan struct{}{} // this Shutdown's own, for a CancelElection racing it to wait for
	for _, e := range elections {
		ends[e] = m.beginEndLocked(e)
	}
	for key, w := range m.watches {
		m.stopping[key] = append(m.stopping[key], w)
	}
	m.watches = map[Key]*HolderWatch{}
	var watches []*HolderWatch
	for _, ws := range m.stopping {
		watches = append(watches, ws...)
	}
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
			if e.candidacy != nil { // candidate records deleted: nothing left behind when the host exits
				<-e.candidacy.done
			}
		}
		close(finished)
	}()
	select {
	case <-finished:
		m.events.Stop(start.Add(timeout)) // flushes the releases' Events, within the timeout
	case <-m.clock.After(timeout):
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
	for key, ol := range m.observers {
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
	m.initMu.Lock()
	defer m.initMu.Unlock()
	if m.Initialized() {
		return "already initialized", nil
	}
	if m.initHook != nil {
		if err := m.initHook(); err != nil {
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
