package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/events"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// The reason, type and message of each change of leadership, in
// client-go's resourcelock wording ("<id> became leader", "<id> stopped
// leading"), with the fencing token and why it stopped.
func TestEventMessages(t *testing.T) {
	tests := []struct {
		name       string
		elected    bool
		reason     error // how it ended (nil: cancelled)
		releaseErr error
		wantType   string
		wantMsg    string
	}{
		{"elected", true, nil, nil, kubeapi.EventTypeNormal, "a became leader (fencing token 7)"},
		{"released by Cancel or Shutdown", false, nil, nil, kubeapi.EventTypeNormal, "a stopped leading: released (fencing token 7)"},
		{"cancelled, release failed", false, nil, errors.New("release lease ns/l: boom"), kubeapi.EventTypeWarning,
			"a stopped leading: cancelled, but the release failed (the lease expires after its duration): release lease ns/l: boom (fencing token 7)"},
		{"renew deadline", false, fmt.Errorf("%w (10s): last error: %v", ErrRenewDeadline, errors.New("connection refused")), nil, kubeapi.EventTypeWarning,
			"a stopped leading: renew deadline exceeded (10s): last error: connection refused (fencing token 7)"},
		{"taken", false, fmt.Errorf("%w: holder is now %s", ErrLeaseTaken, clip("b")), nil, kubeapi.EventTypeWarning,
			`a stopped leading: lease taken by another holder: holder is now "b" (fencing token 7)`},
		{"deleted", false, ErrLeaseDeleted, nil, kubeapi.EventTypeWarning, "a stopped leading: lease deleted by another writer (fencing token 7)"},
		{"edited", false, fmt.Errorf("%w: leaseTransitions 9, leaseDurationSeconds 15", ErrLeaseEdited), nil, kubeapi.EventTypeWarning,
			"a stopped leading: lease record edited by another writer: leaseTransitions 9, leaseDurationSeconds 15 (fencing token 7)"},
		{"contained panic", false, fmt.Errorf("%w: panic: x", ErrInternal), nil, kubeapi.EventTypeWarning,
			"a stopped leading: internal error: panic: x (fencing token 7)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ, msg := stoppedEvent("a", 7, tt.reason, tt.releaseErr)
			if tt.elected {
				typ, msg = electedEvent("a", 7)
			}
			if typ != tt.wantType || msg != tt.wantMsg {
				t.Fatalf("got %s %q\nwant %s %q", typ, msg, tt.wantType, tt.wantMsg)
			}
		})
	}
}

// Init reads K8S_LEASE_EVENTS and fails on a bad value before anything
// else; SetEvents overrides the variable.
func TestEventsEnvInInit(t *testing.T) {
	tests := []struct {
		name     string
		env      string
		setFirst *bool // SetEvents before Init
		wantOff  bool
		wantErr  bool
	}{
		{"unset: on", "", nil, false, false},
		{"off", "off", nil, true, false},
		{"bad value fails Init", "maybe", nil, false, true},
		{"SetEvents(true) wins over off", "off", ptrTo(true), false, false},
		{"SetEvents(false) wins over on", "on", ptrTo(false), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noConfig(t) // Init then fails at the configuration, after reading the variable
			t.Setenv(EventsEnv, tt.env)
			m := NewManager(nil)
			if tt.setFirst != nil {
				m.SetEvents(*tt.setFirst)
			}
			_, err := m.Init()
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), EventsEnv+`="maybe"`) {
					t.Fatalf("Init = %v; want an error naming %s", err, EventsEnv)
				}
				return
			}
			if !errors.Is(err, ErrNoConfig) {
				t.Fatalf("Init = %v; want only the missing configuration", err)
			}
			if off := !m.events.On(); off != tt.wantOff {
				t.Fatalf("events off = %v, want %v", off, tt.wantOff)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// leaseEvents lists the Events recorded about the Lease ns/name.
func leaseEvents(t *testing.T, client *fake.Clientset, name string) []corev1.Event {
	t.Helper()
	list, err := client.CoreV1().Events("ns").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

func hasEvent(evs []corev1.Event, typ, msg string) bool {
	for _, ev := range evs {
		if ev.Type == typ && ev.Message == msg && ev.Reason == "LeaderElection" && ev.Source.Component == "k8s-lease" &&
			ev.InvolvedObject.Kind == "Lease" && ev.InvolvedObject.APIVersion == "coordination.k8s.io/v1" &&
			ev.InvolvedObject.Namespace == "ns" {
			return true
		}
	}
	return false
}

func describeEvents(evs []corev1.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "\n  %s %s %s/%s host=%s: %s", ev.Type, ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Source.Host, ev.Message)
	}
	return b.String()
}

// Each way a leadership ends records its Event on the Lease, after the
// "became leader" one: through the Manager, on a fake clientset.
func TestLeadershipEventsOnAFakeClientset(t *testing.T) {
	fast := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	tests := []struct {
		name string
		// end ends the leadership; failRenewals makes every renewal fail
		// with a 500 once set.
		end      func(t *testing.T, m *Manager, client *fake.Clientset, e *Election, failRenewals *atomic.Bool)
		wantType string
		wantMsg  string
	}{
		{"Cancel", func(t *testing.T, m *Manager, _ *fake.Clientset, _ *Election, _ *atomic.Bool) {
			if err := m.CancelElection("ns", "l"); err != nil {
				t.Fatal(err)
			}
		}, kubeapi.EventTypeNormal, "a stopped leading: released (fencing token 1)"},
		// Shutdown returns only once the release's Event was written.
		{"Shutdown", func(t *testing.T, m *Manager, _ *fake.Clientset, _ *Election, _ *atomic.Bool) {
			if err := m.Shutdown(5 * time.Second); err != nil {
				t.Fatal(err)
			}
		}, kubeapi.EventTypeNormal, "a stopped leading: released (fencing token 1)"},
		{"Lease deleted", func(t *testing.T, _ *Manager, client *fake.Clientset, e *Election, _ *atomic.Bool) {
			if err := client.CoordinationV1().Leases("ns").Delete(t.Context(), "l", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.WaitLost(); !errors.Is(err, ErrLeaseDeleted) {
				t.Fatalf("WaitLost = %v", err)
			}
		}, kubeapi.EventTypeWarning, "a stopped leading: lease deleted by another writer (fencing token 1)"},
		{"renew deadline", func(t *testing.T, _ *Manager, _ *fake.Clientset, e *Election, failRenewals *atomic.Bool) {
			failRenewals.Store(true)
			if err := e.WaitLost(); !errors.Is(err, ErrRenewDeadline) {
				t.Fatalf("WaitLost = %v", err)
			}
		}, kubeapi.EventTypeWarning, "a stopped leading: renew deadline exceeded (1.5s): last error: Internal error occurred: etcd down (fencing token 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, client, _ := fakeManager()
			m.clock = clock.RealClock{}
			defer func() { _ = m.Shutdown(5 * time.Second) }()
			var failRenewals atomic.Bool
			client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if failRenewals.Load() {
					return true, nil, apierrors.NewInternalError(errors.New("etcd down"))
				}
				return false, nil, nil
			})
			e, err := m.RunElection("ns", "l", "a", fast)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.WaitElected(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "the became-leader Event", func() bool {
				return hasEvent(leaseEvents(t, client, "l"), kubeapi.EventTypeNormal, "a became leader (fencing token 1)")
			})
			tt.end(t, m, client, e, &failRenewals)
			if tt.name == "Shutdown" { // no waiting: Shutdown flushed it
				if evs := leaseEvents(t, client, "l"); !hasEvent(evs, tt.wantType, tt.wantMsg) {
					t.Fatalf("after Shutdown returned, no %s %q among:%s", tt.wantType, tt.wantMsg, describeEvents(evs))
				}
				return
			}
			eventually(t, 5*time.Second, "the stopped-leading Event", func() bool {
				return hasEvent(leaseEvents(t, client, "l"), tt.wantType, tt.wantMsg)
			})
			if evs := leaseEvents(t, client, "l"); len(evs) != 2 || evs[0].Source.Host != "a" {
				t.Fatalf("want exactly 2 Events from host a, got:%s", describeEvents(evs))
			}
		})
	}
}

// SetEvents(false): elections as usual, no Event, and no broadcaster.
func TestSetEventsOff(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	m.SetEvents(false)
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if evs := leaseEvents(t, client, "l"); len(evs) != 0 {
		t.Fatalf("Events recorded with SetEvents(false):%s", describeEvents(evs))
	}
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "events" && a.GetVerb() != "list" {
			t.Fatalf("an events request with SetEvents(false): %v", a)
		}
	}
}

// An events API that never answers (nor heeds its request's context) holds
// neither an election nor a Shutdown: recording returns at once (the
// broadcaster's queue drops when full), and Shutdown waits for queued
// Events at most events.FlushMax.
func TestHungEventsAPIBlocksNothing(t *testing.T) {
	hung := &hungEvents{Client: clientsetapi.Wrap(fake.NewClientset()), hang: make(chan struct{})}
	defer close(hung.hang)
	m := NewManager(nil)
	// Not a reactor: the fake clientset serves one request at a time, so a
	// reactor that hangs would hold the Lease requests too.
	m.SetClient(hung)
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the events request to hang", func() bool { return hung.entered.Load() == 1 })
	start := time.Now()
	for i := 0; i < 5000; i++ { // past every queue
		m.events.Record("ns", "l", "", "a", kubeapi.EventTypeNormal, eventReason, fmt.Sprintf("spam %d", i))
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("5000 recordings behind a hung events API took %v", took)
	}
	start = time.Now()
	if err := m.Shutdown(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > events.FlushMax+time.Second {
		t.Fatalf("Shutdown took %v behind a hung events API; want at most %v + the release", took, events.FlushMax)
	}
	if isLeader, _, _ := e.IsLeader(); isLeader || !e.Ended() {
		t.Fatal("the election did not end with Shutdown")
	}
	t.Logf("Shutdown took %v behind a hung events API", took.Round(time.Millisecond))
}

// hungEvents is a client whose events API never answers a create until
// hang is closed.
type hungEvents struct {
	kubeapi.Client
	hang    chan struct{}
	entered atomic.Int64
}

func (h *hungEvents) CreateEvent(context.Context, *kubeapi.Event) error {
	h.entered.Add(1)
	<-h.hang
	return errors.New("gave up")
}

// A Shutdown that times out while a release still runs: the release's
// Event must not start a broadcaster that nothing stops afterwards.
func TestNoBroadcasterStartedAfterShutdown(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	var slow atomic.Bool
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if _, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && slow.Load() {
			time.Sleep(time.Second) // the release (renewals are patches)
		}
		return false, nil, nil
	})
	e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	running := m.events.Running
	eventually(t, 5*time.Second, "the elected Event's broadcaster", running)
	slow.Store(true)
	if err := m.Shutdown(200 * time.Millisecond); !errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("Shutdown = %v, want a timeout (the release is slow)", err)
	}
	eventually(t, 5*time.Second, "the release landed", func() bool {
		l, err := client.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == ""
	})
	time.Sleep(300 * time.Millisecond) // its Event is recorded right after
	eventually(t, 5*time.Second, "no broadcaster left running", func() bool { return !running() })
}

// Re-entrancy: a log sink that calls Metrics and Stats on every line and
// Shutdown when it sees an election, while Events are recorded.
func TestLogSinkReentersShutdownAndMetrics(t *testing.T) {
	m, _, _ := fakeManager()
	m.clock = clock.RealClock{}
	done := make(chan struct{}, 100)
	SetLogSink(func(level Level, msg string) {
		_ = m.Metrics()
		_ = m.Stats()
		if strings.Contains(msg, "sink-reentry elected, token") {
			_ = m.Shutdown(3 * time.Second)
			done <- struct{}{}
		}
	})
	t.Cleanup(func() { SetLogSink(nil) })
	if err := SetLogLevel(LevelDebug); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = SetLogLevel(LevelWarning) })
	for i := 0; i < 5; i++ {
		e, err := m.RunElection("ns", "l", "sink-reentry", fastUnitTiming)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.WaitElected(5 * time.Second); err != nil && !errors.Is(err, ErrCancelled) {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the sink's Shutdown did not return")
		}
		if err := e.WaitLost(); err != nil {
			t.Fatal(err)
		}
	}
}

// docs/operations.md lists every Event a term's start and end records, in
// the words the code writes (placeholders <id>, <target>, <error>, N).
func TestTheEventsOfOperationsMdAreTheOnesRecorded(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	placeholder := func(msg string) string { return strings.ReplaceAll(msg, "(fencing token -1)", "(fencing token N)") }
	_, elected := electedEvent("<id>", -1)
	_, released := stoppedEvent("<id>", -1, nil, nil)
	_, failedRelease := stoppedEvent("<id>", -1, nil, errors.New("<error>"))
	_, handedOff := handOffEvent("<id>", "<target>", -1, nil)
	_, failedHandOff := handOffEvent("<id>", "<target>", -1, errors.New("<error>"))
	for _, msg := range []string{
		placeholder(elected),
		placeholder(released),
		placeholder(failedRelease),
		placeholder(handedOff),
		placeholder(failedHandOff),
		"<id> stopped leading: " + ErrRenewDeadline.Error(),
		"<id> stopped leading: " + ErrLeaseTaken.Error(),
		ErrLeaseDeleted.Error(),
		ErrLeaseEdited.Error(),
	} {
		if !strings.Contains(string(doc), msg) {
			t.Errorf("docs/operations.md does not list the Event %q", msg)
		}
	}
}
