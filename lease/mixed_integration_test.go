//go:build integration

package lease

import (
	"context"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

type interval struct {
	who        string
	start, end time.Time
}

type intervalLog struct {
	mu  sync.Mutex
	all []interval
}

func (l *intervalLog) add(iv interval) {
	l.mu.Lock()
	l.all = append(l.all, iv)
	l.mu.Unlock()
}

// Our candidates and plain client-go candidates churn on one lease; the
// intervals in which each acted as leader must never overlap.
func TestMixedChurnWithClientGoNoOverlap(t *testing.T) {
	name := leaseName(t)
	log := &intervalLog{}
	end := time.Now().Add(12 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		id := []string{"ours-0", "ours-1"}[i]
		m := newProcess(t)
		wg.Go(func() {
			for time.Now().Before(end) {
				e, err := m.RunElection(itNamespace, name, id, fastTiming)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := e.WaitElected(3 * time.Second); err != nil {
					continue
				}
				start := time.Now()
				time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond)
				if ok, _, _ := e.IsLeader(); !ok {
					t.Errorf("%s lost leadership while holding", id)
				}
				log.add(interval{id, start, time.Now()})
				_ = m.CancelElection(itNamespace, name)
				time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
			}
		})
	}
	client, err := kubernetes.NewForConfig(itServer.Config)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		id := []string{"client-go-0", "client-go-1"}[i]
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				lock := &resourcelock.LeaseLock{LeaseMeta: metav1ObjectMeta(name), Client: client.CoordinationV1(),
					LockConfig: resourcelock.ResourceLockConfig{Identity: id}}
				leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
					Lock: lock, ReleaseOnCancel: true, LeaseDuration: fastTiming.LeaseDuration,
					RenewDeadline: fastTiming.RenewDeadline, RetryPeriod: fastTiming.RetryPeriod,
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(context.Context) {
							start := time.Now()
							time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond)
							log.add(interval{id, start, time.Now()})
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

	ivs := log.all
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
	kinds := map[string]bool{}
	for i, iv := range ivs {
		kinds[iv.who[:4]] = true
		if i > 0 && iv.start.Before(ivs[i-1].end) {
			t.Fatalf("overlap: %s [%v] and %s started %v before it ended", ivs[i-1].who, ivs[i-1].end.Sub(ivs[i-1].start), iv.who, ivs[i-1].end.Sub(iv.start))
		}
	}
	if len(ivs) < 10 || !kinds["ours"] || !kinds["clie"] {
		t.Fatalf("too little mixing to judge: %d leaderships, kinds %v", len(ivs), kinds)
	}
	t.Logf("%d leaderships, both implementations, 0 overlaps", len(ivs))
}
