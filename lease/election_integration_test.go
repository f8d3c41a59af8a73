//go:build integration

package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

func TestSingleElection(t *testing.T) {
	name := leaseName(t)
	m := newProcess(t)
	e := mustRun(t, m, name, "a")
	token := mustElect(t, e, 5*time.Second)
	if token < 1 {
		t.Fatalf("first token = %d, want >= 1", token)
	}
	leader, isToken, left := e.IsLeader()
	if !leader || isToken != token || left <= 0 || left > fastTiming.RenewDeadline {
		t.Fatalf("IsLeader = %v, %d, %v; want true, %d, (0, %v]", leader, isToken, left, token, fastTiming.RenewDeadline)
	}
	if r := getLease(t, name); r.holder != "a" || r.token != token || r.durationSeconds != 2 {
		t.Fatalf("lease record = %+v", r)
	}
	st, err := m.GetHolder(itNamespace, name)
	if err != nil || st != (HolderState{Holder: "a", Token: token, Exists: true}) {
		t.Fatalf("GetHolder = %+v, %v", st, err)
	}
	if err := m.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	if leader, _, _ := e.IsLeader(); leader {
		t.Fatal("still leader after CancelElection returned")
	}
	if err := e.WaitLost(); err != nil {
		t.Fatalf("WaitLost after cancel = %v, want nil", err)
	}
	if r := getLease(t, name); r.holder != "" || r.token != token {
		t.Fatalf("after release, lease record = %+v, want no holder and token %d", r, token)
	}
}

func TestTokenRisesAcrossReleaseAndRestart(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	var tokens []int64
	for i := 0; i < 2; i++ { // same identity, released in between
		m := newProcess(t)
		e := mustRun(t, m, name, "same")
		tokens = append(tokens, mustElect(t, e, 5*time.Second))
		if err := m.CancelElection(itNamespace, name); err != nil {
			t.Fatal(err)
		}
	}
	// Same identity again, after a crash (no release): a new incarnation
	// must wait for expiry and then take a greater token.
	m := newProcess(t)
	e := mustRun(t, m, name, "same")
	tokens = append(tokens, mustElect(t, e, 5*time.Second))
	crash(e)
	crashedAt := time.Now()
	m2 := newProcess(t)
	e2 := mustRun(t, m2, name, "same")
	tokens = append(tokens, mustElect(t, e2, 10*time.Second))
	if waited := time.Since(crashedAt); waited < fastTiming.LeaseDuration-500*time.Millisecond {
		t.Fatalf("restarted incarnation took over after %v, before the crashed one's lease (%v) could expire", waited, fastTiming.LeaseDuration)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens do not rise: %v", tokens)
		}
	}
	if tokens[0] < 1 {
		t.Fatalf("first token %d < 1", tokens[0])
	}
}

func TestSequentialHandoff(t *testing.T) {
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "a")
	ta := mustElect(t, a, 5*time.Second)
	b := mustRun(t, mb, name, "b")
	time.Sleep(300 * time.Millisecond) // b is a standby now
	if leader, _, _ := b.IsLeader(); leader {
		t.Fatal("standby leads while a holds")
	}
	released := time.Now()
	if err := ma.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	tb := mustElect(t, b, 5*time.Second)
	if tb <= ta {
		t.Fatalf("token after hand-off %d <= %d", tb, ta)
	}
	// Logged, not asserted: timings belong to the benchmark.
	t.Logf("hand-off took %v", time.Since(released))
}

func TestConcurrentCandidatesOneWinner(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	const n = 5
	elections := make([]*Election, n)
	for i := range elections {
		elections[i] = mustRun(t, newProcess(t), name, string(rune('a'+i)))
	}
	eventually(t, 5*time.Second, "a leader", func() bool { return countLeaders(elections) == 1 })
	// Watch for a while: never more than one.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if c := countLeaders(elections); c != 1 {
			t.Fatalf("%d leaders at once", c)
		}
	}
}

func countLeaders(es []*Election) int {
	c := 0
	for _, e := range es {
		if ok, _, _ := e.IsLeader(); ok {
			c++
		}
	}
	return c
}

func TestCancelWakesWaitLostAndWaitElected(t *testing.T) {
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	mustElect(t, mustRun(t, ma, name, "a"), 5*time.Second)
	b := mustRun(t, mb, name, "b")
	results := make(chan error, 2)
	go func() { _, err := b.WaitElected(time.Minute); results <- err }()
	go func() { results <- b.WaitLost() }()
	time.Sleep(200 * time.Millisecond)
	if err := mb.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	var sawCancelled, sawNil bool
	for i := 0; i < 2; i++ {
		select {
		case err := <-results:
			sawCancelled = sawCancelled || errors.Is(err, ErrCancelled)
			sawNil = sawNil || err == nil
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not woken by CancelElection")
		}
	}
	if !sawCancelled || !sawNil {
		t.Fatalf("want WaitElected=ErrCancelled and WaitLost=nil, got cancelled=%v nil=%v", sawCancelled, sawNil)
	}
}

func TestWaitElectedTimeoutCancelsCandidacy(t *testing.T) {
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	mustElect(t, mustRun(t, ma, name, "a"), 5*time.Second)
	b := mustRun(t, mb, name, "b")
	if _, err := b.WaitElected(500 * time.Millisecond); !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("WaitElected = %v, want timeout", err)
	}
	if !b.Ended() {
		t.Fatal("candidacy still running after WaitElected timed out")
	}
	if _, err := mb.RunElection(itNamespace, name, "b", fastTiming); err != nil {
		t.Fatalf("a new candidacy after a timed-out one is refused: %v", err)
	}
}

func TestFailoverAfterLeaderDies(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "a")
	ta := mustElect(t, a, 5*time.Second)
	b := mustRun(t, mb, name, "b")
	time.Sleep(200 * time.Millisecond)
	crash(a)
	// While the lease runs, b's GetHolder still names a; after, nobody.
	if st, _ := mb.GetHolder(itNamespace, name); st.Holder != "a" {
		t.Fatalf("GetHolder right after the crash = %+v", st)
	}
	tb := mustElect(t, b, 10*time.Second)
	if tb <= ta {
		t.Fatalf("token after fail-over %d <= %d", tb, ta)
	}
}

func TestGetHolderEmptyAfterLeaderDies(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mw := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "a")
	mustElect(t, a, 5*time.Second)
	if _, err := mw.WatchHolder(itNamespace, name, func(HolderState) {}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "observer sees a", func() bool {
		st, _ := mw.GetHolder(itNamespace, name)
		return st.Holder == "a"
	})
	crash(a)
	eventually(t, fastTiming.LeaseDuration+time.Second, "holder empty after expiry", func() bool {
		st, _ := mw.GetHolder(itNamespace, name)
		return st.Exists && st.Holder == ""
	})
}

func TestLeaseDeletedWhileHeld(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "a")
	mustElect(t, a, 5*time.Second)
	b := mustRun(t, mb, name, "b")
	time.Sleep(200 * time.Millisecond)
	deleted := time.Now()
	if err := itAdmin.CoordinationV1().Leases(itNamespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	go func() { lost <- a.WaitLost() }()
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLeaseDeleted) {
			t.Fatalf("WaitLost = %v, want ErrLeaseDeleted", err)
		}
	case <-time.After(fastTiming.RenewDeadline):
		t.Fatal("leader did not notice the deletion")
	}
	mustElect(t, b, 10*time.Second)
	if waited := time.Since(deleted); waited < fastTiming.LeaseDuration-fastTiming.RetryPeriod-200*time.Millisecond {
		t.Fatalf("standby re-created the lease %v after deletion, before the old term could run out", waited)
	}
}

// editLease applies edit to the Lease as another writer would, retrying
// when a renewal wins the compare-and-swap.
func editLease(t *testing.T, name string, edit func(*coordinationv1.Lease)) {
	t.Helper()
	leases := itAdmin.CoordinationV1().Leases(itNamespace)
	for attempt := 0; attempt < 20; attempt++ {
		l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(l)
		if _, err = leases.Update(context.Background(), l, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not edit the lease: conflicts with every renewal")
}

func TestForeignEditsWhileHeld(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	tests := []struct {
		name string
		edit func(*coordinationv1.Lease)
		want error
	}{
		{"holder changed", func(l *coordinationv1.Lease) { h := "intruder"; l.Spec.HolderIdentity = &h }, ErrLeaseTaken},
		{"lease duration edited down", func(l *coordinationv1.Lease) { d := int32(1); l.Spec.LeaseDurationSeconds = &d }, ErrLeaseEdited},
		{"token edited", func(l *coordinationv1.Lease) { n := *l.Spec.LeaseTransitions + 10; l.Spec.LeaseTransitions = &n }, ErrLeaseEdited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := leaseName(t)
			m := newProcess(t)
			a := mustRun(t, m, name, "a")
			mustElect(t, a, 5*time.Second)
			editLease(t, name, tt.edit)
			done := make(chan error, 1)
			go func() { done <- a.WaitLost() }()
			select {
			case err := <-done:
				if !errors.Is(err, tt.want) {
					t.Fatalf("WaitLost = %v, want %v", err, tt.want)
				}
			case <-time.After(fastTiming.RenewDeadline):
				t.Fatal("leader did not notice the foreign write")
			}
			if ok, _, _ := a.IsLeader(); ok {
				t.Fatal("IsLeader after loss")
			}
		})
	}
}

func TestDuplicateIdentityNeverTwoLeaders(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "twin")
	mustElect(t, a, 5*time.Second)
	b := mustRun(t, mb, name, "twin")
	for end := time.Now().Add(2 * fastTiming.LeaseDuration); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if countLeaders([]*Election{a, b}) > 1 {
			t.Fatal("two processes with one identity both lead")
		}
	}
	if ok, _, _ := b.IsLeader(); ok {
		t.Fatal("the newcomer took over a live holder with its identity")
	}
	if err := ma.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	mustElect(t, b, 5*time.Second)
}

// failingTransport fails every request once fail is set.
type failingTransport struct {
	next http.RoundTripper
	fail *atomic.Bool
}

func (f failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.fail.Load() {
		return nil, errors.New("injected network failure")
	}
	return f.next.RoundTrip(r)
}

func TestRenewFailureReportedByWaitLost(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	var fail atomic.Bool
	cfg := rest.CopyConfig(itServer.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return failingTransport{rt, &fail} }
	m := newProcessWithConfig(t, cfg)
	a := mustRun(t, m, name, "a")
	mustElect(t, a, 5*time.Second)
	fail.Store(true)
	cut := time.Now()
	err := a.WaitLost()
	if !errors.Is(err, ErrRenewDeadline) {
		t.Fatalf("WaitLost = %v, want ErrRenewDeadline", err)
	}
	if took := time.Since(cut); took > fastTiming.RenewDeadline+time.Second {
		t.Fatalf("loss reported %v after the network failed, want within renew deadline + 1 s", took)
	}
	if ok, _, _ := a.IsLeader(); ok {
		t.Fatal("IsLeader after the renew deadline")
	}
	t.Logf("reason: %v", err)
}

func TestSecondElectionOnSameLeaseRefused(t *testing.T) {
	name := leaseName(t)
	m := newProcess(t)
	mustRun(t, m, name, "a")
	if _, err := m.RunElection(itNamespace, name, "b", fastTiming); !errors.Is(err, ErrElectionExists) {
		t.Fatalf("second RunElection = %v, want ErrElectionExists", err)
	}
}

func TestShutdownReleasesAndStaysUsable(t *testing.T) {
	names := []string{leaseName(t), leaseName(t)}
	m := newProcess(t)
	for _, n := range names {
		mustElect(t, mustRun(t, m, n, "a"), 5*time.Second)
	}
	if _, err := m.WatchHolder(itNamespace, names[0], func(HolderState) {}); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if r := getLease(t, n); r.holder != "" {
			t.Fatalf("lease %s still held after Shutdown: %+v", n, r)
		}
	}
	mustElect(t, mustRun(t, m, names[0], "a"), 5*time.Second)
}

func TestConcurrentGetHolder(t *testing.T) {
	name := leaseName(t)
	m := newProcess(t)
	mustElect(t, mustRun(t, m, name, "a"), 5*time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Go(func() {
			for j := 0; j < 100; j++ {
				if st, err := m.GetHolder(itNamespace, name); err != nil || st.Holder != "a" {
					t.Errorf("GetHolder = %+v, %v", st, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// eventLog collects in-process candidates' events for the history checker;
// each candidate stands in for a process with a pid of its own.
type eventLog struct {
	mu     sync.Mutex
	events []history.Event
}

func (l *eventLog) add(pid int, kind string, token int64) {
	l.mu.Lock()
	l.events = append(l.events, history.Event{At: history.Now(), PID: pid, Kind: kind, Token: token})
	l.mu.Unlock()
}

// Our candidates and plain client-go candidates churn on one lease; the
// intervals in which each acted as leader must never overlap, and the token
// must rise from each leadership to the next, whichever implementation held
// it (internal/history checks both).
func TestMixedChurnWithClientGoNoOverlap(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	log := &eventLog{}
	// Our candidate creates the Lease: a client-go creator would start it
	// at leaseTransitions 0, below the tokens we promise (>= 1).
	first := newProcess(t)
	mustElect(t, mustRun(t, first, name, "creator"), 10*time.Second)
	if err := first.CancelElection(itNamespace, name); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(12 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		id, pid := []string{"ours-0", "ours-1"}[i], i+1
		m := newProcess(t)
		wg.Go(func() {
			for time.Now().Before(end) {
				e, err := m.RunElection(itNamespace, name, id, fastTiming)
				if err != nil {
					t.Error(err)
					return
				}
				token, err := e.WaitElected(3 * time.Second)
				if err != nil {
					continue
				}
				log.add(pid, history.Elected, token)
				time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond)
				if ok, _, _ := e.IsLeader(); !ok {
					t.Errorf("%s lost leadership while holding", id)
				}
				log.add(pid, history.Released, token) // before the release is written
				_ = m.CancelElection(itNamespace, name)
				// Ours hear of a release at once, client-go's only at their
				// next retry: pause so that they get their turns too.
				time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
			}
		})
	}
	client, err := kubernetes.NewForConfig(itServer.Config)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		id, pid := []string{"client-go-0", "client-go-1"}[i], i+3
		wg.Go(func() {
			for time.Now().Before(end) {
				// A client-go leader's term ends when the context of
				// OnStartedLeading ends; client-go writes the release after
				// that. A deadline on the whole run could end a term in the
				// middle of the callback's work (the callback then logged its
				// release after the next leader's election), so only a
				// candidacy that has not won yet is given up after 3 s, and a
				// term ends by the callback's own cancel, after its Released
				// (it holds for less than the renew deadline, so client-go's
				// renewals do not fail in it).
				ctx, cancel := context.WithCancel(context.Background())
				var mu sync.Mutex
				won, gaveUp := false, false
				giveUp := time.AfterFunc(3*time.Second, func() {
					mu.Lock()
					defer mu.Unlock()
					if !won {
						gaveUp = true
						cancel()
					}
				})
				lock := &resourcelock.LeaseLock{LeaseMeta: metav1ObjectMeta(name), Client: client.CoordinationV1(),
					LockConfig: resourcelock.ResourceLockConfig{Identity: id}}
				leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
					Lock: lock, ReleaseOnCancel: true, LeaseDuration: fastTiming.LeaseDuration,
					RenewDeadline: fastTiming.RenewDeadline, RetryPeriod: fastTiming.RetryPeriod,
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(ctx context.Context) {
							mu.Lock()
							won = !gaveUp
							mu.Unlock()
							if !won {
								return // given up as it won: client-go releases
							}
							// client-go does not hand out the token: read it
							// (not through the lock, which its elector uses
							// concurrently and is not safe for that).
							l, err := client.CoordinationV1().Leases(itNamespace).Get(ctx, name, metav1.GetOptions{})
							if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != id || l.Spec.LeaseTransitions == nil {
								cancel()
								return
							}
							token := int64(*l.Spec.LeaseTransitions)
							log.add(pid, history.Elected, token)
							select {
							case <-time.After(time.Duration(20+rand.IntN(150)) * time.Millisecond):
							case <-ctx.Done(): // client-go stopped leading: stop acting
							}
							log.add(pid, history.Released, token)
							cancel() // step down: client-go releases after this
						},
						OnStoppedLeading: func() {},
					},
				})
				giveUp.Stop()
				cancel()
			}
		})
	}
	wg.Wait()

	r := history.Check(log.events)
	for _, v := range r.Violations {
		t.Error(v)
	}
	kinds := map[bool]int{} // ours?
	for _, term := range r.Terms {
		kinds[term.PID <= 2]++
	}
	if len(r.Terms) < 10 || kinds[true] == 0 || kinds[false] == 0 {
		t.Fatalf("too little mixing to judge: %d leaderships, %d ours", len(r.Terms), kinds[true])
	}
	t.Logf("%d leaderships (%d ours, %d client-go), tokens %d..%d, %d violations", len(r.Terms), kinds[true], kinds[false],
		r.Terms[0].Token, r.Terms[len(r.Terms)-1].Token, len(r.Violations))
}

// clientGoCandidate runs a plain client-go LeaderElector on the lease.
func clientGoCandidate(t *testing.T, name, identity string, leading *atomic.Bool) context.CancelFunc {
	t.Helper()
	client, err := kubernetes.NewForConfig(itServer.Config)
	if err != nil {
		t.Fatal(err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(name),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true,
			LeaseDuration: fastTiming.LeaseDuration, RenewDeadline: fastTiming.RenewDeadline, RetryPeriod: fastTiming.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { leading.Store(true) },
				OnStoppedLeading: func() { leading.Store(false) },
			},
		})
	}()
	return func() { cancel(); <-done }
}

func TestInteropWithClientGoCandidates(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mc := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "ours-a")
	ta := mustElect(t, a, 5*time.Second)

	var goLeading atomic.Bool
	stopGo := clientGoCandidate(t, name, "client-go-b", &goLeading)
	defer stopGo()
	never2 := func(d time.Duration, ours *Election) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if ok, _, _ := ours.IsLeader(); ok && goLeading.Load() {
				t.Fatal("our election and client-go lead at once")
			}
		}
	}
	never2(fastTiming.LeaseDuration+500*time.Millisecond, a) // client-go waits while we renew
	if goLeading.Load() {
		t.Fatal("client-go took a lease we renew")
	}

	if err := ma.CancelElection(itNamespace, name); err != nil { // release: client-go takes over
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "client-go elected after our release", goLeading.Load)
	if r := getLease(t, name); r.holder != "client-go-b" || r.token <= ta {
		t.Fatalf("after client-go took over: %+v (our token was %d)", r, ta)
	}

	c := mustRun(t, mc, name, "ours-c") // we wait while client-go renews
	never2(fastTiming.LeaseDuration+500*time.Millisecond, c)
	if ok, _, _ := c.IsLeader(); ok {
		t.Fatal("we took a lease client-go renews")
	}
	goToken := getLease(t, name).token
	stopGo() // ReleaseOnCancel: we take over at once
	tc := mustElect(t, c, 3*time.Second)
	if tc <= goToken {
		t.Fatalf("our token %d after client-go's %d", tc, goToken)
	}
}

// A plain client-go leader that was partitioned and healed runs tryRelease:
// it reads the Lease afresh (our election holds it by now) but decides it
// is still leader from its stale observed record, and writes client-go's
// release record with the fresh resourceVersion. That write lands. Our
// standbys must not take the Lease before our leader has stepped down (at
// its next renewal): they wait out its term, since the release was not
// written by the holder (our incarnation annotation is still there).
func TestForeignReleaseOfOurLeaseIsNotTakenAtOnce(t *testing.T) {
	t.Parallel() // own leases and processes; waits, mostly
	name := leaseName(t)
	ma, mb := newProcess(t), newProcess(t)
	a := mustRun(t, ma, name, "ours-a")
	mustElect(t, a, 5*time.Second)
	b := mustRun(t, mb, name, "ours-b")
	time.Sleep(500 * time.Millisecond) // b follows the Lease

	client, err := kubernetes.NewForConfig(itServer.Config)
	if err != nil {
		t.Fatal(err)
	}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1ObjectMeta(name), Client: client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go-partitioned"}}
	// tryRelease: a fresh read, then client-go's release record written
	// with that read's version. Our leader renews meanwhile, every
	// RetryPeriod: a renewal between the two makes the write a conflict,
	// and the partitioned leader's next tryRelease reads afresh. Each round
	// is two requests, well inside one RetryPeriod, so most land; 20 bounds
	// the run of losses on a loaded machine.
	const attempts = 20
	for attempt := 1; ; attempt++ {
		old, _, err := lock.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		released := resourcelock.LeaderElectionRecord{LeaderTransitions: old.LeaderTransitions, LeaseDurationSeconds: 1,
			RenewTime: now, AcquireTime: now}
		err = lock.Update(context.Background(), released)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == attempts {
			t.Fatalf("the foreign release did not land (try %d): %v", attempt, err)
		}
		t.Logf("try %d of the foreign release lost to a renewal: %v", attempt, err)
	}
	releasedAt := time.Now()
	var aLastLeader time.Time
	for end := time.Now().Add(fastTiming.LeaseDuration + time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		aLeads, _, _ := a.IsLeader()
		bLeads, _, _ := b.IsLeader()
		if aLeads {
			aLastLeader = time.Now()
		}
		if aLeads && bLeads {
			t.Fatal("our standby took the Lease while our leader still led, after a foreign release")
		}
	}
	if err := a.WaitLost(); err == nil {
		t.Fatal("our leader did not see the foreign release")
	}
	tb := mustElect(t, b, 5*time.Second)
	t.Logf("leader stepped down %v after the foreign release; standby elected with token %d",
		aLastLeader.Sub(releasedAt).Round(time.Millisecond), tb)
}
