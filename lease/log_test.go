package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/internal/logs"
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

// flushLogs waits until every line logged before it reached the sink.
func flushLogs() { logs.Flush() }

// maxLevel is the highest log level (client-go's highest verbosity).
const maxLevel = logs.MaxLevel

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
				if !waitUntil(3*time.Second, func() bool { return statsOf(e.stats).Election.Renewals >= renewals+3 }) {
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
