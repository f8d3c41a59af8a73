package lease

import (
	"context"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// HolderState is what a holder watch reports: Holder is "" when the Lease
// does not exist (Exists false), was released, or expired.
type HolderState struct {
	Holder string
	Token  int64
	Exists bool
}

// expiryGrace is how soon after a holder's local expiry a watch reports it.
const expiryGrace = 50 * time.Millisecond

// HolderWatch calls a function once with the current holder and then once
// per change of (holder, token), never concurrently with itself.
type HolderWatch struct {
	id     int64 // unique in the process (Manager.CancelWatchID)
	key    Key
	obs    *observer
	clock  clock.Clock
	cb     func(HolderState)
	onEnd  func()
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// callbackTID is the OS thread running the callback (0: none), so that
	// Cancel called from inside the callback can tell and not wait for itself.
	callbackTID atomic.Int64
}

func newHolderWatch(key Key, obs *observer, clk clock.Clock, cb func(HolderState), onEnd func()) *HolderWatch {
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
