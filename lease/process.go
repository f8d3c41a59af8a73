package lease

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The state of package lease that is the process's, not a Manager's: it
// paces the load that the process puts on the API server, and the API
// server sees one process, however many Managers it runs (a host program
// has one; tests have many). Everything else is a Manager's. Outside this
// package, the log sink (lease/internal/logs: the host installs one per
// process) and the count of API requests (lease/internal/telemetry: counted
// where a client is built, which knows no Manager) are process-wide too.

// leading counts the elections of the process that lead now: the number of
// renewal slots grows with it (renewalSlot).
var leading atomic.Int64

// gridPhase offsets this process's grid of renewal slots, so that the bursts
// of processes (one election each, many pods) do not meet at the API server.
var gridPhase = rand.Int64N(int64(time.Hour))

// renewers run the renewals of every election in the process (workers,
// below): one pool, so a burst of renewals wakes the process once.
var renewers = newWorkers(workerIdle)

// firstRounds admits the first rounds of requests of new elections, at most
// firstRoundsAtOnce at a time (firstRoundsAtOnce says why).
var firstRounds = newGate(firstRoundsAtOnce)

// workers runs short jobs (renewals that must overlap: see lead) on
// goroutines that outlive them: a job goes to an idle worker if one waits,
// else to a new one, which then waits workerIdle for more before it ends.
// Nothing is queued, so a job never waits behind another (a renewal must
// go out when it is due).
//
// Why not a goroutine per job: a new goroutine starts on a small stack and
// grows it (copying) through client-go's request path every time; at 1000
// elections that, and the memory churn it causes, was a fifth of the
// library's CPU. A worker's stack has already grown. The number of workers
// follows the jobs in flight (requests per second times their latency),
// not the number of elections.
type workers struct {
	idle    chan func() // unbuffered: a send succeeds only into a waiting worker
	idleFor time.Duration
	started atomic.Int64 // workers started, ever
	running atomic.Int64 // workers alive
	waiting atomic.Int64 // workers waiting for a job
}

// workerIdle is how long a worker waits for another job before it ends:
// past two renewals at client-go's 2 s retry period, so one election keeps
// its worker, and not so long that a burst's workers linger.
const workerIdle = 5 * time.Second

func newWorkers(idleFor time.Duration) *workers {
	return &workers{idle: make(chan func()), idleFor: idleFor}
}

// Go runs job on a worker. job must contain its own panics.
func (w *workers) Go(job func()) {
	select {
	case w.idle <- job:
	default:
		w.started.Add(1)
		w.running.Add(1)
		go w.work(job)
	}
}

func (w *workers) work(job func()) {
	defer w.running.Add(-1)
	timer := time.NewTimer(w.idleFor)
	defer timer.Stop()
	for {
		job()
		timer.Reset(w.idleFor)
		w.waiting.Add(1)
		select {
		case job = <-w.idle:
			w.waiting.Add(-1)
		case <-timer.C:
			w.waiting.Add(-1)
			return
		}
	}
}

// firstRounds (above) admits the elections of the process (every Manager's, as
// renewers serves them all) to their first round of requests - the
// observer's list, then the first acquisition, with the watch the observer
// opens meanwhile - at most firstRoundsAtOnce at a time; the others wait
// for a place, in the order they asked. An election leaves as soon as its
// first round has an outcome: it leads, it waits as a standby, or a request
// failed, so that a lease it cannot read or write does not keep the others
// out (client-go bounds every request by its context: requestTimeout; a
// client that ignored it could keep a place).
//
// Why: a process that starts many elections at once otherwise sends all
// their lists, watches and writes together. At 1000 elections that burst
// peaked near 4700 goroutines and dozens of new connections, and its memory
// stayed: Go keeps goroutine descriptors, and the survivors' stacks end up
// scattered over stack spans that never become free. Measured in a Go
// program starting 1000 elections: RSS 64.5 MB unbounded against 44.8 MB
// with 16 at a time (goroutine stacks 15.6 against 8 MB), all 1000 elected
// in 4.6 s against 4.9 s (the API server is the bound either way); 8 at a
// time took 7.1 s.
//
// Only an election's first round waits: its renewals, retries and
// takeover as a standby never do, and one election alone never waits. A
// Lease the process already follows (a holder watch, GetHolder, an ending
// election of the same lease) keeps its observer running outside the gate.
// An election queued here counts its wait in its campaign's time and, if
// WaitElected times out, says it was queued.
const firstRoundsAtOnce = 16

// firstRoundState is an election's place among the first rounds.
type firstRoundState struct {
	// gate admits the election to its first round (the Manager's, shared
	// by its elections); over leaves it once that round has an outcome
	// (run's goroutine only).
	gate     *gate
	over     func()
	admitted atomic.Bool // past gate: it has sent or may send requests
}

// gate is a counting semaphore.
type gate struct{ slots chan struct{} }

func newGate(n int) *gate { return &gate{slots: make(chan struct{}, n)} }

// enter waits for a slot, or for done to close (ok false, nothing held).
// leave gives the slot back; calling it again does nothing.
func (g *gate) enter(done <-chan struct{}) (leave func(), ok bool) {
	select {
	case g.slots <- struct{}{}:
	case <-done:
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { <-g.slots }) }, true
}

// backoff doubles a delay from min to max, with up to 50% jitter so that
// many processes do not retry in step.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: maxDelay}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }
