package endpoints

import (
	"context"
	"errors"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// deadTerm is leader a's term: token 5 on the Lease of UID uid-l, its
// endpoint 10.0.0.1 published and never withdrawn.
func deadTerm() Publication {
	p := term("a", 5, "10.0.0.1")
	p.LeaseUID = "uid-l"
	return p
}

// lease stores Lease db-lease of that UID, held by holder with token.
func (a *api) lease(uid types.UID, holder string, token int32) {
	a.t.Helper()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-lease", Namespace: testNS, UID: uid},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(token)}}
	if err := a.client.Tracker().Add(l); err != nil {
		a.t.Fatal(err)
	}
}

func (a *api) retire(seen *Term) Retired {
	a.t.Helper()
	got, err := a.store.RetireStale(context.Background(), testNS, "db", "db-lease", "standby", seen)
	if err != nil {
		a.t.Fatal(err)
	}
	return got
}

// The slice of a term the Lease no longer shows is emptied in one update;
// it then carries the Lease's term when that is a later one, else its own.
func TestRetireStaleEmptiesTheSliceOfATermTheLeaseNoLongerShows(t *testing.T) {
	for _, tc := range []struct {
		name                string
		uid                 types.UID // "": no Lease
		holder              string
		token               int32
		wantToken, wantHold string
		wantUID             string
	}{
		{"a later term", "uid-l", "b", 6, "6", "b", "uid-l"},
		{"a hand-off record of the same token", "uid-l", "hand-off-to-b", 5, "5", "a", "uid-l"},
		{"released", "uid-l", "", 5, "5", "a", "uid-l"},
		{"no Lease", "", "", 0, "5", "a", "uid-l"},
		{"another Lease", "uid-new", "b", 1, "1", "b", "uid-new"},
		{"leaseTransitions lowered", "uid-l", "b", 1, "5", "a", "uid-l"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t)
			a.publish(deadTerm())
			if tc.uid != "" {
				a.lease(tc.uid, tc.holder, tc.token)
			}
			a.writes()
			got := a.retire(nil)
			if !got.Emptied || !slices.Equal(got.Addresses, []string{"10.0.0.1"}) || got.Token != 5 || got.Holder != "a" ||
				got.LeaseGone != (tc.uid == "") {
				t.Fatalf("RetireStale: %+v; want a's 10.0.0.1 (token 5) emptied", got)
			}
			if w := a.writes(); !slices.Equal(w, []string{"update " + sliceName}) {
				t.Fatalf("writes %q, want one update", w)
			}
			s := a.stored(sliceName)
			if len(s.Endpoints) != 0 || s.Annotations[TokenAnnotation] != tc.wantToken || s.Annotations[HolderAnnotation] != tc.wantHold ||
				s.Annotations[LeaseUIDAnnotation] != tc.wantUID || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
				t.Fatalf("the slice: endpoints %+v, annotations %v; want none, of %s/%s (UID %s)", s.Endpoints, s.Annotations,
					tc.wantHold, tc.wantToken, tc.wantUID)
			}
			// Emptied: nothing more to do.
			if got := a.retire(nil); got.Emptied {
				t.Fatalf("a second RetireStale emptied again: %+v", got)
			}
			a.noWrites()
		})
	}
}

// The current term's slice, an empty one, another Lease's, an object not
// ours and no slice at all are left alone; a slice of the term the caller
// saw is left alone without reading the Lease.
func TestRetireStaleLeavesAllElseAlone(t *testing.T) {
	// A check begun as a standby that ends after the standby was elected:
	// its own publisher writes the slice of its term.
	t.Run("a Lease the caller holds", func(t *testing.T) {
		a := newAPI(t)
		a.publish(deadTerm())
		a.lease("uid-l", "standby", 6)
		a.writes()
		if got := a.retire(nil); got.Emptied {
			t.Fatalf("RetireStale emptied the slice while the Lease names the caller: %+v", got)
		}
		a.noWrites()
	})
	t.Run("the current term's", func(t *testing.T) {
		a := newAPI(t)
		a.publish(deadTerm())
		a.lease("uid-l", "a", 5)
		a.writes()
		if got := a.retire(nil); got.Emptied {
			t.Fatalf("RetireStale emptied the current term's slice: %+v", got)
		}
		a.noWrites()
		a.lists("10.0.0.1", 5, "a")
	})
	t.Run("the term seen", func(t *testing.T) {
		a := newAPI(t)
		a.publish(deadTerm())
		a.writes()
		a.retire(&Term{LeaseUID: "uid-l", Token: 5, Holder: "a"})
		for _, act := range a.client.Actions() {
			if act.GetResource().Resource == "leases" {
				t.Fatalf("read the Lease: %v", act)
			}
		}
		a.noWrites()
		a.lists("10.0.0.1", 5, "a")
	})
	t.Run("empty", func(t *testing.T) {
		a := newAPI(t)
		a.publish(deadTerm())
		if err := a.store.Withdraw(context.Background(), deadTerm()); err != nil {
			t.Fatal(err)
		}
		a.writes()
		a.retire(nil)
		a.noWrites()
	})
	t.Run("none", func(t *testing.T) {
		a := newAPI(t)
		if got := a.retire(nil); got.Exists || got.Emptied {
			t.Fatalf("RetireStale without a slice: %+v", got)
		}
		a.noWrites()
	})
	for _, other := range []struct {
		name   string
		labels map[string]string
		annots map[string]string
	}{
		{"the EndpointSlice controller's", map[string]string{discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
			map[string]string{LeaseAnnotation: "db-lease", TokenAnnotation: "5", HolderAnnotation: "a"}},
		{"another Lease's", map[string]string{discoveryv1.LabelManagedBy: ManagedBy},
			map[string]string{LeaseAnnotation: "other", TokenAnnotation: "5", HolderAnnotation: "a"}},
		{"ours without a Lease named", map[string]string{discoveryv1.LabelManagedBy: ManagedBy},
			map[string]string{TokenAnnotation: "5", HolderAnnotation: "a"}},
	} {
		t.Run(other.name, func(t *testing.T) {
			a := newAPI(t)
			ready := true
			a.put(&discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: sliceName, Namespace: testNS, Labels: other.labels, Annotations: other.annots, ResourceVersion: "7"},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
			})
			before := a.storedJSON(sliceName)
			if got := a.retire(nil); got.Emptied {
				t.Fatalf("RetireStale emptied it: %+v", got)
			}
			a.noWrites()
			if after := a.storedJSON(sliceName); after != before {
				t.Fatalf("the object changed:\n%s\n%s", before, after)
			}
		})
	}
}

// The new leader's own write lands between the read and the update: the
// update conflicts, the re-read shows the Lease's current term, and the
// leader's endpoint stays.
func TestRetireStaleNeverRemovesTheLeadersEndpoint(t *testing.T) {
	a := newAPI(t)
	a.publish(deadTerm())
	a.lease("uid-l", "b", 6)
	a.conflictOnce("update", func() {
		s := a.stored(sliceName).DeepCopy()
		s.Annotations[TokenAnnotation], s.Annotations[HolderAnnotation] = "6", "b"
		s.Endpoints[0].Addresses = []string{"10.0.0.2"}
		s.ResourceVersion = "1000"
		if err := a.client.Tracker().Update(slicesGVR, s, testNS); err != nil {
			t.Error(err)
		}
	})
	if got := a.retire(nil); got.Emptied {
		t.Fatalf("RetireStale emptied the new leader's slice: %+v", got)
	}
	a.lists("10.0.0.2", 6, "b")
}

// The Lease cannot be read (RBAC, the API server): nothing is written, the
// error says which read failed.
func TestRetireStaleWritesNothingWhenTheLeaseCannotBeRead(t *testing.T) {
	a := newAPI(t)
	a.publish(deadTerm())
	forbidden := errors.New("leases is forbidden")
	a.client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) { return true, nil, forbidden })
	a.writes()
	if _, err := a.store.RetireStale(context.Background(), testNS, "db", "db-lease", "standby", nil); !errors.Is(err, forbidden) {
		t.Fatalf("RetireStale: %v; want the Lease's read error", err)
	}
	a.noWrites()
	a.lists("10.0.0.1", 5, "a")
}
