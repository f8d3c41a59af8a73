package lease

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
)

// A candidate blocked by an error only an operator cures, and what it
// reports once cured.

// Cancel of a candidate blocked by 403 (in its fix backoff) returns at once.
func TestCancelWhileBlockedIsPrompt(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	m.SetEvents(false)
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, forbiddenErr()
	})
	e, err := m.RunElection("ns", "l", "b", Timing{LeaseDuration: 60 * time.Second, RenewDeadline: 40 * time.Second, RetryPeriod: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "blocked", func() bool { return e.lastAPIError() != nil })
	done := make(chan error, 1)
	go func() { done <- e.Cancel() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // the backoff is 10 s and more: this is a hang, not a timing
		t.Fatal("Cancel of a blocked candidate did not return")
	}
}

// After the operator fixes RBAC, a standby that now waits behind another
// holder must not report the cured 403 (Stats, WaitElected's message).
func TestCuredErrorNotReportedAsWaitReason(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	m.SetEvents(false)
	var deny atomic.Bool
	deny.Store(true)
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if deny.Load() {
			return true, nil, forbiddenErr()
		}
		return false, nil, nil
	})
	e, err := m.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "blocked", func() bool { return e.lastAPIError() != nil })
	// The operator fixes RBAC; meanwhile another process took the lease.
	deny.Store(false)
	other := testLease("l", "other", 1, time.Now(), 3600)
	other.ResourceVersion = ""
	if _, err := client.CoordinationV1().Leases("ns").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the standby sees the holder", func() bool {
		s := e.obs.snapshot()
		return s.synced && s.rec.holder == "other"
	})
	eventually(t, 5*time.Second, "the cured error cleared from the stats", func() bool {
		for _, s := range m.Stats() {
			if s.Election != nil && s.Election.LastAPIError != "" {
				return false
			}
		}
		return true
	})
	if _, err = e.WaitElected(200 * time.Millisecond); err == nil || strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("WaitElected = %v, want a timeout that does not blame the cured 403", err)
	}
}

// A leader elected after a 403 was cured, whose renewals then get no
// answer, must not blame the cured 403 for the loss.
func TestCuredErrorNotReportedAsLossReason(t *testing.T) {
	m, client, _ := fakeManager()
	m.clock = clock.RealClock{}
	m.SetEvents(false)
	var deny, hang atomic.Bool
	var e *Election
	deny.Store(true)
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if deny.Load() {
			return true, nil, forbiddenErr()
		}
		return false, nil, nil
	})
	client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if hang.Load() { // no answer within the renew deadline
			waitUntil(10*time.Second, func() bool { ok, _, _ := e.IsLeader(); return !ok })
			return true, nil, apierrors.NewTimeoutError("slow", 1)
		}
		return false, nil, nil
	})
	e, err := m.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "blocked", func() bool { return e.lastAPIError() != nil })
	deny.Store(false)
	if _, err := e.WaitElected(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	lost := e.WaitLost()
	if lost == nil || !errors.Is(lost, ErrRenewDeadline) || strings.Contains(lost.Error(), "forbidden") {
		t.Fatalf("WaitLost = %v, want a renew deadline loss that does not blame the cured 403", lost)
	}
	hang.Store(false)
	_ = m.Shutdown(5 * time.Second)
}

// A leader whose renewals are refused (401, 403) stops leading by the end
// of its guarantee, never later.
func TestRenewalRefusedEndsLeadershipByTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"403", forbiddenErr},
		{"401", func() error { return apierrors.NewUnauthorized("token revoked") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, client, _ := fakeManager()
			m.clock = clock.RealClock{}
			m.SetEvents(false)
			var fail atomic.Bool
			client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
				if fail.Load() {
					return true, nil, tc.err()
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
			fail.Store(true)
			_, _, left := e.IsLeader()
			failedAt := time.Now()
			lost := e.WaitLost()
			if !errors.Is(lost, ErrRenewDeadline) {
				t.Fatalf("WaitLost = %v, want the renew deadline", lost)
			}
			// The guarantee is checked locally (IsLeader turns 0 at
			// validUntil by itself); the loss is reported at it.
			if ok, _, _ := e.IsLeader(); ok {
				t.Fatal("still leader after the loss")
			}
			t.Logf("lost %v after the first refusal (guarantee left then: %v): %v", time.Since(failedAt).Round(time.Millisecond), left, lost)
			_ = m.Shutdown(2 * time.Second)
		})
	}
}
