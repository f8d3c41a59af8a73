package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// observer keeps a watch on one Lease and the latest snapshot of it. It is
// shared by every election, watch and GetHolder on that lease in the process.
type observer struct {
	leases kubeapi.Leases
	name   string
	clock  clock.WithDelayedExecution
	resync time.Duration
	stats  metricsSink

	mu   sync.Mutex
	snap snapshot
	subs map[chan struct{}]struct{}
	// The follow loop (list, then watch) runs unless stopped or paused
	// while an election of this process, pausedBy, leads the lease (see
	// pauseWhileLeading). cancelLoop is nil while it is not running;
	// loopDone is closed when the last loop started has returned.
	stopped    bool
	stoppedCh  chan struct{} // closed by stop
	pausedBy   any
	cancelLoop context.CancelFunc
	loopDone   chan struct{}
	// loop counts the follow loops started, listedBy is the loop whose list
	// last succeeded: the snapshot is live once they agree.
	loop, listedBy uint64
	// startWanted: start was called while the pause held; the loop resumes
	// when the pause is lifted, whatever the ending leader knew of other
	// users (it gives up its share before it lifts the pause).
	startWanted bool
	// renewEvery is the shortest retry period of this process's elections
	// on the lease (0: none): how often a holder renews, so how long the
	// watch of a held Lease may stay quiet (quietFor).
	renewEvery time.Duration
	// redial closes the connections that went silent under a quiet watch
	// (client.go); nil: none.
	redial *redialer
	// suspectedAt is the resourceVersion a quiet watch was last suspected
	// at: the relist that followed showed it again (the holder stopped
	// renewing), so the same quiet is not suspected twice.
	suspectedAt string
	// listsGivenUp: lists in a row given up at their bound (listBound).
	listsGivenUp int
}

func newObserver(leases kubeapi.Leases, name string, clk clock.WithDelayedExecution, resync time.Duration, highestToken int64, stats metricsSink) *observer {
	o := &observer{leases: leases, name: name, clock: clk, resync: resync, stats: stats,
		subs: map[chan struct{}]struct{}{}, stoppedCh: make(chan struct{})}
	o.snap.highestToken = highestToken
	return o
}

func (o *observer) start() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pausedBy != nil {
		o.startWanted = true
	}
	o.resumeLocked()
}

// stop ends the follow loop for good and waits for it.
func (o *observer) stop() {
	o.mu.Lock()
	if !o.stopped {
		close(o.stoppedCh)
	}
	o.stopped = true
	o.pauseLocked()
	done := o.loopDone
	o.mu.Unlock()
	if done != nil {
		<-done
	}
}

// pauseWhileLeading pauses the follow loop while leader, an election of this
// process, holds the lease; leadingEnded(leader) resumes it (a list, then a
// watch). Each renewal, a compare-and-swap every retry period, checks the
// Lease and its answer keeps the snapshot current, so a watch would only
// cost a stream, three goroutines and the decoding of our own renewals: at
// 1000 elections, most of the memory. The price is that a foreign write
// reaches the leader at its next renewal rather than by the watch, as with
// client-go.
func (o *observer) pauseWhileLeading(leader any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pausedBy = leader
	o.startWanted = false // this leader's own end says whether others use it
	o.pauseLocked()
	o.notifyLocked() // the snapshot is live now: a waiter for a list cut short answers
}

// leadingEnded lifts the pause made for leader, and resumes the follow loop
// when resume is set: the election calls it after giving up its share of
// the observer, with resume set only when something else still uses it, so
// that an observer nobody uses sends no list (it resumes when next used:
// see start), or when start was called meanwhile. A later pause by another
// election is left alone.
func (o *observer) leadingEnded(leader any, resume bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pausedBy != leader {
		return
	}
	o.pausedBy = nil
	if resume || o.startWanted {
		o.resumeLocked()
	}
}

// expectRenewalsEvery lowers renewEvery to period (an election's retry
// period) if that is shorter.
func (o *observer) expectRenewalsEvery(period time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.renewEvery == 0 || period < o.renewEvery {
		o.renewEvery = period
	}
}

// quietFor is how long the watch may deliver nothing while the Lease is
// held before it is suspect: a holder renews every retry period, so two of
// those (this process's elections' shortest; without one, 2/5 of the
// holder's lease duration, two renewals at client-go's defaults), and
// false when nothing is expected (no holder, a release or a hand-off
// record, a term run out by this process's clock, our own leadership).
func (o *observer) quietFor(now time.Time) (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.snap
	if !s.synced || !s.rec.exists || s.rec.holder == "" || s.rec.handingOff() || o.pausedBy != nil ||
		!now.Before(s.expiry()) || s.rec.resourceVersion == o.suspectedAt {
		return 0, false
	}
	if o.renewEvery > 0 {
		return 2 * o.renewEvery, true
	}
	return max(2*s.rec.duration()/5, time.Second), true
}

// suspectQuiet takes the watch's view for stale: a held Lease delivered
// nothing for quietFor (its API server frozen, or cut off from etcd and
// serving a watch cache that stopped). The connections that received
// nothing since the last event are closed (at most one round per retry
// period), and until the relist that follows answers, the snapshot is not
// live: GetHolder waits for that list rather than report "no holder" from
// a view that may be stale.
func (o *observer) suspectQuiet(lastEvent time.Time) {
	o.mu.Lock()
	o.suspectedAt = o.snap.rec.resourceVersion
	o.listedBy = 0
	period := o.renewEvery
	if period == 0 {
		period = o.snap.rec.duration() / 5
	}
	o.mu.Unlock()
	o.stats.WatchRestarted()
	o.redial.closeSilent(lastEvent, o.clock.Now(), period, "following lease "+o.name+": its API watch delivered nothing while the Lease is held")
}

// lowerResync shortens the watch's life to resync if that is shorter: the
// observer serves the user that needs the shortest.
func (o *observer) lowerResync(resync time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.resync = min(o.resync, resync)
}

func (o *observer) pauseLocked() {
	if o.cancelLoop != nil {
		o.cancelLoop()
		o.cancelLoop = nil
	}
}

// resumeLocked starts a follow loop unless one runs, the observer is
// stopped, or an election of this process leads the lease. The new loop
// first waits for the previous one to return, so that loops never overlap
// and stop needs to wait for the last one only.
func (o *observer) resumeLocked() {
	if o.stopped || o.cancelLoop != nil || o.pausedBy != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	prev, done := o.loopDone, make(chan struct{})
	o.cancelLoop, o.loopDone = cancel, done
	o.startWanted = false
	o.loop++
	loop := o.loop
	o.snap.err = nil // the new loop reports its own
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		o.run(ctx, loop)
	}()
}

func (o *observer) snapshot() snapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.snap
	s.live = o.pausedBy != nil || (o.cancelLoop != nil && o.listedBy == o.loop)
	return s
}

// seqNow is the count of states applied so far (snapshot.seq), to pass
// to applyRead with the answer of a read sent now.
func (o *observer) seqNow() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.snap.seq
}

// errNotSynced: the observer gave no answer in time, or was stopped first.
var errNotSynced = errors.New("no answer from the API server")

// awaitSynced returns the snapshot once it is live (see snapshot.live: a
// follow loop resumed after a pause lists first), or the error of the last
// failed list (the loop goes on retrying, so a later call may succeed), or
// an error after timeout.
func (o *observer) awaitSynced(timeout time.Duration) (snapshot, error) {
	if s := o.snapshot(); s.synced && s.live {
		return s, nil
	}
	ch := o.subscribe()
	defer o.unsubscribe(ch)
	t := o.clock.NewTimer(timeout)
	defer t.Stop()
	for {
		s := o.snapshot()
		switch {
		case s.synced && s.live:
			return s, nil
		case s.err != nil:
			return s, s.err
		}
		select {
		case <-ch:
		case <-o.stoppedCh:
			return s, fmt.Errorf("%w: stopped before the first list", errNotSynced)
		case <-t.C():
			return s, fmt.Errorf("%w within %v", errNotSynced, timeout)
		}
	}
}

// subscribe returns a channel that receives a value (coalesced) after every
// change of the snapshot.
func (o *observer) subscribe() chan struct{} {
	ch := make(chan struct{}, 1)
	o.mu.Lock()
	o.subs[ch] = struct{}{}
	o.mu.Unlock()
	return ch
}

func (o *observer) unsubscribe(ch chan struct{}) {
	o.mu.Lock()
	delete(o.subs, ch)
	o.mu.Unlock()
}

// failed records a list or watch error of the follow loop numbered loop
// and wakes subscribers, so that an election can give up on an error that
// retrying will not cure. An error of a loop paused or replaced meanwhile
// is not the current loop's (it cleared the error when it started).
func (o *observer) failed(err error, loop uint64) {
	level := LevelInfo
	if needsFix(err, false) || permanent(err) {
		level = LevelWarning
	}
	logf(level, "following lease %s: %v (retrying)", o.name, err)
	o.mu.Lock()
	defer o.mu.Unlock()
	if loop != o.loop || o.cancelLoop == nil {
		return
	}
	o.snap.err, o.snap.errAt = err, o.clock.Now()
	o.notifyLocked()
}

// errQuietWatch: the watch of a held Lease delivered nothing for quietFor;
// the follow loop lists again at once (suspectQuiet).
var errQuietWatch = errors.New("the API watch delivered nothing while the Lease is held")

// minWatchLife: a watch that ended sooner without an error is reopened
// with backoff.
const minWatchLife = time.Second

// run lists and watches the Lease until ctx is done; it always starts with a
// list, which also catches what happened while it was paused.
func (o *observer) run(ctx context.Context, loop uint64) {
	backoff := newBackoff(100*time.Millisecond, 5*time.Second)
	rv := ""
	quickCloses := 0
	for ctx.Err() == nil {
		var err error
		if rv == "" {
			rv, err = o.safeList(ctx, loop)
		}
		if err == nil {
			opened := o.clock.Now()
			rv, err = o.watch(ctx, rv)
			if errors.Is(err, errQuietWatch) {
				continue // rv is "": a list, on the connection dialled anew
			}
			if err == nil && o.clock.Since(opened) < minWatchLife {
				// The server closed the watch at once (overloaded, or a
				// proxy in the way): reopen with backoff, not at
				// round-trip speed, and list again after a few in a row
				// (the watch may be delivering nothing at all).
				if quickCloses++; quickCloses >= 3 {
					rv, quickCloses = "", 0
				}
				select {
				case <-ctx.Done():
				case <-o.clock.After(backoff.next()):
				}
				continue
			}
			quickCloses = 0
		}
		if err == nil {
			backoff.reset()
			continue
		}
		if ctx.Err() != nil {
			return // paused or stopped mid-request: not a failure
		}
		o.stats.WatchRestarted()
		if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
			rv = "" // too old to resume: list again
			continue
		}
		if errors.Is(err, errListGivenUp) {
			// No news of the API server yet, and none of the Lease: what
			// waits for the view (GetHolder) waits for the next list.
			logf(LevelInfo, "following lease %s: %v (listing again)", o.name, err)
		} else {
			o.failed(err, loop)
		}
		select {
		case <-ctx.Done():
		case <-o.clock.After(backoff.next()):
		}
		rv = "" // a list after an error also catches a missed deletion
	}
}

// safeList is list with a panic turned into an error (see contained).
func (o *observer) safeList(ctx context.Context, loop uint64) (string, error) {
	return o.contained("list", "watch", func() (string, error) { return o.list(ctx, loop) })
}

// contained runs a step of the follow loop (injection point point) with a
// panic turned into a logged error: the loop backs off and lists again
// instead of killing the host.
func (o *observer) contained(point, what string, step func() (string, error)) (rv string, err error) {
	defer func() {
		if p := recover(); p != nil {
			rv, err = "", panicError(p)
			logf(LevelError, "lease %s: %s: %v", o.name, what, err)
		}
	}()
	injectPanic(point)
	return step()
}

func (o *observer) selector() string {
	return fields.OneTermEqualSelector("metadata.name", o.name).String()
}

// list reads the Lease (by a name-scoped list, which also yields a resource
// version to watch from when it does not exist).
func (o *observer) list(ctx context.Context, loop uint64) (string, error) {
	bound := o.listBound()
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	o.stats.ObserverRequest()
	sent, sentAt := o.seqNow(), o.clock.Now()
	list, err := o.leases.List(rctx, metav1.ListOptions{FieldSelector: o.selector()})
	o.mu.Lock()
	givenUp := err != nil && rctx.Err() != nil && ctx.Err() == nil
	if givenUp {
		o.listsGivenUp++
	} else if err == nil {
		o.listsGivenUp = 0
	}
	period := o.renewEvery
	o.mu.Unlock()
	if givenUp {
		// Its connection may hang (a frozen API server): the next list
		// would wait on it too. At the longest bound it is an error like
		// any (a campaign waiting for its first view hears of it).
		if period == 0 {
			period = bound / 5
		}
		o.redial.closeSilent(sentAt, o.clock.Now(), period, "following lease "+o.name+": list unanswered")
		if bound >= requestTimeout {
			return "", err
		}
		return "", fmt.Errorf("%w after %v: %v", errListGivenUp, bound, err)
	}
	if err != nil {
		return "", err
	}
	var found *coordinationv1.Lease
	for i := range list.Items {
		if list.Items[i].Name == o.name {
			found = &list.Items[i]
		}
	}
	if found != nil {
		o.applyList(found, found.ResourceVersion, sent, loop)
	} else {
		o.applyList(nil, list.ResourceVersion, sent, loop)
	}
	return list.ResourceVersion, nil
}

// errListGivenUp: a list went unanswered for its bound (listBound).
var errListGivenUp = errors.New("list unanswered, given up")

// listBound is how long a list may go unanswered before it is given up
// and listed again (after the loop's backoff): two retry periods of this
// process's elections (renewEvery), doubled for each list given up in a
// row, at most requestTimeout (without an election, requestTimeout). A
// list hung at a frozen etcd member holds an API Priority and Fairness
// seat until it ends: traced in the soak, standbys' relists held the
// leader-election level's seats for 2 to 6.8 s while the leader's
// renewals queued behind them until its term lapsed. The doubling waits
// out a server slow rather than hung, in the end.
func (o *observer) listBound() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.renewEvery == 0 {
		return requestTimeout
	}
	return min(requestTimeout, 2*o.renewEvery<<min(o.listsGivenUp, 16))
}

// watch follows the Lease from rv until the server ends the watch (after
// o.resync, which bounds how long a silently broken watch goes unnoticed),
// and returns the resource version to resume from.
func (o *observer) watch(ctx context.Context, rv string) (string, error) {
	o.mu.Lock()
	resync := o.resync
	o.mu.Unlock()
	timeout := int64(resync / time.Second)
	wctx, cancel := context.WithTimeout(ctx, resync+requestTimeout)
	defer cancel()
	o.stats.ObserverRequest()
	w, err := o.leases.Watch(wctx, metav1.ListOptions{
		FieldSelector: o.selector(), ResourceVersion: rv,
		TimeoutSeconds: &timeout, AllowWatchBookmarks: true,
	})
	if err != nil {
		return rv, err
	}
	defer w.Stop()
	// A held Lease is renewed every retry period: a watch that delivers
	// nothing for longer is suspect (quietFor), and is ended for a relist
	// on a fresh connection.
	lastEvent := o.clock.Now()
	quiet := o.clock.NewTimer(time.Hour)
	defer quiet.Stop()
	rearm := func() {
		d, ok := o.quietFor(o.clock.Now())
		if !ok {
			d = time.Hour // nothing expected; re-armed at the next event
		}
		quiet.Reset(d)
	}
	rearm()
	for {
		select {
		case <-wctx.Done():
			return rv, nil
		case <-quiet.C():
			if _, ok := o.quietFor(o.clock.Now()); !ok {
				rearm()
				continue
			}
			o.suspectQuiet(lastEvent)
			return "", errQuietWatch
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			lastEvent = o.clock.Now()
			next, err := o.safeHandle(ev)
			if err != nil {
				return rv, err
			}
			if next != "" {
				rv = next
			}
			rearm()
		}
	}
}

// safeHandle is handle with a panic turned into an error (see contained).
func (o *observer) safeHandle(ev watch.Event) (string, error) {
	return o.contained("event", "watch event", func() (string, error) { return o.handle(ev) })
}

func (o *observer) handle(ev watch.Event) (string, error) {
	if ev.Type == watch.Error {
		return "", apierrors.FromObject(ev.Object)
	}
	l, ok := ev.Object.(*coordinationv1.Lease)
	if !ok {
		return "", nil
	}
	switch ev.Type {
	case watch.Bookmark:
	case watch.Deleted:
		if l.Name == o.name {
			o.apply(nil, l.ResourceVersion)
		}
	default:
		if l.Name == o.name {
			o.apply(l, l.ResourceVersion)
		}
	}
	return l.ResourceVersion, nil
}
