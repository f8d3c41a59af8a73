package endpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

const testNS = "prod"

var slicesGVR = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")

// api is a fake API server whose EndpointSlices behave as the real one's
// do where it matters here: a resourceVersion and a UID on every write, an
// update or a delete whose resourceVersion (or UID) precondition is stale
// is a conflict.
type api struct {
	patched []string // the patches applied since the last writes
	t       *testing.T
	client  *fake.Clientset
	store   Store
}

func newAPI(t *testing.T) *api {
	t.Helper()
	a := &api{t: t, client: fake.NewClientset()}
	a.store = Store{Client: clientsetapi.Wrap(a.client)}
	var mu sync.Mutex
	rv := int64(100)
	next := func() string { rv++; return strconv.FormatInt(rv, 10) }
	tr := a.client.Tracker()
	gr := slicesGVR.GroupResource()
	current := func(name string) (*discoveryv1.EndpointSlice, error) {
		o, err := tr.Get(slicesGVR, testNS, name)
		if err != nil {
			return nil, err
		}
		return o.(*discoveryv1.EndpointSlice), nil
	}
	a.client.PrependReactor("*", "endpointslices", func(action k8stesting.Action) (bool, kruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch act := action.(type) {
		case k8stesting.CreateActionImpl:
			s := act.GetObject().(*discoveryv1.EndpointSlice).DeepCopy()
			s.ResourceVersion = next()
			s.UID = types.UID("uid-" + s.ResourceVersion)
			if err := tr.Create(slicesGVR, s, act.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, s.DeepCopy(), nil
		case k8stesting.UpdateActionImpl:
			s := act.GetObject().(*discoveryv1.EndpointSlice).DeepCopy()
			cur, err := current(s.Name)
			if err != nil {
				return true, nil, err
			}
			if s.ResourceVersion != cur.ResourceVersion {
				return true, nil, apierrors.NewConflict(gr, s.Name, errors.New("the object has been modified"))
			}
			s.ResourceVersion, s.UID = next(), cur.UID
			if err := tr.Update(slicesGVR, s, act.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, s.DeepCopy(), nil
		case k8stesting.PatchActionImpl:
			// As the API server: the patch on the current object, a
			// failed test a 422, a new resourceVersion.
			cur, err := current(act.GetName())
			if err != nil {
				return true, nil, err
			}
			patch, err := jsonpatch.DecodePatch(act.GetPatch())
			if err != nil {
				return true, nil, apierrors.NewBadRequest(err.Error())
			}
			raw, err := json.Marshal(cur)
			if err != nil {
				return true, nil, err
			}
			if raw, err = patch.Apply(raw); err != nil {
				return true, nil, apierrors.NewInvalid(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice").GroupKind(), act.GetName(),
					field.ErrorList{field.Invalid(field.NewPath("patch"), "", err.Error())})
			}
			s := &discoveryv1.EndpointSlice{}
			if err := json.Unmarshal(raw, s); err != nil {
				return true, nil, err
			}
			s.ResourceVersion = next()
			if err := tr.Update(slicesGVR, s, act.GetNamespace()); err != nil {
				return true, nil, err
			}
			a.patched = append(a.patched, "patch "+s.Name)
			return true, s.DeepCopy(), nil
		case k8stesting.DeleteActionImpl:
			if pre := act.DeleteOptions.Preconditions; pre != nil {
				cur, err := current(act.GetName())
				if err != nil {
					return true, nil, err
				}
				if (pre.ResourceVersion != nil && *pre.ResourceVersion != cur.ResourceVersion) || (pre.UID != nil && *pre.UID != cur.UID) {
					return true, nil, apierrors.NewConflict(gr, act.GetName(), errors.New("precondition failed"))
				}
			}
		}
		return false, nil, nil
	})
	return a
}

// stored is the slice name as the fake holds it (nil: none).
func (a *api) stored(name string) *discoveryv1.EndpointSlice {
	a.t.Helper()
	o, err := a.client.Tracker().Get(slicesGVR, testNS, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		a.t.Fatal(err)
	}
	return o.(*discoveryv1.EndpointSlice)
}

// storedJSON is the stored slice name, byte for byte.
func (a *api) storedJSON(name string) string {
	a.t.Helper()
	raw, err := json.Marshal(a.stored(name))
	if err != nil {
		a.t.Fatal(err)
	}
	return string(raw)
}

// put stores s as it is (another writer's object).
func (a *api) put(s *discoveryv1.EndpointSlice) {
	a.t.Helper()
	if err := a.client.Tracker().Add(s); err != nil {
		a.t.Fatal(err)
	}
}

// writes are the writes on EndpointSlices since the last call, as
// "verb name" (a delete with its preconditions).
func (a *api) writes() []string {
	var out []string
	for _, act := range a.client.Actions() {
		switch act := act.(type) {
		case k8stesting.CreateActionImpl:
			out = append(out, "create "+act.GetObject().(*discoveryv1.EndpointSlice).Name)
		case k8stesting.UpdateActionImpl:
			out = append(out, "update "+act.GetObject().(*discoveryv1.EndpointSlice).Name)
		case k8stesting.DeleteActionImpl:
			w := "delete " + act.GetName()
			if pre := act.DeleteOptions.Preconditions; pre != nil && pre.ResourceVersion != nil && pre.UID != nil {
				w += fmt.Sprintf(" if rv=%s uid=%s", *pre.ResourceVersion, *pre.UID)
			}
			out = append(out, w)
		}
	}
	out = append(out, a.patched...) // the patches that applied (a failed test writes nothing)
	a.patched = nil
	a.client.ClearActions()
	return out
}

// noWrites fails the test if anything was written since the last writes.
func (a *api) noWrites() {
	a.t.Helper()
	if w := a.writes(); len(w) > 0 {
		a.t.Fatalf("writes %q, want none", w)
	}
}

// equalJSON reports whether a and b have the same JSON.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
