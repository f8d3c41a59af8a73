package lease

import (
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// handOffPair is a leader "a" and a campaigning standby "b", two Managers
// (two processes) on one fake API server.
func handOffPair(t *testing.T) (a, b *Manager, ea, eb *Election, client *fake.Clientset) {
	t.Helper()
	client = fake.NewClientset()
	a, b, ea, eb = campaigningPair(t, client, client)
	return a, b, ea, eb, client
}

// campaigningPair is a leader "a", a process on clientA, and a standby "b"
// on clientB that follows the lease and has recorded its candidacy.
func campaigningPair(t *testing.T, clientA, clientB kubernetes.Interface) (a, b *Manager, ea, eb *Election) {
	t.Helper()
	a, b = process(t, clientA), process(t, clientB)
	var err error
	if ea, err = a.RunElection("ns", "l", "a", unitTiming); err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if eb, err = b.RunElection("ns", "l", "b", unitTiming); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b follows the lease and has recorded its candidacy", func() bool {
		s := eb.obs.snapshot()
		cs, err := a.Candidates("ns", "l")
		return s.synced && s.rec.holder == "a" && err == nil && len(cs) == 2
	})
	return a, b, ea, eb
}

func TestHandOffToACampaigningCandidate(t *testing.T) {
	a, _, ea, eb, client := handOffPair(t)
	if err := a.HandOff("ns", "l", "b", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := ea.IsLeader(); ok {
		t.Fatal("the old leader still leads")
	}
	if err := ea.WaitLost(); err != nil {
		t.Fatalf("the old leader's WaitLost = %v, want nil (a hand-off ends it as a cancel does)", err)
	}
	token, err := eb.WaitElected(time.Second)
	if err != nil || token != 2 {
		t.Fatalf("target: token %d, %v; want token 2", token, err)
	}
	l, err := client.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := recordOf(l); r.holder != "b" || r.handOffTo != "" || r.incarnation == "" {
		t.Fatalf("record after the hand-off: %+v", r)
	}
	if a.Election("ns", "l") != nil {
		t.Fatal("the old leader's election is still registered: a new RunElection would be refused")
	}
}

// A target whose record is live but which does not campaign (it crashed):
// after the timeout the lease is released and the campaigning standby
// takes it.
func TestHandOffToACrashedCandidateTimesOutAndReleases(t *testing.T) {
	a, _, _, eb, client := handOffPair(t)
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "c", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err := a.HandOff("ns", "l", "c", 300*time.Millisecond)
	if !errors.Is(err, ErrHandOffTimeout) {
		t.Fatalf("HandOff = %v, want a timeout", err)
	}
	if token, err := eb.WaitElected(5 * time.Second); err != nil || token != 2 {
		t.Fatalf("the standby after the release: token %d, %v", token, err)
	}
}

func TestHandOffRefusals(t *testing.T) {
	a, b, _, _, _ := handOffPair(t)
	for _, tc := range []struct {
		name      string
		m         *Manager
		lease, to string
		timeout   time.Duration
		want      error
	}{
		{"a standby", b, "l", "a", time.Second, ErrNotLeader},
		{"no election on the lease", a, "other", "b", time.Second, ErrNotLeader},
		{"to itself", a, "l", "a", time.Second, ErrInvalidArgument},
		{"bad target", a, "l", "", time.Second, ErrInvalidArgument},
		{"bad timeout", a, "l", "b", 0, ErrInvalidArgument},
		{"a target with no candidate record", a, "l", "nobody", time.Second, errTargetNotSeen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.m.HandOff("ns", tc.lease, tc.to, tc.timeout); !errors.Is(err, tc.want) {
				t.Fatalf("HandOff = %v, want %v", err, tc.want)
			}
		})
	}
	// By id: another id than the running election's is no election.
	id := a.Election("ns", "l").ID()
	if err := a.HandOffID("ns", "l", id+1000, "b", time.Second); !errors.Is(err, ErrNoElection) {
		t.Fatalf("HandOffID with another election's id = %v, want %v", err, ErrNoElection)
	}
	if ok, _, _ := a.Election("ns", "l").IsLeader(); !ok {
		t.Fatal("a refused hand-off ended the leadership")
	}
}

// The timeout release of handOffElection ends only what still matches
// e.identity/e.incarnation after a conflict (endTerm), and reports
// "released" whenever endTerm returned no error, also when it released
// nothing: (1) the target took the lease just after the deadline: HandOff
// returns ErrHandOffTimeout "... the lease is released" while the target
// leads (and PolicyHandOffOnCancel maps it to success); (2) anyone edited
// the Lease during the window (an operator's annotation): "released",
// while the hand-off record still stands and nobody but the ghost target
// may take the lease for a lease duration.
func TestHandOffRegressionTimeoutReportsWhatHappened(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	t.Run("target took it at the deadline", func(t *testing.T) {
		fc := fake.NewClientset()
		enforceResourceVersions(fc)
		aReleasing := make(chan struct{})
		var once sync.Once
		client := hooked{Clientset: fc, beforeUpdate: func(l *coordinationv1.Lease) {
			if l.Name != "l" || l.Spec.HolderIdentity == nil {
				return
			}
			switch h := *l.Spec.HolderIdentity; {
			case h == "b" && l.Annotations[IncarnationAnnotation] != "": // b's acquisition
				<-aReleasing
			case h == "" && l.Annotations[HandOffAnnotation] == "": // a's timeout release
				once.Do(func() { // b's acquisition lands first
					close(aReleasing)
					waitUntil(10*time.Second, func() bool {
						l, err := fc.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
						return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "b"
					})
				})
			}
		}}
		a, b := process(t, client), process(t, client)
		_, eb := leaderAndRecordedStandby(t, a, b, "a", "b", fastUnitTiming)
		err := a.HandOff("ns", "l", "b", 500*time.Millisecond)
		okB, tok, _ := eb.IsLeader()
		t.Logf("HandOff = %v; b leads: %v (token %d)", err, okB, tok)
		if !(!errors.Is(err, errReleasedInstead) || !okB) {
			t.Fatal("regression (review 2)")
		}
	})
	t.Run("lease annotated during the window", func(t *testing.T) {
		fc := fake.NewClientset()
		enforceResourceVersions(fc)
		a := process(t, fc)
		ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ea.WaitElected(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := leaseRecords(clientsetapi.Wrap(fc)).Put(t.Context(), "ns", "l", Candidate{Identity: "ghost", RenewTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.HandOff("ns", "l", "ghost", time.Second) }()
		eventually(t, 5*time.Second, "the hand-off record", func() bool {
			l, err := fc.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
			return err == nil && recordOf(l).handedOffTo("ghost")
		})
		annotateLease(t, fc, "example.com/note", "maintenance")
		err = <-done
		l, _ := fc.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
		r := recordOf(l)
		t.Logf("HandOff = %v; lease now: holder %q, handed-off-to %q", err, r.holder, r.handOffTo)
		if !(!errors.Is(err, errReleasedInstead) || !r.handedOffTo("ghost")) {
			t.Fatal("regression (review 2)")
		}
	})
}

// slowOnce answers one renewal of lease "l", once armed, only when its
// context ends (on the leader's goroutine: at the inline cut), as a
// response read just then.
type slowOnce struct {
	kubeapi.Client
	armed    atomic.Bool
	inFlight atomic.Int32
}

func (c *slowOnce) Leases(ns string) kubeapi.Leases { return slowOnceLeases{c.Client.Leases(ns), c} }

type slowOnceLeases struct {
	kubeapi.Leases
	c *slowOnce
}

func (l slowOnceLeases) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	if name == "l" && l.c.armed.CompareAndSwap(true, false) {
		l.c.inFlight.Add(1)
		defer l.c.inFlight.Add(-1)
		<-ctx.Done()
		ctx = context.WithoutCancel(ctx)
	}
	return l.Leases.Patch(ctx, name, pt, data, opts, sub...)
}

// A hand-off begun while a renewal is on its way gives the target its
// whole timeout from the hand-off record's write: the wait for the
// renewal's answer is not taken from it.
func TestHandOffTimeoutStartsAtItsWrite(t *testing.T) {
	client := fake.NewClientset()
	slowA := &slowOnce{Client: clientsetapi.Wrap(client)}
	a, b := processOn(t, slowA), process(t, client)
	ea, err := a.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eb, err := b.RunElection("ns", "l", "b", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b follows", func() bool {
		s := eb.obs.snapshot()
		cs, err := a.Candidates("ns", "l")
		return s.synced && s.rec.holder == "a" && err == nil && len(cs) == 2
	})
	slowA.armed.Store(true)
	eventually(t, 5*time.Second, "a renewal in flight", func() bool { return slowA.inFlight.Load() == 1 })
	// It is answered after the hand-off's whole timeout (the cut is 1 s).
	if err := a.HandOff("ns", "l", "b", 500*time.Millisecond); err != nil {
		t.Fatalf("HandOff to a campaigning target: %v", err)
	}
}

// lostAnswerPair is a leader "a", whose client loses the answers of the
// updates of the Lease that loseA picks (they land), and a campaigning
// standby "b", whose client loses those loseB picks; one fake API server
// that enforces resource versions, as a real one does.
func lostAnswerPair(t *testing.T, loseA, loseB func(*coordinationv1.Lease) bool) (a, b *Manager, ea, eb *Election, client *fake.Clientset) {
	t.Helper()
	client = fake.NewClientset()
	enforceResourceVersions(client)
	a, b, ea, eb = campaigningPair(t, losingAnswers(client, loseA), losingAnswers(client, loseB))
	return a, b, ea, eb, client
}

// once picks the first Lease that pick picks, and no other.
func once(pick func(*coordinationv1.Lease) bool) func(*coordinationv1.Lease) bool {
	var done atomic.Bool
	return func(l *coordinationv1.Lease) bool { return pick(l) && done.CompareAndSwap(false, true) }
}

func handingOff(l *coordinationv1.Lease) bool { return l.Annotations[HandOffAnnotation] != "" }
func never(*coordinationv1.Lease) bool        { return false }

func heldByIdentity(identity string) func(*coordinationv1.Lease) bool {
	return func(l *coordinationv1.Lease) bool { return recordOf(l).holder == identity }
}

func currentLease(t *testing.T, client *fake.Clientset) record {
	t.Helper()
	l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return recordOf(l)
}

// A hand-off record that landed although its answer was lost is a
// hand-off: the target, campaigning, takes the lease, and HandOff says so
// (it used to say "released instead" while the record stood).
func TestAHandOffWhoseAnswerIsLostStillHandsOff(t *testing.T) {
	a, _, _, eb, client := lostAnswerPair(t, once(handingOff), never)
	if err := a.HandOff("ns", "l", "b", 5*time.Second); err != nil {
		t.Fatalf("HandOff whose record landed, answer lost, target campaigning = %v (Lease now %+v); want nil", err, currentLease(t, client))
	}
	if token, err := eb.WaitElected(time.Second); err != nil || token != 2 {
		t.Fatalf("the target after the hand-off: token %d, %v; want it leading with token 2", token, err)
	}
}

// The same towards a target that does not campaign (it crashed): HandOff
// times out, and the record that landed is released then, with the failed
// target remembered, so the standby takes the lease at once.
func TestAHandOffWhoseAnswerIsLostToADeadTargetIsReleasedAfterItsTimeout(t *testing.T) {
	a, _, _, eb, client := lostAnswerPair(t, once(handingOff), never)
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "c", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err := a.HandOff("ns", "l", "c", 300*time.Millisecond)
	if !errors.Is(err, ErrHandOffTimeout) || !errors.Is(err, errReleasedInstead) {
		t.Fatalf("HandOff to a dead target, record landed, answer lost = %v (Lease now %+v); want a timeout, then released", err, currentLease(t, client))
	}
	awaitFailedHandOff(t, client, "c")
	if token, err := eb.WaitElected(5 * time.Second); err != nil || token != 2 {
		t.Fatalf("the standby after the release: token %d, %v", token, err)
	}
}

// An acquisition that landed although its answer was lost is this
// candidacy's: it leads at its next look instead of waiting out its own
// record (a lease duration, 15 s here), as plain client-go adopts a record
// naming it.
func TestAnAcquisitionWhoseAnswerIsLostIsAdopted(t *testing.T) {
	a, _, _, eb, client := lostAnswerPair(t, never, once(heldByIdentity("b")))
	if err := a.HandOff("ns", "l", "b", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 4*time.Second, "the target leads after its acquisition's answer was lost", func() bool {
		ok, _, _ := eb.IsLeader()
		return ok
	})
	if ok, token, _ := eb.IsLeader(); !ok || token != 2 {
		t.Fatalf("the target leads with token %d; want 2, the token it wrote", token)
	}
	if r := currentLease(t, client); !r.heldBy("b", eb.incarnation) || r.token != 2 {
		t.Fatalf("Lease %+v; want b's incarnation, token 2", r)
	}
}

// A candidacy cancelled while none of its acquisitions was answered
// releases what may have landed: a record naming it is not left to expire.
func TestACancelAfterLostAcquisitionAnswersReleasesWhatLanded(t *testing.T) {
	a, b, _, eb, client := lostAnswerPair(t, never, heldByIdentity("b"))
	if err := a.HandOff("ns", "l", "b", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's acquisition landed", func() bool { return currentLease(t, client).heldBy("b", eb.incarnation) })
	if err := b.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if r := currentLease(t, client); r.holder != "" {
		t.Fatalf("after the cancel the Lease is %+v; want it released", r)
	}
}

// An acquisition that landed, but whose caller was answered 409 (client-go
// sent it again after a 429 or a 5xx with Retry-After, and the first one
// had landed), is this candidacy's too: adopted at the next look, and
// released by a cancel, not left to be waited out.
func TestAnAcquisitionAnsweredConflictAfterItLandedIsAdoptedOrReleased(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		t.Run(map[bool]string{false: "adopted", true: "released by a cancel"}[cancel], func(t *testing.T) {
			client := fake.NewClientset()
			enforceResourceVersions(client)
			landedThenConflict := hooked{Clientset: client, afterUpdate: func(l *coordinationv1.Lease, err error) error {
				if err == nil && l.Name == "l" && recordOf(l).holder == "b" {
					return apierrors.NewConflict(coordinationv1.Resource("leases"), "l", errors.New("the object has been modified"))
				}
				return err
			}}
			a, b, _, eb := campaigningPair(t, client, landedThenConflict)
			if err := a.HandOff("ns", "l", "b", 5*time.Second); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "b's acquisition landed", func() bool { return currentLease(t, client).heldBy("b", eb.incarnation) })
			if cancel {
				if err := b.CancelElection("ns", "l"); err != nil {
					t.Fatal(err)
				}
				if r := currentLease(t, client); r.holder != "" {
					t.Fatalf("after the cancel the Lease is %+v; want it released", r)
				}
				return
			}
			// Its adoption is answered 409 as well (the hook): it keeps
			// adopting its own landed write, and each adoption lands.
			eventually(t, 4*time.Second, "b adopts what landed", func() bool { return countUpdatesBy(client, "b") >= 2 })
		})
	}
}

// countUpdatesBy counts the updates of the election Lease that name holder.
func countUpdatesBy(client *fake.Clientset, holder string) int {
	n := 0
	for _, a := range client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok {
			if l, ok := u.GetObject().(*coordinationv1.Lease); ok && l.Name == "l" && recordOf(l).holder == holder {
				n++
			}
		}
	}
	return n
}

// An acquisition that keeps landing and being refused (a proxy that
// forwards, then answers 5xx or 409) is adopted at once the first time,
// then no faster than the campaign's backoff: never at round-trip speed.
func TestAnAcquisitionThatKeepsLandingRefusedBacksOff(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	server := fake.NewClientset(leaseAt("", 1, testNow.Add(-time.Hour), 1, "5")) // released long ago
	enforceResourceVersions(server)
	m := NewManager(clk)
	m.SetClient(clientsetapi.Wrap(hooked{Clientset: server, afterUpdate: func(l *coordinationv1.Lease, err error) error {
		if err == nil && l.Name == "l" && recordOf(l).holder == "b" {
			return apierrors.NewInternalError(errors.New("the proxy lost the answer"))
		}
		return err
	}}))
	m.SetEvents(false)
	t.Cleanup(func() { go clk.Step(time.Hour); _ = m.Shutdown(5 * time.Second) })
	if _, err := m.RunElection("ns", "l", "b", unitTiming); err != nil {
		t.Fatal(err)
	}
	awaitWaitingIn(t, "(*Election).sleep", 1)
	if n := countUpdatesBy(server, "b"); n != 2 {
		t.Fatalf("%d writes before the first backoff; want 2: the acquisition and one adoption at once", n)
	}
	clk.Step(unitTiming.RetryPeriod)
	eventually(t, 5*time.Second, "the adoption after the backoff", func() bool { return countUpdatesBy(server, "b") == 3 })
	awaitWaitingIn(t, "(*Election).sleep", 1)
}

// An acquisition left unanswered closes the connections silent since it
// was sent (its API server may be frozen), as a renewal does.
func TestAnUnansweredAcquisitionRedials(t *testing.T) {
	server := fake.NewClientset(leaseAt("", 1, testNow, 1, "5")) // released
	enforceResourceVersions(server)
	m := process(t, losingAnswers(server, once(heldByIdentity("b"))))
	closer := &closerLog{}
	m.api.redial = &redialer{conns: closer}
	e, err := m.RunElection("ns", "l", "b", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := len(closer.sinces()); n != 1 {
		t.Fatalf("%d rounds of closing silent connections; want 1, after the unanswered acquisition", n)
	}
}

// Hand-offs the library makes on its own (the preferred holder,
// PolicyYieldToNewer): the host can still read why the term ended, and
// Shutdown waits for one in flight.

// A hand-off the library starts on its own (here: the preferred holder)
// takes the election out of the Manager's map before it ends it. A
// Shutdown meanwhile neither cancels nor waits for it: it returns while the
// hand-off is still being written and waited for, and the hand-off's Event
// then starts a new broadcaster after Shutdown stopped the old one
// (TestNoBroadcasterStartedAfterShutdown's leak, back by another road);
// the hand-off's observer share also keeps an observer (list + watch)
// running after Shutdown for up to a lease duration.
func TestHandOffRegressionShutdownWaitsForOwnHandOff(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	var block atomic.Bool
	block.Store(true)
	writing := make(chan struct{}, 1)
	release := make(chan struct{})
	client := hooked{Clientset: fc, beforeUpdate: func(l *coordinationv1.Lease) {
		if l.Name == "l" && l.Annotations[HandOffAnnotation] != "" && block.CompareAndSwap(true, false) {
			writing <- struct{}{}
			<-release
		}
	}}
	a := NewManager(clock.RealClock{})
	a.SetClient(clientsetapi.Wrap(client))
	a.SetEvents(true)
	b := process(t, client)
	leaderAndRecordedStandby(t, a, b, "a", "b", fastUnitTiming)
	annotateLease(t, fc, PreferredHolderAnnotation, "b")
	select {
	case <-writing:
	case <-time.After(5 * time.Second):
		t.Fatal("no hand-off started")
	}
	running := a.events.Running
	shut := make(chan error, 1)
	go func() { shut <- a.Shutdown(3 * time.Second) }()
	waiting := func() bool { // for the hand-off's end, or for the election's (which the hand-off holds)
		return waitingIn("(*Manager).Shutdown.") > 0 || lockedIn("(*Election).CancelWithin") > 0
	}
	if !waitUntil(10*time.Second, func() bool { return len(shut) > 0 || waiting() }) {
		t.Fatal("Shutdown neither returned nor waited for the hand-off in flight")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) before the hand-off in flight ended", err)
	default:
	}
	close(release) // the hand-off's write lands
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if running() {
		t.Fatal("an Events broadcaster runs after Shutdown")
	}
}

// After a hand-off the library made on its own (preferred holder,
// PolicyYieldToNewer), the header promises WaitLost -1 "leadership handed
// off to ...". handOffOnItsOwn removes the election from the Manager
// (forgetElection) and does not keep it among the replaced ones, so a
// K8sLeaseWaitLost / K8sLeaseWaitLostId called after it (capi: election()
// finds nothing, "nothing to wait for") returns 0, as after a cancel: only
// a host already blocked in WaitLost learns why. A loss, by contrast, stays
// readable.
func TestHandOffRegressionOwnHandOffReasonKeptForWaitLost(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a, b := process(t, client), process(t, client)
	ea, _ := leaderAndRecordedStandby(t, a, b, "a", "b", fastUnitTiming)
	annotateLease(t, client, PreferredHolderAnnotation, "b")
	<-ea.ending.ended
	byName, byID := a.Election("ns", "l"), a.ElectionID("ns", "l", ea.ID())
	t.Logf("the election's own WaitLost: %v; found later by name: %v, by id: %v (capi WaitLost[Id] then returns 0)",
		ea.WaitLost(), byName != nil, byID != nil)
	if !(!errors.Is(ea.WaitLost(), ErrHandedOff) || byName != nil || byID != nil) {
		t.Fatal("regression (review 2)")
	}
}

// The hand-off record is told apart from anything another writer's renewal
// or acquisition can leave on the Lease: a plain client-go candidate may
// have any identity, the hand-off record's holder name included, and keeps
// leaseTransitions and every annotation when it writes.

// handOffRecordAt is a hand-off record to "b" written at t0 over a lease a
// held with token 3.
func handOffRecordAt(t0 time.Time) *coordinationv1.Lease {
	l := testLease("l", "a", 3, t0.Add(-time.Second), 10)
	handOffSpec(l, "b", Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 2 * time.Second}, t0)
	return l
}

// clientGoWrite is what a plain client-go LeaderElector named identity
// writes over l: a renewal when it sees itself as the holder (acquireTime
// and leaseTransitions kept), else an acquisition (transitions + 1); the
// annotations stay as they were.
func clientGoWrite(l *coordinationv1.Lease, identity string, at time.Time) *coordinationv1.Lease {
	l = l.DeepCopy()
	renew := metav1.NewMicroTime(at)
	seconds := int32(15)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != identity {
		transitions := *l.Spec.LeaseTransitions + 1
		l.Spec.LeaseTransitions = &transitions
		l.Spec.AcquireTime = &renew
	}
	l.Spec.HolderIdentity = &identity
	l.Spec.RenewTime = &renew
	l.Spec.LeaseDurationSeconds = &seconds
	return l
}

func TestAHandOffRecordWrittenOverByAnotherWriterIsNoHandOff(t *testing.T) {
	t0 := testNow
	handed := handOffRecordAt(t0)
	if !recordOf(handed).handedOffTo("b") {
		t.Fatal("the hand-off record itself is not recognised")
	}
	renewed := clientGoWrite(handed, handOffHolder("b"), t0.Add(2*time.Second))
	// client-go named like the record's holder, after another client-go
	// candidate led in between (its acquisition sets acquireTime = renewTime).
	other := clientGoWrite(handed, "x", t0.Add(11*time.Second))
	acquired := clientGoWrite(other, handOffHolder("b"), t0.Add(30*time.Second))
	for name, l := range map[string]*coordinationv1.Lease{
		"renewed by client-go named like the record's holder":            renewed,
		"acquired by client-go named like the record's holder, later on": acquired,
	} {
		r := recordOf(l)
		if r.handedOffTo("b") || r.handingOff() {
			t.Errorf("%s: still taken for a hand-off to b", name)
		}
		s := snapshot{synced: true, rec: r, observedAt: t0.Add(time.Minute)}
		if act, _ := decide(s, t0.Add(time.Minute+time.Second), 10*time.Second, "b", record{}); act != actWait {
			t.Errorf("%s: the target decides %v; want wait (client-go leads it)", name, act)
		}
	}
}

// While a hand-off is pending the lease has a holder-to-be: GetHolder and
// holder watches report the target (only it may take the lease within the
// record's term), not "no holder", which would say a campaign could take
// it at once.
func TestAPendingHandOffReportsTheTarget(t *testing.T) {
	s := snapshot{synced: true, rec: recordOf(handOffRecordAt(testNow)), observedAt: testNow}
	if h, tok, ok := s.holderView(testNow.Add(time.Second)); h != "b" || tok != 3 || !ok {
		t.Fatalf("holderView of a pending hand-off = %q, %d, %v; want b, 3, true", h, tok, ok)
	}
	if h, _, _ := s.holderView(testNow.Add(10 * time.Second)); h != "" {
		t.Fatalf("holderView once the hand-off's term ran out = %q; want no holder", h)
	}
}

// A hand-off to b while a plain client-go candidate named like the
// hand-off record's holder campaigns: client-go takes the record as its
// own and renews it. The target must not take it over beside client-go,
// and the hand-off's timeout must not release client-go's live term.
func TestHandOffRecordRenewedByClientGoIsNeitherTakenNorReleased(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a := process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	cgLeading, ctx := fakeClientGoCandidate(t, client, handOffHolder("b"))
	// b's candidate record, as left by b, which is frozen: it does not
	// campaign while the hand-off's window runs.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(ctx, "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err = a.HandOff("ns", "l", "b", 1500*time.Millisecond)
	if err == nil || errors.Is(err, errReleasedInstead) {
		t.Fatalf("HandOff = %v; want the report that the lease changed before b took it, and no release", err)
	}
	eventually(t, 5*time.Second, "client-go leads the record it took as its own", cgLeading.Load)
	if l, err := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{}); err != nil || *l.Spec.HolderIdentity != handOffHolder("b") {
		t.Fatalf("after the hand-off's timeout the lease is %+v, %v; want client-go's live term, not released", l, err)
	}
	// b resumes and campaigns: it must wait while client-go renews.
	eb := process(t, client)
	e, err := eb.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	neverBesideClientGo(t, client, e, handOffHolder("b"), cgLeading, "two leaders: b took the hand-off record that client-go renews")
}

// clientGoWrites counts the writes of ns/l that name identity as the holder
// (a plain client-go candidate's acquisitions and renewals).
func clientGoWrites(client *fake.Clientset, identity string) int {
	n := 0
	for _, a := range client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "leases" {
			if l, ok := u.GetObject().(*coordinationv1.Lease); ok && l.Name == "l" && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == identity {
				n++
			}
		}
	}
	return n
}

// neverBesideClientGo waits until e follows the lease that the client-go
// candidate named identity leads, then while client-go renews it 25 times
// (2.5 s, more than e's lease duration: every renewal a chance for e to
// take the lease, at once or once it judged the term over), and fails with
// msg if e is elected meanwhile.
func neverBesideClientGo(t *testing.T, client *fake.Clientset, e *Election, identity string, cgLeading *atomic.Bool, msg string) {
	t.Helper()
	eventually(t, 5*time.Second, "the candidate following client-go's term", func() bool {
		s := e.obs.snapshot()
		return s.synced && s.rec.holder == identity
	})
	from := clientGoWrites(client, identity)
	eventually(t, 15*time.Second, "25 renewals by client-go", func() bool {
		return isClosed(e.elected) || clientGoWrites(client, identity) >= from+25
	})
	if isClosed(e.elected) {
		t.Fatal(msg)
	}
	if !cgLeading.Load() {
		t.Fatal("client-go no longer leads")
	}
}

// A hand-off record brought back whole (etcd restored from a backup taken
// during a hand-off, the Lease re-created from a dump) still reads as one:
// the target must not take it at once when this process saw a later term
// (a higher token) or the record is far older than its term by the clock.
func TestARestoredHandOffRecordIsNotTakenAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	for name, restored := range map[string]struct {
		at    time.Time
		token int32
	}{
		"a later term was seen":       {testNow, 3},
		"hours old by the wall clock": {testNow.Add(-3 * time.Hour), 5},
		"both":                        {testNow.Add(-3 * time.Hour), 3},
	} {
		o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
		x := testLease("l", "x", 5, testNow, 15)
		x.ResourceVersion = "500"
		o.applyRead(x, "500", o.seqNow()) // x leads, term 5
		h := testLease("l", "a", restored.token, restored.at, 15)
		handOffSpec(h, "t", unitTiming, restored.at)
		h.ResourceVersion = "300"
		o.applyRead(h, "300", o.seqNow()) // read afresh at an older version
		s := o.snapshot()
		if act, _ := decide(s, clk.Now(), 15*time.Second, "t", record{}); act == actAcquire {
			t.Errorf("%s: the target takes the restored hand-off record (token %d, highest seen %d) at once; want a wait of a lease duration",
				name, s.rec.token, s.highestToken)
		}
	}
	// The live hand-off is still taken at once.
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	h := testLease("l", "a", 5, testNow, 15)
	handOffSpec(h, "t", unitTiming, testNow)
	o.applyRead(h, "501", o.seqNow())
	if act, _ := decide(o.snapshot(), clk.Now(), 15*time.Second, "t", record{}); act != actAcquire {
		t.Fatalf("a live hand-off record: decide = %v; want acquire", act)
	}
}

// A hand-off to an identity that a plain client-go candidate uses: client-go
// sees itself as the observed holder (IsLeader() compares the holder with
// its identity), skips the expiry check and takes the lease WITHOUT bumping
// leaseTransitions (it keeps the old leader's token), keeping every
// annotation, so the hand-off record (holder b, no incarnation,
// handed-off-to b) stays while client-go b leads. HandOff reports "timed
// out ... the lease is released" although b leads. Any candidate of this
// library named b then takes the lease at once (decide: handedOffTo(self))
// while client-go b leads: two leaders.
func TestHandOffRegressionClientGoNamedLikeTheTargetNeverLeadsBesideUs(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a := process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	tokenA, err := ea.WaitElected(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Plain client-go candidate "b".
	cgLeading, ctx := fakeClientGoCandidate(t, client, "b")
	eventually(t, 5*time.Second, "client-go b's tries", func() bool { // each a GET of the lease
		n := 0
		for _, a := range client.Actions() {
			if g, ok := a.(k8stesting.GetAction); ok && a.GetResource().Resource == "leases" && g.GetName() == "l" {
				n++
			}
		}
		return n >= 2
	})
	if cgLeading.Load() {
		t.Fatal("client-go b leads before the hand-off")
	}
	// b's candidate record (say left by b's earlier life on this library,
	// or records unreadable: requireCampaigning then lets it through).
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(ctx, "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}

	err = a.HandOff("ns", "l", "b", 1500*time.Millisecond)
	if !errors.Is(err, ErrHandOffTimeout) || !errors.Is(err, errReleasedInstead) {
		t.Fatalf("HandOff = %v, want a timeout and a release: client-go b must not take the hand-off record", err)
	}
	_ = tokenA
	// client-go b takes the released lease the normal way; a candidate of
	// this library also named b must not lead beside it.
	eventually(t, 5*time.Second, "client-go b leads after the release", cgLeading.Load)
	b2 := process(t, client)
	eb2, err := b2.RunElection("ns", "l", "b", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	neverBesideClientGo(t, client, eb2, "b", cgLeading, "two leaders: library b and client-go b")
}

// Hand-offs in a loop among three hosts, with request latency: never two
// leaders, and every term's token greater.

// withLatency delays Lease writes before (request) and after (response) they
// land, up to max each.
type withLatency struct {
	*fake.Clientset
	max time.Duration
}

func (c withLatency) CoordinationV1() coordclient.CoordinationV1Interface {
	return latencyCoord{c.Clientset.CoordinationV1(), c.max}
}

type latencyCoord struct {
	coordclient.CoordinationV1Interface
	max time.Duration
}

func (s latencyCoord) Leases(ns string) coordclient.LeaseInterface {
	return latencyLeases{s.CoordinationV1Interface.Leases(ns), s.max}
}

type latencyLeases struct {
	coordclient.LeaseInterface
	max time.Duration
}

func (l latencyLeases) nap() { time.Sleep(rand.N(l.max)) }

func (l latencyLeases) Update(ctx context.Context, x *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	l.nap()
	r, err := l.LeaseInterface.Update(ctx, x, o)
	l.nap()
	return r, err
}

func (l latencyLeases) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	l.nap()
	r, err := l.LeaseInterface.Patch(ctx, name, pt, data, o, sub...)
	l.nap()
	return r, err
}

// Soundness probe (passes when nothing is wrong): hand-offs in a loop among
// three hosts, with request and response latencies (renewals pipelined and
// landing late), compare-and-swap enforced; as each host's term starts,
// a check that no other host leads, and at the end one that every term's
// token is greater than the one before.
func TestHandOffRegressionStressNeverTwoLeaders(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	client := withLatency{Clientset: fc, max: 40 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type term struct {
		token, rv int64 // rv: of a write of the term, which orders the terms
	}
	var mu sync.Mutex
	var terms []term
	violations := make(chan string, 10)
	var hosts []*standingHost
	leading := func() (n int, leader *standingHost) {
		for _, h := range hosts {
			if h.leads() {
				n, leader = n+1, h
			}
		}
		return n, leader
	}
	elected := func(e *Election) { // a term starts: two leaders at once can only begin now
		if n, _ := leading(); n > 1 {
			select {
			case violations <- "two leaders at once":
			default:
			}
		}
		e.mu.Lock()
		rv, _ := strconv.ParseInt(e.term.written.ResourceVersion, 10, 64)
		tm := term{e.term.token, rv}
		e.mu.Unlock()
		mu.Lock()
		terms = append(terms, tm)
		mu.Unlock()
	}
	for _, id := range []string{"a", "b", "c"} {
		hosts = append(hosts, &standingHost{t: t, m: process(t, client), id: id, awaitRecordDelete: true, onElected: elected})
	}
	for _, h := range hosts {
		go h.run(ctx)
	}
	handed, failed := 0, 0
	for attempt := 0; handed < 40 && attempt < 200; attempt++ {
		var leader *standingHost
		if !waitUntil(10*time.Second, func() bool { _, leader = leading(); return leader != nil }) {
			t.Fatalf("no leader for 10 s (after %d hand-offs, %d failed)", handed, failed)
		}
		to := leader
		for to == leader {
			to = hosts[rand.N(len(hosts))]
		}
		if err := leader.m.HandOff("ns", "l", to.id, time.Second); err != nil {
			failed++
			if !errors.Is(err, errTargetNotSeen) { // the record race (see TestHandOffRegressionRecordSurvivesStandingAgain)
				t.Logf("HandOff %s -> %s: %v", leader.id, to.id, err)
			}
		} else {
			handed++
		}
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("hand-offs: %d done, %d failed; %d terms", handed, failed, len(terms))
	select {
	case v := <-violations:
		t.Fatal(v)
	default:
	}
	slices.SortFunc(terms, func(a, b term) int { return cmp.Compare(a.rv, b.rv) })
	for i := 1; i < len(terms); i++ {
		if terms[i].token <= terms[i-1].token {
			t.Fatalf("token did not increase: term at rv %d has token %d after token %d", terms[i].rv, terms[i].token, terms[i-1].token)
		}
	}
}

// PolicyYieldToNewer: it tries again after a refused hand-off, and a newer
// version that only crash-loops costs one hand-off, not a flapping
// leadership.

// yieldToNewer returns after its first call of the hook whatever the hook
// did: when handOffOnItsOwn refuses (the newer candidate's record read by
// name is missing for a moment: it just stood again, see
// TestHandOffRegressionRecordSurvivesStandingAgain; or the read races its refresh),
// PolicyYieldToNewer is off for the rest of the term and the newer
// version never gets the lease.
func TestHandOffRegressionYieldRetriesAfterARefusal(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	var refused atomic.Int32
	client.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == candidateRecordName("l", "n") && refused.Add(1) == 1 {
			return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), candidateRecordName("l", "n"))
		}
		return false, nil, nil
	})
	a := process(t, client)
	ea, err := a.RunElectionWith("ns", "l", "a", fastUnitTiming, ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a following the candidate records", func() bool {
		for _, act := range client.Actions() {
			if w, ok := act.(k8stesting.WatchAction); ok && act.GetResource().Resource == "leases" && !w.GetWatchRestrictions().Labels.Empty() {
				return true
			}
		}
		return false
	})
	n := process(t, client)
	en, err := n.RunElectionWith("ns", "l", "n", fastUnitTiming, ElectionOptions{Version: "2.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if !waitUntil(10*time.Second, func() bool { ok, _, _ := en.IsLeader(); return ok }) {
		t.Logf("record reads refused: 1 of %d", refused.Load())
		t.Fatal("regression (review 2): the newer n (campaigning, record present) was not handed the lease within 10 s")
	}
	if ok, _, _ := ea.IsLeader(); ok {
		t.Fatal("the old version a still leads beside n")
	}
	t.Logf("the newer n leads; record reads refused: 1 of %d", refused.Load())
}

// PolicyYieldToNewer with a newer-version replica that does not campaign
// (a broken rollout: the new pod crash-loops; each start re-puts its record,
// so it stays live): every old-version leader yields to it at once, the
// lease then has no leader for a lease duration, is released, the next
// old-version leader yields again, ... for as long as the record is live.
func TestHandOffRegressionCrashLoopingNewerDoesNotFlapLeadership(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a, b := standingPair(t, client, "a", "b", ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer | PolicyHandOffOnCancel})
	// Each start of n re-puts its record, naming the term it saw.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "n", Version: "2.0.0", RenewTime: time.Now(), SeenToken: math.MaxInt32}); err != nil {
		t.Fatal(err)
	}
	awaitFailedHandOff(t, client, "n")
	awaitSteadyLeader(t, a.m, b.m)
	t.Logf("hand-offs while a crash-looping 2.0.0 replica's record is live: %d", handOffCount(a.m, b.m))
	if n := handOffCount(a.m, b.m); n != 1 {
		t.Fatalf("%d hand-offs to a newer version that does not campaign; want the one that failed", n)
	}
}

// The leader follows the candidate records from the version its list
// showed: a watch without one starts with every record as an event (a real
// API server's "send initial events"), which the loop takes for a change,
// lists again and watches again, at round-trip speed for the whole term.
func TestYieldToNewerWatchesFromItsList(t *testing.T) {
	client := fake.NewClientset()
	watched := make(chan string, 16)
	client.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() {
			return false, nil, nil
		}
		return true, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "77"}}, nil
	})
	client.PrependWatchReactor("leases", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if w := a.(k8stesting.WatchAction).GetWatchRestrictions(); !w.Labels.Empty() {
			watched <- w.ResourceVersion
		}
		return false, nil, nil
	})
	a := process(t, client)
	ea, err := a.RunElectionWith("ns", "l", "a", fastUnitTiming, ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if rv := receive(t, watched, 5*time.Second, "the watch of the candidate records"); rv != "77" {
		t.Fatalf("the candidate records watched from resourceVersion %q; want 77, the list's", rv)
	}
}

// The preferred holder: one that does not campaign, or whose record cannot
// be read, does not make leadership flap, and one that is named stops
// PolicyYieldToNewer from handing the lease back and forth.

// The preferred holder names an identity whose candidate record is live
// (renewed within 10 min) but which does not campaign: it crashed, or shut
// down cleanly and its record's delete did not land (Shutdown does not wait
// for it). Every new leader hands the lease to it at its first renewal (the
// 10 s recheck is per Election, and each term is a new Election), the lease
// then has no leader for a lease duration (the hand-off's timeout), and so
// on: for up to candidateTTL (10 min), or for good when the records cannot
// be read (requireCampaigning then lets every hand-off through).
func TestHandOffRegressionPreferredGhostCostsOneHandOff(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	a, b := standingPair(t, client, "a", "b", ElectionOptions{})
	// A record that names every term (as one written by a replica that
	// died during this one does): the first hand-off to it is made.
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "ghost", RenewTime: time.Now(), SeenToken: math.MaxInt32}); err != nil {
		t.Fatal(err)
	}
	annotateLease(t, client, PreferredHolderAnnotation, "ghost")
	awaitFailedHandOff(t, client, "ghost")
	awaitSteadyLeader(t, a.m, b.m)
	t.Logf("hand-offs: %d (lease %v)", handOffCount(a.m, b.m), fastUnitTiming.LeaseDuration)
	if n := handOffCount(a.m, b.m); n != 1 {
		t.Fatalf("%d hand-offs to a preferred holder that does not campaign; want the one that failed", n)
	}
}

// A preferred holder whose record was written before this term (a replica
// that died then) is never handed the lease: it is not seen alive.
func TestAPreferredHolderThatDidNotSeeThisTermIsNotHandedTheLease(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	targets := handOffTargets(client)
	a, b := standingPair(t, client, "a", "b", ElectionOptions{})
	if _, err := leaseRecords(clientsetapi.Wrap(client)).Put(t.Context(), "ns", "l", Candidate{Identity: "ghost", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	annotateLease(t, client, PreferredHolderAnnotation, "ghost")
	awaitSteadyLeader(t, a.m, b.m)
	if n, got := handOffCount(a.m, b.m), targets(); n != 0 || len(got) != 0 {
		t.Fatalf("%d hand-offs (records to %v) to a preferred holder whose record predates the term; want none", n, got)
	}
}

// PolicyYieldToNewer plus a preferred holder of an older version: P (1.0.0)
// hands to N (2.0.0) as it is newer, N hands back to P as the preferred
// holder, for ever (each term is a new Election: no rate limit across
// terms). A rolling update in a cluster with the annotation set does this.
func TestHandOffRegressionPreferredHolderStopsYielding(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &standingHost{t: t, m: process(t, client), id: "p", awaitRecordDelete: true, opts: ElectionOptions{Version: "1.0.0", Policy: PolicyYieldToNewer}}
	n := &standingHost{t: t, m: process(t, client), id: "n", awaitRecordDelete: true, opts: ElectionOptions{Version: "2.0.0", Policy: PolicyYieldToNewer}}
	go p.run(ctx)
	eventually(t, 5*time.Second, "p leads", p.leads)
	annotateLease(t, client, PreferredHolderAnnotation, "p")
	go n.run(ctx)
	eventually(t, 5*time.Second, "n's candidate record", func() bool {
		cs, err := p.m.Candidates("ns", "l")
		return err == nil && len(cs) == 2
	})
	awaitSteadyLeader(t, p.m, n.m)
	got := handOffCount(p.m, n.m)
	t.Logf("hand-offs before a leader stayed: %d (p leads: %v)", got, p.leads())
	if !(got < 6) {
		t.Fatal("regression (review 2)")
	}
}

// The same with no record at all, where the record cannot be read: with
// the shipped deploy/rbac.yaml, a get of a record whose name is not one of
// the three listed (a typo in the annotation, a pod name from before a
// scale-down) is Forbidden, requireCampaigning then "hands off all the
// same", and leadership flaps for as long as the annotation stays.
func TestHandOffRegressionUnreadableRecordRefusesOwnHandOffs(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	client := fake.NewClientset()
	enforceResourceVersions(client)
	const typo = "metadata-master-O" // letter O
	var refused atomic.Int32         // reads of the typo's record
	client.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if name := a.(k8stesting.GetAction).GetName(); strings.Contains(name, "-candidate-") {
			if name == candidateRecordName("l", typo) {
				refused.Add(1)
			}
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), name, errors.New("RBAC: not in resourceNames"))
		}
		return false, nil, nil
	})
	a, b := standingPair(t, client, "metadata-master-0", "metadata-master-1", ElectionOptions{})
	annotateLease(t, client, PreferredHolderAnnotation, typo)
	eventually(t, 10*time.Second, "the leader reading the preferred holder's record", func() bool { return refused.Load() > 0 })
	awaitSteadyLeader(t, a.m, b.m)
	t.Logf("preferred holder %q (no such replica): its record read %d times, refused; hand-offs: %d",
		typo, refused.Load(), handOffCount(a.m, b.m))
	if n := handOffCount(a.m, b.m); n != 0 {
		t.Fatalf("%d hand-offs to a preferred holder whose record cannot be read; want none", n)
	}
}

// slowLeaseUpdates answers every update of Lease "l", once armed, after
// latency, or with its context's error when that ends first: a slow API
// server (the update does not land then).
type slowLeaseUpdates struct {
	kubeapi.Client
	armed   atomic.Bool
	latency time.Duration
}

func (c *slowLeaseUpdates) Leases(ns string) kubeapi.Leases {
	return slowLeaseUpdatesLeases{c.Client.Leases(ns), c}
}

type slowLeaseUpdatesLeases struct {
	kubeapi.Leases
	c *slowLeaseUpdates
}

func (l slowLeaseUpdatesLeases) Update(ctx context.Context, x *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if x.Name == "l" && l.c.armed.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(l.c.latency):
		}
	}
	return l.Leases.Update(ctx, x, o)
}

// HandOff's timeout is how long to wait for the target: it bounds neither
// the hand-off record's write nor the release after it. With a timeout of
// a few milliseconds and an API server slower than that, the lease is
// handed off or released, never left held (for a lease duration, with no
// leader) by a leader that stepped down.
func TestHandOffTimeoutBoundsOnlyTheWaitForTheTarget(t *testing.T) {
	client := fake.NewClientset()
	slowA := &slowLeaseUpdates{Client: clientsetapi.Wrap(client), latency: 100 * time.Millisecond}
	a, b := processOn(t, slowA), process(t, client)
	ea, _ := leaderAndRecordedStandby(t, a, b, "a", "b", unitTiming)
	slowA.armed.Store(true)
	err := a.HandOff("ns", "l", "b", 5*time.Millisecond)
	t.Logf("HandOff(5 ms) on a 100 ms API server = %v", err)
	if errors.Is(err, errReleaseFailed) {
		t.Fatalf("the timeout for the target bounded the release too: %v", err)
	}
	if r := currentLease(t, client); r.heldBy("a", ea.incarnation) {
		t.Fatalf("the lease is still held by the leader that stepped down: %+v", r)
	}
}

// A hand-off that finds the election ended meanwhile (lost while the
// target's candidate record was being read) leaves it registered, ended,
// as a loss does: the election, looked up by its id, still reports why
// leadership was lost.
func TestHandOffRegressionLossDuringTheTargetCheckIsKept(t *testing.T) {
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	var armed atomic.Bool
	getting, proceed := make(chan struct{}), make(chan struct{})
	client := hooked{Clientset: fc, beforeGet: func(name string) {
		if name == candidateRecordName("l", "b") && armed.CompareAndSwap(true, false) {
			close(getting)
			<-proceed
		}
	}}
	a := process(t, client)
	ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := leaseRecords(clientsetapi.Wrap(fc)).Put(t.Context(), "ns", "l", Candidate{Identity: "b", RenewTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- a.HandOffID("ns", "l", ea.ID(), "b", time.Second) }()
	receive(t, getting, 5*time.Second, "the read of b's candidate record")
	// Another writer takes the lease meanwhile: a loses it.
	for {
		l, err := fc.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err = fc.CoordinationV1().Leases("ns").Update(t.Context(), clientGoWrite(l, "x", time.Now()), metav1.UpdateOptions{}); err == nil {
			break
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "a lost the lease", ea.Ended)
	close(proceed)
	err = receive(t, done, 10*time.Second, "HandOffID's answer")
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("HandOffID after the loss = %v, want %v", err, ErrNotLeader)
	}
	got := a.ElectionID("ns", "l", ea.ID())
	if got == nil {
		t.Fatal("the failed hand-off forgot the lost election: WaitLost by its id cannot tell why leadership was lost")
	}
	if err := got.WaitLost(); !errors.Is(err, ErrLeaseTaken) {
		t.Fatalf("WaitLost = %v, want %v", err, ErrLeaseTaken)
	}
}
