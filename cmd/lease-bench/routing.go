package main

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/k8s-lease/k8s-lease/lease"
)

// The routing section: leader-only routing (Manager.PublishEndpoint), ours
// only. Three replicas, each a lease.Manager on its own connection, campaign
// on three Leases at once: two whose leader publishes its endpoint on a
// selector-less Service, one without. Round after round, the leader of the
// first hands off to a standby, the leader of the second (no endpoint) does
// the same, and the leader of the third is cancelled (a standby takes
// over); the old leader campaigns again at once. Admin watches on the
// Leases and on the Services' EndpointSlices time when the slices list the
// new leader alone and check that no other address is listed after its
// WaitElected returned.

const (
	routingReplicas = 3
	routingPort     = 8080
	// routingPause follows each move, once the old leader campaigns again:
	// the new term's check window, and time for a renewal now and then.
	routingPause = 300 * time.Millisecond
)

// routingAddress is replica i's address: pod-network addresses, distinct,
// neither loopback nor link-local (the library refuses those).
func routingAddress(i int) string { return fmt.Sprintf("10.244.0.%d", i+1) }

// routeReplica is one replica: its identity, address, connection, Manager.
type routeReplica struct {
	id, addr string
	c        *conn
	m        *lease.Manager
}

// routeMember is one candidacy of a replica on a group's Lease.
type routeMember struct {
	*routeReplica
	cand   *oursCandidate
	joined time.Time // just before its RunElection
}

// routeGroup is the replicas' election on one Lease, with the Service its
// leader publishes (service "": none).
type routeGroup struct {
	name, service string
	leader        routeMember
	standbys      []routeMember // the longest campaigning first
	leases        *leaseLog
	slices        *sliceLog // nil without a Service
}

// routeMove is what one change of leader of a group measured.
type routeMove struct {
	from, to routeMember
	took     time.Duration // the call (HandOff, CancelElection) -> the new leader's WaitElected returned
	// The slices' first state listing only the new leader (as the slice
	// watch delivered it), minus when its WaitElected returned, and minus
	// when the Lease watch delivered its acquisition.
	routedVsElected, routedVsAcquired time.Duration
	sliceRequests                     int // EndpointSlice requests from the call to the new leader's WaitElected
	strays                            int // states listing another address after the new leader's WaitElected
}

func (b *bench) newRouteReplica(i int, log *requestLog) (*routeReplica, error) {
	c := newConn(b.cfg)
	c.log = log
	client, err := lease.NewClient(c.cfg)
	if err != nil {
		return nil, err
	}
	m := lease.NewManager(nil)
	m.SetClient(client)
	return &routeReplica{id: fmt.Sprintf("replica-%d", i), addr: routingAddress(i), c: c, m: m}, nil
}

// routeGroupOf starts the replicas' election on a new Lease: rs[0] leads
// first. With publish, a selector-less Service of the Lease's name, with
// one unnamed port, is created through the admin client, and every
// candidacy publishes its replica's endpoint on it.
func (b *bench) routeGroupOf(prefix string, rs []*routeReplica, publish bool) (*routeGroup, error) {
	g := &routeGroup{name: b.leaseName(prefix)}
	var err error
	if g.leases, err = b.followLease(g.name); err != nil {
		return nil, err
	}
	if publish {
		g.service = g.name
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: g.service}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(routingPort)}}}}
		if _, err := b.admin.CoreV1().Services(benchNamespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
			g.stop()
			return nil, fmt.Errorf("routing: the Service %s: %w", g.service, err)
		}
		if g.slices, err = b.followSlices(g.service); err != nil {
			g.stop()
			return nil, err
		}
	}
	for i, r := range rs {
		mem, err := g.join(r)
		if err != nil {
			g.stop()
			return nil, err
		}
		if i == 0 {
			if _, err := firstElected([]candidate{mem.cand}, 3*fast.LeaseDuration); err != nil {
				g.stop()
				return nil, fmt.Errorf("routing %s: %w", g.name, err)
			}
			g.leader = mem
			continue
		}
		g.standbys = append(g.standbys, mem)
	}
	for _, s := range g.standbys {
		if err := g.waitCampaigning(s); err != nil {
			g.stop()
			return nil, err
		}
	}
	time.Sleep(routingPause)
	return g, nil
}

// stop ends the group's watches (the Managers are the section's).
func (g *routeGroup) stop() {
	g.leases.stop()
	if g.slices != nil {
		g.slices.stop()
	}
}

// join starts r's candidacy on the group's Lease, publishing r's endpoint
// if the group has a Service.
func (g *routeGroup) join(r *routeReplica) (routeMember, error) {
	var ep *lease.Endpoint
	if g.service != "" {
		ep = &lease.Endpoint{Service: g.service, Address: r.addr, Port: routingPort}
	}
	joined := time.Now()
	oc, err := campaign(r.c, r.m, benchNamespace, g.name, r.id, fast, ep)
	if err != nil {
		return routeMember{}, fmt.Errorf("routing %s: %s campaigns: %w", g.name, r.id, err)
	}
	return routeMember{routeReplica: r, cand: oc, joined: joined}, nil
}

// waitCampaigning waits until Manager.Candidates lists mem's own candidate
// record (renewed since it joined): a hand-off to it is accepted, and it
// has read the held Lease.
func (g *routeGroup) waitCampaigning(mem routeMember) error {
	since := mem.joined.Truncate(time.Microsecond) // the record's renewTime is a MicroTime
	return waitListed(mem.m, g.name, 10*time.Second, func(c lease.Candidate) bool {
		return c.Identity == mem.id && !c.RenewTime.Before(since)
	})
}

// waitListed polls Manager.Candidates on benchNamespace/name until one of
// the records satisfies ok.
func waitListed(m *lease.Manager, name string, within time.Duration, ok func(lease.Candidate) bool) error {
	deadline := time.Now().Add(within)
	for {
		cs, err := m.Candidates(benchNamespace, name)
		if slices.ContainsFunc(cs, ok) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("candidate of %s not listed by Manager.Candidates within %v (last error: %v)", name, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// move changes the group's leader: with handOff the leader calls
// Manager.HandOff to the longest campaigning standby, else
// CancelElection (a standby takes the released Lease). Then the old leader
// campaigns again, and the new term is checked until the pause ends.
func (b *bench) move(g *routeGroup, handOff bool, reqs *requestLog) (routeMove, error) {
	mv := routeMove{from: g.leader}
	leaseFrom, sliceFrom := g.leases.len(), 0
	if g.slices != nil {
		sliceFrom = g.slices.len()
	}
	called := time.Now()
	if handOff {
		mv.to = g.standbys[0]
		herr := mv.from.m.HandOff(benchNamespace, g.name, mv.to.id, handOffTimeout)
		select {
		case <-mv.to.cand.elected():
		case <-time.After(handOffTimeout):
			return mv, fmt.Errorf("routing %s: %s did not lead within %v of the hand-off (HandOff: %v)", g.name, mv.to.id, handOffTimeout, herr)
		}
		if herr != nil {
			return mv, fmt.Errorf("routing %s: %s leads, but HandOff returned: %w", g.name, mv.to.id, herr)
		}
	} else {
		cancelled := make(chan error, 1)
		go func() { cancelled <- mv.from.m.CancelElection(benchNamespace, g.name) }()
		var cs []candidate
		for _, s := range g.standbys {
			cs = append(cs, s.cand)
		}
		next, err := firstElected(cs, 3*fast.LeaseDuration)
		if cerr := <-cancelled; err == nil && cerr != nil {
			err = fmt.Errorf("CancelElection: %w", cerr)
		}
		if err != nil {
			return mv, fmt.Errorf("routing %s: after the leader's cancel: %w", g.name, err)
		}
		mv.to = g.standbys[slices.IndexFunc(g.standbys, func(s routeMember) bool { return s.cand == next })]
	}
	elected := mv.to.cand.electedAt()
	mv.took = elected.Sub(called)
	first := 0
	if g.slices != nil {
		// At once, a list: what a client reading the slices now is told.
		if listed, err := b.listSlices(g.service); err != nil {
			return mv, err
		} else if others(listed, mv.to.addr) > 0 {
			mv.strays++
			progress("  routing %s: after %s's WaitElected returned, the slices list %v", g.name, mv.to.id, listed)
		}
		i, err := g.slices.waitFor(sliceFrom, 5*time.Second, func(e sliceEvent) bool { return listsOnly(e.addrs, mv.to.addr) })
		if err != nil {
			return mv, fmt.Errorf("routing %s: the slices listing only %s: %w", g.name, mv.to.addr, err)
		}
		events, _ := g.slices.all()
		first = i
		mv.routedVsElected = events[i].seen.Sub(elected)
		mv.sliceRequests = sliceRequests(reqs.all(), called, elected)
		j, err := g.leases.waitFor(leaseFrom, 5*time.Second, func(e leaseEvent) bool {
			return e.holder == mv.to.id && e.handOffTo == "" && e.incarnation != ""
		})
		if err != nil {
			return mv, fmt.Errorf("routing %s: %s's acquisition: %w", g.name, mv.to.id, err)
		}
		leases, _ := g.leases.all()
		mv.routedVsAcquired = events[i].seen.Sub(leases[j].seen)
	}
	// The old leader campaigns again; the new leader's standbys are the
	// others, the longest campaigning first.
	again, err := g.join(mv.from.routeReplica)
	if err != nil {
		return mv, err
	}
	g.leader = mv.to
	g.standbys = append(slices.DeleteFunc(g.standbys, func(s routeMember) bool { return s.cand == mv.to.cand }), again)
	if err := g.waitCampaigning(again); err != nil {
		return mv, err
	}
	time.Sleep(routingPause)
	if g.slices != nil {
		// Every state delivered since the first that listed the new leader
		// alone: the new leader's, the predecessor's cannot come back.
		events, err := g.slices.all()
		if err != nil {
			return mv, err
		}
		if n := strays(events[first:], mv.to.addr); n > 0 {
			mv.strays += n
			progress("  routing %s: %d state(s) of the slices listing another address than %s's after it led", g.name, n, mv.to.id)
		}
	}
	return mv, nil
}

// routing fills the routing rows: n rounds, each a hand-off with an
// endpoint and one without (their order alternating), then a release.
func (b *bench) routing(n int) error {
	log := &requestLog{}
	var rs []*routeReplica
	defer func() {
		for _, r := range rs {
			_ = r.m.Shutdown(10 * time.Second)
		}
	}()
	for i := range routingReplicas {
		r, err := b.newRouteReplica(i, log)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	var groups []*routeGroup
	defer func() {
		for _, g := range groups {
			g.stop()
		}
	}()
	for _, spec := range []struct {
		prefix  string
		publish bool
	}{{"routing-handoff", true}, {"routing-plain", false}, {"routing-release", true}} {
		g, err := b.routeGroupOf(spec.prefix, rs, spec.publish)
		if err != nil {
			return err
		}
		groups = append(groups, g)
	}
	withEP, plain, release := groups[0], groups[1], groups[2]
	started := time.Now()
	var handOffRouted, handOffAcquired, releaseRouted, releaseAcquired, took, tookPlain, sliceReqs []float64
	strayed := 0
	for i := 0; i < n; i++ {
		order := []*routeGroup{withEP, plain}
		if i%2 == 1 {
			order = []*routeGroup{plain, withEP}
		}
		for _, g := range append(order, release) {
			handOff := g != release
			mv, err := b.move(g, handOff, log)
			if err != nil {
				return err
			}
			strayed += mv.strays
			switch g {
			case plain:
				tookPlain = append(tookPlain, ms(mv.took))
				progress("  routing, hand-off, no endpoint: %s -> %s leads after %.1f ms", mv.from.id, mv.to.id, ms(mv.took))
				continue
			case withEP:
				took = append(took, ms(mv.took))
				handOffRouted = append(handOffRouted, ms(mv.routedVsElected))
				handOffAcquired = append(handOffAcquired, ms(mv.routedVsAcquired))
				sliceReqs = append(sliceReqs, float64(mv.sliceRequests))
			default:
				releaseRouted = append(releaseRouted, ms(mv.routedVsElected))
				releaseAcquired = append(releaseAcquired, ms(mv.routedVsAcquired))
			}
			what := map[bool]string{true: "hand-off", false: "release"}[handOff]
			progress("  routing, %s: %s -> %s leads after %.1f ms; the slices list only it at %+.1f ms from its WaitElected, %+.1f ms from its acquisition; %d slice request(s) until its WaitElected",
				what, mv.from.id, mv.to.id, ms(mv.took), ms(mv.routedVsElected), ms(mv.routedVsAcquired), mv.sliceRequests)
		}
	}
	progress("  routing: %d rounds in %v", n, time.Since(started).Round(time.Second))
	renewed := renewals(log.all(), withEP.name, plain.name, release.name)
	if len(took) == 0 || len(renewed) == 0 {
		return fmt.Errorf("routing: %d hand-offs, %d renewals timed", len(took), len(renewed))
	}
	b.addAll("HandOff to a standby: its WaitElected returned -> the slices list only it", ours, "ms", handOffRouted)
	b.addAll("HandOff to a standby: its acquisition seen on the Lease -> the slices list only it", ours, "ms", handOffAcquired)
	b.addAll("CancelElection of the leader: the next one's WaitElected returned -> the slices list only it", ours, "ms", releaseRouted)
	b.addAll("CancelElection of the leader: the next one's acquisition seen on the Lease -> the slices list only it", ours, "ms", releaseAcquired)
	b.addAll(fmt.Sprintf("HandOff call -> the target's WaitElected, endpoint published, %s, 2 standbys", timingName(fast)), ours, "ms", took)
	b.addAll("HandOff call -> the target's WaitElected, no endpoint (the same replicas, interleaved)", ours, "ms", tookPlain)
	with, without, write := series{Samples: took}, series{Samples: tookPlain}, series{Samples: renewed}
	b.add("HandOff with endpoint − without: difference of the p50s", ours, "ms", with.quantile(0.5)-without.quantile(0.5))
	b.add("HandOff with endpoint − without: difference of the p90s", ours, "ms", with.quantile(0.9)-without.quantile(0.9))
	b.addAll("one Lease write: a leader's renewal (a PATCH), at its transport", ours, "ms", renewed)
	b.add("difference of the p50s in Lease writes (÷ the renewal's p50)", ours, "Lease writes",
		(with.quantile(0.5)-without.quantile(0.5))/write.quantile(0.5))
	b.addAll("EndpointSlice requests from the HandOff call to the target's WaitElected", ours, "count", sliceReqs)
	b.add("others' addresses listed after a new leader's WaitElected returned (all moves)", ours, "count", float64(strayed))
	if strayed != 0 {
		b.failures = append(b.failures, fmt.Sprintf("routing: %d time(s) the slices listed another address than the new leader's after its WaitElected returned", strayed))
	}
	return nil
}

// sliceLog is an admin watch on the EndpointSlices of one Service: after
// each event, every address they list.
type sliceLog = watchLog[sliceEvent]

type sliceEvent struct {
	seen  time.Time // when the admin watch delivered it
	addrs []string  // every address of every slice of the Service after it, sorted
}

// sliceSelector selects the EndpointSlices of service, as kube-proxy and
// CoreDNS do.
func sliceSelector(service string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service}
}

// followSlices starts the admin watch on the slices of benchNamespace's
// Service service (none need exist yet).
func (b *bench) followSlices(service string) (*sliceLog, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := b.admin.DiscoveryV1().EndpointSlices(benchNamespace).Watch(ctx, sliceSelector(service))
	if err != nil {
		cancel()
		return nil, err
	}
	state := sliceState{}
	return follow(ctx, cancel, w, "the slices of "+service, func(ev watch.Event) (sliceEvent, bool) {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			return sliceEvent{}, false
		}
		seen := time.Now()
		return sliceEvent{seen: seen, addrs: state.set(s.Name, addressesOf(s), ev.Type == watch.Deleted)}, true
	}), nil
}

// listSlices lists the slices of Service service: every address they list.
func (b *bench) listSlices(service string) ([]string, error) {
	l, err := b.admin.DiscoveryV1().EndpointSlices(benchNamespace).List(context.Background(), sliceSelector(service))
	if err != nil {
		return nil, fmt.Errorf("routing: list the slices of %s: %w", service, err)
	}
	state := sliceState{}
	var addrs []string
	for i := range l.Items {
		addrs = state.set(l.Items[i].Name, addressesOf(&l.Items[i]), false)
	}
	return addrs, nil
}

// addressesOf is every address a slice lists, whatever its conditions.
func addressesOf(s *discoveryv1.EndpointSlice) []string {
	var addrs []string
	for _, ep := range s.Endpoints {
		addrs = append(addrs, ep.Addresses...)
	}
	return addrs
}

// sliceState is the addresses of each slice of a Service, by slice name.
type sliceState map[string][]string

// set records that slice name lists addrs (deleted: it is gone) and returns
// every address the slices list, sorted, each once.
func (s sliceState) set(name string, addrs []string, deleted bool) []string {
	if deleted {
		delete(s, name)
	} else {
		s[name] = addrs
	}
	var all []string
	for _, a := range s {
		all = append(all, a...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// listsOnly reports whether addrs is exactly addr.
func listsOnly(addrs []string, addr string) bool { return len(addrs) == 1 && addrs[0] == addr }

// others counts the addresses of addrs other than addr.
func others(addrs []string, addr string) int {
	n := 0
	for _, a := range addrs {
		if a != addr {
			n++
		}
	}
	return n
}

// strays counts the states that list another address than addr.
func strays(events []sliceEvent, addr string) int {
	n := 0
	for _, e := range events {
		if others(e.addrs, addr) > 0 {
			n++
		}
	}
	return n
}

// renewals are the durations (ms) of the renewals of the Leases named:
// the PATCHes of .../leases/<name>.
func renewals(reqs []request, names ...string) []float64 {
	var ds []float64
	for _, r := range reqs {
		dir, name := path.Split(r.path)
		if r.method == "PATCH" && strings.HasSuffix(dir, "/leases/") && slices.Contains(names, name) {
			ds = append(ds, ms(r.took))
		}
	}
	return ds
}

// sliceRequests counts the EndpointSlice requests sent from from to to.
func sliceRequests(reqs []request, from, to time.Time) int {
	n := 0
	for _, r := range reqs {
		if strings.Contains(r.path, "/endpointslices") && !r.sent.Before(from) && !r.sent.After(to) {
			n++
		}
	}
	return n
}
