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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	krecord "k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Kubernetes Events on leadership changes, on the Lease itself, so that
// `kubectl describe lease NAME` tells who led when and why it stopped. They
// follow client-go's resourcelock convention (reason LeaderElection, "<id>
// became leader", "<id> stopped leading") so that tools and people reading
// events of client-go leaders read ours the same way.
//
// Events are best effort and kept off the election path: they go through
// client-go's EventBroadcaster (a queue, the spam filter and the
// aggregation every Kubernetes component uses), whose recording never
// blocks: Event hands the Event to a queue of 1000 (watch.Broadcaster's
// ActionOrDrop, which drops it with a log line when that is full), whence it
// moves to the sink's queue of 1000 (dropped silently when full). Nothing
// here is called with a library lock held. A failing events API (403
// without the RBAC, a slow or unreachable API server) costs a warning log,
// rate-limited, and nothing else.

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
	// eventsWarnEvery: at most one warning about failed Events per Manager
	// in this time; the others are counted and logged at debug level.
	eventsWarnEvery = time.Minute
	// flushKind marks the internal Event that Shutdown queues behind the
	// others to learn when they are done; it never leaves the process.
	flushKind = "k8s-lease-flush"
)

// managerEvents is a Manager's Event recording: one broadcaster, started on
// the first Event and stopped by Shutdown (a later Event starts another).
// The zero value records: Events are on by default.
type managerEvents struct {
	off  atomic.Bool
	warn eventWarnings

	mu       sync.Mutex // guards what follows; never held while recording
	explicit bool       // SetEvents was called: the environment no longer decides
	client   kubernetes.Interface
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
// the client the broadcaster will write with.
func (me *managerEvents) use(client kubernetes.Interface) *managerEvents {
	me.mu.Lock()
	defer me.mu.Unlock()
	if me.client == nil {
		me.client = client
	}
	return me
}

// record queues an Event about the Lease key (uid when known). It never
// blocks, never fails, and must not be called with a library lock held.
func (me *managerEvents) record(key Key, uid types.UID, identity, eventType, message string) {
	if me == nil || me.off.Load() {
		return
	}
	// Called on an election's own goroutine, outside its panic guard.
	defer func() {
		if p := recover(); p != nil {
			logf(LevelWarning, "lease %s: recording an Event: %v", key, panicError(p))
		}
	}()
	p := me.pipeline()
	if p == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
		Namespace: key.Namespace, Name: key.Name, UID: uid}
	p.recorder(identity).Event(ref, eventType, eventReason, clipMessage(message))
}

// pipeline returns the running broadcaster, starting it on first use.
func (me *managerEvents) pipeline() *eventPipeline {
	me.mu.Lock()
	defer me.mu.Unlock()
	if me.pipe == nil && me.client != nil {
		me.pipe = newEventPipeline(me.client.CoreV1().Events(""), &me.warn)
	}
	return me.pipe
}

// stop lets the queued Events reach the API server until deadline, at most
// eventsFlushMax from now, then stops the broadcaster without waiting past
// the deadline (Shutdown defers it, with Shutdown's own deadline).
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

// eventPipeline is one client-go broadcaster writing to the events API.
type eventPipeline struct {
	broadcaster krecord.EventBroadcaster
	logger      klog.Logger
	flushed     chan struct{} // closed when the flush marker reached the sink
}

func newEventPipeline(events corev1client.EventInterface, warn *eventWarnings) *eventPipeline {
	p := &eventPipeline{logger: klog.New(&eventLogSink{warn: warn}), flushed: make(chan struct{})}
	// The context carries the logger that the broadcaster's sink loop logs
	// with (a rejected or failed write). It has no Done channel, so the
	// broadcaster starts no goroutine to watch it.
	p.broadcaster = krecord.NewBroadcaster(krecord.WithContext(klog.NewContext(context.Background(), p.logger)))
	var once sync.Once
	sink := &corev1client.EventSinkImpl{Interface: &boundedEvents{EventInterface: events,
		flush: func() { once.Do(func() { close(p.flushed) }) }}}
	p.broadcaster.StartRecordingToSink(sink)
	return p
}

// recorder is cheap (a struct): one per Event, since source.host is the
// identity of the election that records it.
func (p *eventPipeline) recorder(identity string) krecord.EventRecorder {
	return p.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent, Host: identity}).
		WithLogger(p.logger)
}

func (p *eventPipeline) stop(deadline time.Time) {
	// The marker is queued behind every Event recorded so far, and the
	// sink loop takes them in order: once it arrives they were written,
	// or given up on.
	p.recorder("").Event(&corev1.ObjectReference{Kind: flushKind, Namespace: "default", Name: flushKind},
		corev1.EventTypeNormal, "Flush", "flush")
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	select {
	case <-p.flushed:
	case <-ctx.Done():
	}
	// Shutdown closes the queue and ends retry sleeps; a request in flight
	// ends by its own timeout (boundedEvents), not waited for here.
	stopped := make(chan struct{})
	go func() {
		p.broadcaster.Shutdown()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
	}
}

// boundedEvents is the events client the sink writes with: every request
// carries the library's request timeout (client-go's EventSinkImpl sends
// without one, and a hung request would hold the sink loop for good), a
// panic is an error rather than a dead host, and the flush marker is
// answered locally.
type boundedEvents struct {
	corev1client.EventInterface
	flush func()
}

func (b *boundedEvents) CreateWithEventNamespace(ev *corev1.Event) (got *corev1.Event, err error) {
	if ev.InvolvedObject.Kind == flushKind {
		b.flush()
		return ev, nil
	}
	return b.do(func(ctx context.Context) (*corev1.Event, error) {
		return b.CreateWithEventNamespaceWithContext(ctx, ev)
	})
}

func (b *boundedEvents) UpdateWithEventNamespace(ev *corev1.Event) (*corev1.Event, error) {
	return b.do(func(ctx context.Context) (*corev1.Event, error) {
		return b.UpdateWithEventNamespaceWithContext(ctx, ev)
	})
}

func (b *boundedEvents) PatchWithEventNamespace(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	return b.do(func(ctx context.Context) (*corev1.Event, error) {
		return b.PatchWithEventNamespaceWithContext(ctx, ev, data)
	})
}

func (b *boundedEvents) do(req func(context.Context) (*corev1.Event, error)) (got *corev1.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			got, err = nil, panicError(p)
		}
	}()
	ctx, cancel := requestContext()
	defer cancel()
	return req(ctx)
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
	e.events.record(e.key, uid, e.identity, typ, msg)
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
	e.events.record(e.key, uid, e.identity, typ, msg)
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
	return corev1.EventTypeNormal, fmt.Sprintf("%s became leader (fencing token %d)", identity, token)
}

// stoppedEvent is the Event of a leadership's end: reason nil is a cancel,
// with releaseErr the release's outcome; else a loss (see errors.go). A
// release is Normal; a loss, or a release that failed (the Lease stays
// held until it expires), is a Warning.
func stoppedEvent(identity string, token int64, reason, releaseErr error) (eventType, message string) {
	eventType, why := corev1.EventTypeWarning, ""
	switch {
	case reason == nil && releaseErr == nil:
		eventType, why = corev1.EventTypeNormal, "released"
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

func (w *eventWarnings) report(err error, msg string, kv []any) {
	w.mu.Lock()
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	at := now()
	if !w.last.IsZero() && at.Sub(w.last) < eventsWarnEvery {
		w.suppressed++
		w.mu.Unlock()
		logf(LevelDebug, "lease events: %s", describeEventError(err, msg, kv))
		return
	}
	suppressed, since := w.suppressed, at.Sub(w.last)
	w.last, w.suppressed = at, 0
	w.mu.Unlock()
	line := "lease events: could not record a Kubernetes Event (elections are not affected): " + describeEventError(err, msg, kv)
	if apierrors.IsForbidden(err) {
		line += fmt.Sprintf("; grant create and patch on events (see deploy/rbac.yaml), or set %s=off", EventsEnv)
	}
	if suppressed > 0 {
		line += fmt.Sprintf(" (%d more such failures in the last %v were logged at debug level only)", suppressed, since.Round(time.Second))
	}
	logf(LevelWarning, "%s", line)
}

// describeEventError is client-go's message, its error, and the Event it
// was about (the value under "event"), without the rest of its keys.
func describeEventError(err error, msg string, kv []any) string {
	s := msg
	if err != nil {
		s += ": " + err.Error()
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if ev, ok := kv[i+1].(*corev1.Event); ok && kv[i] == "event" {
			s += fmt.Sprintf(" [Event %s on %s %s/%s: %q]", ev.Reason, ev.InvolvedObject.Kind,
				ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Message)
		}
	}
	return s
}

// eventLogSink is the logger client-go's record package logs with. Its
// errors (a rejected Event: 403 without the RBAC; a write that failed and
// will be retried; a full queue) are about a best-effort side channel, not
// the election: they become rate-limited warnings (eventWarnings), never
// errors. Its info lines go to the debug level.
type eventLogSink struct {
	warn *eventWarnings
}

var _ klog.LogSink = (*eventLogSink)(nil)

func (s *eventLogSink) Init(klog.RuntimeInfo) {}

func (s *eventLogSink) Enabled(int) bool { return Level(logging.level.Load()) >= LevelDebug }

func (s *eventLogSink) Info(_ int, msg string, kv ...any) {
	logf(LevelDebug, "lease events: %s", describeEventError(nil, msg, kv))
}

func (s *eventLogSink) Error(err error, msg string, kv ...any) { s.warn.report(err, msg, kv) }

func (s *eventLogSink) WithValues(...any) klog.LogSink { return s }

func (s *eventLogSink) WithName(string) klog.LogSink { return s }
