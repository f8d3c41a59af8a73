package lease

// Helpers shared by the tests of package lease, unit and integration
// (integration-only ones are in integration_main_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
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

// Waiting. A unit test never pauses for a while: it waits for the
// condition it needs, on a channel, by stepping a fake clock, or by polling
// through waitUntil, the one place that sleeps (a few milliseconds between
// looks, within a generous bound).

// eventually polls cond until it holds, and fails the test when it does not
// within that time. Unit and integration tests share it.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(within, cond) {
		t.Fatalf("%s: not within %v", what, within)
	}
}

// waitUntil polls cond every few milliseconds until it holds (true) or
// within has passed (false). Unlike eventually it may run on any
// goroutine: a stub of the API server holding a request waits with it.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// waitingIn counts the goroutines blocked on a channel (a receive, a send,
// a select) whose innermost frame in package lease is fn, named as a stack
// trace names it without the package path ("(*Manager).Shutdown"); a name
// ending in "." stands for the function's closures ("(*Manager).Shutdown.").
// It tells that the code under test waits where a test needs it to (for a
// request a stub holds, say), which no channel of the test can tell.
func waitingIn(fn string) int { return countWaiting(fn, true) }

// waitingUnder is waitingIn for fn anywhere on the goroutine's stack: a
// call that waits, wherever below it.
func waitingUnder(fn string) int { return countWaiting(fn, false) }

// busyUnder counts the goroutines running or about to (runnable) with fn
// anywhere on their stack: work under way, as opposed to waiting.
func busyUnder(fn string) int { return countBlocked(fn, false, "running", "runnable") }

// lockedIn is waitingIn for goroutines blocked on a mutex.
func lockedIn(fn string) int {
	return countBlocked(fn, true, "sync.Mutex.Lock", "sync.RWMutex.Lock", "sync.RWMutex.RLock", "semacquire")
}

func countWaiting(fn string, innermost bool) int {
	return countBlocked(fn, innermost, "chan receive", "chan send", "select")
}

// countBlocked counts the goroutines in one of states whose innermost
// frame in package lease (or any, when not innermost) is fn. The
// goroutine asking is left out.
func countBlocked(fn string, innermost bool, states ...string) int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	const pkg = "github.com/k8s-lease/k8s-lease/lease."
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n")[1:] { // the first is the caller's
		head, frames, _ := strings.Cut(g, "\n")
		state, _, _ := strings.Cut(head[strings.IndexByte(head, '[')+1:], "]")
		state, _, _ = strings.Cut(state, ",")
		if !slices.ContainsFunc(states, func(s string) bool { return strings.HasPrefix(state, s) }) {
			continue
		}
		for _, line := range strings.Split(frames, "\n") {
			name, ok := strings.CutPrefix(line, pkg)
			if !ok {
				continue
			}
			if i := strings.LastIndexByte(name, '('); i > 0 {
				name = name[:i]
			}
			if name == fn || strings.HasSuffix(fn, ".") && strings.HasPrefix(name, fn) {
				count++
				break
			}
			if innermost {
				break
			}
		}
	}
	return count
}

// receive returns the next value on ch, and fails the test when none comes
// within that time.
func receive[T any](t *testing.T, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("%s: not within %v", what, within)
		panic("unreachable")
	}
}

// awaitWaitingIn waits until n goroutines wait in fn (see waitingIn).
func awaitWaitingIn(t *testing.T, fn string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d goroutine(s) waiting in %s", n, fn), func() bool { return waitingIn(fn) >= n })
}

// awaitWaiters waits until n timers or tickers wait on clk: the code under
// test is blocked on the fake clock, and a Step reaches it.
func awaitWaiters(t *testing.T, clk *clocktesting.FakeClock, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d waiter(s) on the fake clock", n), func() bool { return clk.Waiters() >= n })
}

// Processes.

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

// fakeManager is a Manager on a fake clock at testNow and a fake API
// server holding objs.
func fakeManager(objs ...kruntime.Object) (*Manager, *fake.Clientset, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(testNow)
	client := fake.NewClientset(objs...)
	m := NewManager(clk)
	m.SetClient(clientsetapi.Wrap(client))
	return m, client, clk
}

// standingHost runs a host's usual loop: stand, wait for the end, stand again.
type standingHost struct {
	t    *testing.T
	m    *Manager
	id   string
	opts ElectionOptions
	// awaitRecordDelete: stand again only once the ended election's
	// candidate record is deleted (see
	// TestHandOffRegressionRecordSurvivesStandingAgain).
	awaitRecordDelete bool
	// onElected, when set, is called as each election of the host leads.
	onElected func(*Election)
	mu        sync.Mutex
	cur       *Election
}

func (h *standingHost) run(ctx context.Context) {
	for ctx.Err() == nil {
		e, err := h.m.RunElectionWith("ns", "l", h.id, fastUnitTiming, h.opts)
		if err != nil {
			h.t.Errorf("host %s cannot stand: %v", h.id, err)
			return
		}
		h.mu.Lock()
		h.cur = e
		h.mu.Unlock()
		select {
		case <-e.elected:
		case <-e.ending.ended:
		case <-ctx.Done():
			return
		}
		if h.onElected != nil && isClosed(e.elected) {
			h.onElected(e)
		}
		select {
		case <-e.ending.ended:
		case <-ctx.Done():
			return
		}
		if h.awaitRecordDelete {
			select {
			case <-e.candidacy.record.done:
			case <-ctx.Done():
				return
			}
		}
	}
}

// election is the host's current election (nil before the first).
func (h *standingHost) election() *Election {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

func (h *standingHost) leads() bool {
	e := h.election()
	if e == nil {
		return false
	}
	ok, _, _ := e.IsLeader()
	return ok
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

// The fake API server.

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

// hooked runs beforeUpdate(l) ahead of every Lease update,
// afterUpdate(l, err) on its outcome (what it returns is the caller's
// error) and beforeList(opts) ahead of every list (when set), on the
// client side: outside the fake's global lock, which its reactors hold.
type hooked struct {
	*fake.Clientset
	beforeUpdate func(*coordinationv1.Lease)
	afterUpdate  func(*coordinationv1.Lease, error) error
	beforeList   func(metav1.ListOptions)
	beforeGet    func(name string)
	beforeDelete func(name string)
}

func (c hooked) CoordinationV1() coordclient.CoordinationV1Interface {
	return hookedCoord{c.Clientset.CoordinationV1(), c}
}

type hookedCoord struct {
	coordclient.CoordinationV1Interface
	c hooked
}

func (s hookedCoord) Leases(ns string) coordclient.LeaseInterface {
	return hookedLeases{s.CoordinationV1Interface.Leases(ns), s.c}
}

type hookedLeases struct {
	coordclient.LeaseInterface
	c hooked
}

func (l hookedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.c.beforeUpdate != nil {
		l.c.beforeUpdate(lease)
	}
	got, err := l.LeaseInterface.Update(ctx, lease, opts)
	if l.c.afterUpdate != nil {
		if err = l.c.afterUpdate(lease, err); err != nil {
			return nil, err
		}
	}
	return got, err
}

// losingAnswers is a client of server whose updates of the election Lease
// "l" that lose picks reach the server and land, but whose answers are
// lost: the caller gets its own deadline's error, as when the API server
// stalls after the write committed.
func losingAnswers(server *fake.Clientset, lose func(*coordinationv1.Lease) bool) hooked {
	return hooked{Clientset: server, afterUpdate: func(l *coordinationv1.Lease, err error) error {
		if err == nil && l.Name == "l" && lose(l) {
			return fmt.Errorf("Put \"https://apiserver/apis/coordination.k8s.io/v1/namespaces/ns/leases/l\": %w", context.DeadlineExceeded)
		}
		return err
	}}
}

func (l hookedLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if l.c.beforeGet != nil {
		l.c.beforeGet(name)
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l hookedLeases) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if l.c.beforeDelete != nil {
		l.c.beforeDelete(name)
	}
	return l.LeaseInterface.Delete(ctx, name, opts)
}

func (l hookedLeases) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if l.c.beforeList != nil {
		l.c.beforeList(opts)
	}
	return l.LeaseInterface.List(ctx, opts)
}

// annotateLease sets an annotation on the election Lease (kubectl annotate),
// reading it again after a conflict (a renewal landed in between).
func annotateLease(t *testing.T, client *fake.Clientset, key, value string) {
	t.Helper()
	for range 50 {
		l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[key] = value
		_, err = client.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not annotate the lease: 50 conflicts in a row")
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

// awaitWatch returns the next watch the fake server opens.
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

// Leases, timings, errors, configuration.

var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testLease(name, holder string, token int32, renewed time.Time, seconds int32) *coordinationv1.Lease {
	renew := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "5"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseTransitions: &token,
			RenewTime: &renew, LeaseDurationSeconds: &seconds},
	}
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

// Hosts that hand off.

// standingPair is two standing hosts on client with opts, a leading first
// and b standing by; they stand until the test ends.
func standingPair(t *testing.T, client kubernetes.Interface, idA, idB string, opts ElectionOptions) (a, b *standingHost) {
	t.Helper()
	a = &standingHost{t: t, m: process(t, client), id: idA, opts: opts}
	b = &standingHost{t: t, m: process(t, client), id: idB, opts: opts}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the Managers' Shutdown
	go a.run(ctx)
	eventually(t, 5*time.Second, a.id+" leads", a.leads)
	go b.run(ctx)
	return a, b
}

// handOffCount is the hand-offs the Managers made.
func handOffCount(ms ...*Manager) int64 {
	return sumElectionStats(ms, func(s *ElectionStats) int64 { return s.HandOffs })
}

// renewalCount is the renewals the Managers made.
func renewalCount(ms ...*Manager) int64 {
	return sumElectionStats(ms, func(s *ElectionStats) int64 { return s.Renewals })
}

func sumElectionStats(ms []*Manager, counter func(*ElectionStats) int64) int64 {
	var n int64
	for _, m := range ms {
		for _, s := range m.Stats() {
			if s.Election != nil {
				n += counter(s.Election)
			}
		}
	}
	return n
}

// awaitSteadyLeader waits until the Managers renew 20 times (2 s of
// fastUnitTiming) with no hand-off in between: a leader that stays.
// Leadership that flaps never gets there.
func awaitSteadyLeader(t *testing.T, ms ...*Manager) {
	t.Helper()
	const renewals = 20
	handOffs, since := handOffCount(ms...), renewalCount(ms...)
	eventually(t, 20*time.Second, fmt.Sprintf("a leader renewing %d times with no hand-off in between", renewals), func() bool {
		if h := handOffCount(ms...); h != handOffs {
			handOffs, since = h, renewalCount(ms...)
		}
		return renewalCount(ms...)-since >= renewals
	})
}

// awaitFailedHandOff waits until the Lease remembers a hand-off to to that
// failed (HandOffFailedAnnotation).
func awaitFailedHandOff(t *testing.T, client *fake.Clientset, to string) {
	t.Helper()
	eventually(t, 10*time.Second, "the failed hand-off to "+to+" remembered on the Lease", func() bool {
		l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
		return err == nil && strings.HasPrefix(l.Annotations[HandOffFailedAnnotation], to+" ")
	})
}

// leaderAndRecordedStandby makes leader lead ns/l in process lm and
// standby campaign on it in process sm, and waits until the leader's
// process lists both candidates' records (a hand-off to the standby is
// then allowed); it returns the two elections.
func leaderAndRecordedStandby(t *testing.T, lm, sm *Manager, leader, standby string, timing Timing) (*Election, *Election) {
	t.Helper()
	el, err := lm.RunElection("ns", "l", leader, timing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := el.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	es, err := sm.RunElection("ns", "l", standby, timing)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, standby+"'s candidate record", func() bool {
		cs, err := lm.Candidates("ns", "l")
		return err == nil && len(cs) == 2
	})
	return el, es
}
