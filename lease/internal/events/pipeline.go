package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// queued is an Event in a pipeline's queue; done is closed once it is
// written, failed or dropped.
type queued struct {
	ev   *kubeapi.Event
	done chan struct{}
}

// pipeline is the queue of a Recorder's Events and the goroutine that
// writes them.
type pipeline struct {
	r      *Recorder // its log, clock, warnings and request timeout
	client kubeapi.Client
	spam   spamFilter
	queue  chan *queued
	// ctx ends the writes: cancelled when stop's deadline passes.
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed when the writer returned
	inFlight atomic.Bool   // a write is under way

	mu       sync.Mutex    // orders enqueue against stop
	stopped  bool          // stop began: nothing more is queued
	stopping chan struct{} // closed by stop: write what is queued, then return
}

func newPipeline(r *Recorder, client kubeapi.Client) *pipeline {
	p := &pipeline{r: r, client: client, queue: make(chan *queued, queueSize),
		stopping: make(chan struct{}), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.run()
	return p
}

// enqueue queues q unless the spam filter or a full queue drops it; false
// when p has stopped (q is neither queued nor dropped).
func (p *pipeline) enqueue(q *queued) bool {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return false
	}
	if !p.spam.allow(q.ev, p.r.clock.Now()) {
		p.mu.Unlock()
		close(q.done)
		p.r.log(Debug, "lease events: dropped by the spam filter: %s", describeEvent(q.ev))
		return true
	}
	select {
	case p.queue <- q:
		p.mu.Unlock()
	default:
		p.mu.Unlock()
		close(q.done)
		p.r.reportFailure(errQueueFull, q.ev)
	}
	return true
}

var errQueueFull = fmt.Errorf("the queue of %d Events is full (the events API is slow or unreachable); dropped", queueSize)

func (p *pipeline) run() {
	defer close(p.done)
	for {
		select {
		case q := <-p.queue:
			p.write(q.ev)
			close(q.done)
		case <-p.stopping:
			for {
				select {
				case q := <-p.queue:
					p.write(q.ev)
					close(q.done)
				default:
					return
				}
			}
		}
		if p.ctx.Err() != nil {
			return
		}
	}
}

// write sends ev, again after a failure that had no answer from the API
// server (tries in all, retryWait apart, as long as the pipeline runs).
func (p *pipeline) write(ev *kubeapi.Event) {
	for try := 1; ; try++ {
		if p.ctx.Err() != nil {
			return
		}
		err := p.create(ev)
		if err == nil || (try > 1 && apierrors.IsAlreadyExists(err)) {
			return // written (the answer to an earlier try was lost)
		}
		var answered apierrors.APIStatus
		if errors.As(err, &answered) || try == tries {
			p.r.reportFailure(err, ev)
			return
		}
		p.r.log(Debug, "lease events: writing an Event failed, trying again in %v: %v", retryWait, err)
		select {
		case <-p.r.clock.After(retryWait):
		case <-p.ctx.Done():
			return
		}
	}
}

func (p *pipeline) create(ev *kubeapi.Event) (err error) {
	p.inFlight.Store(true)
	defer func() {
		p.inFlight.Store(false)
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	ctx, cancel := context.WithTimeout(p.ctx, p.r.requestTimeout)
	defer cancel()
	return p.client.CreateEvent(ctx, ev)
}

// stop writes what is queued until deadline, then abandons the rest,
// with a warning that counts them.
func (p *pipeline) stop(deadline time.Time) {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.stopping)
	}
	p.mu.Unlock()
	timer := p.r.clock.NewTimer(deadline.Sub(p.r.clock.Now()))
	defer timer.Stop()
	select {
	case <-p.done:
		p.cancel()
		return
	case <-timer.C():
	}
	p.cancel()
	left := len(p.queue)
	if p.inFlight.Load() {
		left++
	}
	if left > 0 {
		p.r.reportFailure(fmt.Errorf("%d Events not written by the end of Shutdown's flush (the events API is slow or unreachable); abandoned", left), nil)
	}
}
