package lease

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// eventWarningsLogged captures the log for the test and returns the
// warnings about Events logged so far, when called.
func eventWarningsLogged(t *testing.T) func() []string {
	logs := &capturedLogs{}
	SetLogSink(logs.sink)
	t.Cleanup(func() { SetLogSink(nil) })
	return func() []string {
		flushLogs()
		logs.mu.Lock()
		defer logs.mu.Unlock()
		var out []string
		for _, m := range logs.msgs {
			if strings.HasPrefix(m, "W lease events") {
				out = append(out, m)
			}
		}
		return out
	}
}

// lostAnswer writes the first Event but answers as if it had timed out.
type lostAnswer struct {
	kubeapi.Client
	calls atomic.Int64
}

func (c *lostAnswer) CreateEvent(ctx context.Context, ev *kubeapi.Event) error {
	err := c.Client.CreateEvent(ctx, ev)
	if c.calls.Add(1) == 1 {
		return context.DeadlineExceeded
	}
	return err
}

// A write whose answer was lost is tried again; that it then exists is
// success, not a failure to warn about.
func TestEventRetryAfterLostAnswerIsNotAFailure(t *testing.T) {
	warnings := eventWarningsLogged(t)
	cs := fake.NewClientset()
	client := &lostAnswer{Client: clientsetapi.Wrap(cs)}
	me := (&managerEvents{}).use(client)
	me.record(Key{"ns", "l"}, "", "a", kubeapi.EventTypeNormal, "a became leader (fencing token 1)")
	me.stop(time.Now().Add(3 * time.Second)) // past the retry, 1 s later
	list, err := cs.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || client.calls.Load() != 2 {
		t.Fatalf("%d Events written in %d calls, want 1 in 2", len(list.Items), client.calls.Load())
	}
	if w := warnings(); len(w) != 0 {
		t.Fatalf("warned about an Event that was written: %q", w)
	}
}

// An Event handed to a pipeline that has stopped (Shutdown stopped it
// between record finding it and queueing) is not queued where nobody
// reads: record takes the next pipeline, which writes it.
func TestEventOnAStoppedPipelineIsNotLost(t *testing.T) {
	cs := fake.NewClientset()
	me := (&managerEvents{}).use(clientsetapi.Wrap(cs))
	stale := me.pipeline()
	me.stop(time.Now().Add(time.Second))
	ev := newEvent(Key{"ns", "l"}, "", "a", kubeapi.EventTypeNormal, "a stopped leading: released (fencing token 1)", time.Now())
	stale.enqueue(&queuedEvent{ev: ev, done: make(chan struct{})})
	if n := len(stale.queue); n != 0 {
		t.Fatalf("a stopped pipeline took the Event into a queue nobody reads (%d queued)", n)
	}
	me.record(Key{"ns", "l"}, "", "a", kubeapi.EventTypeNormal, "a stopped leading: released (fencing token 1)")
	me.stop(time.Now().Add(time.Second))
	eventually(t, time.Second, "the Event written by the next pipeline", func() bool {
		list, err := cs.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 1
	})
}

// Events that Shutdown's deadline leaves unwritten are reported, once,
// with their number.
func TestEventsAbandonedAtShutdownAreReported(t *testing.T) {
	warnings := eventWarningsLogged(t)
	events := &hungEvents{Client: clientsetapi.Wrap(fake.NewClientset()), hang: make(chan struct{})}
	defer close(events.hang)
	me := (&managerEvents{}).use(events)
	for i, id := range []string{"a", "b", "c"} {
		me.record(Key{"ns", "l"}, "", id, kubeapi.EventTypeNormal, id+" became leader")
		if i == 0 {
			eventually(t, time.Second, "the first write in flight", func() bool { return events.entered.Load() == 1 })
		}
	}
	me.stop(time.Now().Add(50 * time.Millisecond))
	w := warnings()
	if len(w) != 1 || !strings.Contains(w[0], "3 Events not written") {
		t.Fatalf("want one warning naming the 3 Events left unwritten, got %q", w)
	}
}

func TestEventSpamFilter(t *testing.T) {
	ev := func(host, typ string) *kubeapi.Event {
		return newEvent(Key{"ns", "l"}, "uid", host, typ, "m", time.Time{})
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
		{"the 26th, one refill later", repeat(ev("a", "Normal"), 25), ev("a", "Normal"), eventSpamRefill, true},
		{"another identity", repeat(ev("a", "Normal"), 25), ev("b", "Normal"), 0, true},
		{"another type, as client-go keys it", repeat(ev("a", "Normal"), 25), ev("a", "Warning"), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f eventSpamFilter
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
