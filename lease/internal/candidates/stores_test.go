package candidates

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/internal/candidates/candidatestest"
)

// stores are both kinds of store, each on a fake API server of its own.
var stores = []struct {
	name  string
	gvr   schema.GroupVersionResource
	store func(*fake.Clientset) Store
}{
	{"Lease", coordinationv1.SchemeGroupVersion.WithResource("leases"),
		func(c *fake.Clientset) Store { return Leases{clientsetapi.Wrap(c)} }},
	{"LeaseCandidate", coordinationv1beta1.SchemeGroupVersion.WithResource("leasecandidates"),
		func(c *fake.Clientset) Store { return LeaseCandidates{clientsetapi.Wrap(c)} }},
}

// resourceVersions makes the fake API server give every write a new
// resourceVersion and honour a delete's resourceVersion precondition, as a
// real one does (the fake does neither): a conditional delete then tells
// the record's version from another.
func resourceVersions(client *fake.Clientset) {
	var rv atomic.Int64
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		switch act := a.(type) {
		case k8stesting.CreateAction:
			act.GetObject().(metav1.Object).SetResourceVersion(strconv.FormatInt(rv.Add(1), 10))
		case k8stesting.UpdateAction:
			act.GetObject().(metav1.Object).SetResourceVersion(strconv.FormatInt(rv.Add(1), 10))
		case k8stesting.DeleteAction:
			pre := act.GetDeleteOptions().Preconditions
			if pre == nil || pre.ResourceVersion == nil {
				break
			}
			cur, err := client.Tracker().Get(a.GetResource(), a.GetNamespace(), act.GetName())
			if err != nil {
				return true, nil, err
			}
			if cur.(metav1.Object).GetResourceVersion() != *pre.ResourceVersion {
				return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), act.GetName(), errors.New("precondition failed: resourceVersion"))
			}
		}
		return false, nil, nil
	})
}

// A candidacy's record write (create; on AlreadyExists get, then update)
// that meets its predecessor's delete in between - the record the get or
// the update is about is gone - creates the record again instead of
// failing: a failed write was retried only at the next refresh (5 min)
// later, and meanwhile every hand-off to the candidate was refused as "not
// seen".
func TestCandidateRecordRecreatedAfterPredecessorDelete(t *testing.T) {
	t.Parallel() // own fake API servers
	for _, kind := range stores {
		for _, verb := range []string{"get", "update"} {
			t.Run(kind.name+", delete lands before the "+verb, func(t *testing.T) {
				client := fake.NewClientset()
				resourceVersions(client)
				store := kind.store(client)
				ctx := t.Context()
				if _, err := store.Put(ctx, "ns", "l", Record{Identity: "a", Priority: 1, RenewTime: time.Now()}); err != nil {
					t.Fatal(err) // the predecessor's record
				}
				name := RecordName("l", "a")
				landed := candidatestest.DeleteBefore(t, client, verb, kind.gvr.Resource, name)
				rv, err := store.Put(ctx, "ns", "l", Record{Identity: "a", Priority: 2, RenewTime: time.Now()})
				if !landed.Load() {
					t.Fatalf("the predecessor's delete did not land before the %s", verb)
				}
				if err != nil {
					t.Fatalf("put after the predecessor's delete: %v", err)
				}
				c, found, err := store.Get(ctx, "ns", "l", "a")
				if err != nil || !found || c.Priority != 2 {
					t.Fatalf("record after the put: %+v, found %v, %v; want priority 2", c, found, err)
				}
				// The candidacy's own delete is conditional on rv: it
				// must be the record's.
				if err := store.Remove(ctx, "ns", "l", "a", rv); err != nil {
					t.Fatal(err)
				}
				if _, found, _ := store.Get(ctx, "ns", "l", "a"); found {
					t.Fatalf("the put returned resource version %s, not the record's: the delete missed it", rv)
				}
			})
		}
	}
}

// An object of the record's name that is no record of this lease (another
// application's) is never written over: the write fails with
// ErrNotOurRecord, and neither List nor Get takes it for a record.
func TestPutLeavesAForeignObjectOfTheRecordNameUntouched(t *testing.T) {
	t.Parallel() // own fake API servers
	name := RecordName("l", "a")
	foreign := map[string]kruntime.Object{
		"Lease": &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			Annotations: map[string]string{"owner": "another-app"}}},
		"LeaseCandidate": &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			Annotations: map[string]string{"owner": "another-app"}}, Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: "other"}},
	}
	for _, kind := range stores {
		t.Run(kind.name, func(t *testing.T) {
			client := fake.NewClientset(foreign[kind.name])
			before, err := client.Tracker().Get(kind.gvr, "ns", name)
			if err != nil {
				t.Fatal(err)
			}
			store := kind.store(client)
			ctx := t.Context()
			if _, err := store.Put(ctx, "ns", "l", Record{Identity: "a", RenewTime: time.Now()}); !errors.Is(err, ErrNotOurRecord) {
				t.Fatalf("Put over a foreign object = %v, want ErrNotOurRecord", err)
			}
			if after, err := client.Tracker().Get(kind.gvr, "ns", name); err != nil || !apiequality.Semantic.DeepEqual(after, before) {
				t.Fatalf("the foreign object changed: %v\nbefore %+v\nafter  %+v", err, before, after)
			}
			if _, err := store.Put(ctx, "ns", "l", Record{Identity: "b", RenewTime: time.Now()}); err != nil {
				t.Fatal(err)
			}
			rs, _, err := store.List(ctx, "ns", "l")
			if err != nil || len(rs) != 1 || rs[0].Identity != "b" {
				t.Fatalf("List = %+v, %v; want b's record alone", rs, err)
			}
			if _, found, err := store.Get(ctx, "ns", "l", "a"); err != nil || found {
				t.Fatalf("Get of a = found %v, %v; the foreign object is no record", found, err)
			}
		})
	}
}

// A record says, in both kinds, what the candidate declared and the
// highest fencing token it had seen.
func TestCandidateRecordRoundTrip(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind.name, func(t *testing.T) {
			client := fake.NewClientset()
			store := kind.store(client)
			want := Record{Identity: "a", Version: "1.2.3", Priority: 7, RenewTime: time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC), SeenToken: 42, SeenLease: "uid-1"}
			if _, err := store.Put(t.Context(), "ns", "l", want); err != nil {
				t.Fatal(err)
			}
			got, found, err := store.Get(t.Context(), "ns", "l", "a")
			if err != nil || !found || got.Identity != want.Identity || got.Version != want.Version || got.Priority != want.Priority ||
				!got.RenewTime.Equal(want.RenewTime) || got.SeenToken != want.SeenToken || got.SeenLease != want.SeenLease {
				t.Fatalf("read back %+v, found %v, %v; want %+v", got, found, err, want)
			}
		})
	}
}
