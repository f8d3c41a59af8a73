package lease

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/k8s-lease/k8s-lease/lease/internal/events"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Kubernetes Events on leadership changes, on the Lease itself, so that
// `kubectl describe lease NAME` tells who led when and why it stopped. They
// follow client-go's resourcelock convention (reason LeaderElection, "<id>
// became leader", "<id> stopped leading") so that tools and people reading
// events of client-go leaders read ours the same way. This file says what
// an election reports and when; package lease/internal/events delivers it,
// best effort and off the election path (its doc says how).

// EventsEnv is the environment variable that turns Events off: "off" (or
// "false", "0"); "on", "true", "1", unset or empty leave them on. It is read
// when the Manager loads its configuration (Init); another value fails
// Init, naming the variable. Manager.SetEvents overrides it.
const EventsEnv = events.Env

// endEventWait bounds how long CancelElection and HandOff wait, after the
// release or the hand-off, for its "stopped leading" Event: a host often
// exits right after they return (and never calls Shutdown), which would
// lose the Event still queued. Shutdown flushes the queue itself.
const endEventWait = events.FlushMax

// eventSink delivers the Events an election reports; the Manager's is an
// events.Recorder, which writes them to the API server. Elections call
// Record with no library lock held; it never blocks and never fails. The
// channel it returns is closed once the Event is written, its write failed
// or it was dropped (nil: not recorded, as when Events are off).
type eventSink interface {
	Record(namespace, name string, uid types.UID, identity, eventType, reason, message string) (done <-chan struct{})
}

// noEvents records no Event: the sink of an election built without the
// Manager's (newElection).
type noEvents struct{}

func (noEvents) Record(namespace, name string, uid types.UID, identity, eventType, reason, message string) <-chan struct{} {
	return closedChan
}

// closedChan is a channel that is closed: something already done.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// eventReason is the reason of every Event an election reports: the one
// client-go's resourcelock uses, so that tools that look for it find ours.
const eventReason = "LeaderElection"

// newEventRecorder is a Manager's Event delivery, logging to the library's
// log.
func newEventRecorder() *events.Recorder {
	return events.New(func(level events.Level, format string, args ...any) {
		logf([...]Level{events.Warning: LevelWarning, events.Info: LevelInfo, events.Debug: LevelDebug}[level], format, args...)
	}, requestTimeout)
}

// SetEvents turns the Kubernetes Events on leadership changes on or off,
// from the next change of leadership on. It overrides K8S_LEASE_EVENTS.
func (m *Manager) SetEvents(on bool) { m.events.Set(on) }

// The Events of an election. Each is recorded on the election's goroutine
// or its canceller's, never under e.mu, after the change it reports.

// recordElected records "<id> became leader" if the campaign that just
// returned won (also when a cancel follows at once: its release is
// recorded too).
func (e *Election) recordElected() {
	if !isClosed(e.elected) {
		return
	}
	token, uid := e.eventFacts()
	typ, msg := electedEvent(e.identity, token)
	e.recordEvent(uid, typ, msg)
}

// recordLoss records "<id> stopped leading: <why>" when the election's
// goroutine ends a leadership by a loss (or a contained panic). A cancel is
// recorded by recordRelease instead, with the release's outcome.
func (e *Election) recordLoss() {
	if !isClosed(e.elected) {
		return
	}
	reason := e.endReason()
	if reason == nil || !e.Ended() || errors.Is(reason, ErrHandedOff) { // a hand-off records its own
		return
	}
	token, uid := e.eventFacts()
	typ, msg := stoppedEvent(e.identity, token, reason, nil)
	e.setEndEvent(e.recordEvent(uid, typ, msg)) // a CancelElection after the loss waits for it
}

// recordRelease records the end of a leadership by Cancel (or Shutdown),
// after the release: endedHere false means a loss ended it first (and was
// recorded).
func (e *Election) recordRelease(endedHere bool, releaseErr error) {
	if !endedHere || !isClosed(e.elected) {
		return
	}
	token, uid := e.eventFacts()
	typ, msg := stoppedEvent(e.identity, token, nil, releaseErr)
	e.setEndEvent(e.recordEvent(uid, typ, msg))
}

// setEndEvent keeps the written-channel of the Event that ends the term
// (see awaitEndWrites).
func (e *Election) setEndEvent(done <-chan struct{}) {
	e.mu.Lock()
	e.ending.event = done
	e.mu.Unlock()
}

// awaitEndWrites waits, at most endEventWait in all, for what the end of
// the election writes after it: the Event that ended the term and the
// delete of its candidate record. For the host's CancelElection and
// HandOff, after which a host often exits: it must leave neither behind.
// Never under a lock; Shutdown does not wait here (it flushes every Event
// and waits for every record's delete within its own timeout).
func (e *Election) awaitEndWrites() {
	ctx, cancel := context.WithTimeout(context.Background(), endEventWait)
	defer cancel()
	e.awaitEndEvent(ctx)
	e.awaitCandidateRecordDeleted(ctx)
}

func (e *Election) awaitEndEvent(ctx context.Context) {
	e.mu.Lock()
	done := e.ending.event
	e.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
		logf(LevelInfo, "lease %s: the Event of this term's end is still being written after %v; not waiting for it", e.key, endEventWait)
	}
}

// eventFacts are the fencing token and the UID of the Lease as last written.
func (e *Election) eventFacts() (int64, types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var uid types.UID
	if e.term.written != nil {
		uid = e.term.written.UID
	}
	return e.term.token, uid
}

// recordEvent hands an Event about the Lease, from this candidate, to the
// sink.
func (e *Election) recordEvent(uid types.UID, eventType, message string) (done <-chan struct{}) {
	return e.events.Record(e.key.Namespace, e.key.Name, uid, e.identity, eventType, eventReason, message)
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

// handOffEvent is the Event of a leadership's end by a hand-off to `to`:
// Normal, or a Warning with the error of one that failed.
func handOffEvent(identity, to string, token int64, err error) (eventType, message string) {
	if err != nil {
		return kubeapi.EventTypeWarning, stoppedMessage(identity, fmt.Sprintf("hand-off to %s failed: %v", to, err), token)
	}
	return kubeapi.EventTypeNormal, stoppedMessage(identity, "handed off to "+to, token)
}

// stoppedMessage is the message of every Event that ends a term.
func stoppedMessage(identity, why string, token int64) string {
	return fmt.Sprintf("%s stopped leading: %s (fencing token %d)", identity, why, token)
}
