package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Kubernetes Events on leadership changes, on the Lease itself, so that
// `kubectl describe lease NAME` tells who led when and why it stopped. They
// follow client-go's resourcelock convention (reason LeaderElection, "<id>
// became leader", "<id> stopped leading") so that tools and people reading
// events of client-go leaders read ours the same way.
//
// Events are best effort and kept off the election path. Recording never
// blocks: the Event goes to the Manager's queue of eventQueueSize (dropped,
// with a rate-limited warning, when that is full), whence one goroutine
// writes them in order, each request bounded by the library's request
// timeout. As client-go's recorder does, a spam filter keeps a flapping
// election from flooding the API server (eventSpamBurst Events per lease,
// identity and type, then one per eventSpamRefill), and a write that failed
// without an answer from the API server is tried again (eventTries in
// all); one the API server refused is not. Unlike client-go's recorder,
// Events are not aggregated (client-go combines similar ones, from the
// 10th in 10 minutes, into one "(combined from similar events)" Event whose
// count it patches): each change of leadership stays an Event of its own,
// the spam filter alone bounds a flapping election, and the RBAC needs
// create only. Nothing here is called
// with a library lock held. A failing events API (403 without the RBAC, a
// slow or unreachable API server) costs a warning log, rate-limited, and
// nothing else.
//
// The Events are written as JSON through package kubeapi: client-go's
// tools/record would link core/v1, strategic merge patch and OpenAPI, more
// than a third of the library's size, for these few writes.

// EventsEnv is the environment variable that turns Events off: "off" (or
// "false", "0"); "on", "true", "1", unset or empty leave them on. It is read
// when the Manager loads its configuration (Init); another value fails
// Init, naming the variable. Manager.SetEvents overrides it.
const EventsEnv = "K8S_LEASE_EVENTS"

const (
	eventReason    = "LeaderElection" // client-go's resourcelock uses this reason
	eventComponent = "k8s-lease"      // the Event's source.component; source.host is the identity
	// maxEventMessage keeps a message with a long API error within the
	// 1 KiB that events.k8s.io allows a note.
	maxEventMessage = 1024
	// eventsFlushMax bounds how long Shutdown waits for queued Events (the
	// releases it has just written) to reach the API server.
	eventsFlushMax = 2 * time.Second
	// endEventWait bounds how long CancelElection and HandOff wait, after
	// the release or the hand-off, for its "stopped leading" Event: a host
	// often exits right after they return (and never calls Shutdown), which
	// would lose the Event still queued. Shutdown flushes the queue itself.
	endEventWait = eventsFlushMax
	// eventsWarnEvery: at most one warning about failed Events per Manager
	// in this time; the others are counted and logged at debug level.
	eventsWarnEvery = time.Minute
	// eventQueueSize Events wait at most to be written; more are dropped.
	eventQueueSize = 1000
	// eventTries and eventRetryWait: a write that failed without an answer
	// from the API server (a timeout, a refused connection) is tried again.
	eventTries     = 3
	eventRetryWait = time.Second
	// The spam filter, as client-go's default: eventSpamBurst Events per
	// lease and identity, then one per eventSpamRefill; eventSpamKeys
	// buckets at most.
	eventSpamBurst  = 25
	eventSpamRefill = 5 * time.Minute
	eventSpamKeys   = 4096
)

// managerEvents is a Manager's Event recording: one pipeline, started on
// the first Event and stopped by Shutdown (a later Event starts another).
// The zero value records: Events are on by default.
type managerEvents struct {
	off  atomic.Bool
	warn eventWarnings

	mu       sync.Mutex // guards what follows; never held while writing
	explicit bool       // SetEvents was called: the environment no longer decides
	client   kubeapi.Client
	pipe     *eventPipeline
}

// SetEvents turns the Kubernetes Events on leadership changes on or off,
// from the next change of leadership on. It overrides K8S_LEASE_EVENTS.
func (m *Manager) SetEvents(on bool) {
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	m.events.explicit = true
	m.events.off.Store(!on)
}

// loadEnv reads K8S_LEASE_EVENTS (Init calls it, after the C layer copied
// the host's environment): a value it does not know is an error, not a
// silent default.
func (me *managerEvents) loadEnv() error {
	on, err := parseEventsEnv(os.Getenv(EventsEnv))
	if err != nil {
		return err
	}
	me.mu.Lock()
	defer me.mu.Unlock()
	if !me.explicit {
		me.off.Store(!on)
	}
	if me.off.Load() {
		logf(LevelInfo, "Kubernetes Events on leadership changes are off (%s or SetEvents)", EventsEnv)
	}
	return nil
}

func parseEventsEnv(v string) (on bool, err error) {
	switch strings.ToLower(v) {
	case "", "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, invalid("environment variable %s=%s: must be on or off (or true/false, 1/0; unset or empty means on)",
		EventsEnv, clip(v))
}

// use returns the recorder an election of this Manager uses, remembering
// the client the pipeline will write with.
func (me *managerEvents) use(client kubeapi.Client) *managerEvents {
	me.mu.Lock()
	defer me.mu.Unlock()
	if me.client == nil {
		me.client = client
	}
	return me
}

// record queues an Event about the Lease key (uid when known). It never
// blocks, never fails, and must not be called with a library lock held. The
// channel it returns is closed once the Event is written, or its write
// failed, or it was dropped (nil: Events are off, or it panicked).
func (me *managerEvents) record(key Key, uid types.UID, identity, eventType, message string) (done <-chan struct{}) {
	if me == nil || me.off.Load() {
		return nil
	}
	// Called on an election's own goroutine, outside its panic guard.
	defer func() {
		if p := recover(); p != nil {
			logf(LevelWarning, "lease %s: recording an Event: %v", key, panicError(p))
			done = nil
		}
	}()
	ev := &queuedEvent{ev: newEvent(key, uid, identity, eventType, clipMessage(message), time.Now()), done: make(chan struct{})}
	for {
		p := me.pipeline()
		if p == nil {
			return nil
		}
		if p.enqueue(ev) {
			return ev.done
		}
		// Shutdown stopped p after we found it: the next pipeline writes ev.
	}
}

// queuedEvent is an Event in a pipeline's queue; done is closed once it is
// written, failed or dropped.
type queuedEvent struct {
	ev   *kubeapi.Event
	done chan struct{}
}

// pipeline returns the running pipeline, starting it on first use.
func (me *managerEvents) pipeline() *eventPipeline {
	me.mu.Lock()
	defer me.mu.Unlock()
	if me.pipe == nil && me.client != nil {
		me.pipe = newEventPipeline(me.client, &me.warn)
	}
	return me.pipe
}

// stop lets the queued Events reach the API server until deadline, at most
// eventsFlushMax from now, then stops the pipeline: a write still in flight
// is abandoned (Shutdown defers it, with Shutdown's own deadline).
func (me *managerEvents) stop(deadline time.Time) {
	me.mu.Lock()
	p := me.pipe
	me.pipe = nil
	me.mu.Unlock()
	if p == nil {
		return
	}
	if limit := time.Now().Add(eventsFlushMax); limit.Before(deadline) {
		deadline = limit
	}
	p.stop(deadline)
}

// newEvent is the core/v1 Event client-go's recorder would write: named
// after the Lease and the time, as kubectl lists them.
func newEvent(key Key, uid types.UID, identity, eventType, message string, at time.Time) *kubeapi.Event {
	t := metav1.NewTime(at)
	return &kubeapi.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", key.Name, at.UnixNano()), Namespace: key.Namespace},
		InvolvedObject: kubeapi.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Namespace: key.Namespace, Name: key.Name, UID: uid},
		Reason: eventReason, Message: message, Type: eventType,
		Source:         kubeapi.EventSource{Component: eventComponent, Host: identity},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: eventComponent, ReportingInstance: identity,
	}
}

// eventPipeline is the queue of a Manager's Events and the goroutine that
// writes them.
type eventPipeline struct {
	client kubeapi.Client
	warn   *eventWarnings
	spam   eventSpamFilter
	queue  chan *queuedEvent
	// ctx ends the writes: cancelled when stop's deadline passes.
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed when the writer returned
	inFlight atomic.Bool   // a write is under way

	mu       sync.Mutex    // orders enqueue against stop
	stopped  bool          // stop began: nothing more is queued
	stopping chan struct{} // closed by stop: write what is queued, then return
}

func newEventPipeline(client kubeapi.Client, warn *eventWarnings) *eventPipeline {
	p := &eventPipeline{client: client, warn: warn, queue: make(chan *queuedEvent, eventQueueSize),
		stopping: make(chan struct{}), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.run()
	return p
}

// enqueue queues ev unless the spam filter or a full queue drops it; false
// when p has stopped (ev is neither queued nor dropped).
func (p *eventPipeline) enqueue(q *queuedEvent) bool {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return false
	}
	if !p.spam.allow(q.ev, time.Now()) {
		p.mu.Unlock()
		close(q.done)
		logf(LevelDebug, "lease events: dropped by the spam filter: %s", describeEvent(q.ev))
		return true
	}
	select {
	case p.queue <- q:
		p.mu.Unlock()
	default:
		p.mu.Unlock()
		close(q.done)
		p.warn.report(errEventQueueFull, q.ev)
	}
	return true
}

var errEventQueueFull = fmt.Errorf("the queue of %d Events is full (the events API is slow or unreachable); dropped", eventQueueSize)

func (p *eventPipeline) run() {
	defer close(p.done)
	for {
		select {
		case q := <-p.queue:
			p.write(q.ev)
			close(q.done)
		case <-p.stopping:
			for {
				select {
				case q := <-p.queue:
					p.write(q.ev)
					close(q.done)
				default:
					return
				}
			}
		}
		if p.ctx.Err() != nil {
			return
		}
	}
}

// write sends ev, again after a failure that had no answer from the API
// server (eventTries in all, eventRetryWait apart, as long as the pipeline
// runs).
func (p *eventPipeline) write(ev *kubeapi.Event) {
	for try := 1; ; try++ {
		if p.ctx.Err() != nil {
			return
		}
		err := p.create(ev)
		if err == nil || (try > 1 && apierrors.IsAlreadyExists(err)) {
			return // written (the answer to an earlier try was lost)
		}
		var answered apierrors.APIStatus
		if errors.As(err, &answered) || try == eventTries {
			p.warn.report(err, ev)
			return
		}
		logf(LevelDebug, "lease events: writing an Event failed, trying again in %v: %v", eventRetryWait, err)
		select {
		case <-time.After(eventRetryWait):
		case <-p.ctx.Done():
			return
		}
	}
}

func (p *eventPipeline) create(ev *kubeapi.Event) (err error) {
	p.inFlight.Store(true)
	defer func() {
		p.inFlight.Store(false)
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	ctx, cancel := context.WithTimeout(p.ctx, requestTimeout)
	defer cancel()
	return p.client.CreateEvent(ctx, ev)
}

// stop writes what is queued until deadline, then abandons the rest,
// with a warning that counts them.
func (p *eventPipeline) stop(deadline time.Time) {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.stopping)
	}
	p.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-p.done:
		p.cancel()
		return
	case <-timer.C:
	}
	p.cancel()
	left := len(p.queue)
	if p.inFlight.Load() {
		left++
	}
	if left > 0 {
		p.warn.report(fmt.Errorf("%d Events not written by the end of Shutdown's flush (the events API is slow or unreachable); abandoned", left), nil)
	}
}

// eventSpamFilter is client-go's default spam filter for Events: per lease,
// uid, identity and type, a bucket of eventSpamBurst that refills one per
// eventSpamRefill. It keeps at most eventSpamKeys buckets: a bucket that
// refilled is dropped first, as it is the same as a new one.
type eventSpamFilter struct {
	mu      sync.Mutex
	buckets map[string]*eventBucket
}

type eventBucket struct {
	tokens float64
	at     time.Time
}

func (f *eventSpamFilter) allow(ev *kubeapi.Event, now time.Time) bool {
	key := strings.Join([]string{ev.Source.Host, ev.InvolvedObject.Namespace, ev.InvolvedObject.Name,
		string(ev.InvolvedObject.UID), ev.Type}, "\x00")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.buckets == nil {
		f.buckets = map[string]*eventBucket{}
	}
	b := f.buckets[key]
	if b == nil {
		if len(f.buckets) >= eventSpamKeys {
			f.evict(now)
		}
		b = &eventBucket{tokens: eventSpamBurst, at: now}
		f.buckets[key] = b
	}
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *eventBucket) refill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(float64(eventSpamBurst), b.tokens+float64(now.Sub(b.at))/float64(eventSpamRefill))
		b.at = now
	}
}

// evict drops the buckets that refilled, or all when none did.
func (f *eventSpamFilter) evict(now time.Time) {
	for k, b := range f.buckets {
		if b.refill(now); b.tokens >= eventSpamBurst {
			delete(f.buckets, k)
		}
	}
	if len(f.buckets) >= eventSpamKeys {
		clear(f.buckets)
	}
}

// clipMessage keeps a message within maxEventMessage bytes, cut on a rune
// boundary.
func clipMessage(msg string) string {
	if len(msg) <= maxEventMessage {
		return msg
	}
	const more = "..."
	cut := maxEventMessage - len(more)
	for cut > 0 && !isRuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// The Events of an election. Each is recorded on the election's goroutine
// or its canceller's, never under e.mu, after the change it reports.

// recordElected records "<id> became leader" if the campaign that just
// returned won (also when a cancel follows at once: its release is
// recorded too).
func (e *Election) recordElected() {
	if e.events == nil || !isClosed(e.elected) {
		return
	}
	token, uid := e.eventFacts()
	typ, msg := electedEvent(e.identity, token)
	e.events.record(e.key, uid, e.identity, typ, msg)
}

// recordLoss records "<id> stopped leading: <why>" when the election's
// goroutine ends a leadership by a loss (or a contained panic). A cancel is
// recorded by recordRelease instead, with the release's outcome.
func (e *Election) recordLoss() {
	if e.events == nil || !isClosed(e.elected) {
		return
	}
	reason := e.endReason()
	if reason == nil || !e.Ended() || errors.Is(reason, ErrHandedOff) { // a hand-off records its own
		return
	}
	token, uid := e.eventFacts()
	typ, msg := stoppedEvent(e.identity, token, reason, nil)
	e.setEndEvent(e.events.record(e.key, uid, e.identity, typ, msg)) // a CancelElection after the loss waits for it
}

// recordRelease records the end of a leadership by Cancel (or Shutdown),
// after the release: endedHere false means a loss ended it first (and was
// recorded).
func (e *Election) recordRelease(endedHere bool, releaseErr error) {
	if e.events == nil || !endedHere || !isClosed(e.elected) {
		return
	}
	token, uid := e.eventFacts()
	typ, msg := stoppedEvent(e.identity, token, nil, releaseErr)
	e.setEndEvent(e.events.record(e.key, uid, e.identity, typ, msg))
}

// setEndEvent keeps the written-channel of the Event that ends the term
// (see awaitEndEvent).
func (e *Election) setEndEvent(done <-chan struct{}) {
	e.mu.Lock()
	e.endEvent = done
	e.mu.Unlock()
}

// awaitEndEvent waits, at most endEventWait, for the Event that ended the
// term to be written: for the host's CancelElection and HandOff, after
// which a host often exits. Never under a lock; Shutdown does not wait
// here (it flushes every Event within its own timeout).
func (e *Election) awaitEndEvent() {
	e.mu.Lock()
	done := e.endEvent
	e.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(endEventWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logf(LevelInfo, "lease %s: the Event of this term's end is still being written after %v; not waiting for it", e.key, endEventWait)
	}
}

// eventFacts are the fencing token and the UID of the Lease as last written.
func (e *Election) eventFacts() (int64, types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var uid types.UID
	if e.written != nil {
		uid = e.written.UID
	}
	return e.token, uid
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// electedEvent is the Event of a new leadership.
func electedEvent(identity string, token int64) (eventType, message string) {
	return kubeapi.EventTypeNormal, fmt.Sprintf("%s became leader (fencing token %d)", identity, token)
}

// stoppedEvent is the Event of a leadership's end: reason nil is a cancel,
// with releaseErr the release's outcome; else a loss (see errors.go). A
// release is Normal; a loss, or a release that failed (the Lease stays
// held until it expires), is a Warning.
func stoppedEvent(identity string, token int64, reason, releaseErr error) (eventType, message string) {
	eventType, why := kubeapi.EventTypeWarning, ""
	switch {
	case reason == nil && releaseErr == nil:
		eventType, why = kubeapi.EventTypeNormal, "released"
	case reason == nil:
		why = fmt.Sprintf("cancelled, but the release failed (the lease expires after its duration): %v", releaseErr)
	default:
		why = reason.Error()
	}
	return eventType, stoppedMessage(identity, why, token)
}

// stoppedMessage is the message of every Event that ends a term.
func stoppedMessage(identity, why string, token int64) string {
	return fmt.Sprintf("%s stopped leading: %s (fencing token %d)", identity, why, token)
}

// eventWarnings rate-limits the warnings about Events that could not be
// written: one per eventsWarnEvery; the rest go to the debug level and are
// counted in the next warning.
type eventWarnings struct {
	mu         sync.Mutex
	now        func() time.Time // nil: time.Now (tests set it)
	last       time.Time
	suppressed int
}

func (w *eventWarnings) report(err error, ev *kubeapi.Event) {
	w.mu.Lock()
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	at := now()
	if !w.last.IsZero() && at.Sub(w.last) < eventsWarnEvery {
		w.suppressed++
		w.mu.Unlock()
		logf(LevelDebug, "lease events: %v %s", err, describeEvent(ev))
		return
	}
	suppressed, since := w.suppressed, at.Sub(w.last)
	w.last, w.suppressed = at, 0
	w.mu.Unlock()
	line := fmt.Sprintf("lease events: could not record a Kubernetes Event (elections are not affected): %v %s", err, describeEvent(ev))
	if apierrors.IsForbidden(err) {
		line += fmt.Sprintf("; grant create on events (see deploy/rbac.yaml), or set %s=off", EventsEnv)
	}
	if suppressed > 0 {
		line += fmt.Sprintf(" (%d more such failures in the last %v were logged at debug level only)", suppressed, since.Round(time.Second))
	}
	logf(LevelWarning, "%s", line)
}

// describeEvent names an Event in a log line ("" for none).
func describeEvent(ev *kubeapi.Event) string {
	if ev == nil {
		return ""
	}
	return fmt.Sprintf("[Event %s on %s %s/%s: %q]", ev.Reason, ev.InvolvedObject.Kind,
		ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Message)
}
