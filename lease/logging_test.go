package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

type capturedLogs struct {
	mu   sync.Mutex
	msgs []string
}

func (c *capturedLogs) sink(level Level, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, string("EWID"[min(level, LevelDebug)])+" "+msg)
}

func (c *capturedLogs) has(prefix string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

func TestLoggingLevelsAndKlogRouting(t *testing.T) {
	c := &capturedLogs{}
	SetLogSink(c.sink)
	t.Cleanup(func() { SetLogSink(nil); _ = SetLogLevel(LevelWarning) })

	logf(LevelInfo, "hidden at the default level")
	logf(LevelWarning, "shown warning")
	klog.Warning("from client-go")
	klog.InfoS("client-go info hidden")
	flushLogs()
	if c.has("I hidden") || c.has("I client-go: client-go info") {
		t.Fatalf("info emitted at the default (warning) level: %q", c.msgs)
	}
	if !c.has("W shown warning") || !c.has("W client-go: from client-go") {
		t.Fatalf("warnings missing: %q", c.msgs)
	}
	if err := SetLogLevel(LevelInfo); err != nil {
		t.Fatal(err)
	}
	logf(LevelInfo, "now shown")
	klog.V(1).Info("klog V(1) still hidden at info")
	flushLogs()
	if !c.has("I now shown") || c.has("I client-go: klog V(1)") {
		t.Fatalf("info level: %q", c.msgs)
	}
	if err := SetLogLevel(LevelDebug + 1); err != nil {
		t.Fatal(err)
	}
	klog.V(1).Info("klog V(1) shown")
	flushLogs()
	if !c.has("I client-go: klog V(1) shown") {
		t.Fatalf("klog verbosity not raised: %q", c.msgs)
	}
	for _, bad := range []Level{-1, maxLevel + 1} {
		if err := SetLogLevel(bad); err == nil {
			t.Errorf("SetLogLevel(%d) accepted", bad)
		}
	}
}

// Every level from errors to the highest client-go verbosity is taken
// (klog's flag too), anything else refused naming the log level, and a
// refusal leaves the level as it was.
func TestSetLogLevelRange(t *testing.T) {
	before := Level(logging.level.Load())
	t.Cleanup(func() { _ = SetLogLevel(before) })
	for _, tc := range []struct {
		level Level
		ok    bool
	}{
		{math.MinInt32, false}, {-1, false}, {LevelError, true}, {LevelDebug, true}, {maxLevel, true}, {maxLevel + 1, false}, {math.MaxInt32, false},
	} {
		t.Run(strconv.Itoa(int(tc.level)), func(t *testing.T) {
			_ = SetLogLevel(LevelWarning)
			err := SetLogLevel(tc.level)
			if (err == nil) != tc.ok {
				t.Fatalf("SetLogLevel(%d) = %v, want ok=%v", tc.level, err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "log level") {
					t.Fatalf("refusal %q: not ErrInvalidArgument naming the log level", err)
				}
				if l := Level(logging.level.Load()); l != LevelWarning {
					t.Fatalf("a refused level changed the level to %d", l)
				}
			}
		})
	}
}

// A log callback may call any function of the library, and a slow one
// never stalls elections or renewals: lines are delivered on a goroutine
// of their own, never under a library lock or on the renewal path.
func TestLogCallbackMayCallTheLibrary(t *testing.T) {
	fast := Timing{LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	tests := []struct {
		name  string
		level Level
		// sink is the callback; m and e are the manager and the election
		// (e may be nil until RunElection returns).
		sink func(m *Manager, e func() *Election, msg string)
		// loseLeadership deletes the Lease once elected, so that the
		// leader logs "lost leadership".
		loseLeadership bool
	}{
		{"IsLeader and Stats from an info line", LevelInfo, func(m *Manager, e func() *Election, _ string) {
			m.Stats()
			if el := e(); el != nil {
				el.IsLeader()
			}
		}, false},
		{"CancelElection on lost leadership", LevelWarning, func(m *Manager, _ func() *Election, msg string) {
			if strings.Contains(msg, "lost leadership") {
				_ = m.CancelElection("ns", "l")
			}
		}, true},
		{"SetLogLevel and SetLogSink from the callback", LevelInfo, func(*Manager, func() *Election, string) {
			_ = SetLogLevel(LevelInfo)
			SetLogSink(nil)
		}, false},
		{"a callback that takes a second per line", LevelInfo, func(*Manager, func() *Election, string) {
			time.Sleep(time.Second) // longer than the renew deadline
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, client, _ := fakeManager()
			m.clock = clock.RealClock{}
			var election atomic.Pointer[Election]
			SetLogSink(func(_ Level, msg string) { tt.sink(m, election.Load, msg) })
			if err := SetLogLevel(tt.level); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { SetLogSink(nil); _ = SetLogLevel(LevelWarning); _ = m.Shutdown(5 * time.Second) })
			done := make(chan error, 1)
			go func() {
				e, err := m.RunElection("ns", "l", "a", fast)
				if err != nil {
					done <- err
					return
				}
				election.Store(e)
				if _, err := e.WaitElected(5 * time.Second); err != nil {
					done <- err
					return
				}
				renewals := statsOf(e.stats).Election.Renewals
				deadline := time.Now().Add(3 * time.Second)
				for statsOf(e.stats).Election.Renewals < renewals+3 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if statsOf(e.stats).Election.Renewals < renewals+3 {
					done <- errors.New("renewals stalled")
					return
				}
				if tt.loseLeadership {
					_ = client.CoordinationV1().Leases("ns").Delete(context.Background(), "l", metav1.DeleteOptions{})
					if err := e.WaitLost(); !errors.Is(err, ErrLeaseDeleted) {
						done <- fmt.Errorf("WaitLost = %v", err)
						return
					}
				}
				done <- nil
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the library hung: a log callback that calls it deadlocked it")
			}
		})
	}
}

// SetLogLevel may be called from several threads at once (a host thread
// and a log callback, say): klog's flag set is not safe for that by itself.
func TestSetLogLevelConcurrently(t *testing.T) {
	t.Cleanup(func() { _ = SetLogLevel(LevelWarning) })
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			for j := 0; j < 50; j++ {
				if err := SetLogLevel(Level(j % int(maxLevel+1))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
