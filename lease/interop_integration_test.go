//go:build integration

package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// clientGoCandidate runs a plain client-go LeaderElector on the lease.
func clientGoCandidate(t *testing.T, name, identity string, leading *atomic.Bool) context.CancelFunc {
	t.Helper()
	client, err := kubernetes.NewForConfig(itServer.Config)
	if err != nil {
		t.Fatal(err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(name),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true,
			LeaseDuration: fastTiming.LeaseDuration, RenewDeadline: fastTiming.RenewDeadline, RetryPeriod: fastTiming.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { leading.Store(true) },
				OnStoppedLeading: func() { leading.Store(false) },
			},
		})
	}()
	return func() { cancel(); <-done }
}

func TestInteropWithClientGoCandidates(t *testing.T) {
	name := leaseName(t)
	ma, mc := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "ours-a")
	ta := mustElect(t, a, 5*time.Second)

	var goLeading atomic.Bool
	stopGo := clientGoCandidate(t, name, "client-go-b", &goLeading)
	defer stopGo()
	never2 := func(d time.Duration, ours *Election) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if ok, _, _ := ours.IsLeader(); ok && goLeading.Load() {
				t.Fatal("our election and client-go lead at once")
			}
		}
	}
	never2(fastTiming.LeaseDuration+500*time.Millisecond, a) // client-go waits while we renew
	if goLeading.Load() {
		t.Fatal("client-go took a lease we renew")
	}

	if err := ma.CancelElection(itNamespace, name); err != nil { // release: client-go takes over
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "client-go elected after our release", goLeading.Load)
	if r := getLease(t, name); r.holder != "client-go-b" || r.token <= ta {
		t.Fatalf("after client-go took over: %+v (our token was %d)", r, ta)
	}

	c := mustRun(t, mc, name, "ours-c") // we wait while client-go renews
	never2(fastTiming.LeaseDuration+500*time.Millisecond, c)
	if ok, _, _ := c.IsLeader(); ok {
		t.Fatal("we took a lease client-go renews")
	}
	goToken := getLease(t, name).token
	stopGo() // ReleaseOnCancel: we take over at once
	tc := mustElect(t, c, 3*time.Second)
	if tc <= goToken {
		t.Fatalf("our token %d after client-go's %d", tc, goToken)
	}
}
