package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/endpoints"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// plainElection is candidate "a" on ns/l of a fake clientset, with no
// endpoint yet (PublishEndpoint comes after RunElection, as in C and C++).
func plainElection(t *testing.T, timing Timing) *Election {
	t.Helper()
	leases := fake.NewClientset().CoordinationV1().Leases("ns")
	obs := newObserver(leases, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", timing, leases, obs, clock.RealClock{}, &leaseStats{}, func() bool { return false })
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, nil, nil, clock.RealClock{}, &leaseStats{}, func() bool { return false })
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, nil, nil, clock.RealClock{}, &leaseStats{}, func() bool { return false })
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
	e := newElection(Key{Namespace: "ns", Name: "l"}, "a", unitTiming, leases, obs, clock.RealClock{}, &leaseStats{}, func() bool { return false })
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
