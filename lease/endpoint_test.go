package lease

import (
	"context"
	"errors"
	"fmt"
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
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/endpoints"
	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry/telemetrytest"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// opLog is the order in which the Lease and the endpoint were written.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(op string) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

func (l *opLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ops...)
}

// index is where op first appears in the log, -1 if not.
func (l *opLog) index(op string) int {
	for i, o := range l.all() {
		if o == op {
			return i
		}
	}
	return -1
}

// loggedLeases logs every Lease update: "release" when it clears the
// holder, "hand-off" when it writes a hand-off record, else "update".
type loggedLeases struct {
	typedcoordinationv1.LeaseInterface
	log *opLog
}

func (l loggedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	op := "update"
	switch {
	case lease.Annotations[HandOffAnnotation] != "":
		op = "hand-off"
	case ptr.Deref(lease.Spec.HolderIdentity, "") == "":
		op = "release"
	}
	l.log.add(op)
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// fakeRoutes is an endpointStore that logs its calls. Publish answers with
// publishErr and, while hold is open, waits (after logging) until it closes.
type fakeRoutes struct {
	log        *opLog
	hold       chan struct{}
	publishing chan endpoints.Publication // receives each Publish call, if set
	mu         sync.Mutex
	publishErr error
	published  []endpoints.Publication
	withdrawn  []endpoints.Publication
	retired    []*endpoints.Term // the term each RetireStale was given
}

func (f *fakeRoutes) Publish(_ context.Context, p endpoints.Publication) error {
	f.log.add("publish")
	if f.publishing != nil {
		f.publishing <- p
	}
	if f.hold != nil {
		<-f.hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, p)
	return f.publishErr
}

func (f *fakeRoutes) Withdraw(_ context.Context, p endpoints.Publication) error {
	f.log.add("withdraw")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.withdrawn = append(f.withdrawn, p)
	return nil
}

func (f *fakeRoutes) RetireStale(_ context.Context, _, _, _, _ string, seen *endpoints.Term) (endpoints.Retired, error) {
	f.log.add("retire")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retired = append(f.retired, seen)
	return endpoints.Retired{}, nil
}

func (f *fakeRoutes) calls() (published, withdrawn []endpoints.Publication) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]endpoints.Publication(nil), f.published...), append([]endpoints.Publication(nil), f.withdrawn...)
}

var testEndpoint = Endpoint{Service: "store", Address: "10.0.0.7", Port: 50051}

// routedElection is a candidate "a" on lease ns/l of a fake clientset
// (its Lease updates logged), publishing testEndpoint to routes.
func routedElection(t *testing.T, routes *fakeRoutes) (*Election, *leaseStats) {
	return routedElectionTimed(t, routes, unitTiming)
}

func routedElectionTimed(t *testing.T, routes *fakeRoutes, timing Timing) (*Election, *leaseStats) {
	t.Helper()
	leases := loggedLeases{fake.NewClientset().CoordinationV1().Leases("ns"), routes.log}
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	stats := &leaseStats{}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", timing, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: stats})
	if err := e.publishEndpoint(routes, testEndpoint); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Cancel() })
	return e, stats
}

func TestWaitElectedReturnsAfterTheEndpointIsWritten(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}, hold: make(chan struct{}), publishing: make(chan endpoints.Publication, 1)}
	e, stats := routedElection(t, routes)
	waited := make(chan error, 1)
	go func() {
		_, err := e.WaitElected(10 * time.Second)
		waited <- err
	}()
	e.start()
	p := <-routes.publishing
	// The write is in flight: the election leads, its host must not serve yet.
	if ok, token, _ := e.IsLeader(); !ok || token != p.Token {
		t.Fatalf("while its endpoint is written: IsLeader %v, token %d; want leader with the published token %d", ok, token, p.Token)
	}
	if isClosed(e.endpoint.routed) {
		t.Fatal("WaitElected may return while the endpoint write is in flight")
	}
	select {
	case err := <-waited:
		t.Fatalf("WaitElected returned (%v) before the endpoint was written", err)
	default:
	}
	close(routes.hold)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	want := endpoints.Publication{Namespace: "ns", Service: "store", Lease: "l", Identity: "a", Address: "10.0.0.7", Port: 50051, Token: p.Token}
	if p != want || p.Token < 1 {
		t.Fatalf("published %+v; want %+v with a token", p, want)
	}
	if got := statsOf(stats).Election.EndpointWrites; got != 1 {
		t.Fatalf("EndpointWrites = %d; want 1", got)
	}
}

func TestEndpointWithdrawnBeforeTheRelease(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}}
	e, _ := routedElection(t, routes)
	e.start()
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(); err != nil {
		t.Fatal(err)
	}
	w, r := routes.log.index("withdraw"), routes.log.index("release")
	if w < 0 || r < 0 || w > r {
		t.Fatalf("writes %q: want the endpoint withdrawn before the Lease is released", routes.log.all())
	}
	published, withdrawn := routes.calls()
	if len(withdrawn) != 1 || withdrawn[0] != published[0] {
		t.Fatalf("withdrew %+v after publishing %+v; want the published term withdrawn once", withdrawn, published)
	}
}

func TestEndpointWithdrawnBeforeTheHandOffRecord(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}}
	e, _ := routedElection(t, routes)
	e.start()
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.handOff("b", time.Second, nil, nil); err != nil {
		t.Fatal(err)
	}
	w, h := routes.log.index("withdraw"), routes.log.index("hand-off")
	if w < 0 || h < 0 || w > h {
		t.Fatalf("writes %q: want the endpoint withdrawn before the hand-off record is written", routes.log.all())
	}
}

func TestEndpointWithdrawnAfterALoss(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}}
	// A short renew deadline: the loss is its end.
	e, _ := routedElectionTimed(t, routes, Timing{LeaseDuration: 3 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond})
	e.start()
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Another writer takes the Lease: the next renewal fails its test.
	l, err := e.api.leases.Get(context.Background(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("intruder")
	if _, err := e.api.leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitLost(); err == nil {
		t.Fatal("WaitLost: nil; want the loss")
	}
	// After a loss the withdrawal runs on a goroutine of its own.
	eventually(t, 5*time.Second, "the endpoint withdrawn after the loss", func() bool {
		_, withdrawn := routes.calls()
		return len(withdrawn) == 1 && withdrawn[0].Identity == "a"
	})
}

func TestFailedEndpointWritesLeaveTheElectionAlone(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}, publishErr: errors.New("endpointslices is forbidden"), publishing: make(chan endpoints.Publication, 8)}
	e, stats := routedElection(t, routes)
	e.start()
	token, err := e.WaitElected(10 * time.Second)
	if err != nil {
		t.Fatalf("WaitElected with a failing endpoint write: %v; want elected", err)
	}
	<-routes.publishing
	<-routes.publishing // retried (after 0.5 to 1 s)
	if ok, got, _ := e.IsLeader(); !ok || got != token {
		t.Fatalf("IsLeader %v token %d while its endpoint fails; want still leader with %d", ok, got, token)
	}
	eventually(t, 5*time.Second, "failures counted", func() bool { return statsOf(stats).Election.EndpointFailures >= 1 })
	if err := e.Cancel(); err != nil {
		t.Fatal(err)
	}
}

// A write refused as superseded is counted apart (neither a write nor a
// failure) and reported, once as an Event for the same refusal (retries
// every 30 s would spend the Lease's Event budget, which its loss Event
// shares). A term that no longer leads stops: a later term wrote the
// slice. One that still leads retries, with backoff, after emptying the
// stale slice: no later term exists while it lasts.
func TestASupersededPublisherRetriesOnlyWhileItLeads(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	routes := &fakeRoutes{log: &opLog{}, publishErr: fmt.Errorf("slice ns/store-leader: %w", endpoints.ErrSuperseded),
		publishing: make(chan endpoints.Publication, 8)}
	stats := &leaseStats{}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: fake.NewClientset().CoordinationV1().Leases("ns"), clock: clk, stats: stats})
	events := &recordedEvents{}
	e.events = events
	e.mu.Lock()
	e.term.phase, e.term.token, e.term.validUntil = phaseLeader, 5, clk.Now().Add(time.Minute)
	e.mu.Unlock()
	if err := e.publishEndpoint(routes, testEndpoint); err != nil {
		t.Fatal(err)
	}
	<-routes.publishing
	awaitWaiters(t, clk, 1) // refused while it leads: the retry waits
	if _, _, retired := routesCalls(routes); len(retired) != 1 || *retired[0] != (endpoints.Term{Token: 5, Holder: "a"}) {
		t.Fatalf("RetireStale calls %v; want one, naming this term", retired)
	}
	clk.Step(time.Second)
	<-routes.publishing // retried
	awaitWaiters(t, clk, 1)
	e.mu.Lock()
	e.term.validUntil = clk.Now() // its term lapses
	e.mu.Unlock()
	clk.Step(30 * time.Second)
	e.mu.Lock()
	done := e.endpoint.route.done
	e.mu.Unlock()
	<-done
	if published, _ := routes.calls(); len(published) != 2 {
		t.Fatalf("%d attempts; want 2: none once the term lapsed", len(published))
	}
	if s := statsOf(stats).Election; s.EndpointSuperseded != 2 || s.EndpointFailures != 0 || s.EndpointWrites != 0 {
		t.Fatalf("stats %+v; want 2 superseded, neither writes nor failures", s)
	}
	if w := events.warnings("refused", "delete EndpointSlice ns/store-leader"); len(w) != 1 {
		t.Fatalf("Warning Events %q; want one for the two same refusals, saying how to route to this leader", events.events)
	}
	e.withdrawEndpoint(context.Background(), time.Second)
}

// A refusal after the term lapsed: not retried, nothing emptied.
func TestASupersededPublisherThatNoLongerLeadsStops(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	routes := &fakeRoutes{log: &opLog{}, publishErr: fmt.Errorf("slice ns/store-leader: %w", endpoints.ErrSuperseded),
		hold: make(chan struct{}), publishing: make(chan endpoints.Publication, 8)}
	stats := &leaseStats{}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: fake.NewClientset().CoordinationV1().Leases("ns"), clock: clk, stats: stats})
	e.mu.Lock()
	e.term.phase, e.term.token, e.term.validUntil = phaseLeader, 5, clk.Now().Add(time.Minute)
	e.mu.Unlock()
	published := make(chan error, 1)
	go func() { published <- e.publishEndpoint(routes, testEndpoint) }()
	<-routes.publishing
	e.mu.Lock()
	e.term.validUntil = clk.Now() // lapsed while its write was on its way
	e.mu.Unlock()
	close(routes.hold)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	done := e.endpoint.route.done
	e.mu.Unlock()
	<-done
	if published, _, retired := routesCalls(routes); len(published) != 1 || len(retired) != 0 {
		t.Fatalf("%d attempts, %d RetireStale; want 1 and none", len(published), len(retired))
	}
	if s := statsOf(stats).Election; s.EndpointSuperseded != 1 || s.EndpointFailures != 0 || s.EndpointWrites != 0 {
		t.Fatalf("stats %+v; want 1 superseded, neither writes nor failures", s)
	}
	e.withdrawEndpoint(context.Background(), time.Second)
}

func routesCalls(f *fakeRoutes) (published, withdrawn []endpoints.Publication, retired []*endpoints.Term) {
	published, withdrawn = f.calls()
	f.mu.Lock()
	defer f.mu.Unlock()
	return published, withdrawn, append([]*endpoints.Term(nil), f.retired...)
}

func TestPublishEndpointArguments(t *testing.T) {
	m := process(t, fake.NewClientset())
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		id   int64
		ep   Endpoint
		want string
	}{
		{"bad address", 0, Endpoint{"store", "10.0.0.256", 80}, "address"},
		{"hostname", 0, Endpoint{"store", "store-0.example", 80}, "address"},
		{"port 0", 0, Endpoint{"store", "10.0.0.7", 0}, "port"},
		{"port too big", 0, Endpoint{"store", "10.0.0.7", 65536}, "port"},
		{"bad service", 0, Endpoint{"Store_1", "10.0.0.7", 80}, "service"},
		{"negative id", -1, testEndpoint, "election id"},
		{"no such id", e.ID() + 100, testEndpoint, "no election"},
	} {
		if err := m.PublishEndpoint("ns", "l", c.id, c.ep); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %q", c.name, err, c.want)
		}
	}
	if err := m.PublishEndpoint("ns", "other", 0, testEndpoint); !errors.Is(err, ErrNoElection) {
		t.Errorf("no election on the lease: %v; want ErrNoElection", err)
	}
	if err := m.PublishEndpoint("ns", "l", e.ID(), testEndpoint); err != nil {
		t.Fatal(err)
	}
	if err := m.PublishEndpoint("ns", "l", e.ID(), testEndpoint); err != nil {
		t.Errorf("the same endpoint again: %v; want nil", err)
	}
	other := testEndpoint
	other.Port++
	if err := m.PublishEndpoint("ns", "l", e.ID(), other); !errors.Is(err, ErrEndpointExists) {
		t.Errorf("another endpoint: %v; want ErrEndpointExists", err)
	}
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if err := m.PublishEndpoint("ns", "l", e.ID(), testEndpoint); !errors.Is(err, ErrNoElection) {
		t.Errorf("after the election ended: %v; want ErrNoElection", err)
	}
}

// A host calls PublishEndpoint after RunElectionWith (it needs the id): the
// election may have acquired a free Lease meanwhile. The endpoint must
// still be written before the host's WaitElected returns.
func TestPublishEndpointOnALeaderReturnsAfterTheWrite(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}}
	leases := loggedLeases{fake.NewClientset().CoordinationV1().Leases("ns"), routes.log}
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: &leaseStats{}})
	t.Cleanup(func() { _ = e.Cancel() })
	e.start()
	eventually(t, 5*time.Second, "elected", func() bool { ok, _, _ := e.IsLeader(); return ok })
	if err := e.publishEndpoint(routes, testEndpoint); err != nil {
		t.Fatal(err)
	}
	if published, _ := routes.calls(); len(published) != 1 {
		t.Fatalf("PublishEndpoint on a leader returned after %d writes; want it to return after the first", len(published))
	}
	if _, err := e.WaitElected(time.Second); err != nil {
		t.Fatal(err)
	}
}

// plainElection is candidate "a" on ns/l of a fake clientset, with no
// endpoint yet (PublishEndpoint comes after RunElection, as in C and C++).
func plainElection(t *testing.T, timing Timing) *Election {
	t.Helper()
	leases := fake.NewClientset().CoordinationV1().Leases("ns")
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", timing, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: &leaseStats{}})
	t.Cleanup(func() { _ = e.Cancel() })
	return e
}

// endpointClient is a kubeapi.Client whose EndpointSlices are slices.
type endpointClient struct {
	kubeapi.Client
	slices kubeapi.EndpointSlices
}

func (c endpointClient) EndpointSlices(string) kubeapi.EndpointSlices { return c.slices }

// unansweredSlices never answer: each request waits for its context.
type unansweredSlices struct{}

func (unansweredSlices) Get(ctx context.Context, _ string) (*kubeapi.EndpointSlice, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (unansweredSlices) Create(ctx context.Context, _ *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (unansweredSlices) Update(ctx context.Context, _ *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (unansweredSlices) Delete(ctx context.Context, _ string, _ metav1.DeleteOptions) error {
	<-ctx.Done()
	return ctx.Err()
}
func (unansweredSlices) JSONPatch(ctx context.Context, _ string, _ []byte) (*kubeapi.EndpointSlice, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (unansweredSlices) List(ctx context.Context, _ metav1.ListOptions) (*kubeapi.EndpointSliceList, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The withdraw before the release (publisher's write in flight, then the
// Withdraw) is bounded by endpointTimeout twice, not by Shutdown's (or
// Cancel's, or HandOff's) timeout: with the EndpointSlice API slow
// (an unanswered webhook, an overloaded API server), Shutdown(1 s) times
// out with the Lease still held, and a host that exits then leaves it to
// expire: graceful failover becomes a full lease duration.
func TestShutdownReleasesWithinItsTimeoutWhenTheSliceAPIHangs(t *testing.T) {
	cs, m, _ := electedWithAHangingSliceAPI(t)
	start := time.Now()
	err := m.Shutdown(time.Second)
	took := time.Since(start)
	l, gerr := cs.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
	if gerr != nil {
		t.Fatal(gerr)
	}
	if holder := ptr.Deref(l.Spec.HolderIdentity, ""); err != nil || holder != "" {
		t.Fatalf("Shutdown(1s) = %v after %v, Lease holder %q: want the Lease released within the timeout", err, took.Round(time.Millisecond), holder)
	}
}

// A Lease deleted and re-created (or a fresh set of processes after it was
// deleted) restarts the tokens at 1; a slice left by an earlier term (here
// token 7, withdrawn or not) then refuses every leader until the Lease's
// transitions pass 7 again: the Service routes to the old address (or to
// nobody) for good, and the publisher counts nothing, raises no Event, and
// WaitElected reported success.
func TestATokenRestartDoesNotStrandTheService(t *testing.T) {
	cs := fake.NewClientset()
	ready := true
	port := int32(50051)
	_, err := cs.DiscoveryV1().EndpointSlices("ns").Create(context.Background(), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "store-leader", Namespace: "ns",
			Labels: map[string]string{discoveryv1.LabelServiceName: "store", discoveryv1.LabelManagedBy: endpoints.ManagedBy},
			Annotations: map[string]string{endpoints.TokenAnnotation: "7", endpoints.HolderAnnotation: "old", endpoints.LeaseAnnotation: "l",
				endpoints.LeaseUIDAnnotation: "uid-of-the-deleted-lease"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The Lease is created anew (the fake server gives no UIDs: this one does).
	cs.PrependReactor("create", "leases", func(action k8stesting.Action) (bool, kruntime.Object, error) {
		action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).UID = "uid-of-the-new-lease"
		return false, nil, nil
	})
	m := process(t, cs)
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.PublishEndpoint("ns", "l", e.ID(), testEndpoint); err != nil {
		t.Fatal(err)
	}
	token, err := e.WaitElected(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if waitUntil(3*time.Second, func() bool {
		s, err := cs.DiscoveryV1().EndpointSlices("ns").Get(context.Background(), "store-leader", metav1.GetOptions{})
		return err == nil && len(s.Endpoints) == 1 && s.Endpoints[0].Addresses[0] == testEndpoint.Address
	}) {
		return
	}
	var failures int64
	for _, l := range m.Stats() {
		if l.Election != nil {
			failures = l.Election.EndpointFailures
		}
	}
	t.Fatalf("leader with token %d never routed (the slice keeps token 7's 10.0.0.9); endpoint_failures = %d", token, failures)
}

// panicOnceRoutes panics in its first Publish, then succeeds.
type panicOnceRoutes struct {
	fakeRoutes
	panicked bool
}

func (p *panicOnceRoutes) Publish(ctx context.Context, pub endpoints.Publication) error {
	if !p.panicked {
		p.panicked = true
		panic("store bug")
	}
	return p.fakeRoutes.Publish(ctx, pub)
}

// A panic in the publisher is contained (good), but ends the term's
// publishing for good: no retry, no failure counted, no Event.
func TestAPanicInThePublisherIsRetried(t *testing.T) {
	routes := &panicOnceRoutes{fakeRoutes: fakeRoutes{log: &opLog{}}}
	e := plainElection(t, unitTiming)
	if err := e.publishEndpoint(routes, testEndpoint); err != nil {
		t.Fatal(err)
	}
	e.start()
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if waitUntil(3*time.Second, func() bool { published, _ := routes.calls(); return len(published) > 0 }) {
		return
	}
	s := statsOf(e.stats).Election
	t.Fatalf("after a contained panic the endpoint was never written again (writes %d, failures %d)", s.EndpointWrites, s.EndpointFailures)
}

// Checked, passes: a panic in Withdraw never reaches the host, and the
// release still follows.
func TestAPanicInWithdrawIsContained(t *testing.T) {
	routes := &panicWithdraw{fakeRoutes: fakeRoutes{log: &opLog{}}}
	e := plainElection(t, unitTiming)
	if err := e.publishEndpoint(routes, testEndpoint); err != nil {
		t.Fatal(err)
	}
	e.start()
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(); err != nil {
		t.Fatal(err)
	}
	if err := e.endReason(); err != nil {
		t.Fatalf("end reason %v after a cancel", err)
	}
}

type panicWithdraw struct{ fakeRoutes }

func (p *panicWithdraw) Withdraw(context.Context, endpoints.Publication) error { panic("withdraw bug") }

// The publisher never looks at the term's validity: its retries go on
// after IsLeader turned 0 (a loss not yet noticed by lead, or a process
// frozen past its term: on resume, the publisher's timer and lead's fire
// together). A retry then routes the Service to a process that is no
// longer leader, and, if the new leader's first write failed (it returns
// from WaitElected all the same), before the new leader's retry lands.
// The election is built by hand (no lead loop) to make that deterministic.
func TestThePublisherStopsWhenItsTermIsNoLongerValid(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}, publishErr: errors.New("the API server is unavailable"),
		publishing: make(chan endpoints.Publication, 8)}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: fake.NewClientset().CoordinationV1().Leases("ns"), clock: clock.RealClock{}, stats: &leaseStats{}})
	e.mu.Lock()
	e.term.phase, e.term.token, e.term.validUntil = phaseLeader, 5, time.Now().Add(time.Minute)
	e.mu.Unlock()
	if err := e.publishEndpoint(routes, testEndpoint); err != nil {
		t.Fatal(err)
	}
	<-routes.publishing // the first attempt, while valid: it fails
	e.mu.Lock()
	e.term.validUntil = time.Time{} // the term's validity is over (IsLeader 0); no observer to resume
	e.mu.Unlock()
	defer e.withdrawEndpoint(context.Background(), time.Second)
	select {
	case p := <-routes.publishing:
		if ok, _, _ := e.IsLeader(); !ok {
			t.Fatalf("publisher retried token %d after the term's validity ended", p.Token)
		}
	case <-time.After(2 * time.Second):
	}
}

// The same at the call: PublishEndpoint on an election whose validity has
// lapsed but whose lead loop has not yet ended it (phase still leader)
// starts writing an endpoint for the lapsed term.
func TestPublishEndpointRefusesALapsedTerm(t *testing.T) {
	routes := &fakeRoutes{log: &opLog{}, publishing: make(chan endpoints.Publication, 1)}
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: fake.NewClientset().CoordinationV1().Leases("ns"), clock: clock.RealClock{}, stats: &leaseStats{}})
	e.mu.Lock()
	e.term.phase, e.term.token, e.term.validUntil = phaseLeader, 5, time.Now().Add(-time.Second)
	e.mu.Unlock()
	_ = e.publishEndpoint(routes, testEndpoint)
	defer e.withdrawEndpoint(context.Background(), time.Second)
	select {
	case p := <-routes.publishing:
		t.Fatalf("endpoint of token %d written although IsLeader is 0", p.Token)
	case <-time.After(500 * time.Millisecond):
	}
}

// After a loss the observer stays paused (pausedBy the lost election)
// until run's last defers, which now come after the withdraw: with the
// EndpointSlice API slow, GetHolder, holder watches and a new campaign in
// this process see the Lease as this process last wrote it (itself as
// holder, "live") for up to twice the endpoint timeout.
func TestALossDoesNotFreezeTheProcesssViewOfTheLease(t *testing.T) {
	m, _ := lostWithAHangingSliceAPI(t)
	var h HolderState
	var err error
	if waitUntil(time.Second, func() bool { h, err = m.GetHolder("ns", "l"); return err == nil && h.Holder == "intruder" }) {
		return
	}
	t.Fatalf("1 s after the loss GetHolder still says %+v (%v): the observer waits for the withdraw", h, err)
}

// heldPatches holds its first JSONPatch: it returns when its caller gives
// up and is applied on the server once release is closed (landed gets its
// outcome), as a write whose answer never came.
type heldPatches struct {
	kubeapi.EndpointSlices
	held, release chan struct{}
	landed        chan error
}

func (s heldPatches) JSONPatch(ctx context.Context, name string, patch []byte) (*kubeapi.EndpointSlice, error) {
	select {
	case <-s.held:
		return s.EndpointSlices.JSONPatch(ctx, name, patch)
	default:
	}
	close(s.held)
	go func() {
		<-s.release
		_, err := s.EndpointSlices.JSONPatch(context.Background(), name, patch)
		s.landed <- err
	}()
	<-ctx.Done()
	return nil, ctx.Err()
}

// A cancel cuts the new leader's first write short; landing after the
// cancel returned, it must not route the Service to the stopped leader.
func TestCancelLeavesNoLateEndpoint(t *testing.T) {
	cs := fake.NewClientset()
	ctx := context.Background()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns"},
		Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](4)}}
	releaseSpec(l, time.Now())
	if _, err := cs.CoordinationV1().Leases("ns").Create(ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, port := true, int32(50051)
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "store-leader", Namespace: "ns",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "store", discoveryv1.LabelManagedBy: endpoints.ManagedBy},
			Annotations: map[string]string{endpoints.TokenAnnotation: "4", endpoints.HolderAnnotation: "old", endpoints.LeaseAnnotation: "l"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slices := heldPatches{clientsetapi.Wrap(cs).EndpointSlices("ns"), make(chan struct{}), make(chan struct{}), make(chan error, 1)}
	leases := cs.CoordinationV1().Leases("ns")
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: &leaseStats{}})
	if err := e.publishEndpoint(endpoints.Store{Client: endpointClient{clientsetapi.Wrap(cs), slices}}, testEndpoint); err != nil {
		t.Fatal(err)
	}
	e.start()
	<-slices.held // the patch over the previous term's slice is on its way
	if err := e.Cancel(); err != nil {
		t.Fatal(err)
	}
	close(slices.release)
	<-slices.landed
	s, err := cs.DiscoveryV1().EndpointSlices("ns").Get(ctx, "store-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Annotations[endpoints.HolderAnnotation] == "a" && len(s.Endpoints) > 0 {
		t.Fatalf("after Cancel returned (withdrawn, released) the Service routes to a: %v token %s",
			s.Endpoints[0].Addresses, s.Annotations[endpoints.TokenAnnotation])
	}
}

// After a loss the withdrawal runs on its own goroutine: Shutdown waits
// for it, so that nothing of the library still runs once it returned.
func TestShutdownWaitsForTheWithdrawalAfterALoss(t *testing.T) {
	m, e := lostWithAHangingSliceAPI(t)
	<-e.Done()
	if !waitUntil(2*time.Second, func() bool { return waitingUnder("(*Election).withdrawEndpoint") == 1 }) {
		t.Fatal("no withdrawal after the loss")
	}
	_ = m.Shutdown(time.Second)
	if n := waitingUnder("(*Election).withdrawEndpoint"); n > 0 {
		t.Fatalf("Shutdown returned with %d endpoint withdrawal(s) still running", n)
	}
}

// A release bound of a nanosecond is still a graceful end: the endpoint is
// withdrawn before Cancel returns.
type ctxRoutes struct{ fakeRoutes }

func (c *ctxRoutes) Withdraw(ctx context.Context, p endpoints.Publication) error {
	<-ctx.Done()
	return c.fakeRoutes.Withdraw(ctx, p)
}

func TestATinyReleaseBoundStillWithdrawsFirst(t *testing.T) {
	routes := &ctxRoutes{fakeRoutes{log: &opLog{}}}
	e := plainElection(t, unitTiming)
	if err := e.publishEndpoint(routes, testEndpoint); err != nil {
		t.Fatal(err)
	}
	e.start()
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = e.CancelWithin(1)
	if w := routes.log.index("withdraw"); w < 0 {
		t.Fatalf("writes %q when CancelWithin(1) returned: want the endpoint withdrawn first", routes.log.all())
	}
}

// lostWithAHangingSliceAPI is a Manager whose EndpointSlice requests never
// answer, with an election "a" on ns/l that published an endpoint, was
// elected, and lost its Lease to another writer.
func lostWithAHangingSliceAPI(t *testing.T) (*Manager, *Election) {
	t.Helper()
	cs, m, e := electedWithAHangingSliceAPI(t)
	leases := cs.CoordinationV1().Leases("ns")
	l, err := leases.Get(context.Background(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("intruder")
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitLost(); err == nil {
		t.Fatal("no loss")
	}
	return m, e
}

// electedWithAHangingSliceAPI is a Manager on cs whose EndpointSlice
// requests never answer, with an election "a" on ns/l that published an
// endpoint and was elected (its first write abandoned at its timeout).
func electedWithAHangingSliceAPI(t *testing.T) (*fake.Clientset, *Manager, *Election) {
	t.Helper()
	cs := fake.NewClientset()
	m := processOn(t, endpointClient{clientsetapi.Wrap(cs), unansweredSlices{}})
	timing := Timing{LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}
	e, err := m.RunElection("ns", "l", "a", timing)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.PublishEndpoint("ns", "l", e.ID(), testEndpoint); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	return cs, m, e
}

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
	stats.CampaignStarted(unitTiming.LeaseDuration, unitTiming.RenewDeadline, unitTiming.RetryPeriod)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "c", unitTiming, ElectionOptions{}, electionParts{leases: leases, obs: obs, clock: clock.RealClock{}, stats: stats})
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
	stats.CampaignStarted(unitTiming.LeaseDuration, unitTiming.RenewDeadline, unitTiming.RetryPeriod)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "b", unitTiming, ElectionOptions{}, electionParts{leases: fake.NewClientset().CoordinationV1().Leases("ns"), clock: clock.RealClock{}, stats: stats})
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
