package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// defaultResync bounds how long a watch on a Lease runs before it is
// renewed, for watches not tied to an election's own lease duration.
const defaultResync = 30 * time.Second

// Manager owns the client and every election, watch and observer of a
// process. All methods are safe for concurrent use.
type Manager struct {
	clock clock.Clock

	mu        sync.Mutex
	client    kubernetes.Interface
	elections map[Key]*Election
	watches   map[Key]*HolderWatch
	observers map[Key]*observedLease
	// highestToken remembers, per lease, the highest fencing token seen,
	// beyond the life of its observer (a Lease deleted and re-created must
	// not hand out a smaller token).
	highestToken map[Key]int64
	stats        map[Key]*leaseStats
}

type observedLease struct {
	obs  *observer
	refs int
}

// NewManager returns a Manager using clk (nil: the real clock). It needs a
// client (SetClient) before elections or watches can start.
func NewManager(clk clock.Clock) *Manager {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Manager{clock: clk, elections: map[Key]*Election{}, watches: map[Key]*HolderWatch{},
		observers: map[Key]*observedLease{}, highestToken: map[Key]int64{}, stats: map[Key]*leaseStats{}}
}

// SetClient sets the client if none is set yet, and reports whether it did.
func (m *Manager) SetClient(c kubernetes.Interface) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.client != nil {
		return false
	}
	m.client = c
	return true
}

// Initialized reports whether a client is set.
func (m *Manager) Initialized() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.client != nil
}

func (m *Manager) clientLocked() (kubernetes.Interface, error) {
	if m.client == nil {
		return nil, ErrNotInitialized
	}
	return m.client, nil
}

// acquireObserverLocked returns the shared observer of key, starting it if
// needed; each call must be paired with releaseObserver.
func (m *Manager) acquireObserverLocked(key Key, resync time.Duration) *observer {
	ol := m.observers[key]
	if ol == nil {
		leases := m.client.CoordinationV1().Leases(key.Namespace)
		ol = &observedLease{obs: newObserver(leases, key.Name, m.clock, resync, m.highestToken[key], m.statsLocked(key))}
		ol.obs.start()
		m.observers[key] = ol
	}
	ol.refs++
	return ol.obs
}

func (m *Manager) releaseObserver(key Key) {
	m.mu.Lock()
	ol := m.observers[key]
	if ol == nil {
		m.mu.Unlock()
		return
	}
	ol.refs--
	last := ol.refs == 0
	if last {
		delete(m.observers, key)
		m.highestToken[key] = max(m.highestToken[key], ol.obs.snapshot().highestToken)
	}
	m.mu.Unlock()
	if last {
		ol.obs.stop()
	}
}

// resyncFor bounds a watch's life by twice the lease duration (at most one
// request per lease duration), within [10 s, 5 min].
func resyncFor(leaseDuration time.Duration) time.Duration {
	return min(max(2*leaseDuration, 10*time.Second), 5*time.Minute)
}

// RunElection starts a candidacy on ns/name without waiting for the network.
func (m *Manager) RunElection(ns, name, identity string, t Timing) (*Election, error) {
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
	key := Key{ns, name}
	m.mu.Lock()
	defer m.mu.Unlock()
	client, err := m.clientLocked()
	if err != nil {
		return nil, err
	}
	if old := m.elections[key]; old != nil && !old.Ended() {
		return nil, fmt.Errorf("%w: %s (cancel it first)", ErrElectionExists, key)
	}
	obs := m.acquireObserverLocked(key, resyncFor(t.LeaseDuration))
	e := newElection(key, identity, t, client.CoordinationV1().Leases(ns), obs, m.clock, m.statsLocked(key),
		func() { m.releaseObserver(key) })
	m.elections[key] = e
	e.start()
	return e, nil
}

// Election returns the election on ns/name (running or ended), or nil.
func (m *Manager) Election(ns, name string) *Election {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.elections[Key{ns, name}]
}

// CancelElection ends the election on ns/name (releasing a held lease) and
// forgets it. No election is not an error.
func (m *Manager) CancelElection(ns, name string) error {
	if err := ValidateKey(ns, name); err != nil {
		return err
	}
	key := Key{ns, name}
	m.mu.Lock()
	e := m.elections[key]
	delete(m.elections, key)
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	return e.Cancel()
}

// WatchHolder starts a holder watch on ns/name.
func (m *Manager) WatchHolder(ns, name string, cb func(HolderState)) (*HolderWatch, error) {
	if err := ValidateKey(ns, name); err != nil {
		return nil, err
	}
	if cb == nil {
		return nil, fmt.Errorf("%w: callback: must not be NULL", ErrInvalidArgument)
	}
	key := Key{ns, name}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.clientLocked(); err != nil {
		return nil, err
	}
	if m.watches[key] != nil {
		return nil, fmt.Errorf("%w: %s (cancel it first)", ErrWatchExists, key)
	}
	obs := m.acquireObserverLocked(key, defaultResync)
	stats := m.statsLocked(key)
	w := newHolderWatch(key, obs, m.clock, func(s HolderState) { stats.watchCallbacks.Add(1); cb(s) },
		func() { m.releaseObserver(key) })
	m.watches[key] = w
	w.start()
	return w, nil
}

// CancelWatch stops the watch on ns/name (see HolderWatch.Cancel). No watch
// is not an error.
func (m *Manager) CancelWatch(ns, name string) error {
	if err := ValidateKey(ns, name); err != nil {
		return err
	}
	key := Key{ns, name}
	m.mu.Lock()
	w := m.watches[key]
	delete(m.watches, key)
	m.mu.Unlock()
	if w != nil {
		w.Cancel()
	}
	return nil
}

// Shutdown cancels every election (releasing held leases) and every watch,
// in parallel, and waits for them up to timeout. The Manager stays usable.
func (m *Manager) Shutdown(timeout time.Duration) error {
	m.mu.Lock()
	elections, watches := m.elections, m.watches
	m.elections, m.watches = map[Key]*Election{}, map[Key]*HolderWatch{}
	m.mu.Unlock()

	var wg sync.WaitGroup
	errs := make(chan error, len(elections))
	for _, e := range elections {
		wg.Go(func() { errs <- e.CancelWithin(min(timeout, e.timing.RenewDeadline, requestTimeout)) })
	}
	for _, w := range watches {
		wg.Go(w.Cancel)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-m.clock.After(timeout):
		return fmt.Errorf("%w after %v (elections and watches are still being stopped)", ErrShutdownTimeout, timeout)
	}
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// Init loads the configuration (see LoadConfig) and sets the client, once;
// later calls succeed at once. It returns where the configuration came from.
func (m *Manager) Init() (string, error) {
	if m.Initialized() {
		return "already initialized", nil
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
	return source, nil
}

// requestContext bounds one API call made on behalf of a caller.
func requestContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), requestTimeout)
}
