package lease

import (
	"sync/atomic"
	"time"
)

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
