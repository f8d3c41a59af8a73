package lease

import (
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		idle time.Duration // the workers' idle time
		// run gives jobs to w and returns how many workers it expects to
		// have been started.
		run func(t *testing.T, w *workers) int64
	}{
		{"a job runs", 200 * time.Millisecond, func(t *testing.T, w *workers) int64 {
			done := make(chan struct{})
			w.Go(func() { close(done) })
			waitClosed(t, done)
			return 1
		}},
		// A worker counts itself waiting just before it waits, so a job
		// given at once can miss it (Go then starts another worker, as it
		// must); on a busy machine that gap is long. The next job is
		// offered as Go offers it, until the waiting worker takes it, and
		// the worker waits longer than this row can take.
		{"a waiting worker takes the next job", 2 * time.Second, func(t *testing.T, w *workers) int64 {
			done := make(chan struct{})
			w.Go(func() { close(done) })
			waitClosed(t, done)
			for i := 0; i < 20; i++ {
				done := make(chan struct{})
				job := func() { close(done) }
				eventually(t, 5*time.Second, "the waiting worker taking a job", func() bool {
					select {
					case w.idle <- job:
						return true
					default:
						return false
					}
				})
				waitClosed(t, done)
			}
			return 1
		}},
		{"jobs at once never wait for each other", 200 * time.Millisecond, func(t *testing.T, w *workers) int64 {
			release := make(chan struct{})
			var started sync.WaitGroup
			started.Add(3)
			for i := 0; i < 3; i++ {
				w.Go(func() { started.Done(); <-release })
			}
			all := make(chan struct{})
			go func() { started.Wait(); close(all) }()
			waitClosed(t, all) // three jobs run together: none was queued
			close(release)
			return 3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkers(tc.idle)
			want := tc.run(t, w)
			if got := w.started.Load(); got != want {
				t.Fatalf("%d workers started, want %d", got, want)
			}
			eventually(t, tc.idle+5*time.Second, "idle workers ended", func() bool { return w.running.Load() == 0 })
		})
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not done within 5 s")
	}
}

func TestGate(t *testing.T) {
	never := make(chan struct{}) // a done that never closes
	closed := make(chan struct{})
	close(closed)
	enterAll := func(t *testing.T, g *gate, n int) []func() {
		t.Helper()
		var leaves []func()
		for i := range n {
			leave, ok := g.enter(never)
			if !ok {
				t.Fatalf("enter %d of %d: refused", i+1, n)
			}
			leaves = append(leaves, leave)
		}
		return leaves
	}
	tests := []struct {
		name string
		run  func(t *testing.T, g *gate)
	}{
		{"it admits as many as it has slots", func(t *testing.T, g *gate) {
			enterAll(t, g, 3)
			if len(g.slots) != 3 {
				t.Fatalf("%d slots taken, want 3", len(g.slots))
			}
		}},
		{"a full gate gives up when done closes, holding nothing", func(t *testing.T, g *gate) {
			enterAll(t, g, 3)
			if leave, ok := g.enter(closed); ok || leave != nil {
				t.Fatal("entered a full gate")
			}
			if len(g.slots) != 3 {
				t.Fatalf("%d slots taken, want 3", len(g.slots))
			}
		}},
		{"one waiting is admitted when a slot is left", func(t *testing.T, g *gate) {
			leaves := enterAll(t, g, 3)
			admitted := make(chan bool, 1)
			go func() {
				_, ok := g.enter(never)
				admitted <- ok
			}()
			leaves[1]()
			select {
			case ok := <-admitted:
				if !ok {
					t.Fatal("refused")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("not admitted within 5s of a slot being left")
			}
		}},
		{"one waiting gives up when done closes", func(t *testing.T, g *gate) {
			enterAll(t, g, 3)
			done := make(chan struct{})
			refused := make(chan bool, 1)
			go func() {
				_, ok := g.enter(done)
				refused <- !ok
			}()
			close(done)
			if !<-refused {
				t.Fatal("entered a full gate")
			}
		}},
		{"leaving twice gives back one slot", func(t *testing.T, g *gate) {
			leaves := enterAll(t, g, 2)
			leaves[0]()
			leaves[0]()
			if len(g.slots) != 1 {
				t.Fatalf("%d slots taken, want 1", len(g.slots))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newGate(3)) })
	}
}

// A lease this process may not read must not keep other elections out of
// their first round: its election leaves the gate at its first error.
func TestFirstRoundsAnUnreadableLeaseDoesNotKeepOthersOut(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	client.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.ListAction).GetListRestrictions().Fields.String() == "metadata.name=locked" {
			return true, nil, forbiddenErr()
		}
		return false, nil, nil
	})
	m := process(t, client)
	m.firstRounds = newGate(1)
	if _, err := m.RunElection("ns", "locked", "a", unitTiming); err != nil {
		t.Fatal(err)
	}
	// Its list is sent once it holds the only place.
	eventually(t, 5*time.Second, "the unreadable lease's list", func() bool {
		for _, a := range client.Actions() {
			if l, ok := a.(k8stesting.ListAction); ok && l.GetListRestrictions().Fields.String() == "metadata.name=locked" {
				return true
			}
		}
		return false
	})
	e, err := m.RunElection("ns", "free", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(10 * time.Second); err != nil {
		t.Fatalf("the election on a readable lease: %v", err)
	}
}

// An election waiting for its first round sends nothing, and a cancel ends
// it there.
func TestFirstRoundsACancelEndsAWaitingElection(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	m := process(t, client)
	m.firstRounds = newGate(1)
	leave, _ := m.firstRounds.enter(nil) // the gate is full
	defer leave()
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(); err != nil { // it waits for the election's goroutine
		t.Fatal(err)
	}
	if err := e.WaitLost(); err != nil {
		t.Fatalf("WaitLost: %v", err)
	}
	if n := countVerbs(t, client.Actions()); len(n) != 0 {
		t.Fatalf("requests on Leases while waiting for the first round: %v", n)
	}
}

// Elections that queue for their first round are each elected in turn:
// one that leads, and one that waits as a standby, both leave the gate.
func TestFirstRoundsQueuedElectionsAreEachElected(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	leadElsewhere(t, client, "held")
	m := process(t, client)
	m.firstRounds = newGate(1)
	if _, err := m.RunElection("ns", "held", "a", unitTiming); err != nil { // a standby
		t.Fatal(err)
	}
	var es []*Election
	for _, name := range []string{"l0", "l1", "l2", "l3"} {
		e, err := m.RunElection("ns", name, "a", unitTiming)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	for i, e := range es {
		if _, err := e.WaitElected(10 * time.Second); err != nil {
			t.Fatalf("election %d: %v", i, err)
		}
	}
}

// leadElsewhere makes another process lead ns/name and returns its election.
func leadElsewhere(t *testing.T, client *fake.Clientset, name string) *Election {
	t.Helper()
	e, err := process(t, client).RunElection("ns", name, "other", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return e
}

// An election sends nothing while the gate is full, and is elected once a
// place is left; a WaitElected that times out meanwhile says why.
func TestFirstRoundsAQueuedElectionWaitsForAPlace(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	m := process(t, client)
	m.firstRounds = newGate(1)
	leave, _ := m.firstRounds.enter(nil)
	queued, err := m.RunElection("ns", "queued", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	_, err = queued.WaitElected(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "before its first request") {
		t.Fatalf("WaitElected of a queued election: %v, want a timeout that says it was queued", err)
	}
	if n := countVerbs(t, client.Actions()); len(n) != 0 {
		t.Fatalf("requests on Leases while the gate was full: %v", n)
	}
	e, err := m.RunElection("ns", "next", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	leave()
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatalf("once a place was left: %v", err)
	}
}

// A standby takes over while the gate is full: only first rounds wait.
func TestFirstRoundsATakeoverDoesNotWait(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	held := leadElsewhere(t, client, "l")
	m := process(t, client)
	m.firstRounds = newGate(1)
	standby, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	// Once it is admitted, the place is free again when its first round is
	// over; the test then keeps it.
	eventually(t, 5*time.Second, "the standby admitted", standby.firstRound.admitted.Load)
	leave, _ := m.firstRounds.enter(nil)
	defer leave()
	if err := held.Cancel(); err != nil { // a release: the standby takes over at once
		t.Fatal(err)
	}
	if _, err := standby.WaitElected(5 * time.Second); err != nil {
		t.Fatalf("takeover with the gate full: %v", err)
	}
}
