package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/k8s-lease/k8s-lease/lease"
)

// The rolling section: three replicas r0, r1, r2 of one service, updated
// as a StatefulSet does (from the highest ordinal down: stop the replica,
// wait for it to end, start its new version with the same identity, wait
// until it campaigns, then the next), three updates in a row. An admin
// watch on the Lease counts leadership moves and the leaderless time of
// each (see terms).

const rollingReplicas = 3

// rollingVariant is one implementation under test.
type rollingVariant struct {
	label  string // row label
	which  impl   // the table column
	policy bool   // ours: Priority = -ordinal, PolicyHandOffOnCancel|PolicyYieldToNewer
}

var rollingVariants = []rollingVariant{
	{label: "no policy", which: ours},
	{label: "no policy", which: clientGo},
	{label: "newest-version policy", which: ours, policy: true},
}

func (v rollingVariant) String() string { return fmt.Sprintf("%s, %s", v.which, v.label) }

// rollReplica is one running version of a replica.
type rollReplica interface {
	elected() <-chan struct{}
	waitCampaigning() error
	stop() error // graceful; returns once it ended
}

type oursReplica struct {
	*electedSignal
	m          *lease.Manager
	name, id   string
	version    string
	recordGone bool // its candidate record was removed by the time stop returned
}

func startOursReplica(b *bench, name string, ordinal, version int, policy bool) (*oursReplica, error) {
	c := newConn(b.cfg)
	client, err := lease.NewClient(c.cfg)
	if err != nil {
		return nil, err
	}
	m := lease.NewManager(nil)
	m.SetClient(client)
	opts := lease.ElectionOptions{Version: fmt.Sprintf("%d.0.0", version)}
	if policy {
		opts.Priority = -int32(ordinal)
		opts.Policy = lease.PolicyHandOffOnCancel | lease.PolicyYieldToNewer
	}
	id := fmt.Sprintf("r%d", ordinal)
	e, err := m.RunElectionWith(benchNamespace, name, id, fast, opts)
	if err != nil {
		return nil, err
	}
	r := &oursReplica{electedSignal: newElectedSignal(), m: m, name: name, id: id, version: opts.Version}
	go func() {
		if _, err := e.WaitElected(time.Hour); err == nil {
			r.fire()
		}
	}()
	return r, nil
}

func (r *oursReplica) elected() <-chan struct{} { return r.ch }

// listed reports whether Manager.Candidates lists this replica's record.
func (r *oursReplica) listed() (bool, error) {
	cs, err := r.m.Candidates(benchNamespace, r.name)
	if err != nil {
		return false, err
	}
	for _, c := range cs {
		if c.Identity == r.id && c.Version == r.version {
			return true, nil
		}
	}
	return false, nil
}

func (r *oursReplica) waitCampaigning() error {
	err := waitListed(r.m, r.name, 10*time.Second, func(c lease.Candidate) bool { return c.Identity == r.id && c.Version == r.version })
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.id, r.version, err)
	}
	return nil
}

// stop: CancelElection (which applies PolicyHandOffOnCancel; Shutdown
// alone releases), then Shutdown; then it waits up to 3 s for its
// candidate record to go (removed by the library after the election ends),
// so that the next version's record is not deleted by this one's removal.
func (r *oursReplica) stop() error {
	err := r.m.CancelElection(benchNamespace, r.name)
	if serr := r.m.Shutdown(10 * time.Second); err == nil {
		err = serr
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok, lerr := r.listed(); lerr == nil && !ok {
			r.recordGone = true
			break
		}
	}
	if !r.recordGone {
		progress("  %s %s: its candidate record is still listed 3 s after it stopped", r.id, r.version)
	}
	return err
}

type clientGoReplica struct{ *clientGoCandidate }

func (r clientGoReplica) waitCampaigning() error { time.Sleep(200 * time.Millisecond); return nil }
func (r clientGoReplica) stop() error            { r.clientGoCandidate.stop(); return nil }

func (b *bench) startReplica(v rollingVariant, name string, ordinal, version int) (rollReplica, error) {
	if v.which == ours {
		return startOursReplica(b, name, ordinal, version, v.policy)
	}
	c, err := startClientGo(newConn(b.cfg), benchNamespace, name, fmt.Sprintf("r%d", ordinal), fast)
	if err != nil {
		return nil, err
	}
	return clientGoReplica{c.(*clientGoCandidate)}, nil
}

// updateResult is what one rolling update did to the leadership.
type updateResult struct {
	moves []move
}

func (u updateResult) leaderless() time.Duration {
	var d time.Duration
	for _, m := range u.moves {
		d += m.leaderless
	}
	return d
}

func (u updateResult) String() string {
	var parts []string
	for _, m := range u.moves {
		parts = append(parts, fmt.Sprintf("%s->%s %.1f ms", m.from.holder, m.to.holder, ms(m.leaderless)))
	}
	return fmt.Sprintf("%d move(s), %.1f ms leaderless [%s]", len(u.moves), ms(u.leaderless()), strings.Join(parts, ", "))
}

// settle waits until the lease has a holder of its own (not a release or
// an untaken hand-off record) and nothing changed hands for 1.5 s (more
// than client-go's jittered retry period).
func settle(log *leaseLog) error {
	deadline := time.Now().Add(3 * fast.LeaseDuration)
	for {
		time.Sleep(1500 * time.Millisecond)
		events, err := log.all()
		if err != nil {
			return err
		}
		ts, _ := terms(events)
		if led(events) && len(ts) > 0 && time.Since(events[ts[len(ts)-1].first].seen) >= 1500*time.Millisecond {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no settled leader within %v", 3*fast.LeaseDuration)
		}
	}
}

// rollingRun starts r0 (which leads), r1, r2 at version 1 and runs
// `updates` rolling updates.
func (b *bench) rollingRun(v rollingVariant, updates int) ([]updateResult, error) {
	name := b.leaseName("rolling")
	log, err := b.followLease(name)
	if err != nil {
		return nil, err
	}
	defer log.stop()
	reps := make([]rollReplica, rollingReplicas)
	defer func() {
		var wg sync.WaitGroup
		for _, r := range reps {
			if r != nil {
				wg.Go(func() { _ = r.stop() })
			}
		}
		wg.Wait()
	}()
	for i := range reps {
		r, err := b.startReplica(v, name, i, 1)
		if err != nil {
			return nil, err
		}
		reps[i] = r
		if i == 0 {
			select {
			case <-r.elected():
			case <-time.After(3 * fast.LeaseDuration):
				return nil, fmt.Errorf("rolling %s: r0 not elected on a free lease", v)
			}
		} else if err := r.waitCampaigning(); err != nil {
			return nil, err
		}
	}
	if err := settle(log); err != nil {
		return nil, fmt.Errorf("rolling %s, start: %w", v, err)
	}
	bounds := []int{log.len()}
	for u := 1; u <= updates; u++ {
		for i := rollingReplicas - 1; i >= 0; i-- {
			if err := reps[i].stop(); err != nil {
				progress("  rolling %s, update %d: stopping r%d: %v", v, u, i, err)
			}
			reps[i] = nil
			r, err := b.startReplica(v, name, i, u+1)
			if err != nil {
				return nil, err
			}
			reps[i] = r
			if err := r.waitCampaigning(); err != nil {
				return nil, fmt.Errorf("rolling %s, update %d: %w", v, u, err)
			}
		}
		if err := settle(log); err != nil {
			return nil, fmt.Errorf("rolling %s, update %d: %w", v, u, err)
		}
		bounds = append(bounds, log.len())
	}
	events, err := log.all()
	if err != nil {
		return nil, err
	}
	_, moves := terms(events)
	res := make([]updateResult, updates)
	for _, m := range moves {
		for u := 0; u < updates; u++ {
			if m.to.first >= bounds[u] && m.to.first < bounds[u+1] {
				res[u].moves = append(res[u].moves, m)
			}
		}
	}
	for u, r := range res {
		progress("  %s: update %d (v%d -> v%d): %s", v, u+1, u+1, u+2, r)
	}
	return res, nil
}

// rolling fills the rolling-update rows: runs × 3 updates per variant.
func (b *bench) rolling(runs int) error {
	const updates = 3
	for run := 0; run < runs; run++ {
		for _, v := range rollingVariants {
			res, err := b.rollingRun(v, updates)
			if err != nil {
				return err
			}
			prefix := "rolling update of 3 replicas, " + v.label + ": "
			for _, u := range res {
				b.add(prefix+"leadership moves per update", v.which, "count", float64(len(u.moves)))
				for _, m := range u.moves {
					b.add(prefix+"leaderless time per move", v.which, "ms", ms(m.leaderless))
				}
				b.add(prefix+"leaderless time per update", v.which, "ms", ms(u.leaderless()))
			}
		}
	}
	return nil
}
