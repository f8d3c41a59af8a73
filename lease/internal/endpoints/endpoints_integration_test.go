//go:build integration

package endpoints

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// On a real API server, through the library's own REST client: the API
// server accepts our slices (their labels, addressType, an unnamed TCP port,
// an empty endpoints list), Publish replaces by a higher token and refuses
// a lower one, a change of address family re-creates the slice, Withdraw
// empties only its own term's, and an object not ours is left alone.
// (envtest runs no controller-manager, so what the EndpointSlice controller
// would do is not seen here: only the objects.)
func TestEndpointSliceOnAPIServer(t *testing.T) {
	const ns = "endpoints-it"
	srv, err := testenv.Start(os.Stderr, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(30 * time.Second); err != nil {
			t.Errorf("stop envtest-server: %v", err)
		}
	})
	admin, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubeapi.New(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	store := Store{Client: client}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A selector-less Service with one unnamed port.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432, TargetPort: intstr.FromInt32(5432), Protocol: corev1.ProtocolTCP}}}}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pub := func(identity string, token int64, address string) Publication {
		return Publication{Namespace: ns, Service: "db", Lease: "db-lease", Identity: identity, Address: address, Port: 5432, Token: token}
	}
	get := func() *discoveryv1.EndpointSlice {
		t.Helper()
		s, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, SliceName("db"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	lists := func(s *discoveryv1.EndpointSlice, addressType discoveryv1.AddressType, address, token, holder string) {
		t.Helper()
		if s.AddressType != addressType || len(s.Endpoints) != 1 || !slices.Equal(s.Endpoints[0].Addresses, []string{address}) ||
			s.Endpoints[0].Conditions.Ready == nil || !*s.Endpoints[0].Conditions.Ready ||
			s.Annotations[TokenAnnotation] != token || s.Annotations[HolderAnnotation] != holder {
			t.Fatalf("slice %s %+v, annotations %v; want %s [%s] of %s/%s", s.AddressType, s.Endpoints, s.Annotations, addressType, address, holder, token)
		}
	}

	if got, err := store.Read(ctx, ns, "db"); err != nil || got.Exists {
		t.Fatalf("read before any publish: %+v, %v", got, err)
	}
	if err := store.Publish(ctx, pub("a", 3, "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	first := get()
	lists(first, discoveryv1.AddressTypeIPv4, "10.0.0.1", "3", "a")
	if first.Labels[discoveryv1.LabelServiceName] != "db" || first.Labels[discoveryv1.LabelManagedBy] != ManagedBy ||
		len(first.Ports) != 1 || *first.Ports[0].Name != "" || *first.Ports[0].Protocol != corev1.ProtocolTCP || *first.Ports[0].Port != 5432 {
		t.Fatalf("labels %v, ports %+v", first.Labels, first.Ports)
	}

	// A higher token replaces, in place.
	if err := store.Publish(ctx, pub("b", 5, "10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	second := get()
	lists(second, discoveryv1.AddressTypeIPv4, "10.0.0.2", "5", "b")
	if second.UID != first.UID {
		t.Fatal("a replacement within the address family re-created the slice")
	}
	// A lower one is refused, and writes nothing.
	if err := store.Publish(ctx, pub("a", 3, "10.0.0.1")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish by a lower token: %v, want ErrSuperseded", err)
	}
	if got := get(); got.ResourceVersion != second.ResourceVersion {
		t.Fatal("a refused publish wrote the slice")
	}

	// Withdraw: another term's writes nothing; its own empties the slice,
	// which the API server takes with endpoints [].
	if err := store.Withdraw(ctx, pub("a", 3, "")); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.ResourceVersion != second.ResourceVersion {
		t.Fatal("another term's withdrawal wrote the slice")
	}
	if err := store.Withdraw(ctx, pub("b", 5, "")); err != nil {
		t.Fatal(err)
	}
	if got := get(); len(got.Endpoints) != 0 || got.Annotations[TokenAnnotation] != "5" {
		t.Fatalf("withdrawn slice: %+v, annotations %v", got.Endpoints, got.Annotations)
	}
	if got, err := store.Read(ctx, ns, "db"); err != nil || !got.Exists || len(got.Addresses) != 0 || got.Token != 5 || got.Holder != "b" {
		t.Fatalf("read after the withdrawal: %+v, %v", got, err)
	}
	if err := store.Publish(ctx, pub("a", 4, "10.0.0.1")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish by a lower token after the withdrawal: %v, want ErrSuperseded", err)
	}

	// Another address family: the slice is re-created (addressType is
	// immutable), listing the canonical form.
	if err := store.Publish(ctx, pub("c", 6, "FD00::6")); err != nil {
		t.Fatal(err)
	}
	third := get()
	lists(third, discoveryv1.AddressTypeIPv6, "fd00::6", "6", "c")
	if third.UID == first.UID {
		t.Fatal("the change of address family did not re-create the slice")
	}
	// The API server itself refuses the change in place.
	inPlace := third.DeepCopy()
	inPlace.AddressType = discoveryv1.AddressTypeIPv4
	inPlace.Endpoints[0].Addresses = []string{"10.0.0.6"}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, inPlace, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("an in-place change of addressType: %v, want Invalid", err)
	}
	if got, err := store.Read(ctx, ns, "db"); err != nil || !slices.Equal(got.Addresses, []string{"fd00::6"}) || got.Port != 5432 || got.Token != 6 {
		t.Fatalf("read: %+v, %v", got, err)
	}

	// One patch each, on the real API server: the next term over the one
	// it follows (its tests pass), a term with a stale PrevToken (its test
	// fails: 422, and the read refuses the later term's slice), and the
	// withdrawal of the own endpoint.
	next := pub("d", 7, "fd00::7")
	next.PrevToken = 6
	if err := store.Publish(ctx, next); err != nil {
		t.Fatal(err)
	}
	lists(get(), discoveryv1.AddressTypeIPv6, "fd00::7", "7", "d")
	stale := pub("e", 5, "fd00::5")
	stale.PrevToken = 4
	if err := store.Publish(ctx, stale); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish of token 5 over token 7's slice: %v, want ErrSuperseded", err)
	}
	if err := store.Withdraw(ctx, next); err != nil {
		t.Fatal(err)
	}
	if got := get(); len(got.Endpoints) != 0 || got.Annotations[TokenAnnotation] != "7" {
		t.Fatalf("after d's withdrawal: endpoints %+v, annotations %v", got.Endpoints, got.Annotations)
	}

	// An object of the slice's name that is not ours: left alone.
	port := int32(80)
	foreign := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: SliceName("web"), Namespace: ns,
		Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "someone-else"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.1.1"}}},
		Ports: []discoveryv1.EndpointPort{{Port: &port}}}
	foreign, err = admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, foreign, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web := Publication{Namespace: ns, Service: "web", Lease: "web-lease", Identity: "a", Address: "10.0.0.1", Port: 80, Token: 100}
	if err := store.Publish(ctx, web); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("publish over a foreign slice: %v, want ErrNotOurs", err)
	}
	if err := store.Withdraw(ctx, web); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("withdraw of a foreign slice: %v, want ErrNotOurs", err)
	}
	if got, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil || got.ResourceVersion != foreign.ResourceVersion {
		t.Fatalf("the foreign slice: %v, %v", got, err)
	}

	// Ours are found by their label.
	ours, err := client.EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + ManagedBy})
	if err != nil || len(ours.Items) != 1 || ours.Items[0].Name != SliceName("db") {
		t.Fatalf("list of ours: %+v, %v", ours, err)
	}

	// The API server refuses in a slice the addresses validate.Endpoint
	// refuses beyond the brief's rules (loopback, link-local), so the
	// library refuses them before sending anything.
	for _, address := range []string{"127.0.0.1", "169.254.1.1", "::1", "fe80::1"} {
		bad := &kubeapi.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: ManagedBy}},
			AddressType: validate.AddressType(address), Endpoints: []kubeapi.Endpoint{{Addresses: []string{address}}}}
		if _, err := client.EndpointSlices(ns).Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "endpoints[0].addresses[0]") {
			t.Fatalf("a slice listing %s: %v, want Invalid, of the address", address, err)
		}
		if err := validate.Endpoint("db", address, 5432); err == nil {
			t.Fatalf("validate.Endpoint accepts %s", address)
		}
	}
}
