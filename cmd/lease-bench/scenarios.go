package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/lease"
)

const benchNamespace = "bench"

type bench struct {
	cfg     *rest.Config
	admin   kubernetes.Interface
	renews  *renewLog
	seq     int
	section string // the section running: its rows are added to it
	results []series
	// failures are checks that failed; reported after the table, and the
	// run exits non-zero.
	failures []string
}

func (b *bench) leaseName(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e6, b.seq)
}

func (b *bench) add(name string, which impl, unit string, v float64) {
	for i := range b.results {
		if b.results[i].Name == name && b.results[i].Impl == string(which) {
			b.results[i].Samples = append(b.results[i].Samples, v)
			return
		}
	}
	b.results = append(b.results, series{Section: b.section, Name: name, Impl: string(which), Unit: unit, Samples: []float64{v}})
}

// addAll adds the samples vs to the row name.
func (b *bench) addAll(name string, which impl, unit string, vs []float64) {
	for _, v := range vs {
		b.add(name, which, unit, v)
	}
}

// firstElected waits for the first of cs to be elected.
func firstElected(cs []candidate, within time.Duration) (candidate, error) {
	won := make(chan candidate, len(cs))
	stop := make(chan struct{})
	defer close(stop)
	for _, c := range cs {
		go func() {
			select {
			case <-c.elected():
				won <- c
			case <-stop:
			}
		}()
	}
	select {
	case c := <-won:
		return c, nil
	case <-time.After(within):
		return nil, fmt.Errorf("nobody elected within %v", within)
	}
}

func stopAll(cs []candidate) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(c.stop)
	}
	wg.Wait()
}

// group starts a leader, waits for it, then starts standbys and lets them
// observe the held lease.
func (b *bench) group(which impl, t lease.Timing, standbys int, prefix string) (string, candidate, []candidate, error) {
	name := b.leaseName(prefix)
	leader, err := start(which, b.cfg, benchNamespace, name, "leader", t)
	if err != nil {
		return "", nil, nil, err
	}
	if _, err := firstElected([]candidate{leader}, 3*t.LeaseDuration); err != nil {
		leader.stop()
		return "", nil, nil, fmt.Errorf("%s leader: %w", which, err)
	}
	var sbs []candidate
	for i := 0; i < standbys; i++ {
		c, err := start(which, b.cfg, benchNamespace, name, fmt.Sprintf("standby-%d", i), t)
		if err != nil {
			stopAll(append(sbs, leader))
			return "", nil, nil, err
		}
		sbs = append(sbs, c)
	}
	time.Sleep(2*t.RetryPeriod + 300*time.Millisecond) // every standby has looked at the held lease
	return name, leader, sbs, nil
}

// handoff: the leader releases; time until the first standby leads.
func (b *bench) handoff(which impl, t lease.Timing, standbys int) (time.Duration, error) {
	_, leader, sbs, err := b.group(which, t, standbys, "handoff")
	if err != nil {
		return 0, err
	}
	defer stopAll(sbs)
	released := time.Now()
	go leader.stop()
	next, err := firstElected(sbs, 3*t.LeaseDuration)
	if err != nil {
		return 0, err
	}
	return next.electedAt().Sub(released), nil
}

// failover: the leader stops renewing without releasing (its connection is
// cut); overshoot = first standby elected - (last renewTime + lease duration).
func (b *bench) failover(which impl, t lease.Timing, standbys int) (time.Duration, error) {
	name, leader, sbs, err := b.group(which, t, standbys, "failover")
	if err != nil {
		return 0, err
	}
	defer stopAll(append(sbs, leader))
	time.Sleep(rand.N(t.RetryPeriod)) // crash at a random point of the renew cycle
	leader.conn().cut.Store(true)
	next, err := firstElected(sbs, 3*t.LeaseDuration+10*time.Second)
	if err != nil {
		return 0, err
	}
	last := b.renews.last(name, "leader")
	if last.IsZero() {
		return 0, fmt.Errorf("no renewal of %s seen", name)
	}
	return next.electedAt().Sub(last.Add(t.LeaseDuration)), nil
}

// timeToElected: a candidate on a free (absent) lease.
func (b *bench) timeToElected(which impl, t lease.Timing) (time.Duration, error) {
	started := time.Now()
	c, err := start(which, b.cfg, benchNamespace, b.leaseName("free"), "alone", t)
	if err != nil {
		return 0, err
	}
	defer c.stop()
	if _, err := firstElected([]candidate{c}, 3*t.LeaseDuration); err != nil {
		return 0, err
	}
	return c.electedAt().Sub(started), nil
}

// steadyRequests: requests/s of one leader and of each of 5 standbys over window.
func (b *bench) steadyRequests(which impl, t lease.Timing, window time.Duration) (leaderRate float64, standbyRates []float64, err error) {
	_, leader, sbs, err := b.group(which, t, 5, "steady")
	if err != nil {
		return 0, nil, err
	}
	defer stopAll(append(sbs, leader))
	time.Sleep(t.LeaseDuration) // past start-up requests
	before := map[candidate]int64{}
	for _, c := range append(sbs, leader) {
		before[c] = c.conn().requests.Load()
	}
	time.Sleep(window)
	rate := func(c candidate) float64 { return float64(c.conn().requests.Load()-before[c]) / window.Seconds() }
	for _, c := range sbs {
		standbyRates = append(standbyRates, rate(c))
	}
	return rate(leader), standbyRates, nil
}

// renewLog follows every Lease of the bench namespace and remembers, per
// lease and holder, the last renewTime written.
type renewLog struct {
	mu      sync.Mutex
	byLease map[string]map[string]time.Time
}

func watchRenewals(ctx context.Context, admin kubernetes.Interface) (*renewLog, error) {
	r := &renewLog{byLease: map[string]map[string]time.Time{}}
	w, err := admin.CoordinationV1().Leases(benchNamespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	go func() {
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil || *l.Spec.HolderIdentity == "" {
				continue
			}
			r.mu.Lock()
			if r.byLease[l.Name] == nil {
				r.byLease[l.Name] = map[string]time.Time{}
			}
			if rt := l.Spec.RenewTime.Time; rt.After(r.byLease[l.Name][*l.Spec.HolderIdentity]) {
				r.byLease[l.Name][*l.Spec.HolderIdentity] = rt
			}
			r.mu.Unlock()
		}
	}()
	return r, nil
}

func (r *renewLog) last(lease, holder string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byLease[lease][holder]
}
