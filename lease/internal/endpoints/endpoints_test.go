package endpoints

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

const sliceName = "db-leader"

// term is the publication of identity's term with token at address:5432.
func term(identity string, token int64, address string) Publication {
	return Publication{Namespace: testNS, Service: "db", Lease: "db-lease", Identity: identity, Address: address, Port: 5432, Token: token}
}

func (a *api) publish(p Publication) {
	a.t.Helper()
	if err := a.store.Publish(context.Background(), p); err != nil {
		a.t.Fatalf("publish %s/%d: %v", p.Identity, p.Token, err)
	}
}

// lists checks that the slice lists exactly address, with token and holder.
func (a *api) lists(address string, token int64, holder string) {
	a.t.Helper()
	got, err := a.store.Read(context.Background(), testNS, "db")
	if err != nil {
		a.t.Fatal(err)
	}
	if !got.Exists || !slices.Equal(got.Addresses, []string{address}) || got.Port != 5432 || got.Token != token || got.Holder != holder {
		a.t.Fatalf("the slice lists %+v, want [%s]:5432 of %s/%d", got, address, holder, token)
	}
}

func TestSliceName(t *testing.T) {
	long := strings.Repeat("a", 63)
	if got := SliceName("db"); got != "db-leader" {
		t.Fatalf("SliceName(db) = %q", got)
	}
	if err := validate.Key(testNS, SliceName(long)); err != nil {
		t.Fatalf("the slice name of a 63-character Service: %v", err)
	}
}

func TestPublishCreates(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 3, "10.0.0.1"))
	// Created empty and without a holder, then filled: a create that lands
	// late routes nowhere (TestALateCreateCannotRouteAfterAnAddressFamilyChange).
	for _, act := range a.client.Actions() {
		if c, ok := act.(k8stesting.CreateActionImpl); ok {
			if s := c.GetObject().(*discoveryv1.EndpointSlice); len(s.Endpoints) != 0 || s.Annotations[HolderAnnotation] != "" ||
				s.Annotations[TokenAnnotation] != "3" {
				t.Fatalf("created with endpoints %+v, annotations %v; want none, token 3 and no holder", s.Endpoints, s.Annotations)
			}
		}
	}
	if w := a.writes(); !slices.Equal(w, []string{"create " + sliceName, "update " + sliceName}) {
		t.Fatalf("writes %q, want a create and an update", w)
	}
	s := a.stored(sliceName)
	yes, no := true, false
	wantEndpoints := []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"},
		Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}}}
	tcp := corev1.ProtocolTCP
	switch {
	case s.Labels[discoveryv1.LabelServiceName] != "db" || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy:
		t.Fatalf("labels %v", s.Labels)
	case s.Annotations[TokenAnnotation] != "3" || s.Annotations[HolderAnnotation] != "a" || s.Annotations[LeaseAnnotation] != "db-lease":
		t.Fatalf("annotations %v", s.Annotations)
	case s.AddressType != discoveryv1.AddressTypeIPv4:
		t.Fatalf("addressType %q", s.AddressType)
	case !equalJSON(t, s.Endpoints, wantEndpoints):
		t.Fatalf("endpoints %+v", s.Endpoints)
	case len(s.Ports) != 1 || s.Ports[0].Name == nil || *s.Ports[0].Name != "" || s.Ports[0].Protocol == nil ||
		*s.Ports[0].Protocol != tcp || s.Ports[0].Port == nil || *s.Ports[0].Port != 5432:
		t.Fatalf("ports %+v", s.Ports)
	}
	a.lists("10.0.0.1", 3, "a")

	// The same term again: nothing to write.
	a.publish(term("a", 3, "10.0.0.1"))
	a.noWrites()
}

func TestPublishByHigherTokenReplaces(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 3, "10.0.0.1"))
	uid := a.stored(sliceName).UID
	a.writes()
	a.publish(term("b", 5, "10.0.0.2"))
	if w := a.writes(); !slices.Equal(w, []string{"update " + sliceName}) {
		t.Fatalf("writes %q, want one update", w)
	}
	a.lists("10.0.0.2", 5, "b")
	if got := a.stored(sliceName).UID; got != uid {
		t.Fatalf("uid %s, want %s: the slice was re-created", got, uid)
	}
	// The same token (its term) may move its endpoint.
	a.publish(term("b", 5, "10.0.0.3"))
	a.lists("10.0.0.3", 5, "b")
}

func TestPublishByLowerTokenRefused(t *testing.T) {
	a := newAPI(t)
	a.publish(term("b", 5, "10.0.0.2"))
	before := a.storedJSON(sliceName)
	a.writes()
	err := a.store.Publish(context.Background(), term("a", 3, "10.0.0.1"))
	if !errors.Is(err, ErrSuperseded) || !strings.Contains(err.Error(), testNS+"/"+sliceName) {
		t.Fatalf("publish by a lower token: %v, want ErrSuperseded naming the slice", err)
	}
	a.noWrites()
	if after := a.storedJSON(sliceName); after != before {
		t.Fatalf("the slice changed:\n%s\n%s", before, after)
	}
}

// An object of the slice's name that is not ours is never written, by any
// call; nor is a slice of ours published for another Lease.
func TestForeignObjectUntouched(t *testing.T) {
	ready := true
	port := int32(80)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		annots map[string]string
	}{
		{"the EndpointSlice controller's", map[string]string{discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", discoveryv1.LabelServiceName: "db"}, nil},
		{"without a managed-by label", map[string]string{discoveryv1.LabelServiceName: "db"}, nil},
		{"ours, for another Lease", map[string]string{discoveryv1.LabelManagedBy: ManagedBy}, map[string]string{LeaseAnnotation: "other", TokenAnnotation: "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t)
			a.put(&discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: sliceName, Namespace: testNS, Labels: tc.labels, Annotations: tc.annots, ResourceVersion: "7"},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
				Ports:       []discoveryv1.EndpointPort{{Port: &port}},
			})
			before := a.storedJSON(sliceName)
			ctx := context.Background()
			if err := a.store.Publish(ctx, term("a", 99, "10.0.0.1")); !errors.Is(err, ErrNotOurs) || !strings.Contains(err.Error(), testNS+"/"+sliceName) {
				t.Fatalf("publish: %v, want ErrNotOurs naming the slice", err)
			}
			if err := a.store.Publish(ctx, term("a", 99, "fd00::1")); !errors.Is(err, ErrNotOurs) {
				t.Fatalf("publish of another address family: %v, want ErrNotOurs", err)
			}
			if err := a.store.Withdraw(ctx, term("a", 1, "")); !errors.Is(err, ErrNotOurs) {
				t.Fatalf("withdraw: %v, want ErrNotOurs", err)
			}
			a.noWrites()
			if after := a.storedJSON(sliceName); after != before {
				t.Fatalf("the object changed:\n%s\n%s", before, after)
			}
			got, err := a.store.Read(ctx, testNS, "db")
			if wantErr := tc.labels[discoveryv1.LabelManagedBy] != ManagedBy; (errors.Is(err, ErrNotOurs)) != wantErr || !got.Exists ||
				!slices.Equal(got.Addresses, []string{"10.9.9.9"}) || got.Port != 80 {
				t.Fatalf("read: %+v, %v", got, err)
			}
		})
	}
}

func TestWithdrawEmptiesOnlyOwnTerm(t *testing.T) {
	a := newAPI(t)
	ctx := context.Background()
	if err := a.store.Withdraw(ctx, term("b", 5, "")); err != nil {
		t.Fatalf("withdraw of an absent slice: %v", err)
	}
	a.publish(term("b", 5, "10.0.0.2"))
	a.writes()
	// Earlier terms (a lower token, the same token of another holder)
	// leave a later term's slice alone.
	for _, other := range []Publication{term("a", 3, ""), term("c", 5, "")} {
		if err := a.store.Withdraw(ctx, other); err != nil {
			t.Fatalf("withdraw of another term (%s/%d): %v", other.Identity, other.Token, err)
		}
	}
	a.noWrites()
	a.lists("10.0.0.2", 5, "b")

	if err := a.store.Withdraw(ctx, term("b", 5, "")); err != nil {
		t.Fatal(err)
	}
	if w := a.writes(); !slices.Equal(w, []string{"update " + sliceName}) {
		t.Fatalf("writes %q, want one update", w)
	}
	s := a.stored(sliceName)
	if len(s.Endpoints) != 0 || s.Annotations[TokenAnnotation] != "5" || s.Annotations[HolderAnnotation] != "b" ||
		s.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
		t.Fatalf("withdrawn slice: endpoints %+v, annotations %v, labels %v", s.Endpoints, s.Annotations, s.Labels)
	}
	if err := a.store.Withdraw(ctx, term("b", 5, "")); err != nil {
		t.Fatal(err)
	}
	a.noWrites() // already empty

	// The token stays: a lower term is still refused, a higher one publishes.
	if err := a.store.Publish(ctx, term("a", 4, "10.0.0.1")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish by a lower token after the withdrawal: %v, want ErrSuperseded", err)
	}
	a.publish(term("c", 6, "10.0.0.3"))
	a.lists("10.0.0.3", 6, "c")
}

func TestWithdrawOfSupersededTermWritesNothing(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 3, "10.0.0.1"))
	a.publish(term("b", 5, "10.0.0.2"))
	before := a.storedJSON(sliceName)
	a.writes()
	if err := a.store.Withdraw(context.Background(), term("a", 3, "")); err != nil {
		t.Fatal(err)
	}
	a.noWrites()
	if after := a.storedJSON(sliceName); after != before {
		t.Fatalf("the slice changed:\n%s\n%s", before, after)
	}
}

// conflictOnce answers the first verb on the slices with a 409, after
// running meanwhile (another writer's write, or nothing), as a write that
// lost a race does.
func (a *api) conflictOnce(verb string, meanwhile func()) {
	done := false
	a.client.PrependReactor(verb, "endpointslices", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if done {
			return false, nil, nil
		}
		done = true
		if meanwhile != nil {
			meanwhile()
		}
		if verb == "create" {
			return true, nil, apierrors.NewAlreadyExists(slicesGVR.GroupResource(), sliceName)
		}
		return true, nil, apierrors.NewConflict(slicesGVR.GroupResource(), sliceName, errors.New("the object has been modified"))
	})
}

func TestConflictRetry(t *testing.T) {
	ctx := context.Background()
	t.Run("update", func(t *testing.T) {
		a := newAPI(t)
		a.publish(term("a", 3, "10.0.0.1"))
		a.conflictOnce("update", nil)
		a.writes()
		a.publish(term("b", 5, "10.0.0.2"))
		if w := a.writes(); !slices.Equal(w, []string{"update " + sliceName, "update " + sliceName}) {
			t.Fatalf("writes %q, want two updates", w)
		}
		a.lists("10.0.0.2", 5, "b")
	})
	t.Run("create", func(t *testing.T) {
		a := newAPI(t)
		a.conflictOnce("create", nil)
		a.publish(term("a", 3, "10.0.0.1"))
		a.lists("10.0.0.1", 3, "a")
	})
	t.Run("withdraw", func(t *testing.T) {
		a := newAPI(t)
		a.publish(term("a", 3, "10.0.0.1"))
		a.conflictOnce("update", nil)
		if err := a.store.Withdraw(ctx, term("a", 3, "")); err != nil {
			t.Fatal(err)
		}
		if s := a.stored(sliceName); len(s.Endpoints) != 0 {
			t.Fatalf("endpoints %+v after the withdrawal", s.Endpoints)
		}
	})
	// The race lost to a newer leader: the re-read sees its token, and
	// nothing of the older term is written.
	t.Run("lost to a newer leader", func(t *testing.T) {
		a := newAPI(t)
		a.publish(term("a", 3, "10.0.0.1"))
		a.conflictOnce("update", func() {
			s := a.stored(sliceName).DeepCopy()
			s.Annotations[TokenAnnotation], s.Annotations[HolderAnnotation] = "9", "c"
			s.Endpoints[0].Addresses = []string{"10.0.0.9"}
			s.ResourceVersion = "1000"
			if err := a.client.Tracker().Update(slicesGVR, s, testNS); err != nil {
				t.Error(err)
			}
		})
		if err := a.store.Publish(ctx, term("b", 5, "10.0.0.2")); !errors.Is(err, ErrSuperseded) {
			t.Fatalf("publish after losing to token 9: %v, want ErrSuperseded", err)
		}
		a.lists("10.0.0.9", 9, "c")
	})
	t.Run("every attempt lost", func(t *testing.T) {
		a := newAPI(t)
		a.publish(term("a", 3, "10.0.0.1"))
		a.client.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, kruntime.Object, error) {
			return true, nil, apierrors.NewConflict(slicesGVR.GroupResource(), sliceName, errors.New("the object has been modified"))
		})
		a.writes()
		err := a.store.Publish(ctx, term("b", 5, "10.0.0.2"))
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), testNS+"/"+sliceName) {
			t.Fatalf("publish losing every compare-and-swap: %v, want the conflict, naming the slice", err)
		}
		if w := a.writes(); len(w) != maxAttempts {
			t.Fatalf("writes %q, want %d attempts", w, maxAttempts)
		}
	})
}

func TestAddressFamilyChangeRecreates(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 3, "10.0.0.1"))
	old := a.stored(sliceName)
	a.writes()
	a.publish(term("b", 4, "2001:DB8::7"))
	want := []string{"delete " + sliceName + " if rv=" + old.ResourceVersion + " uid=" + string(old.UID), "create " + sliceName, "update " + sliceName}
	if w := a.writes(); !slices.Equal(w, want) {
		t.Fatalf("writes %q, want %q", w, want)
	}
	s := a.stored(sliceName)
	if s.AddressType != discoveryv1.AddressTypeIPv6 || s.UID == old.UID {
		t.Fatalf("addressType %s, uid %s (was %s)", s.AddressType, s.UID, old.UID)
	}
	a.lists("2001:db8::7", 4, "b") // canonical form

	// A newer leader's write between the read and the delete: the delete's
	// precondition fails, the re-read refuses.
	a.conflictOnce("delete", func() {
		s := a.stored(sliceName).DeepCopy()
		s.Annotations[TokenAnnotation] = "9"
		s.ResourceVersion = "1000"
		if err := a.client.Tracker().Update(slicesGVR, s, testNS); err != nil {
			t.Error(err)
		}
	})
	if err := a.store.Publish(context.Background(), term("c", 5, "10.0.0.5")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish: %v, want ErrSuperseded", err)
	}
	if s := a.stored(sliceName); s.AddressType != discoveryv1.AddressTypeIPv6 || s.Annotations[TokenAnnotation] != "9" {
		t.Fatalf("the newer leader's slice was replaced: %s, token %s", s.AddressType, s.Annotations[TokenAnnotation])
	}
}

// A slice of ours with an unreadable token (edited by hand) counts as
// older than any term.
func TestUnreadableTokenIsOldest(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 3, "10.0.0.1"))
	s := a.stored(sliceName).DeepCopy()
	s.Annotations[TokenAnnotation] = "three"
	if err := a.client.Tracker().Update(slicesGVR, s, testNS); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.store.Read(context.Background(), testNS, "db"); got.Token != -1 {
		t.Fatalf("read token %d, want -1", got.Token)
	}
	// Older than any term: a term withdrawing takes it over, empty.
	if err := a.store.Withdraw(context.Background(), term("a", 3, "")); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.store.Read(context.Background(), testNS, "db"); len(got.Addresses) != 0 || got.Token != 3 {
		t.Fatalf("after the withdrawal over an unreadable token: %+v; want empty, token 3", got)
	}
	s.Annotations[TokenAnnotation] = "three"
	s.ResourceVersion = ""
	if err := a.client.Tracker().Update(slicesGVR, s, testNS); err != nil {
		t.Fatal(err)
	}
	a.publish(term("b", 0, "10.0.0.2"))
	a.lists("10.0.0.2", 0, "b")
}

func TestInvalidPublicationSendsNothing(t *testing.T) {
	a := newAPI(t)
	ctx := context.Background()
	for _, p := range []Publication{
		term("a", 1, "127.0.0.1"),
		term("a", 1, "db.example.com"),
		term("a", -1, "10.0.0.1"),
		term("", 1, "10.0.0.1"),
		{Namespace: testNS, Service: "Db", Lease: "l", Identity: "a", Address: "10.0.0.1", Port: 80},
		{Namespace: testNS, Service: "db", Lease: "l", Identity: "a", Address: "10.0.0.1", Port: 0},
		{Namespace: "", Service: "db", Lease: "l", Identity: "a", Address: "10.0.0.1", Port: 80},
	} {
		if err := a.store.Publish(ctx, p); !errors.Is(err, validate.ErrInvalidArgument) {
			t.Fatalf("publish %+v: %v, want ErrInvalidArgument", p, err)
		}
	}
	if err := a.store.Withdraw(ctx, Publication{Namespace: testNS, Service: "-db", Lease: "db-lease"}); !errors.Is(err, validate.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "service") {
		t.Fatalf("withdraw of a bad service: %v", err)
	}
	if _, err := a.store.Read(ctx, "", "db"); !errors.Is(err, validate.ErrInvalidArgument) || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("read in no namespace: %v", err)
	}
	if n := len(a.client.Actions()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// The fake API server does not validate: the metadata of a published
// slice must pass the API server's rules for labels and annotations.
func TestPublishedMetadataIsValid(t *testing.T) {
	a := newAPI(t)
	a.publish(Publication{Namespace: testNS, Service: strings.Repeat("d", 63), Lease: "db-lease", Identity: "pod-0 of db",
		Address: "10.0.0.1", Port: 5432, Token: 1 << 62})
	s := a.stored(SliceName(strings.Repeat("d", 63)))
	if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
		t.Fatalf("name %q: %v", s.Name, errs)
	}
	for k, v := range s.Labels {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			t.Fatalf("label %s=%s: %v", k, v, errs)
		}
	}
	for k := range s.Annotations {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Fatalf("annotation %s: %v", k, errs)
		}
	}
}

// A term that knows the token it follows replaces that term's slice in one
// patch (no read); when the slice carries another term, the patch changes
// nothing and the usual path decides.
func TestPublishOverThePreviousTermIsOnePatch(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 3, "10.0.0.1"))
	a.writes()
	next := term("b", 4, "10.0.0.2")
	next.PrevToken = 3
	a.publish(next)
	if w := a.writes(); !slices.Equal(w, []string{"patch " + sliceName}) {
		t.Fatalf("writes %q, want one patch", w)
	}
	if n := len(a.client.Actions()); n != 0 {
		t.Fatalf("%d more requests", n)
	}
	a.lists("10.0.0.2", 4, "b")
	// A stale PrevToken: the patch's test fails, the read decides (and
	// refuses a later term's slice).
	old := term("c", 2, "10.0.0.3")
	old.PrevToken = 1
	if err := a.store.Publish(context.Background(), old); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish of token 2 over token 4's slice: %v; want ErrSuperseded", err)
	}
	a.noWrites()
	a.lists("10.0.0.2", 4, "b")
}

// A term withdrawing the endpoint it published (its address known) empties
// its slice in one patch, without a read; once empty, a withdrawal again
// writes nothing.
func TestWithdrawOfTheOwnEndpointIsOnePatch(t *testing.T) {
	a := newAPI(t)
	own := term("a", 3, "10.0.0.1")
	a.publish(own)
	a.writes()
	if err := a.store.Withdraw(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	if w := a.writes(); !slices.Equal(w, []string{"patch " + sliceName}) {
		t.Fatalf("writes %q, want one patch", w)
	}
	if s := a.stored(sliceName); len(s.Endpoints) != 0 || s.Annotations[TokenAnnotation] != "3" {
		t.Fatalf("withdrawn slice: endpoints %+v, annotations %v", s.Endpoints, s.Annotations)
	}
	if err := a.store.Withdraw(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	a.noWrites()
}

// A later term's withdrawal over an earlier term's slice takes it over,
// empty: the slice lists nothing as of that term.
func TestWithdrawOverAnEarlierTermsSliceTakesItOver(t *testing.T) {
	a := newAPI(t)
	a.publish(term("b", 5, "10.0.0.2"))
	a.writes()
	if err := a.store.Withdraw(context.Background(), term("b", 6, "10.0.0.3")); err != nil {
		t.Fatal(err)
	}
	if w := a.writes(); !slices.Equal(w, []string{"update " + sliceName}) {
		t.Fatalf("writes %q, want one update", w)
	}
	if got, _ := a.store.Read(context.Background(), testNS, "db"); len(got.Addresses) != 0 || got.Token != 6 || got.Holder != "b" {
		t.Fatalf("the slice: %+v; want empty, of b/6", got)
	}
}
