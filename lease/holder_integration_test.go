//go:build integration

package lease

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recorder collects watch callbacks and fails on concurrent ones.
type recorder struct {
	mu      sync.Mutex
	busy    bool
	states  []HolderState
	overlap bool
}

func (r *recorder) callback(st HolderState) {
	r.mu.Lock()
	if r.busy {
		r.overlap = true
	}
	r.busy = true
	r.states = append(r.states, st)
	r.mu.Unlock()
	time.Sleep(time.Millisecond)
	r.mu.Lock()
	r.busy = false
	r.mu.Unlock()
}

func (r *recorder) get() []HolderState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]HolderState(nil), r.states...)
}

func (r *recorder) waitLen(t *testing.T, n int, within time.Duration) []HolderState {
	t.Helper()
	eventually(t, within, "callbacks", func() bool { return len(r.get()) >= n })
	return r.get()
}

func TestWatchHolderSemantics(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	mw, ma, mb := newProcess(t), newProcess(t), newProcess(t)
	rec := &recorder{}
	if _, err := mw.WatchHolder(itNamespace, name, rec.callback); err != nil {
		t.Fatal(err)
	}
	// 1. The current state once, promptly: no Lease yet.
	if got := rec.waitLen(t, 1, 2*time.Second); got[0] != (HolderState{}) {
		t.Fatalf("first callback = %+v, want absent", got[0])
	}
	// 2. A leader: one callback, none for its renewals.
	a := mustRun(t, ma, name, "a")
	ta := mustElect(t, a, 5*time.Second)
	rec.waitLen(t, 2, 2*time.Second)
	time.Sleep(3 * fastTiming.RetryPeriod) // several renewals
	if got := rec.get(); len(got) != 2 || got[1] != (HolderState{Holder: "a", Token: ta, Exists: true}) {
		t.Fatalf("after election and renewals: %+v", got)
	}
	// 3. Hand-off: released then b, each reported.
	b := mustRun(t, mb, name, "b")
	if err := ma.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	tb := mustElect(t, b, 5*time.Second)
	got := rec.waitLen(t, 3, 2*time.Second)
	last := got[len(got)-1]
	eventually(t, 2*time.Second, "b reported", func() bool {
		g := rec.get()
		last = g[len(g)-1]
		return last == HolderState{Holder: "b", Token: tb, Exists: true}
	})
	// 4. The holder stops renewing: reported as no holder within 1 s of expiry.
	crash(b)
	crashed := time.Now()
	eventually(t, fastTiming.LeaseDuration+time.Second, "expiry reported", func() bool {
		g := rec.get()
		return g[len(g)-1] == HolderState{Holder: "", Token: tb, Exists: true}
	})
	t.Logf("expiry reported %v after the crash", time.Since(crashed))
	// 5. Deleted: reported as absent.
	if err := itAdmin.CoordinationV1().Leases(itNamespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "deletion reported", func() bool {
		g := rec.get()
		return g[len(g)-1] == HolderState{}
	})
	// Exactly one callback per change: no two equal neighbours.
	all := rec.get()
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("callback %d repeats %+v: %+v", i, all[i], all)
		}
	}
	if rec.overlap {
		t.Fatal("callbacks of one watch ran concurrently")
	}
}

func TestCancelWatchIsSynchronous(t *testing.T) {
	name := leaseName(t)
	m := newProcess(t)
	mustElect(t, mustRun(t, m, name, "a"), 5*time.Second)
	for i := 0; i < 200; i++ {
		var mu sync.Mutex
		cancelled := false
		late := false
		w, err := m.WatchHolder(itNamespace, name, func(HolderState) {
			mu.Lock()
			late = late || cancelled
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			time.Sleep(time.Millisecond)
		}
		if err := m.CancelWatch(itNamespace, name); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		cancelled = true
		mu.Unlock()
		<-w.done
		if late {
			t.Fatalf("cycle %d: callback ran after CancelWatch returned", i)
		}
	}
}

func TestCancelWatchFromCallbackDoesNotDeadlock(t *testing.T) {
	name := leaseName(t)
	m := newProcess(t)
	calls := make(chan struct{}, 10)
	_, err := m.WatchHolder(itNamespace, name, func(HolderState) {
		_ = m.CancelWatch(itNamespace, name)
		_, _ = m.GetHolder(itNamespace, name)
		calls <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-calls:
	case <-time.After(5 * time.Second):
		t.Fatal("callback that cancels its own watch did not return")
	}
	mustElect(t, mustRun(t, m, name, "a"), 5*time.Second) // a change that must not be delivered
	time.Sleep(300 * time.Millisecond)
	if len(calls) != 0 {
		t.Fatal("callback ran after cancelling itself")
	}
	if _, err := m.WatchHolder(itNamespace, name, func(HolderState) {}); err != nil {
		t.Fatalf("watch again after self-cancel: %v", err)
	}
}

func TestPodLabel(t *testing.T) {
	pod := leaseName(t)
	createPod(t, pod)
	m := newProcess(t)
	if err := m.SetPodLabel(itNamespace, pod, "k8s-lease.io/leader", "true"); err != nil {
		t.Fatal(err)
	}
	p, err := itAdmin.CoreV1().Pods(itNamespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil || p.Labels["k8s-lease.io/leader"] != "true" {
		t.Fatalf("label not set: %v %v", p.Labels, err)
	}
	for i := 0; i < 2; i++ { // removing an absent label is success
		if err := m.RemovePodLabel(itNamespace, pod, "k8s-lease.io/leader"); err != nil {
			t.Fatalf("remove #%d: %v", i+1, err)
		}
	}
	p, _ = itAdmin.CoreV1().Pods(itNamespace).Get(context.Background(), pod, metav1.GetOptions{})
	if _, ok := p.Labels["k8s-lease.io/leader"]; ok {
		t.Fatalf("label still there: %v", p.Labels)
	}
	if err := m.SetPodLabel(itNamespace, "no-such-pod", "a", "b"); err == nil {
		t.Fatal("labelling a missing pod succeeded")
	}
}
