//go:build k8s_lease_panic_inject

package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// With -tags k8s_lease_panic_inject, a panic injected at each point inside
// the library is contained: the caller gets ErrInternal (or the goroutine
// retries), the process lives, and the manager stays usable.
func TestInjectedPanicsAreContained(t *testing.T) {
	cases := []struct {
		point string
		check func(t *testing.T, m *Manager, logs func() string)
	}{
		{"call", func(t *testing.T, m *Manager, _ func() string) {
			_, err := m.RunElection("ns", "l", "a", unitTiming)
			// The cgo layer's guard turns this into -1; here it is a panic
			// reaching the caller, which the guard test covers.
			t.Fatalf("RunElection returned %v instead of panicking", err)
		}},
		{"campaign", func(t *testing.T, m *Manager, _ func() string) {
			e, err := m.RunElection("ns", "l", "a", unitTiming)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.WaitElected(5 * time.Second); !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "injected panic at campaign") {
				t.Fatalf("WaitElected = %v, want ErrInternal with the panic", err)
			}
			if err := e.WaitLost(); !errors.Is(err, ErrInternal) {
				t.Fatalf("WaitLost = %v", err)
			}
			if ok, _, _ := e.IsLeader(); ok {
				t.Fatal("leader after a panic")
			}
		}},
		{"list", func(t *testing.T, m *Manager, logs func() string) {
			if _, err := m.WatchHolder("ns", "l", func(HolderState) {}); err != nil {
				t.Fatal(err)
			}
			awaitLog(t, logs, "injected panic at list")
		}},
		{"watch", func(t *testing.T, m *Manager, logs func() string) {
			called := make(chan struct{}, 1)
			w, err := m.WatchHolder("ns", "l", func(HolderState) { called <- struct{}{} })
			if err != nil {
				t.Fatal(err)
			}
			awaitLog(t, logs, "holder watch on ns/l ended")
			w.Cancel() // still safe after the watch ended by itself
			if len(called) != 0 {
				t.Fatal("callback ran although the panic came before it")
			}
		}},
		{"event", func(t *testing.T, m *Manager, logs func() string) {
			if _, err := m.WatchHolder("ns", "l", func(HolderState) {}); err != nil {
				t.Fatal(err)
			}
			leases := m.api.kube.Leases("ns")
			if _, err := leases.Create(context.Background(), testLease("l", "x", 1, testNow, 15), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// Writes until one reaches the watch (it may open after the first).
			i := 0
			eventually(t, 5*time.Second, "an error logged for the panic at event", func() bool {
				i++
				if _, err := leases.Update(context.Background(), testLease("l", fmt.Sprintf("x%d", i), 1, testNow, 15), metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				return strings.Contains(logs(), "injected panic at event")
			})
		}},
		{"renew", func(t *testing.T, m *Manager, _ func() string) {
			fast := Timing{LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
			m.clock = clock.RealClock{}
			e, err := m.RunElection("ns", "l", "a", fast)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.WaitElected(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			if err := e.WaitLost(); !errors.Is(err, ErrRenewDeadline) || !strings.Contains(err.Error(), "injected panic at renew") {
				t.Fatalf("WaitLost = %v, want the renew deadline with the contained panic as last error", err)
			}
		}},
		{"release", func(t *testing.T, m *Manager, _ func() string) {
			e, err := m.RunElection("ns", "l", "a", unitTiming)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.WaitElected(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			if err := m.Shutdown(5 * time.Second); !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "injected panic at release") {
				t.Fatalf("Shutdown = %v, want the contained panic", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			var mu sync.Mutex
			var logs strings.Builder
			SetLogSink(func(_ Level, msg string) { mu.Lock(); logs.WriteString(msg + "\n"); mu.Unlock() })
			t.Cleanup(func() { SetLogSink(nil) })
			t.Setenv("K8S_LEASE_PANIC_AT", tc.point)
			m, _, _ := fakeManager()
			func() {
				defer func() {
					p := recover()
					if p != nil && tc.point != "call" {
						t.Fatalf("panic escaped: %v", p)
					}
					if tc.point == "call" && !strings.Contains(fmt.Sprint(p), "injected panic at call") {
						t.Fatalf("the call did not panic as injected: %v", p)
					}
				}()
				tc.check(t, m, func() string { mu.Lock(); defer mu.Unlock(); return logs.String() })
			}()
			t.Setenv("K8S_LEASE_PANIC_AT", "")
			// Usable afterwards: a fresh election on another lease works.
			if _, err := m.RunElection("ns", "after", "a", unitTiming); err != nil {
				t.Fatalf("manager unusable after the panic: %v", err)
			}
			if err := m.Shutdown(5 * time.Second); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// awaitLog waits up to 5 s for an error log containing want.
func awaitLog(t *testing.T, logs func() string, want string) {
	t.Helper()
	if !waitUntil(5*time.Second, func() bool { return strings.Contains(logs(), want) }) {
		t.Fatalf("no error logged for the panic (want %q); logs: %s", want, logs())
	}
}

// A panic inside a hand-off (injected as it begins, with the Manager's
// lock held: "handoff"). An explicit hand-off has already claimed the
// election (its end is registered): the panic reaches its caller (the cgo
// guard makes it -1) only after the election is cancelled, taken out of
// the registry and the lock given back, or the election would renew for
// ever with nothing left to cancel it. A hand-off the library makes on its own (the preferred
// holder) runs on a goroutine of its own, where the panic is logged.
func TestInjectedPanicInAHandOff(t *testing.T) {
	var mu sync.Mutex
	var logs strings.Builder
	SetLogSink(func(_ Level, msg string) { mu.Lock(); logs.WriteString(msg + "\n"); mu.Unlock() })
	t.Cleanup(func() { SetLogSink(nil) })
	// Not process(): a Manager whose lock stays held cannot shut down.
	manager := func(fc *fake.Clientset) *Manager {
		m := NewManager(clock.RealClock{})
		m.SetClient(clientsetapi.Wrap(fc))
		m.SetEvents(false)
		return m
	}
	leader := func(t *testing.T, m *Manager) *Election {
		e, err := m.RunElection("ns", "l", "a", fastUnitTiming)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.WaitElected(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		return e
	}
	lockFree := func(m *Manager) bool {
		if m.mu.TryLock() {
			m.mu.Unlock()
			return true
		}
		return false
	}
	t.Run("explicit", func(t *testing.T) {
		fc := fake.NewClientset()
		enforceResourceVersions(fc)
		m := manager(fc)
		e := leader(t, m)
		if _, err := leaseRecords(clientsetapi.Wrap(fc)).Put(t.Context(), "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		t.Setenv("K8S_LEASE_PANIC_AT", "handoff")
		p := func() (p any) {
			defer func() { p = recover() }()
			err := m.HandOff("ns", "l", "b", time.Second)
			t.Errorf("HandOff returned %v instead of panicking", err)
			return nil
		}()
		t.Setenv("K8S_LEASE_PANIC_AT", "")
		if !strings.Contains(fmt.Sprint(p), "injected panic at handoff") {
			t.Fatalf("HandOff's panic: %v", p)
		}
		eventually(t, 5*time.Second, "the Manager's lock given back", func() bool { return lockFree(m) })
		eventually(t, 5*time.Second, "the election ended", e.Ended)
		if err := e.WaitLost(); err != nil {
			t.Fatalf("WaitLost = %v, want nil (cancelled)", err)
		}
		if r := currentLease(t, fc); r.holder != "" {
			t.Fatalf("the lease after the panic: %+v, want it released", r)
		}
		if err := m.Shutdown(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("on its own", func(t *testing.T) {
		fc := fake.NewClientset()
		enforceResourceVersions(fc)
		m := manager(fc)
		e := leader(t, m)
		// A record that names every term: the preferred holder is handed
		// the lease at once.
		if _, err := leaseRecords(clientsetapi.Wrap(fc)).Put(t.Context(), "ns", "l", Candidate{Identity: "ghost", RenewTime: time.Now(), SeenToken: math.MaxInt32}); err != nil {
			t.Fatal(err)
		}
		t.Setenv("K8S_LEASE_PANIC_AT", "handoff")
		annotateLease(t, fc, PreferredHolderAnnotation, "ghost")
		awaitLog(t, func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }, "injected panic at handoff")
		t.Setenv("K8S_LEASE_PANIC_AT", "")
		eventually(t, 5*time.Second, "the Manager's lock given back", func() bool { return lockFree(m) })
		if e.Ended() {
			t.Log("the election ended after the panic")
		}
		if err := m.Shutdown(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	})
}
