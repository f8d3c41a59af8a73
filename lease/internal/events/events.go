// Package events delivers the Kubernetes Events of leader elections to the
// API server, on the Lease they are about: the on/off switch
// (K8S_LEASE_EVENTS), a queue that never blocks the caller, the goroutine
// that writes it, client-go's spam filter, and rate-limited warnings about
// what could not be written. What an election reports, and when, is package
// lease's. This package must not import package lease (which depends on
// it): it takes strings, kubeapi types and a log function.
//
// Events are best effort and kept off the election path. Recording never
// blocks: the Event goes to the Recorder's queue of queueSize (dropped, with
// a rate-limited warning, when that is full), whence one goroutine writes
// them in order, each request bounded by the library's request timeout. As
// client-go's recorder does, a spam filter keeps a flapping election from
// flooding the API server (spamBurst Events per lease, identity and type,
// then one per spamRefill), and a write that failed without an answer from
// the API server is tried again (tries in all); one the API server refused
// is not. Unlike client-go's recorder, Events are not aggregated (client-go
// combines similar ones, from the 10th in 10 minutes, into one "(combined
// from similar events)" Event whose count it patches): each change of
// leadership stays an Event of its own, the spam filter alone bounds a
// flapping election, and the RBAC needs create only. A failing events API
// (403 without the RBAC, a slow or unreachable API server) costs a warning
// log, rate-limited, and nothing else.
//
// The Events are written as JSON through package kubeapi: client-go's
// tools/record would link core/v1, strategic merge patch and OpenAPI, more
// than a third of the library's size, for these few writes.
package events

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Env is the environment variable that turns Events off (package lease
// exports it, and documents its values, as EventsEnv).
const Env = "K8S_LEASE_EVENTS"

// FlushMax bounds how long Stop lets queued Events (the releases Shutdown
// has just written) reach the API server.
const FlushMax = 2 * time.Second

const (
	component = "k8s-lease" // the Event's source.component; source.host is the identity
	// maxMessage keeps a message with a long API error within the 1 KiB
	// that events.k8s.io allows a note.
	maxMessage = 1024
	// warnEvery: at most one warning about failed Events per Recorder in
	// this time; the others are counted and logged at debug level.
	warnEvery = time.Minute
	// queueSize Events wait at most to be written; more are dropped.
	queueSize = 1000
	// tries and retryWait: a write that failed without an answer from the
	// API server (a timeout, a refused connection) is tried again.
	tries     = 3
	retryWait = time.Second
	// The spam filter, as client-go's default: spamBurst Events per lease,
	// uid, identity and type (not reason), then one per spamRefill;
	// spamKeys buckets at most.
	spamBurst  = 25
	spamRefill = 5 * time.Minute
	spamKeys   = 4096
)

// Level is the level of a line this package logs.
type Level int

const (
	Warning Level = iota
	Info
	Debug
)

// Logf receives the lines this package logs; package lease passes its log.
type Logf func(level Level, format string, args ...any)

// Recorder is a Manager's Event recording: one pipeline, started on the
// first Event and stopped by Stop (a later Event starts another). Events
// are on until Set or LoadEnv turns them off.
type Recorder struct {
	log            Logf
	requestTimeout time.Duration // bounds each write
	clock          clock.Clock   // a fake one in tests
	off            atomic.Bool
	warnings       warnings

	mu       sync.Mutex // guards what follows; never held while writing
	explicit bool       // Set was called: the environment no longer decides
	client   kubeapi.Client
	pipe     *pipeline
}

// New returns a Recorder that logs to log and bounds each write by
// requestTimeout.
func New(log Logf, requestTimeout time.Duration) *Recorder {
	return &Recorder{log: log, requestTimeout: requestTimeout, clock: clock.RealClock{}}
}

// Set turns the Events on or off, from the next one on. It overrides
// K8S_LEASE_EVENTS.
func (r *Recorder) Set(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.explicit = true
	r.off.Store(!on)
}

// On reports whether Events are recorded.
func (r *Recorder) On() bool { return !r.off.Load() }

// LoadEnv reads K8S_LEASE_EVENTS (package lease's Init calls it, after the
// C layer copied the host's environment): a value it does not know is an
// error, not a silent default.
func (r *Recorder) LoadEnv() error {
	on, err := parseEnv(os.Getenv(Env))
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.explicit {
		r.off.Store(!on)
	}
	if r.off.Load() {
		r.log(Info, "Kubernetes Events on leadership changes are off (%s or SetEvents)", Env)
	}
	return nil
}

func parseEnv(v string) (on bool, err error) {
	switch strings.ToLower(v) {
	case "", "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, validate.Invalid("environment variable %s=%s: must be on or off (or true/false, 1/0; unset or empty means on)",
		Env, validate.Clip(v))
}

// Use returns r, remembering the client the pipeline will write with (the
// first one given).
func (r *Recorder) Use(client kubeapi.Client) *Recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		r.client = client
	}
	return r
}

// Record queues an Event about the Lease namespace/name (uid when known)
// from identity, with the caller's type, reason and message. It never
// blocks and never fails. The channel it returns is closed once the Event
// is written, or its write failed, or it was dropped (nil: Events are off,
// no client was given, or it panicked).
func (r *Recorder) Record(namespace, name string, uid types.UID, identity, eventType, reason, message string) (done <-chan struct{}) {
	if r.off.Load() {
		return nil
	}
	// The caller's goroutine may have no panic guard of its own.
	defer func() {
		if p := recover(); p != nil {
			r.log(Warning, "lease %s/%s: recording an Event: %v", namespace, name, panicError(p))
			done = nil
		}
	}()
	q := &queued{ev: newEvent(namespace, name, uid, identity, eventType, reason, clipMessage(message), r.clock.Now()), done: make(chan struct{})}
	for {
		p := r.pipeline()
		if p == nil {
			return nil
		}
		if p.enqueue(q) {
			return q.done
		}
		// Stop stopped p after we found it: the next pipeline writes q.
	}
}

// pipeline returns the running pipeline, starting it on first use.
func (r *Recorder) pipeline() *pipeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pipe == nil && r.client != nil {
		r.pipe = newPipeline(r, r.client)
	}
	return r.pipe
}

// Running reports whether a pipeline runs (tests: none is left after Stop).
func (r *Recorder) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pipe != nil
}

// Stop lets the queued Events reach the API server until deadline, at most
// FlushMax from now, then stops the pipeline: a write still in flight is
// abandoned (package lease's Shutdown defers it, with its own deadline).
func (r *Recorder) Stop(deadline time.Time) {
	r.mu.Lock()
	p := r.pipe
	r.pipe = nil
	r.mu.Unlock()
	if p == nil {
		return
	}
	if limit := r.clock.Now().Add(FlushMax); limit.Before(deadline) {
		deadline = limit
	}
	p.stop(deadline)
}

// newEvent is the core/v1 Event client-go's recorder would write: named
// after the Lease and the time, as kubectl lists them.
func newEvent(namespace, name string, uid types.UID, identity, eventType, reason, message string, at time.Time) *kubeapi.Event {
	t := metav1.NewTime(at)
	return &kubeapi.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", name, at.UnixNano()), Namespace: namespace},
		InvolvedObject: kubeapi.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Namespace: namespace, Name: name, UID: uid},
		Reason: reason, Message: message, Type: eventType,
		Source:         kubeapi.EventSource{Component: component, Host: identity},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: component, ReportingInstance: identity,
	}
}

// clipMessage keeps a message within maxMessage bytes, cut on a rune
// boundary.
func clipMessage(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	const more = "..."
	cut := maxMessage - len(more)
	for cut > 0 && !isRuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// panicError is a recovered panic with its stack, worded as package lease's
// ErrInternal ("internal error: panic: ...").
func panicError(p any) error {
	return fmt.Errorf("internal error: panic: %v\n%s", p, debug.Stack())
}
