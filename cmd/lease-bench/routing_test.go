package main

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func TestRoutingAddresses(t *testing.T) {
	seen := map[string]bool{}
	for i := range routingReplicas {
		a, err := netip.ParseAddr(routingAddress(i))
		if err != nil || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || !a.Is4() {
			t.Errorf("replica %d: address %s (%v)", i, routingAddress(i), err)
		}
		if seen[a.String()] {
			t.Errorf("replica %d: address %s twice", i, a)
		}
		seen[a.String()] = true
	}
}

func TestSliceState(t *testing.T) {
	s := sliceState{}
	steps := []struct {
		name    string
		addrs   []string
		deleted bool
		want    []string
	}{
		{"svc-leader", []string{"10.244.0.1"}, false, []string{"10.244.0.1"}},
		{"svc-leader", []string{}, false, nil}, // withdrawn
		{"svc-leader", []string{"10.244.0.2"}, false, []string{"10.244.0.2"}},
		{"svc-abcde", []string{"10.244.0.3", "10.244.0.2"}, false, []string{"10.244.0.2", "10.244.0.3"}},
		{"svc-abcde", nil, true, []string{"10.244.0.2"}},
		{"svc-leader", nil, true, nil},
	}
	for i, st := range steps {
		if got := s.set(st.name, st.addrs, st.deleted); !slices.Equal(got, st.want) {
			t.Errorf("step %d: %v, want %v", i, got, st.want)
		}
	}
}

func TestStrays(t *testing.T) {
	const a, b = "10.244.0.1", "10.244.0.2"
	if !listsOnly([]string{a}, a) || listsOnly([]string{a, b}, a) || listsOnly(nil, a) || listsOnly([]string{b}, a) {
		t.Error("listsOnly: wrong")
	}
	if others([]string{a, b}, a) != 1 || others(nil, a) != 0 || others([]string{a}, a) != 0 {
		t.Error("others: wrong")
	}
	events := []sliceEvent{{addrs: []string{a}}, {addrs: nil}, {addrs: []string{a, b}}, {addrs: []string{b}}, {addrs: []string{a}}}
	if n := strays(events, a); n != 2 {
		t.Errorf("strays: %d, want 2", n)
	}
}

func TestAddressesOf(t *testing.T) {
	s := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}}, {Addresses: []string{"10.244.0.2", "10.244.0.3"}}}}
	if got := addressesOf(s); !slices.Equal(got, []string{"10.244.0.1", "10.244.0.2", "10.244.0.3"}) {
		t.Errorf("addressesOf: %v", got)
	}
}

func TestRequestsOfTheTransport(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const leases = "/apis/coordination.k8s.io/v1/namespaces/bench/leases/"
	const slicesPath = "/apis/discovery.k8s.io/v1/namespaces/bench/endpointslices/"
	reqs := []request{
		{sent: at(0), method: "PATCH", path: leases + "a", took: 3 * time.Millisecond},
		{sent: at(1), method: "PUT", path: leases + "a", took: 4 * time.Millisecond},   // an acquisition
		{sent: at(2), method: "PATCH", path: leases + "c", took: 9 * time.Millisecond}, // another Lease
		{sent: at(3), method: "GET", path: slicesPath + "svc-leader"},
		{sent: at(4), method: "PUT", path: slicesPath + "svc-leader"},
		{sent: at(5), method: "PATCH", path: leases + "b", took: 2 * time.Millisecond},
		{sent: at(9), method: "GET", path: slicesPath + "svc-leader"},
	}
	if got := renewals(reqs, "a", "b"); !slices.Equal(got, []float64{3, 2}) {
		t.Errorf("renewals: %v", got)
	}
	if n := sliceRequests(reqs, at(3), at(5)); n != 2 {
		t.Errorf("sliceRequests: %d, want 2", n)
	}
}

// The watch log keeps what convert keeps, in order, and waitFor finds the
// first match from an index on, also one still to come.
func TestWatchLog(t *testing.T) {
	w := watch.NewFake()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-ctx.Done(); w.Stop() }() // as a real watch ends with its context
	state := sliceState{}
	l := follow(ctx, cancel, w, "test", func(ev watch.Event) (sliceEvent, bool) {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			return sliceEvent{}, false
		}
		return sliceEvent{seen: time.Now(), addrs: state.set(s.Name, addressesOf(s), ev.Type == watch.Deleted)}, true
	})
	slice := func(addrs ...string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "svc-leader"}, Endpoints: []discoveryv1.Endpoint{{Addresses: addrs}}}
	}
	w.Add(slice("10.244.0.1"))
	w.Action(watch.Bookmark, &metav1.Status{}) // not a slice: dropped
	w.Modify(slice())
	if i, err := l.waitFor(0, 5*time.Second, func(e sliceEvent) bool { return len(e.addrs) == 0 }); err != nil || i != 1 {
		t.Fatalf("waitFor the withdrawal: %d, %v", i, err)
	}
	found := make(chan int)
	go func() {
		i, err := l.waitFor(1, 5*time.Second, func(e sliceEvent) bool { return listsOnly(e.addrs, "10.244.0.2") })
		if err != nil {
			t.Error(err)
		}
		found <- i
	}()
	w.Modify(slice("10.244.0.2"))
	if i := <-found; i != 2 {
		t.Errorf("waitFor the new leader: %d, want 2", i)
	}
	if _, err := l.waitFor(3, 10*time.Millisecond, func(sliceEvent) bool { return true }); err == nil {
		t.Error("waitFor past the last event: no timeout")
	}
	l.stop()
	if events, err := l.all(); len(events) != 3 || err != nil {
		t.Errorf("events %d (want 3), err %v", len(events), err)
	}
}
