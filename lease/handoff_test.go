package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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
		ea, err := a.RunElection("ns", "l", "a", fastUnitTiming)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ea.WaitElected(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		eb, err := b.RunElection("ns", "l", "b", fastUnitTiming)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "b recorded", func() bool {
			cs, err := a.Candidates("ns", "l")
			return err == nil && len(cs) == 2
		})
		err = a.HandOff("ns", "l", "b", 500*time.Millisecond)
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
