//go:build integration

package lease

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// eventLog collects in-process candidates' events for the history checker;
// each candidate stands in for a process with a pid of its own.
type eventLog struct {
	mu     sync.Mutex
	events []history.Event
}

func (l *eventLog) add(pid int, kind string, token int64) {
	l.mu.Lock()
	l.events = append(l.events, history.Event{At: history.Now(), PID: pid, Kind: kind, Token: token})
	l.mu.Unlock()
}

// Our candidates and plain client-go candidates churn on one lease; the
// intervals in which each acted as leader must never overlap, and the token
// must rise from each leadership to the next, whichever implementation held
// it (internal/history checks both).
func TestMixedChurnWithClientGoNoOverlap(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	log := &eventLog{}
	// Our candidate creates the Lease: a client-go creator would start it
	// at leaseTransitions 0, below the tokens we promise (>= 1).
	first := newProcess(t)
	mustElect(t, mustRun(t, first, name, "creator"), 10*time.Second)
	if err := first.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(12 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		id, pid := []string{"ours-0", "ours-1"}[i], i+1
		m := newProcess(t)
		wg.Go(func() {
			for time.Now().Before(end) {
				e, err := m.RunElection(itNamespace, name, id, fastTiming)
				if err != nil {
					t.Error(err)
					return
				}
				token, err := e.WaitElected(3 * time.Second)
				if err != nil {
					continue
				}
				log.add(pid, history.Elected, token)
				time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond)
				if ok, _, _ := e.IsLeader(); !ok {
					t.Errorf("%s lost leadership while holding", id)
				}
				log.add(pid, history.Released, token) // before the release is written
				_ = m.CancelElection(itNamespace, name)
				// Ours hear of a release at once, client-go's only at their
				// next retry: pause so that they get their turns too.
				time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
			}
		})
	}
	client, err := kubernetes.NewForConfig(itServer.Config)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		id, pid := []string{"client-go-0", "client-go-1"}[i], i+3
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				lock := &resourcelock.LeaseLock{LeaseMeta: metav1ObjectMeta(name), Client: client.CoordinationV1(),
					LockConfig: resourcelock.ResourceLockConfig{Identity: id}}
				leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
					Lock: lock, ReleaseOnCancel: true, LeaseDuration: fastTiming.LeaseDuration,
					RenewDeadline: fastTiming.RenewDeadline, RetryPeriod: fastTiming.RetryPeriod,
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(ctx context.Context) {
							// client-go does not hand out the token: read it
							// (not through the lock, which its elector uses
							// concurrently and is not safe for that).
							l, err := client.CoordinationV1().Leases(itNamespace).Get(ctx, name, metav1.GetOptions{})
							if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != id || l.Spec.LeaseTransitions == nil {
								cancel()
								return
							}
							token := int64(*l.Spec.LeaseTransitions)
							log.add(pid, history.Elected, token)
							time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond)
							log.add(pid, history.Released, token)
							cancel() // step down: client-go releases after this
						},
						OnStoppedLeading: func() {},
					},
				})
				cancel()
			}
		})
	}
	wg.Wait()

	r := history.Check(log.events)
	for _, v := range r.Violations {
		t.Error(v)
	}
	kinds := map[bool]int{} // ours?
	for _, term := range r.Terms {
		kinds[term.PID <= 2]++
	}
	if len(r.Terms) < 10 || kinds[true] == 0 || kinds[false] == 0 {
		t.Fatalf("too little mixing to judge: %d leaderships, %d ours", len(r.Terms), kinds[true])
	}
	t.Logf("%d leaderships (%d ours, %d client-go), tokens %d..%d, %d violations", len(r.Terms), kinds[true], kinds[false],
		r.Terms[0].Token, r.Terms[len(r.Terms)-1].Token, len(r.Violations))
}
