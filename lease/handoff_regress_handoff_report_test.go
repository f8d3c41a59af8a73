package lease

import (
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

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
		client := hookedUpdates{Clientset: fc, before: func(l *coordinationv1.Lease) {
			if l.Name != "l" || l.Spec.HolderIdentity == nil {
				return
			}
			switch h := *l.Spec.HolderIdentity; {
			case h == "b" && l.Annotations[IncarnationAnnotation] != "": // b's acquisition
				<-aReleasing
			case h == "" && l.Annotations[HandOffAnnotation] == "": // a's timeout release
				once.Do(func() { close(aReleasing); time.Sleep(200 * time.Millisecond) })
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
