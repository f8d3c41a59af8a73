//go:build integration

package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	t.Parallel() // own leases and processes; waits, mostly
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

// A plain client-go leader that was partitioned and healed runs tryRelease:
// it reads the Lease afresh (our election holds it by now) but decides it
// is still leader from its stale observed record, and writes client-go's
// release record with the fresh resourceVersion. That write lands. Our
// standbys must not take the Lease before our leader has stepped down (at
// its next renewal): they wait out its term, since the release was not
// written by the holder (our incarnation annotation is still there).
func TestForeignReleaseOfOurLeaseIsNotTakenAtOnce(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "ours-a")
	mustElect(t, a, 5*time.Second)
	b := mustRun(t, mb, name, "ours-b")
	time.Sleep(500 * time.Millisecond) // b follows the Lease

	client, err := kubernetes.NewForConfig(itServer.Config)
	if err != nil {
		t.Fatal(err)
	}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1ObjectMeta(name), Client: client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go-partitioned"}}
	// tryRelease: a fresh read, then client-go's release record written
	// with that read's version. Our leader renews meanwhile, every
	// RetryPeriod: a renewal between the two makes the write a conflict,
	// and the partitioned leader's next tryRelease reads afresh. Each round
	// is two requests, well inside one RetryPeriod, so most land; 20 bounds
	// the run of losses on a loaded machine.
	const attempts = 20
	for attempt := 1; ; attempt++ {
		old, _, err := lock.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		released := resourcelock.LeaderElectionRecord{LeaderTransitions: old.LeaderTransitions, LeaseDurationSeconds: 1,
			RenewTime: now, AcquireTime: now}
		err = lock.Update(context.Background(), released)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == attempts {
			t.Fatalf("the foreign release did not land (try %d): %v", attempt, err)
		}
		t.Logf("try %d of the foreign release lost to a renewal: %v", attempt, err)
	}
	releasedAt := time.Now()
	var aLastLeader time.Time
	for end := time.Now().Add(fastTiming.LeaseDuration + time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		aLeads, _, _ := a.IsLeader()
		bLeads, _, _ := b.IsLeader()
		if aLeads {
			aLastLeader = time.Now()
		}
		if aLeads && bLeads {
			t.Fatal("our standby took the Lease while our leader still led, after a foreign release")
		}
	}
	if err := a.WaitLost(); err == nil {
		t.Fatal("our leader did not see the foreign release")
	}
	tb := mustElect(t, b, 5*time.Second)
	t.Logf("leader stepped down %v after the foreign release; standby elected with token %d",
		aLastLeader.Sub(releasedAt).Round(time.Millisecond), tb)
}
