//go:build integration

package fault

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/history"
	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// What the library's slices carry (lease/internal/endpoints, which this
// package may not import).
const (
	sliceManagedBy   = "leader-endpoint.k8s-lease.io"
	sliceTokenKey    = "k8s-lease.io/fencing-token"
	sliceHolderKey   = "k8s-lease.io/holder"
	serviceNameLabel = discoveryv1.LabelServiceName
)

// routing: lease 2 s, renew deadline 1.5 s, retry 300 ms; the four faults
// take about 13 s.
var routing = timing{2 * time.Second, 1500 * time.Millisecond, 300 * time.Millisecond}

const routedPort = 8080

// Leader-only routing (K8sLeasePublishEndpoint) through the faults a
// leader meets. Three candidates publish each its own address for one
// selector-less Service (deploy/service.yaml's, under a name of this
// scenario's), and the leader is in turn SIGKILLed, SIGTERMed, frozen past
// its lease (SIGSTOP, then SIGCONT) and cut off from the API server (its
// proxy black-holed, then healed); a candidate that exits is restarted
// under its identity with a new address, as a new Pod would be. Meanwhile
// the test lists the Service's EndpointSlices every few ms and watches them
// and the Lease. What must hold:
//   - once a new leader's WaitElected returned (its "elected" line), every
//     list sent later, until the next fault, shows exactly one endpoint,
//     that leader's address:port, in our slice, with its token and
//     identity; between a fault and that moment, only the old leader's
//     address, the new one's or none;
//   - every slice of the Service is ours (managed-by), its fencing token
//     never falls (the watch sees every write), and each leader writes it
//     after its acquisition of the Lease;
//   - the SIGTERMed leader's endpoint is withdrawn (endpoints: [], its token
//     kept) before the Lease is released;
//   - the history: no overlap, rising tokens; and once every candidate has
//     stopped, the slice lists nobody.
//
// Write order between the slice and the Lease is read from their
// resourceVersions: both live in the test bed's one etcd, whose revision
// orders all its writes.
func TestLeaderOnlyRouting(t *testing.T) {
	t.Parallel()
	admin := newClient(t, server.Config)
	s := newScenario(t, routing)
	svc := createLeaderService(t, admin, "route-"+strings.TrimPrefix(s.lease, "fault-"))
	leases := recordWatch(t, func(ctx context.Context) (watch.Interface, error) {
		return admin.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + s.lease})
	})
	slicesSeen := recordWatch(t, func(ctx context.Context) (watch.Interface, error) {
		return admin.DiscoveryV1().EndpointSlices(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: serviceNameLabel + "=" + svc})
	})
	// Lists every 5 ms need a client without client-go's rate limit (5
	// requests a second): a list held back by it would be sent later than
	// its sample says.
	cfg := rest.CopyConfig(server.Config)
	cfg.QPS, cfg.Burst = -1, 0
	sampler := sampleSlices(t, newClient(t, cfg), svc)

	addrOf := map[*proc]string{}
	start := func(id string) {
		addr := fmt.Sprintf("10.0.0.%d", len(addrOf)+1)
		addrOf[s.start(id, candOpts{proxied: true, publish: fmt.Sprintf("%s=%s:%d", svc, addr, routedPort)})] = addr
	}
	for i := 0; i < 3; i++ {
		start(fmt.Sprintf("route-%d", i))
	}
	var changes []routeChange
	// lead waits for the leader after the fault injected at `at` into old's
	// term (old nil: the first leader) and opens its window.
	lead := func(fault string, at int64, old *proc, oldTerm history.Term) (*proc, history.Term) {
		t.Helper()
		p, term := s.awaitLeader(s.timing.lease+s.timing.renew+10*time.Second, at)
		if p == old {
			s.fail("%s: %s, the leader it hit, leads again (token %d)", fault, old.id, term.Token)
		}
		c := routeChange{fault: fault, at: at, next: p, addr: addrOf[p], token: term.Token,
			elected: s.electedAt(5*time.Second, p, term.Token)}
		if old != nil {
			c.old, c.oldAddr, c.oldToken = old, addrOf[old], oldTerm.Token
		}
		if n := len(changes); n > 0 {
			changes[n-1].until = at
		}
		changes = append(changes, c)
		return p, term
	}
	settle := func() { time.Sleep(s.timing.retry + 500*time.Millisecond) } // a renewal seen by every standby
	leader, term := lead("start", 0, nil, history.Term{})
	settle()

	at := history.Now()
	s.sigkill(leader)
	start(leader.id) // restarted as kubelet would, with a new Pod's address
	leader, term = lead("SIGKILL", at, leader, term)
	settle()

	at = history.Now()
	s.sigterm(leader)
	start(leader.id)
	leader, term = lead("SIGTERM", at, leader, term)
	settle()

	frozen := leader
	at = history.Now()
	if err := syscall.Kill(frozen.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := syscall.Kill(frozen.pid(), syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	if err := awaitStopped(frozen.pid(), 5*time.Second); err != nil {
		s.fail("SIGSTOP of %s (pid %d): %v", frozen.id, frozen.pid(), err)
	}
	// Nothing runs in the frozen process from here: the end of its term for
	// the checker, as in TestLeaderFrozenPastItsLease.
	freeze := history.Event{At: history.Now(), PID: frozen.pid(), Kind: history.Killed, Detail: "frozen by SIGSTOP"}
	frozenTerm := term
	leader, term = lead("SIGSTOP", at, frozen, frozenTerm)
	time.Sleep(time.Duration(max(at+int64(s.timing.lease+500*time.Millisecond), changes[len(changes)-1].elected+
		int64(300*time.Millisecond)) - history.Now()))
	thaw()
	// The resumed process finds its term over (its withdrawal finds the
	// newer token and writes nothing) and campaigns again.
	s.awaitTermEnd(s.timing.renew+5*time.Second, frozen.pid(), frozenTerm.Token)
	settle()

	cut := leader
	at = history.Now()
	cut.proxy.BlackHole()
	s.requireStepDown(s.awaitTermEnd(s.timing.renew+3*time.Second, cut.pid(), term.Token), at)
	leader, _ = lead("partition", at, cut, term)
	settle()
	cut.proxy.Heal() // it rejoins as a standby: its writes, if any, must not show
	time.Sleep(s.timing.lease)

	changes[len(changes)-1].until = history.Now()
	s.stopAll()
	// The last leader withdrew its endpoint on SIGTERM, and nobody leads.
	if last := listSlices(admin, svc); last.err != nil || len(last.addresses()) != 0 {
		t.Errorf("once every candidate stopped the Service lists %v (err %v), want no endpoint", last.addresses(), last.err)
	}
	samples := sampler.lists()
	checkRoutes(t, changes, samples)
	checkSliceWrites(t, changes, slicesSeen.eventsSeen(), leases.eventsSeen())
	if r := s.verify(freeze); r.OK() && t.Failed() {
		s.dumpLog()
	}
}

func newClient(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// routeChange is one leadership of the scenario: the fault that ended the
// previous one and the leader that followed, whose window runs from its
// ELECTED until the next fault.
type routeChange struct {
	fault    string
	at       int64 // the fault's injection (mono ns; 0: the start)
	old      *proc // the leader it hit (nil: none)
	oldAddr  string
	oldToken int64
	next     *proc // the leader elected after it
	addr     string
	token    int64
	elected  int64 // next's WaitElected returned (its "elected" line)
	until    int64 // the next fault, or the end of the faults
}

// electedAt is when p logged "elected" for the term with token: the
// return of its WaitElected. (A term's start in the history may be earlier:
// IsLeader says 1 from the acquisition, before the endpoint is written.)
func (s *scenario) electedAt(within time.Duration, p *proc, token int64) int64 {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		events, err := history.ParseFile(s.log)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, ev := range events {
			if ev.PID == p.pid() && ev.Kind == history.Elected && ev.Token == token {
				return ev.At
			}
		}
		if time.Now().After(deadline) {
			s.fail("%s (pid %d) leads with token %d but logged no \"elected\" within %v", p.id, p.pid(), token, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// createLeaderService creates deploy/service.yaml's Service under name.
func createLeaderService(t *testing.T, admin kubernetes.Interface, name string) string {
	t.Helper()
	svc := leaderService(t)
	svc.Name = name
	if _, err := admin.CoreV1().Services(namespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// leaderService is deploy/service.yaml's Service, checked to be what
// K8sLeasePublishEndpoint asks for.
func leaderService(t *testing.T) *corev1.Service {
	t.Helper()
	objs, err := testenv.Manifest("service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("deploy/service.yaml: %d objects, want one Service", len(objs))
	}
	svc, ok := objs[0].(*corev1.Service)
	if !ok || len(svc.Spec.Selector) != 0 || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "" {
		t.Fatalf("deploy/service.yaml: want one selector-less Service with one unnamed port, got %#v", objs[0])
	}
	return svc
}

// sliceState is what one EndpointSlice of the Service said.
type sliceState struct {
	name, managedBy, holder string
	token                   int64 // -1: none
	addresses               []string
	ports                   []int32
}

func stateOf(es *discoveryv1.EndpointSlice) sliceState {
	st := sliceState{name: es.Name, managedBy: es.Labels[discoveryv1.LabelManagedBy], holder: es.Annotations[sliceHolderKey], token: -1}
	if tok, err := strconv.ParseInt(es.Annotations[sliceTokenKey], 10, 64); err == nil {
		st.token = tok
	}
	for _, e := range es.Endpoints {
		st.addresses = append(st.addresses, e.Addresses...)
	}
	for _, p := range es.Ports {
		st.ports = append(st.ports, deref(p.Port))
	}
	return st
}

// sliceSample is one list of the Service's slices.
type sliceSample struct {
	sent, recv int64 // mono ns: before the list was sent, after its answer
	slices     []sliceState
	err        error
}

// addresses lists every endpoint of every slice.
func (sm sliceSample) addresses() []string {
	var all []string
	for _, st := range sm.slices {
		all = append(all, st.addresses...)
	}
	return all
}

func (sm sliceSample) lists(addr string) bool { return slices.Contains(sm.addresses(), addr) }

func listSlices(admin kubernetes.Interface, svc string) sliceSample {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sm := sliceSample{sent: history.Now()}
	list, err := admin.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: serviceNameLabel + "=" + svc})
	sm.recv, sm.err = history.Now(), err
	if err == nil {
		for i := range list.Items {
			sm.slices = append(sm.slices, stateOf(&list.Items[i]))
		}
	}
	return sm
}

// recorder is a goroutine that records until stopped.
type recorder struct {
	once   sync.Once
	cancel func()
	done   chan struct{}
}

// newRecorder runs record(ctx) until stop (or the test's end) cancels ctx.
func newRecorder(t *testing.T, record func(ctx context.Context)) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		record(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

// stop returns once the recording goroutine did.
func (r *recorder) stop() { r.once.Do(func() { r.cancel(); <-r.done }) }

type slicesSampler struct {
	*recorder
	mu      sync.Mutex
	samples []sliceSample
}

// sampleSlices sends a list of the Service's slices every 5 ms until stop,
// up to 4 at a time: a list the API server holds back (a list from its
// watch cache waits until the cache caught up with the writes before it)
// leaves no gap in the sampling.
func sampleSlices(t *testing.T, admin kubernetes.Interface, svc string) *slicesSampler {
	w := &slicesSampler{}
	w.recorder = newRecorder(t, func(ctx context.Context) {
		var lists sync.WaitGroup
		defer lists.Wait()
		inFlight := make(chan struct{}, 4)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for ; ctx.Err() == nil; <-tick.C {
			select {
			case inFlight <- struct{}{}:
			default:
				continue // 4 in flight: this one is skipped
			}
			lists.Go(func() {
				sm := listSlices(admin, svc)
				<-inFlight
				w.mu.Lock()
				w.samples = append(w.samples, sm)
				w.mu.Unlock()
			})
		}
	})
	return w
}

// lists stops the sampling and returns the lists by the time they were sent.
func (w *slicesSampler) lists() []sliceSample {
	w.stop()
	sort.Slice(w.samples, func(i, j int) bool { return w.samples[i].sent < w.samples[j].sent })
	return w.samples
}

// checkRoutes applies the sampled lists to each window of changes, and
// logs, per fault, when the new leader was first listed alone and when
// the old leader's address was last and no longer listed. A list read the
// slices at some moment between its sending and its answer: one sent after
// the ELECTED line read them after it, and one answered before the next
// fault read them before that. (A list across a fault counts in neither
// window.)
func checkRoutes(t *testing.T, changes []routeChange, samples []sliceSample) {
	t.Helper()
	var failed, gaps, took []time.Duration
	for i, sm := range samples {
		if sm.err != nil {
			failed = append(failed, time.Duration(sm.sent-samples[0].sent))
			continue
		}
		if i > 0 {
			gaps = append(gaps, time.Duration(sm.sent-samples[i-1].sent))
		}
		took = append(took, time.Duration(sm.recv-sm.sent))
		for _, st := range sm.slices {
			if st.managedBy != sliceManagedBy {
				t.Errorf("a slice of the Service not ours: %+v (managed by %q)", st, st.managedBy)
			}
		}
		if n := len(sm.addresses()); n > 1 {
			t.Errorf("the Service lists %d endpoints at once: %v", n, sm.slices)
		}
	}
	if len(gaps) == 0 {
		t.Fatalf("%d lists of the Service's slices, none answered", len(samples))
	}
	slices.Sort(gaps)
	slices.Sort(took)
	t.Logf("%d lists of the Service's slices, one sent every %v (median; max %v), answered in %v (median; max %v); %d failed %v",
		len(samples), gaps[len(gaps)/2].Round(10*time.Microsecond), gaps[len(gaps)-1].Round(time.Millisecond),
		took[len(took)/2].Round(10*time.Microsecond), took[len(took)-1].Round(time.Millisecond), len(failed), failed)
	for _, c := range changes {
		t.Log(checkWindow(t, c, samples))
	}
}

// checkWindow checks the lists of c's window and says when the Service
// began to list the new leader alone (the earliest answer showing it, and
// the latest list sent before that without it), and when the old leader's
// address was last listed and gone.
func checkWindow(t *testing.T, c routeChange, samples []sliceSample) string {
	t.Helper()
	var in []sliceSample
	for _, sm := range samples {
		if sm.err == nil && sm.sent >= c.at && sm.recv < c.until {
			in = append(in, sm)
		}
	}
	alone := func(sm sliceSample) bool { a := sm.addresses(); return len(a) == 1 && a[0] == c.addr }
	bad := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if bad++; bad <= 5 {
			t.Errorf(format, args...)
		}
	}
	var listedBy, notYet, oldSeen, oldGone int64 // mono ns; 0: none
	for _, sm := range in {
		if sm.sent > c.elected {
			if st := sm.slices; !alone(sm) || st[0].token != c.token || st[0].holder != c.next.id || !slices.Equal(st[0].ports, []int32{routedPort}) {
				fail("%s: a list sent %v after %s's WaitElected returned (token %d, %s:%d) shows %+v",
					c.fault, time.Duration(sm.sent-c.elected), c.next.id, c.token, c.addr, routedPort, st)
			}
		}
		for _, a := range sm.addresses() {
			if a != c.addr && a != c.oldAddr {
				fail("%s: a list sent %v from %s's ELECTED shows %s, neither the old leader's (%q) nor the new one's",
					c.fault, time.Duration(sm.sent-c.elected), c.next.id, a, c.oldAddr)
			}
		}
		if alone(sm) {
			listedBy = earliest(listedBy, sm.recv)
		}
		switch {
		case c.old == nil:
		case sm.lists(c.oldAddr):
			oldSeen = max(oldSeen, sm.sent)
		default:
			oldGone = earliest(oldGone, sm.recv)
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d more such lists", c.fault, bad-5)
	}
	if listedBy == 0 {
		t.Errorf("%s: %s (%s) was never listed alone while it led", c.fault, c.next.id, c.addr)
	}
	for _, sm := range in {
		if !alone(sm) && sm.sent < listedBy {
			notYet = max(notYet, sm.sent)
		}
	}
	line := fmt.Sprintf("%s: %s (%s, token %d) elected %v after it", c.fault, c.next.id, c.addr, c.token,
		time.Duration(c.elected-c.at).Round(time.Millisecond))
	if c.fault == "start" {
		line = fmt.Sprintf("start: %s (%s, token %d) elected", c.next.id, c.addr, c.token)
	}
	line += fmt.Sprintf("; listed alone in a list answered %v from its ELECTED (the last list without it was sent at %v)",
		since(listedBy, c.elected), since(notYet, c.elected))
	if c.old != nil {
		line += fmt.Sprintf("; the old leader %s (%s) last listed in a list sent %v after the fault, gone in one answered %v after it",
			c.old.id, c.oldAddr, since(oldSeen, c.at), since(oldGone, c.at))
	}
	return line
}

// earliest is the earlier of two instants, 0 meaning none.
func earliest(a, b int64) int64 {
	if a == 0 || b < a {
		return b
	}
	return a
}

// since is at - from rounded to 10 µs, "never" for 0.
func since(at, from int64) string {
	if at == 0 {
		return "never"
	}
	return time.Duration(at - from).Round(10 * time.Microsecond).String()
}

// checkSliceWrites checks every write of the slice the watch saw against
// the Lease's: the token never falls, each leader writes after it acquired
// the Lease, and the SIGTERMed leader withdraws before its release.
func checkSliceWrites(t *testing.T, changes []routeChange, sliceEvents, leaseEvents []watch.Event) {
	t.Helper()
	prev := int64(-1)
	for _, ev := range sliceEvents {
		es, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok || ev.Type == watch.Deleted {
			t.Errorf("slice watch: %s %T", ev.Type, ev.Object)
			continue
		}
		st := stateOf(es)
		if st.managedBy != sliceManagedBy {
			t.Errorf("slice watch: %s of a slice not ours: %+v", ev.Type, st)
		}
		if st.token < prev {
			t.Errorf("slice watch: the token fell from %d to %d (resourceVersion %s: %+v)", prev, st.token, es.ResourceVersion, st)
		}
		prev = st.token
	}
	t.Logf("the slice was written %d times, tokens %d at most", len(sliceEvents), prev)
	for _, c := range changes {
		acquired := firstRV(leaseEvents, func(l *coordinationv1.Lease) bool {
			return deref(l.Spec.HolderIdentity) == c.next.id && int64(deref(l.Spec.LeaseTransitions)) == c.token
		})
		published := firstRV(sliceEvents, func(es *discoveryv1.EndpointSlice) bool {
			st := stateOf(es)
			return st.token == c.token && st.holder == c.next.id && len(st.addresses) == 1
		})
		if acquired == 0 || published == 0 || published < acquired {
			t.Errorf("%s: %s (token %d) acquired the Lease at resourceVersion %d and published at %d (0: not seen)",
				c.fault, c.next.id, c.token, acquired, published)
		}
		if c.fault != "SIGTERM" {
			continue
		}
		withdrawn := firstRV(sliceEvents, func(es *discoveryv1.EndpointSlice) bool {
			st := stateOf(es)
			return st.token == c.oldToken && st.holder == c.old.id && len(st.addresses) == 0
		})
		released := firstRV(leaseEvents, func(l *coordinationv1.Lease) bool {
			return deref(l.Spec.HolderIdentity) == "" && int64(deref(l.Spec.LeaseTransitions)) == c.oldToken
		})
		t.Logf("SIGTERM: %s withdrew its endpoint at resourceVersion %d, released the Lease at %d; %s published at %d",
			c.old.id, withdrawn, released, c.next.id, published)
		if withdrawn == 0 || released == 0 || withdrawn > released {
			t.Errorf("SIGTERM: %s's endpoint was not withdrawn before the release (0: not seen)", c.old.id)
		}
	}
}

// firstRV is the resourceVersion of the first event whose object of type T
// matches (0: none).
func firstRV[T metav1.Object](events []watch.Event, match func(T) bool) uint64 {
	for _, ev := range events {
		if o, ok := ev.Object.(T); ok && ev.Type != watch.Deleted && match(o) {
			rv, _ := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
			return rv
		}
	}
	return 0
}

type watchRecord struct {
	*recorder
	t      *testing.T
	events []watch.Event
	err    error
}

// recordWatch keeps every event of the watch open returns until
// eventsSeen; the test fails if the watch cannot be opened or ends before.
func recordWatch(t *testing.T, open func(context.Context) (watch.Interface, error)) *watchRecord {
	t.Helper()
	w, err := open(context.Background()) // w.Stop ends it
	if err != nil {
		t.Fatal(err)
	}
	r := &watchRecord{t: t}
	r.recorder = newRecorder(t, func(ctx context.Context) {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				switch {
				case !ok:
					r.err = fmt.Errorf("the watch ended early")
					return
				case ev.Type == watch.Error:
					r.err = fmt.Errorf("watch error: %v", ev.Object)
					return
				}
				r.events = append(r.events, ev)
			}
		}
	})
	return r
}

// eventsSeen stops the watch and returns its events.
func (r *watchRecord) eventsSeen() []watch.Event {
	r.t.Helper()
	r.stop()
	if r.err != nil {
		r.t.Error(r.err)
	}
	return r.events
}

// deploy/rbac.yaml grants what K8sLeasePublishEndpoint needs for
// deploy/service.yaml's Service and no more on EndpointSlices: as its
// ServiceAccount, the slice <service>-leader can be created, read, updated
// and deleted (with preconditions, as the library deletes); no slice can
// be listed or watched, and no other slice read, updated, patched or
// deleted. Creating one of another name is allowed: RBAC cannot scope
// create by name.
func TestLeaderEndpointRBAC(t *testing.T) {
	t.Parallel()
	admin := newClient(t, server.Config)
	sa, _ := applyRBACManifest(t, admin)
	svc := leaderService(t).Name
	as := newClient(t, &rest.Config{Host: server.Config.Host, BearerToken: newBoundToken(t, admin, sa).token,
		TLSClientConfig: rest.TLSClientConfig{CAData: server.Config.CAData}})
	ctx := context.Background()
	api, adminAPI := as.DiscoveryV1().EndpointSlices(namespace), admin.DiscoveryV1().EndpointSlices(namespace)
	slice := func(name string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: map[string]string{serviceNameLabel: svc, discoveryv1.LabelManagedBy: sliceManagedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
		}
	}
	name, other := svc+"-leader", svc+"-other"
	for _, n := range []string{name, other} {
		t.Cleanup(func() { _ = adminAPI.Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	// The Role may take a moment to reach the authorizer's cache.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err = api.Create(ctx, slice(name), metav1.CreateOptions{}); err == nil || !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("create %s as %s: %v", name, sa, err)
	}
	got, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	got.Endpoints = []discoveryv1.Endpoint{}
	updated, err := api.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update %s: %v", name, err)
	}
	if _, err := api.Create(ctx, slice(other), metav1.CreateOptions{}); err != nil {
		t.Errorf("create %s (any name, as RBAC cannot scope create): %v", other, err)
	}
	forbidden := map[string]error{}
	_, forbidden["list"] = api.List(ctx, metav1.ListOptions{LabelSelector: serviceNameLabel + "=" + svc})
	_, forbidden["watch"] = api.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	_, forbidden["patch "+name] = api.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	_, forbidden["get "+other] = api.Get(ctx, other, metav1.GetOptions{})
	_, forbidden["update "+other] = api.Update(ctx, slice(other), metav1.UpdateOptions{})
	forbidden["delete "+other] = api.Delete(ctx, other, metav1.DeleteOptions{})
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as %s: %v, want forbidden", what, sa, err)
		}
	}
	pre := metav1.Preconditions{UID: &updated.UID, ResourceVersion: &updated.ResourceVersion}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &pre}); err != nil {
		t.Errorf("delete %s: %v", name, err)
	}
}
