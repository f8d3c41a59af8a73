package lease

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
)

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
