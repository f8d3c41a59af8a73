package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// capturedLog keeps the lines a Recorder logs.
type capturedLog struct {
	mu    sync.Mutex
	lines []loggedLine
}

type loggedLine struct {
	level Level
	msg   string
}

func (c *capturedLog) logf(level Level, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, loggedLine{level, fmt.Sprintf(format, args...)})
}

// warnings are the warnings logged so far.
func (c *capturedLog) warnings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.lines {
		if l.level == Warning {
			out = append(out, l.msg)
		}
	}
	return out
}

// newTestRecorder is a Recorder writing with client, on a fake clock.
func newTestRecorder(t *testing.T, client kubeapi.Client) (*Recorder, *capturedLog, *clocktesting.FakeClock) {
	log := &capturedLog{}
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r := New(log.logf, 10*time.Second)
	r.clock = fc
	t.Cleanup(func() { // ends a writer the test left waiting (on the fake clock, or a hung client)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.pipe != nil {
			r.pipe.cancel()
		}
	})
	return r.Use(client), log, fc
}

// waitUntil polls cond: the pipeline's goroutine gets there on its own.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// hungClient is a client whose events API never answers a create until
// hang is closed; entered is closed once the first create is under way.
type hungClient struct {
	kubeapi.Client
	hang, entered chan struct{}
	once          sync.Once
}

func newHungClient(t *testing.T) *hungClient {
	h := &hungClient{hang: make(chan struct{}), entered: make(chan struct{})}
	t.Cleanup(func() { close(h.hang) })
	return h
}

func (h *hungClient) CreateEvent(context.Context, *kubeapi.Event) error {
	h.once.Do(func() { close(h.entered) })
	<-h.hang
	return errors.New("gave up")
}

// A message with a long API error is cut to what the API server takes, on
// a rune boundary.
func TestEventMessageIsClipped(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		want int // length
	}{
		{"short", "a became leader", len("a became leader")},
		{"exactly the limit", strings.Repeat("x", maxMessage), maxMessage},
		{"ascii over", strings.Repeat("x", 3000), maxMessage},
		{"multi-byte at the cut", strings.Repeat("é", 1000), maxMessage - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clipMessage(tt.msg)
			if len(got) != tt.want || !strings.HasPrefix(tt.msg, strings.TrimSuffix(got, "...")) || !isValidUTF8(got) {
				t.Fatalf("clipMessage: %d bytes (want %d), %q...", len(got), tt.want, got[:min(len(got), 20)])
			}
		})
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// K8S_LEASE_EVENTS: on, off, their usual spellings, unset; anything else
// is an error naming the variable and the accepted values.
func TestParseEventsEnv(t *testing.T) {
	tests := []struct {
		value   string
		want    bool
		wantErr bool
	}{
		{"", true, false}, {"on", true, false}, {"ON", true, false}, {"true", true, false}, {"1", true, false},
		{"off", false, false}, {"Off", false, false}, {"false", false, false}, {"0", false, false},
		{"no", false, true}, {"disabled", false, true}, {" off", false, true}, {"2", false, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.value), func(t *testing.T) {
			on, err := parseEnv(tt.value)
			if tt.wantErr {
				if err == nil || !errors.Is(err, validate.ErrInvalidArgument) || !strings.Contains(err.Error(), Env) ||
					!strings.Contains(err.Error(), "must be on or off") {
					t.Fatalf("parseEnv(%q) = %v, %v; want an error naming %s and the accepted values", tt.value, on, err, Env)
				}
				return
			}
			if err != nil || on != tt.want {
				t.Fatalf("parseEnv(%q) = %v, %v; want %v", tt.value, on, err, tt.want)
			}
		})
	}
}

// forbiddenEvents is a client whose events API refuses every create (403),
// counting them.
type forbiddenEvents struct {
	kubeapi.Client
	mu       sync.Mutex
	rejected int
}

func (f *forbiddenEvents) CreateEvent(context.Context, *kubeapi.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejected++
	return apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New("RBAC: no"))
}

// An events API that refuses (403) costs one warning, never an error;
// further failures within a minute are counted into the next warning
// instead of logged as warnings.
func TestRejectedEventsAreARateLimitedWarning(t *testing.T) {
	client := &forbiddenEvents{}
	r, log, fc := newTestRecorder(t, client)
	record := func(identity, message string) {
		if done := r.Record("ns", "l", "", identity, kubeapi.EventTypeNormal, "LeaderElection", message); done == nil {
			t.Fatal("not recorded")
		} else {
			<-done
		}
	}
	for i, identity := range []string{"a", "b", "c"} {
		record(identity, fmt.Sprintf("%s became leader (fencing token %d)", identity, i+1))
		record(identity, fmt.Sprintf("%s stopped leading: released (fencing token %d)", identity, i+1))
	}
	fc.Step(warnEvery + time.Second)
	record("d", "d became leader (fencing token 4)")
	r.Stop(fc.Now().Add(time.Second))
	if client.rejected != 7 {
		t.Fatalf("%d Events rejected, want 7", client.rejected)
	}
	for _, l := range log.lines {
		if l.level != Warning && l.level != Debug {
			t.Errorf("logged at level %d: %s", l.level, l.msg)
		}
	}
	warnings := log.warnings()
	if len(warnings) != 2 {
		t.Fatalf("want 2 warnings (the first, then one a minute later), got %d:\n%s", len(warnings), strings.Join(warnings, "\n"))
	}
	for _, want := range []string{"forbidden", "elections are not affected", "create on events", Env + "=off",
		`"a became leader (fencing token 1)"`} {
		if !strings.Contains(warnings[0], want) {
			t.Errorf("first warning lacks %q: %s", want, warnings[0])
		}
	}
	if !strings.Contains(warnings[1], "(5 more such failures in the last 1m1s") {
		t.Errorf("second warning does not count the 5 suppressed: %s", warnings[1])
	}
}

// Behind an events API that never answers, an Event past a full queue is
// dropped at once, with a warning.
func TestFullQueueDropsTheEvent(t *testing.T) {
	hung := newHungClient(t)
	r, log, _ := newTestRecorder(t, hung)
	r.Record("ns", "l", "", "a", kubeapi.EventTypeNormal, "LeaderElection", "in flight")
	<-hung.entered
	for i := 0; i < queueSize; i++ { // identities of their own: past the spam filter
		r.Record("ns", "l", "", fmt.Sprint("q", i), kubeapi.EventTypeNormal, "LeaderElection", "queued")
	}
	done := r.Record("ns", "l", "", "b", kubeapi.EventTypeNormal, "LeaderElection", "b became leader (fencing token 1)")
	select {
	case <-done:
	default:
		t.Fatal("the Event past a full queue is not dropped")
	}
	if w := log.warnings(); len(w) != 1 || !strings.Contains(w[0], "full") || !strings.Contains(w[0], "b became leader") {
		t.Fatalf("want one warning naming the full queue and the Event, got %q", w)
	}
}

// lostAnswer writes the first Event but answers as if it had timed out.
type lostAnswer struct {
	kubeapi.Client
	mu    sync.Mutex
	calls int
}

func (c *lostAnswer) CreateEvent(ctx context.Context, ev *kubeapi.Event) error {
	err := c.Client.CreateEvent(ctx, ev)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls++; c.calls == 1 {
		return context.DeadlineExceeded
	}
	return err
}

// A write whose answer was lost is tried again; that it then exists is
// success, not a failure to warn about.
func TestEventRetryAfterLostAnswerIsNotAFailure(t *testing.T) {
	cs := fake.NewClientset()
	client := &lostAnswer{Client: clientsetapi.Wrap(cs)}
	r, log, fc := newTestRecorder(t, client)
	r.Record("ns", "l", "", "a", kubeapi.EventTypeNormal, "LeaderElection", "a became leader (fencing token 1)")
	waitUntil(t, "the wait before the retry", fc.HasWaiters)
	fc.Step(retryWait)
	r.Stop(fc.Now().Add(3 * time.Second))
	list, err := cs.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || client.calls != 2 {
		t.Fatalf("%d Events written in %d calls, want 1 in 2", len(list.Items), client.calls)
	}
	if w := log.warnings(); len(w) != 0 {
		t.Fatalf("warned about an Event that was written: %q", w)
	}
}

// An Event handed to a pipeline that has stopped (Stop stopped it between
// Record finding it and queueing) is not queued where nobody reads: Record
// takes the next pipeline, which writes it.
func TestEventOnAStoppedPipelineIsNotLost(t *testing.T) {
	cs := fake.NewClientset()
	r, _, fc := newTestRecorder(t, clientsetapi.Wrap(cs))
	stale := r.pipeline()
	r.Stop(fc.Now().Add(time.Second))
	ev := newEvent("ns", "l", "", "a", kubeapi.EventTypeNormal, "LeaderElection", "a stopped leading: released (fencing token 1)", fc.Now())
	stale.enqueue(&queued{ev: ev, done: make(chan struct{})})
	if n := len(stale.queue); n != 0 {
		t.Fatalf("a stopped pipeline took the Event into a queue nobody reads (%d queued)", n)
	}
	r.Record("ns", "l", "", "a", kubeapi.EventTypeNormal, "LeaderElection", "a stopped leading: released (fencing token 1)")
	r.Stop(fc.Now().Add(time.Second)) // returns once the queue is written: the fake clock does not end it
	list, err := cs.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("Events written by the next pipeline: %v, %v; want 1", list, err)
	}
}

// Events that Stop's deadline leaves unwritten are reported, once, with
// their number.
func TestEventsAbandonedAtShutdownAreReported(t *testing.T) {
	hung := newHungClient(t)
	r, log, fc := newTestRecorder(t, hung)
	for i, id := range []string{"a", "b", "c"} {
		r.Record("ns", "l", "", id, kubeapi.EventTypeNormal, "LeaderElection", id+" became leader")
		if i == 0 {
			<-hung.entered
		}
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.Stop(fc.Now().Add(50 * time.Millisecond))
	}()
	waitUntil(t, "Stop's deadline timer", fc.HasWaiters)
	fc.Step(50 * time.Millisecond)
	<-stopped
	if w := log.warnings(); len(w) != 1 || !strings.Contains(w[0], "3 Events not written") {
		t.Fatalf("want one warning naming the 3 Events left unwritten, got %q", w)
	}
}

func TestEventSpamFilter(t *testing.T) {
	ev := func(host, typ string) *kubeapi.Event {
		return newEvent("ns", "l", "uid", host, typ, "LeaderElection", "m", time.Time{})
	}
	start := time.Now()
	for _, tc := range []struct {
		name    string
		before  []*kubeapi.Event // allowed first, at start
		ev      *kubeapi.Event
		at      time.Duration // after start
		allowed bool
	}{
		{"the first", nil, ev("a", "Normal"), 0, true},
		{"the 26th at once", repeat(ev("a", "Normal"), 25), ev("a", "Normal"), 0, false},
		{"the 26th, one refill later", repeat(ev("a", "Normal"), 25), ev("a", "Normal"), spamRefill, true},
		{"another identity", repeat(ev("a", "Normal"), 25), ev("b", "Normal"), 0, true},
		{"another type, as client-go keys it", repeat(ev("a", "Normal"), 25), ev("a", "Warning"), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f spamFilter
			for i, e := range tc.before {
				if !f.allow(e, start) {
					t.Fatalf("event %d of the burst refused", i)
				}
			}
			if got := f.allow(tc.ev, start.Add(tc.at)); got != tc.allowed {
				t.Fatalf("allow = %v, want %v", got, tc.allowed)
			}
		})
	}
}

func repeat(ev *kubeapi.Event, n int) []*kubeapi.Event {
	out := make([]*kubeapi.Event, n)
	for i := range out {
		out[i] = ev
	}
	return out
}
