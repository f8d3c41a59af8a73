package lease

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/endpoints"
	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry/telemetrytest"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// A dead leader's endpoint: leader "a" published 10.0.0.9 with token 5 on
// the Lease of UID "uid-l", and was killed (no withdrawal).
const deadAddress = "10.0.0.9"

func deadLeadersSlice() *discoveryv1.EndpointSlice {
	ready, port := true, int32(50051)
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "store-leader", Namespace: "ns",
			Labels: map[string]string{discoveryv1.LabelServiceName: "store", discoveryv1.LabelManagedBy: endpoints.ManagedBy},
			Annotations: map[string]string{endpoints.TokenAnnotation: "5", endpoints.HolderAnnotation: "a", endpoints.LeaseAnnotation: "l",
				endpoints.LeaseUIDAnnotation: "uid-l"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{deadAddress}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	}
}

// heldLease is Lease ns/l of that UID held by holder with token, renewed
// now (incarnation: "" for a plain client-go holder).
func heldLease(uid types.UID, holder, incarnation string, token int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", UID: uid}}
	if incarnation != "" {
		l.Annotations = map[string]string{IncarnationAnnotation: incarnation}
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
		LeaseTransitions: ptr.To(token), RenewTime: &now, AcquireTime: &now}
	return l
}

// sliceOf reads ns/store-leader from cs (nil: none).
func sliceOf(t *testing.T, cs *fake.Clientset) *discoveryv1.EndpointSlice {
	t.Helper()
	s, err := cs.DiscoveryV1().EndpointSlices("ns").Get(context.Background(), "store-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func routesTo(s *discoveryv1.EndpointSlice, address string) bool {
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			if a == address {
				return true
			}
		}
	}
	return false
}

// recordedEvents is an eventSink that keeps "<type> <reason>: <message>".
type recordedEvents struct {
	mu     sync.Mutex
	events []string
}

func (r *recordedEvents) Record(_, _ string, _ types.UID, _, eventType, reason, message string) <-chan struct{} {
	r.mu.Lock()
	r.events = append(r.events, eventType+" "+reason+": "+message)
	r.mu.Unlock()
	done := make(chan struct{})
	close(done)
	return done
}

// warnings are the Warning Events recorded that contain all of words.
func (r *recordedEvents) warnings(words ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
next:
	for _, ev := range r.events {
		if !strings.HasPrefix(ev, "Warning ") {
			continue
		}
		for _, w := range words {
			if !strings.Contains(ev, w) {
				continue next
			}
		}
		out = append(out, ev)
	}
	return out
}

// metric is the sample of family with labels in the metrics of stats, as
// lease ns/l (-1: none).
func metric(t *testing.T, stats *leaseStats, family string, labels map[string]string) float64 {
	t.Helper()
	text := telemetry.MetricsText([]telemetry.LeaseMetrics{{Name: "ns/l", Counters: stats}}, 0, 0)
	return telemetrytest.Value(telemetrytest.Parse(t, text), family, labels)
}

// standbyOn is candidate "c" on ns/l of cs (not started: no campaign, so
// the test decides when it looks), its observer synced, with Events kept.
func standbyOn(t *testing.T, cs *fake.Clientset) (*Election, *leaseStats, *recordedEvents) {
	t.Helper()
	leases := cs.CoordinationV1().Leases("ns")
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	if _, err := obs.awaitSynced(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	stats := &leaseStats{}
	stats.CampaignStarted()
	e := newElection(Key{Namespace: "ns", Name: "l"}, "c", unitTiming, leases, obs, clock.RealClock{}, stats, func() bool { return false })
	events := &recordedEvents{}
	e.events = events
	return e, stats, events
}

// Leader "a" was killed with its endpoint published, and the next term
// publishes none: a plain client-go candidate took the Lease over, or one
// of ours without an endpoint (a hand-off target), or the Lease was
// deleted, or re-created, or its leaseTransitions lowered (a manifest
// applied again). A candidate of ours with the Service's endpoint
// configured knows the Lease's record: the slice of a term that record no
// longer shows stops routing, is counted and reported. When the Lease is
// of a later term, the emptied slice carries it (a late write of a's term
// then fails); else a's term stays (the token never falls).
func TestAStandbyWithAnEndpointEmptiesADeadLeadersSlice(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lease     *coordinationv1.Lease // nil: none
		wantToken string
		wantOf    string // holder annotation
		wantUID   string
	}{
		{"a plain client-go candidate leads", heldLease("uid-l", "b", "", 6), "6", "b", "uid-l"},
		{"one of ours without an endpoint leads", heldLease("uid-l", "t", "inc-t", 6), "6", "t", "uid-l"},
		{"the Lease is gone", nil, "5", "a", "uid-l"},
		{"the Lease was re-created", heldLease("uid-new", "b", "", 1), "1", "b", "uid-new"},
		{"the Lease's leaseTransitions was lowered", heldLease("uid-l", "b", "", 1), "5", "a", "uid-l"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []kruntime.Object{deadLeadersSlice()}
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			cs := fake.NewClientset(objs...)
			e, stats, events := standbyOn(t, cs)
			if err := e.publishEndpoint(endpoints.Store{Client: clientsetapi.Wrap(cs)}, testEndpoint); err != nil {
				t.Fatal(err)
			}
			if !waitUntil(3*time.Second, func() bool { return !routesTo(sliceOf(t, cs), deadAddress) }) {
				t.Fatalf("the Service still routes to the dead leader: %v", sliceOf(t, cs).Endpoints)
			}
			s := sliceOf(t, cs)
			if len(s.Endpoints) != 0 || s.Annotations[endpoints.TokenAnnotation] != tc.wantToken ||
				s.Annotations[endpoints.HolderAnnotation] != tc.wantOf || s.Annotations[endpoints.LeaseUIDAnnotation] != tc.wantUID {
				t.Fatalf("the slice lists %v with annotations %v; want nothing, of %s/%s (lease UID %s)",
					s.Endpoints, s.Annotations, tc.wantOf, tc.wantToken, tc.wantUID)
			}
			eventually(t, 3*time.Second, "the clearing counted", func() bool {
				return metric(t, stats, "k8s_lease_stale_endpoints_cleared_total", map[string]string{"name": "ns/l"}) == 1
			})
			eventually(t, 3*time.Second, "a Warning Event naming the dead endpoint", func() bool {
				return len(events.warnings(deadAddress, "token 5")) > 0
			})
			if w := events.warnings(deadAddress, "token 5"); len(w) != 1 {
				t.Fatalf("Warning Events naming the dead endpoint: %q; want one", w)
			}
		})
	}
}

// The Lease's leaseTransitions was lowered on the same UID (a manifest
// applied again): the new leader's token (1) is below the slice's (5, of
// a dead leader). Its write is refused; while it leads, that refusal is no
// later leader's doing. It must say so: a Warning Event and a count, and
// the dead leader's endpoint emptied (its token kept: it never falls).
func TestASupersededPublisherSaysSoAndEmptiesTheStaleSlice(t *testing.T) {
	lease := heldLease("uid-l", "b", "inc-b", 1)
	cs := fake.NewClientset(deadLeadersSlice(), lease)
	stats := &leaseStats{}
	stats.CampaignStarted()
	e := newElection(Key{Namespace: "ns", Name: "l"}, "b", unitTiming, nil, nil, clock.RealClock{}, stats, func() bool { return false })
	events := &recordedEvents{}
	e.events = events
	e.mu.Lock()
	e.term.phase, e.term.token, e.term.validUntil, e.term.written = phaseLeader, 1, time.Now().Add(time.Minute), lease
	e.mu.Unlock()
	if err := e.publishEndpoint(endpoints.Store{Client: clientsetapi.Wrap(cs)}, testEndpoint); err != nil {
		t.Fatal(err)
	}
	defer e.withdrawEndpoint(context.Background(), time.Second)
	if !waitUntil(3*time.Second, func() bool { return !routesTo(sliceOf(t, cs), deadAddress) }) {
		t.Errorf("the Service still routes to the dead leader: %v", sliceOf(t, cs).Endpoints)
	}
	if s := sliceOf(t, cs); s.Annotations[endpoints.TokenAnnotation] != "5" {
		t.Errorf("the slice's token fell to %s", s.Annotations[endpoints.TokenAnnotation])
	}
	if !waitUntil(3*time.Second, func() bool { return len(events.warnings("b", "token 5")) > 0 }) {
		t.Errorf("no Warning Event says b's endpoint was refused (events %q)", events.events)
	}
	if v := metric(t, stats, "k8s_lease_endpoint_writes_total", map[string]string{"name": "ns/l", "result": "superseded"}); v < 1 {
		t.Errorf("k8s_lease_endpoint_writes_total{result=\"superseded\"} = %v; want it counted", v)
	}
	if s := statsOf(stats).Election; s.EndpointWrites != 0 || s.EndpointFailures != 0 {
		t.Errorf("stats %+v; a refused write is neither a write nor a failure", s)
	}
}

// checkedTerm waits until the standby's check of the slice is done, and
// returns the term it was made against.
func checkedTerm(t *testing.T, e *Election) shownTerm {
	t.Helper()
	var seen shownTerm
	eventually(t, 5*time.Second, "the standby's check of the slice", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		seen = e.endpoint.route.checked
		return e.endpoint.route.checkedOK && !e.endpoint.route.checking
	})
	return seen
}

// sliceReads counts the reads of the slice sent to cs.
func sliceReads(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "endpointslices" {
			n++
		}
	}
	return n
}

// The candidate loop hands each snapshot of the Lease to clearStaleRoute
// (here the test does, as campaign does). While the slice's term holds the
// Lease, the standby leaves it alone, and looks once per term; once a plain
// client-go candidate took the Lease over from the killed leader, the
// standby empties the dead leader's slice.
func TestAStandbyEmptiesTheSliceOfATermTheLeaseNoLongerShows(t *testing.T) {
	cs := fake.NewClientset(deadLeadersSlice(), heldLease("uid-l", "a", "inc-a", 5))
	e, stats, events := standbyOn(t, cs)
	if err := e.publishEndpoint(endpoints.Store{Client: clientsetapi.Wrap(cs)}, testEndpoint); err != nil {
		t.Fatal(err)
	}
	if seen := checkedTerm(t, e); seen.term.Token != 5 || seen.term.Holder != "a" {
		t.Fatalf("checked against %+v; want a's term", seen)
	}
	if !routesTo(sliceOf(t, cs), deadAddress) {
		t.Fatal("the standby emptied the slice of the term that holds the Lease")
	}
	// a's renewals change nothing that matters: no more reads.
	reads := sliceReads(cs)
	for range 3 {
		e.clearStaleRoute(e.obs.snapshot())
	}
	checkedTerm(t, e)
	if n := sliceReads(cs); n != reads {
		t.Fatalf("%d more reads of the slice for the same term", n-reads)
	}

	// A release or a hand-off record comes after a withdrawal, and a
	// candidate takes the Lease next: nothing to read until then.
	released := heldLease("uid-l", "", "", 5)
	if _, err := cs.CoordinationV1().Leases("ns").Update(context.Background(), released, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the observer sees the release", func() bool { return e.obs.snapshot().rec.holder == "" })
	e.clearStaleRoute(e.obs.snapshot())
	if n := sliceReads(cs); n != reads {
		t.Fatalf("%d reads of the slice for a released Lease", n-reads)
	}

	// a is killed; b, a plain client-go candidate, takes the Lease over.
	if _, err := cs.CoordinationV1().Leases("ns").Update(context.Background(), heldLease("uid-l", "b", "", 6), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the observer sees b", func() bool { return e.obs.snapshot().rec.holder == "b" })
	e.clearStaleRoute(e.obs.snapshot())
	if seen := checkedTerm(t, e); seen.term.Token != 6 || seen.term.Holder != "b" {
		t.Fatalf("checked against %+v; want b's term", seen)
	}
	s := sliceOf(t, cs)
	if len(s.Endpoints) != 0 || s.Annotations[endpoints.TokenAnnotation] != "6" || s.Annotations[endpoints.HolderAnnotation] != "b" {
		t.Fatalf("the slice lists %v with annotations %v; want nothing, of b/6", s.Endpoints, s.Annotations)
	}
	if v := metric(t, stats, "k8s_lease_stale_endpoints_cleared_total", map[string]string{"name": "ns/l"}); v != 1 {
		t.Fatalf("k8s_lease_stale_endpoints_cleared_total = %v; want 1", v)
	}
	eventually(t, 3*time.Second, "a Warning Event naming the dead endpoint", func() bool {
		return len(events.warnings(deadAddress, "token 5", `"b"`)) > 0
	})
	if w := events.warnings(deadAddress, "token 5", `"b"`); len(w) != 1 {
		t.Fatalf("Warning Events %q; want one naming the dead endpoint and the Lease's holder", events.events)
	}
}

// Only a candidate looks: a leader publishes its own endpoint, and an
// election that ended publishes nothing.
func TestOnlyACandidateClearsStaleRoutes(t *testing.T) {
	cs := fake.NewClientset(deadLeadersSlice(), heldLease("uid-l", "b", "", 6))
	e, _, _ := standbyOn(t, cs)
	e.mu.Lock()
	e.endpoint.route = &route{store: endpoints.Store{Client: clientsetapi.Wrap(cs)}, endpoint: testEndpoint}
	e.term.phase = phaseEnded
	e.mu.Unlock()
	e.clearStaleRoute(e.obs.snapshot())
	e.mu.Lock()
	checking := e.endpoint.route.checking
	e.mu.Unlock()
	if checking || sliceReads(cs) != 0 {
		t.Fatal("an ended election checked the slice")
	}
}

// The candidate loop itself checks: a running standby, its endpoint
// configured while the dead leader's term still holds the Lease, empties
// the slice once a plain client-go candidate took the Lease over.
func TestARunningStandbyEmptiesTheSliceAfterATakeover(t *testing.T) {
	cs := fake.NewClientset(deadLeadersSlice(), heldLease("uid-l", "a", "inc-a", 5))
	e, _, _ := standbyOn(t, cs)
	if err := e.publishEndpoint(endpoints.Store{Client: clientsetapi.Wrap(cs)}, testEndpoint); err != nil {
		t.Fatal(err)
	}
	checkedTerm(t, e) // against a's term: left alone
	e.start()
	t.Cleanup(func() { _ = e.Cancel() })
	awaitWaitingIn(t, "(*Election).waitFor", 1) // the campaign waits out a's term
	if !routesTo(sliceOf(t, cs), deadAddress) {
		t.Fatal("emptied while a's term holds the Lease")
	}
	if _, err := cs.CoordinationV1().Leases("ns").Update(context.Background(), heldLease("uid-l", "b", "", 6), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(5*time.Second, func() bool { return !routesTo(sliceOf(t, cs), deadAddress) }) {
		t.Fatalf("a running standby left the dead leader's endpoint after b took the Lease: %v", sliceOf(t, cs).Endpoints)
	}
}

// A check still running when the Lease shows a new term (the check of a's
// term held in its read of the slice) is followed by one of the new term
// as it ends, not only at the Lease's next change (after a deletion, none
// comes).
func TestACheckRunningAtATermChangeIsFollowedByOneOfTheNewTerm(t *testing.T) {
	cs := fake.NewClientset(deadLeadersSlice(), heldLease("uid-l", "a", "inc-a", 5))
	e, _, _ := standbyOn(t, cs)
	e.start()
	t.Cleanup(func() { _ = e.Cancel() })
	held, release := make(chan struct{}), make(chan struct{})
	client := slowFirstSliceGet{clientsetapi.Wrap(cs), held, release, &sync.Once{}}
	if err := e.publishEndpoint(endpoints.Store{Client: client}, testEndpoint); err != nil {
		t.Fatal(err)
	}
	receive(t, held, 5*time.Second, "the check of a's term reading the slice")
	if _, err := cs.CoordinationV1().Leases("ns").Update(context.Background(), heldLease("uid-l", "b", "", 6), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the standby sees b", func() bool { return e.obs.snapshot().rec.holder == "b" })
	awaitWaitingIn(t, "(*Election).waitFor", 1) // its loop looked at b's term, with a check running
	close(release)
	if !waitUntil(4*time.Second, func() bool { return !routesTo(sliceOf(t, cs), deadAddress) }) {
		e.mu.Lock()
		defer e.mu.Unlock()
		t.Fatalf("4 s after b took the Lease the Service still routes to dead a (checked %+v, checking %v)", e.endpoint.route.checked, e.endpoint.route.checking)
	}
}

// slowFirstSliceGet holds the first read of an EndpointSlice until release
// is closed (announcing it on held).
type slowFirstSliceGet struct {
	kubeapi.Client
	held, release chan struct{}
	once          *sync.Once
}

func (s slowFirstSliceGet) EndpointSlices(ns string) kubeapi.EndpointSlices {
	return slowFirstSliceGets{s.Client.EndpointSlices(ns), s}
}

type slowFirstSliceGets struct {
	kubeapi.EndpointSlices
	s slowFirstSliceGet
}

func (g slowFirstSliceGets) Get(ctx context.Context, name string) (*kubeapi.EndpointSlice, error) {
	g.s.once.Do(func() { close(g.s.held); <-g.s.release })
	return g.EndpointSlices.Get(ctx, name)
}
