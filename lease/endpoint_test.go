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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/k8s-lease/k8s-lease/lease/internal/endpoints"
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", timing, leases, obs, clock.RealClock{}, stats, func() bool { return false })
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
	if _, _, err := e.handOff("b", time.Second, nil); err != nil {
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, nil, nil, clk, stats, func() bool { return false })
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, nil, nil, clk, stats, func() bool { return false })
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, leases, obs, clock.RealClock{}, &leaseStats{}, func() bool { return false })
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
