package lease

// Helpers shared by the tests of package lease, unit and integration
// (integration-only ones are in integration_main_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// process is a Manager on client (a process of its own), without Events,
// shut down when the test ends.
func process(t *testing.T, client kubernetes.Interface) *Manager {
	t.Helper()
	return processOn(t, clientsetapi.Wrap(client))
}

// processOn is process on a client of the library's own interface.
func processOn(t *testing.T, client kubeapi.Client) *Manager {
	t.Helper()
	m := NewManager(clock.RealClock{})
	m.SetClient(client)
	m.SetEvents(false)
	t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
	return m
}

// standingHost runs a host's usual loop: stand, wait for the end, stand again.
type standingHost struct {
	m    *Manager
	id   string
	opts ElectionOptions
	// delay before standing again (lets the ended election's record
	// delete land first: see TestHandOffRegressionRecordSurvivesStandingAgain)
	delay time.Duration
	mu    sync.Mutex
	cur   *Election
}

func (h *standingHost) run(ctx context.Context) {
	for ctx.Err() == nil {
		e, err := h.m.RunElectionWith("ns", "l", h.id, fastUnitTiming, h.opts)
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		h.mu.Lock()
		h.cur = e
		h.mu.Unlock()
		select {
		case <-e.ended:
		case <-ctx.Done():
			return
		}
		time.Sleep(h.delay)
	}
}

func (h *standingHost) leads() bool {
	h.mu.Lock()
	e := h.cur
	h.mu.Unlock()
	if e == nil {
		return false
	}
	ok, _, _ := e.IsLeader()
	return ok
}

// annotateLease sets an annotation on the election Lease (kubectl annotate).
func annotateLease(t *testing.T, client *fake.Clientset, key, value string) {
	t.Helper()
	for i := 0; i < 50; i++ {
		l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[key] = value
		if _, err = client.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{}); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("could not annotate the lease")
}

// enforceResourceVersions makes the fake API server treat Leases as a real one does:
// every write gets a new resourceVersion, an update whose resourceVersion
// is not the current one is a conflict, and a JSON patch whose test fails
// is 422 Invalid. (The fake clientset enforces none of it: without this,
// unit tests never exercise the library's compare-and-swaps.)
func enforceResourceVersions(client *fake.Clientset) {
	var mu sync.Mutex
	var rv int64 = 1000
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	gk := schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}
	tr := client.Tracker()
	next := func() string { rv++; return strconv.FormatInt(rv, 10) }
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch act := a.(type) {
		case k8stesting.CreateActionImpl:
			l := act.GetObject().(*coordinationv1.Lease).DeepCopy()
			l.ResourceVersion = next()
			if err := tr.Create(gvr, l, act.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, l.DeepCopy(), nil
		case k8stesting.UpdateActionImpl:
			l := act.GetObject().(*coordinationv1.Lease).DeepCopy()
			cur, err := tr.Get(gvr, act.GetNamespace(), l.Name)
			if err != nil {
				return true, nil, err
			}
			if l.ResourceVersion != cur.(*coordinationv1.Lease).ResourceVersion {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("the object has been modified"))
			}
			l.ResourceVersion = next()
			if err := tr.Update(gvr, l, act.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, l.DeepCopy(), nil
		case k8stesting.DeleteActionImpl:
			if pre := act.DeleteOptions.Preconditions; pre != nil && pre.ResourceVersion != nil {
				cur, err := tr.Get(gvr, act.GetNamespace(), act.GetName())
				if err != nil {
					return true, nil, err
				}
				if cur.(*coordinationv1.Lease).ResourceVersion != *pre.ResourceVersion {
					return true, nil, apierrors.NewConflict(gvr.GroupResource(), act.GetName(), errors.New("precondition failed: resourceVersion"))
				}
			}
			return false, nil, nil
		case k8stesting.PatchActionImpl:
			if act.GetPatchType() != types.JSONPatchType {
				return false, nil, nil
			}
			cur, err := tr.Get(gvr, act.GetNamespace(), act.GetName())
			if err != nil {
				return true, nil, err
			}
			old, _ := json.Marshal(cur)
			p, err := jsonpatch.DecodePatch(act.GetPatch())
			if err != nil {
				return true, nil, apierrors.NewBadRequest(err.Error())
			}
			mod, err := p.Apply(old)
			if err != nil {
				return true, nil, apierrors.NewInvalid(gk, act.GetName(), field.ErrorList{field.Invalid(field.NewPath("patch"), "", err.Error())})
			}
			l := &coordinationv1.Lease{}
			if err := json.Unmarshal(mod, l); err != nil {
				return true, nil, err
			}
			l.ResourceVersion = next()
			if err := tr.Update(gvr, l, act.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, l.DeepCopy(), nil
		}
		return false, nil, nil
	})
}

// fakeClientGoCandidate runs a plain client-go LeaderElector named identity
// on ns/l of client (2 s / 1.5 s / 100 ms) until the test ends; leading
// says whether it leads, ctx ends with the test.
func fakeClientGoCandidate(t *testing.T, client *fake.Clientset, identity string) (leading *atomic.Bool, ctx context.Context) {
	t.Helper()
	leading = &atomic.Bool{}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"},
		Client: client.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: identity}}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { leading.Store(true) },
			OnStoppedLeading: func() { leading.Store(false) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go le.Run(ctx)
	return leading, ctx
}

// eventually polls cond every 10 ms until it holds or within passes. Unit
// and integration tests share it.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hookedUpdates runs before(l) ahead of every Lease update, outside the
// fake's global lock.
type hookedUpdates struct {
	*fake.Clientset
	before func(*coordinationv1.Lease)
}

func (c hookedUpdates) CoordinationV1() coordclient.CoordinationV1Interface {
	return hookedCoord{c.Clientset.CoordinationV1(), c.before}
}

type hookedCoord struct {
	coordclient.CoordinationV1Interface
	before func(*coordinationv1.Lease)
}

func (s hookedCoord) Leases(ns string) coordclient.LeaseInterface {
	return hookedLeases{s.CoordinationV1Interface.Leases(ns), s.before}
}

type hookedLeases struct {
	coordclient.LeaseInterface
	before func(*coordinationv1.Lease)
}

func (l hookedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	l.before(lease)
	return l.LeaseInterface.Update(ctx, lease, opts)
}

var unitTiming = Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

var fastUnitTiming = Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}

func forbiddenErr() error {
	return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "l", errors.New("RBAC: no"))
}

// noConfig makes LoadConfig find nothing: no in-cluster service, and a
// kubeconfig path that does not exist.
func noConfig(t *testing.T) {
	t.Helper()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
}

// countVerbs counts the client's Lease requests by verb.
func countVerbs(t *testing.T, actions []k8stesting.Action) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, a := range actions {
		if a.GetResource().Resource == "leases" {
			n[a.GetVerb()]++
		}
	}
	return n
}

func awaitWatch(t *testing.T, watches <-chan *watch.RaceFreeFakeWatcher) *watch.RaceFreeFakeWatcher {
	t.Helper()
	select {
	case w := <-watches:
		return w
	case <-time.After(5 * time.Second):
		t.Fatal("no watch opened within 5 s")
		return nil
	}
}

var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testLease(name, holder string, token int32, renewed time.Time, seconds int32) *coordinationv1.Lease {
	renew := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "5"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseTransitions: &token,
			RenewTime: &renew, LeaseDurationSeconds: &seconds},
	}
}

func fakeManager(objs ...kruntime.Object) (*Manager, *fake.Clientset, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(testNow)
	client := fake.NewClientset(objs...)
	m := NewManager(clk)
	m.SetClient(clientsetapi.Wrap(client))
	return m, client, clk
}
