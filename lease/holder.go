package lease

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// GetHolder returns the current holder of ns/name, from this process's
// observer of the lease: the first call on a lease starts one (a list, then
// a watch) and waits for the list; later calls answer locally, with expiry
// judged on the monotonic clock from when this process saw the record
// change, never from the holder's renewTime. An observer that was not
// following the lease (nothing used it for a while) lists before it
// answers. A holder seen for the first
// time is therefore reported for up to a lease duration after that first
// sight, even if it stopped renewing earlier: the rule a campaign uses, so
// that "no holder" here means a campaign can take the lease at once. The
// observer lives on while the lease is asked about or used by an election
// or watch (see idleObserverTimeout).
func (m *Manager) GetHolder(ns, name string) (HolderState, error) {
	if err := ValidateKey(ns, name); err != nil {
		return HolderState{}, err
	}
	client, err := m.client()
	if err != nil {
		return HolderState{}, err
	}
	key := Key{ns, name}
	m.mu.Lock()
	ol := m.observeLocked(client, key, watchLife(0, client.FindsDeadConnections()), true)
	// A share while waiting: an observer a caller waits on is not idle, and
	// asking about more leases at once must not evict it mid-list.
	ol.refs++
	obs := ol.obs
	m.mu.Unlock()
	snap, err := obs.awaitSynced(requestTimeout)
	m.releaseObserver(key) // idle again (unless used): reaped after idleObserverTimeout
	if err == nil && snap.err != nil {
		// The watch broke and the observer is retrying: what it knows may
		// be stale, so say so rather than answer from it.
		err = fmt.Errorf("%w (following the lease, retrying)", snap.err)
	}
	if err != nil {
		return HolderState{}, fmt.Errorf("get lease %s: %w", key, err)
	}
	holder, token, exists := snap.holderView(m.clock.Now())
	return HolderState{Holder: holder, Token: token, Exists: exists}, nil
}

// HolderState is what a holder watch reports: Holder is "" when the Lease
// does not exist (Exists false), was released, or expired.
type HolderState struct {
	Holder string
	Token  int64
	Exists bool
}

// expiryGrace is how soon after a holder's local expiry a watch reports it.
const expiryGrace = 50 * time.Millisecond

// watchRegistry is the Manager's holder watches; m.mu guards it.
type watchRegistry struct {
	running map[Key]*HolderWatch
	// stopping holds cancelled watches until their goroutine ends, so that
	// every canceller can find and wait for them (not just the first).
	stopping map[Key][]*HolderWatch
}

// stopAllLocked moves every running watch to stopping and returns all the
// stopping ones, for Shutdown to cancel and wait for; m.mu held.
func (r *watchRegistry) stopAllLocked() []*HolderWatch {
	for key, w := range r.running {
		r.stopping[key] = append(r.stopping[key], w)
	}
	r.running = map[Key]*HolderWatch{}
	var watches []*HolderWatch
	for _, ws := range r.stopping {
		watches = append(watches, ws...)
	}
	return watches
}

// HolderWatch calls a function once with the current holder and then once
// per change of (holder, token), never concurrently with itself.
type HolderWatch struct {
	id     int64 // unique in the process (Manager.CancelWatchID)
	key    Key
	obs    *observer
	clock  clock.WithDelayedExecution
	cb     func(HolderState)
	onEnd  func()
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// callbackTID is the OS thread running the callback (0: none), so that
	// Cancel called from inside the callback can tell and not wait for itself.
	callbackTID atomic.Int64
}

func newHolderWatch(key Key, obs *observer, clk clock.WithDelayedExecution, cb func(HolderState), onEnd func()) *HolderWatch {
	ctx, cancel := context.WithCancel(context.Background())
	return &HolderWatch{key: key, obs: obs, clock: clk, cb: cb, onEnd: onEnd,
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

func (w *HolderWatch) start() { go w.run() }

// ID is the watch's id, unique in the process.
func (w *HolderWatch) ID() int64 { return w.id }

func (w *HolderWatch) run() {
	defer close(w.done)
	defer w.onEnd()
	notify := w.obs.subscribe()
	defer w.obs.unsubscribe(notify)
	defer func() {
		if p := recover(); p != nil { // the watch ends; the host lives
			logf(LevelError, "holder watch on %s ended: %v", w.key, panicError(p))
		}
	}()
	var last *HolderState
	for {
		snap := w.obs.snapshot()
		now := w.clock.Now()
		var expiry <-chan time.Time
		var timer clock.Timer
		if snap.synced && snap.live { // a snapshot nobody kept current is relisted first
			holder, token, exists := snap.holderView(now)
			cur := HolderState{Holder: holder, Token: token, Exists: exists}
			if last == nil || *last != cur {
				if !w.deliver(cur) {
					return
				}
				last = &cur
			}
			if holder != "" {
				timer = w.clock.NewTimer(snap.expiry().Sub(now) + expiryGrace)
				expiry = timer.C()
			}
		}
		select {
		case <-w.ctx.Done():
		case <-notify:
		case <-expiry:
		}
		if timer != nil {
			timer.Stop()
		}
		if w.ctx.Err() != nil {
			return
		}
	}
}

// deliver runs the callback on this goroutine's locked thread, unless the
// watch was cancelled.
func (w *HolderWatch) deliver(s HolderState) bool {
	if w.ctx.Err() != nil {
		return false
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w.callbackTID.Store(int64(syscall.Gettid()))
	defer w.callbackTID.Store(0)
	injectPanic("watch")
	w.cb(s)
	return true
}

// Cancel stops the watch. Called from outside the callback it returns once
// no callback runs or will run. Called from inside this watch's own callback
// it cannot wait for itself: it returns at once, and no callback runs after
// the current one returns.
func (w *HolderWatch) Cancel() {
	// Pinned so that the thread id stays this caller's while it is
	// compared (a Go caller could otherwise move, and the callback's
	// goroutine take over its old thread).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w.cancelAsSeenFrom(int64(syscall.Gettid()))
}

// cancelAsSeenFrom is Cancel on behalf of a caller on thread tid: it does
// not wait when that thread runs this watch's callback. (The callback's
// goroutine is locked to its thread while it runs, so no other caller can
// be on that thread meanwhile.)
func (w *HolderWatch) cancelAsSeenFrom(tid int64) {
	w.cancel()
	if w.callbackTID.Load() == tid {
		return
	}
	<-w.done
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
	if m.watches.running[key] != nil {
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
	m.watches.running[key] = w
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
	if w := m.watches.running[key]; w != nil && (id == 0 || w.id == id) {
		delete(m.watches.running, key)
		m.watches.stopping[key] = append(m.watches.stopping[key], w)
	}
	var pending []*HolderWatch
	for _, w := range m.watches.stopping[key] {
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
	if m.watches.running[key] == w {
		delete(m.watches.running, key) // ended by itself (a contained panic)
	}
	rest := m.watches.stopping[key][:0]
	for _, s := range m.watches.stopping[key] {
		if s != w {
			rest = append(rest, s)
		}
	}
	if len(rest) == 0 {
		delete(m.watches.stopping, key)
	} else {
		m.watches.stopping[key] = rest
	}
}
