package lease

import (
	"time"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// The Manager's observers: one per Lease the process follows, shared by its
// elections, holder watches and GetHolder calls, kept idle for a while
// after their last use and then stopped (the reaper).

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

// observerRegistry is the Manager's observers, one per Lease; m.mu
// guards it.
type observerRegistry struct {
	leases  map[Key]*observedLease
	reaping bool // a reaper goroutine runs (see idleObserverTimeout)
	// highestToken remembers, per lease, the highest fencing token seen,
	// beyond the life of its observer (a Lease deleted and re-created must
	// not hand out a smaller token).
	highestToken map[Key]int64
}

// observedLease is a shared observer: refs counts the elections and holder
// watches using it; with none it is idle, and lastUsed (the last GetHolder,
// or when the last user gave it up) decides when it is stopped.
type observedLease struct {
	obs      *observer
	refs     int
	lastUsed time.Time
}

// observeLocked returns the shared observer of key, starting it (or
// resuming its follow loop) if needed and start is set; m.mu held. An
// observer with no election or watch is idle: see idleObserverTimeout.
func (m *Manager) observeLocked(client kubeapi.Client, key Key, resync time.Duration, start bool) *observedLease {
	ol := m.observers.leases[key]
	if ol == nil {
		m.evictIdleLocked(maxIdleObservers - 1)
		leases := client.Leases(key.Namespace)
		ol = &observedLease{obs: newObserver(leases, key.Name, m.clock, resync, m.observers.highestToken[key], m.statsLocked(key))}
		ol.obs.redial = m.api.redial
		m.observers.leases[key] = ol
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
	ol := m.observers.leases[key]
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
	for key, ol := range m.observers.leases {
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
	ol := m.observers.leases[key]
	delete(m.observers.leases, key)
	m.keepHighestTokenLocked(key, ol.obs)
	if s := m.stats[key]; s != nil && s.UnusedByElectionsAndWatches() && m.elections.running[key] == nil && m.watches.running[key] == nil {
		delete(m.stats, key)
	}
	m.pruneRememberedLocked()
	return ol.obs
}

// pruneRememberedLocked drops the counters and highest tokens of unused
// leases while more than maxRememberedLeases are kept; m.mu held.
func (m *Manager) pruneRememberedLocked() {
	for key := range m.stats {
		if len(m.stats) <= maxRememberedLeases && len(m.observers.highestToken) <= maxRememberedLeases {
			return
		}
		if m.observers.leases[key] == nil && m.elections.running[key] == nil && m.watches.running[key] == nil && len(m.watches.stopping[key]) == 0 {
			delete(m.stats, key)
			delete(m.observers.highestToken, key)
		}
	}
	for key := range m.observers.highestToken {
		if len(m.observers.highestToken) <= maxRememberedLeases {
			return
		}
		if m.stats[key] == nil {
			delete(m.observers.highestToken, key)
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
	if tok := max(m.observers.highestToken[key], obs.snapshot().highestToken); tok > 0 {
		m.observers.highestToken[key] = tok
	}
}

// scheduleReapLocked starts the reaper unless it runs; m.mu held.
func (m *Manager) scheduleReapLocked() {
	if m.observers.reaping {
		return
	}
	m.observers.reaping = true
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
			m.observers.reaping = false
		}
	}()
	now := m.clock.Now()
	for key, ol := range m.observers.leases {
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
