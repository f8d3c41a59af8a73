package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/k8s-lease/k8s-lease/lease"
)

// watchLog is an admin watch: every event it delivered, in the API
// server's order, as the bench's own admin client sees it, turned into an
// E by the watch's convert.
type watchLog[E any] struct {
	mu      sync.Mutex
	events  []E
	changed chan struct{} // closed and replaced on every event
	err     error
	cancel  context.CancelFunc
	done    chan struct{}
}

// follow records the events of w (started with ctx, which cancel ends) that
// convert keeps (ok); what names the watch in errors.
func follow[E any](ctx context.Context, cancel context.CancelFunc, w watch.Interface, what string,
	convert func(watch.Event) (e E, ok bool)) *watchLog[E] {
	l := &watchLog[E]{changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				l.fail(fmt.Errorf("admin watch on %s: %v", what, ev.Object))
				continue
			}
			e, ok := convert(ev)
			if !ok {
				continue
			}
			l.mu.Lock()
			l.events = append(l.events, e)
			close(l.changed)
			l.changed = make(chan struct{})
			l.mu.Unlock()
		}
		if ctx.Err() == nil {
			l.fail(fmt.Errorf("admin watch on %s ended early", what))
		}
	}()
	return l
}

func (l *watchLog[E]) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

func (l *watchLog[E]) stop() {
	l.cancel()
	<-l.done
}

func (l *watchLog[E]) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// all returns a copy of the events so far and the watch's error, if any.
func (l *watchLog[E]) all() ([]E, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]E(nil), l.events...), l.err
}

// waitFor returns the index of the first event at or after from that
// satisfies ok, waiting up to within.
func (l *watchLog[E]) waitFor(from int, within time.Duration, ok func(E) bool) (int, error) {
	deadline := time.After(within)
	for {
		l.mu.Lock()
		for i := from; i < len(l.events); i++ {
			if ok(l.events[i]) {
				l.mu.Unlock()
				return i, nil
			}
		}
		from = max(from, len(l.events))
		changed, err := l.changed, l.err
		l.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-changed:
		case <-deadline:
			return 0, fmt.Errorf("admin watch: not seen within %v", within)
		}
	}
}

// leaseLog is an admin watch on one Lease: every record written to it. It
// is implementation-neutral (it reads only spec fields, and our two
// annotations to tell a hand-off record from a holder's own).
type leaseLog = watchLog[leaseEvent]

type leaseEvent struct {
	seen        time.Time // when the admin watch delivered it
	holder      string
	token       int32     // spec.leaseTransitions
	renew       time.Time // spec.renewTime, written by the holder's clock (this process)
	incarnation string    // lease.IncarnationAnnotation (ours only)
	handOffTo   string    // lease.HandOffAnnotation: a hand-off record
	rv          string
}

// followLease starts the admin watch on benchNamespace/name (which need not
// exist yet); its first events are the current state.
func (b *bench) followLease(name string) (*leaseLog, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := b.admin.CoordinationV1().Leases(benchNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		cancel()
		return nil, err
	}
	return follow(ctx, cancel, w, name, func(ev watch.Event) (leaseEvent, bool) {
		ls, ok := ev.Object.(*coordinationv1.Lease)
		if !ok || ev.Type == watch.Deleted {
			return leaseEvent{}, false
		}
		e := leaseEvent{seen: time.Now(), rv: ls.ResourceVersion,
			incarnation: ls.Annotations[lease.IncarnationAnnotation], handOffTo: ls.Annotations[lease.HandOffAnnotation]}
		if s := ls.Spec; s.HolderIdentity != nil {
			e.holder = *s.HolderIdentity
		}
		if s := ls.Spec; s.LeaseTransitions != nil {
			e.token = *s.LeaseTransitions
		}
		if s := ls.Spec; s.RenewTime != nil {
			e.renew = s.RenewTime.Time
		}
		return e, true
	}), nil
}

// A term is one holder's tenure as the admin watch shows it: the records
// with one holder and one spec.leaseTransitions that are not hand-off
// records. Its end is the renewTime of the last record its holder wrote:
// its last renewal, or the release record (no holder) or hand-off record
// that followed it.
type term struct {
	holder  string
	token   int32
	first   int       // index of its first record
	started time.Time // renewTime of its first record (the acquisition)
	ended   time.Time
}

// move is a change of term: leaderless is the new term's acquisition minus
// the old term's end, both renewTimes on the bench host's clock.
type move struct {
	from, to   term
	leaderless time.Duration
}

// terms reads the terms and the moves between them from a log.
func terms(events []leaseEvent) ([]term, []move) {
	var ts []term
	var ms []move
	for i, e := range events {
		var cur *term
		if len(ts) > 0 {
			cur = &ts[len(ts)-1]
		}
		switch {
		case e.handOffTo != "" || e.holder == "":
			// The current holder's hand-off or release record.
			if cur != nil {
				cur.ended = e.renew
			}
		case cur != nil && e.holder == cur.holder && e.token == cur.token:
			cur.ended = e.renew // a renewal
		default:
			t := term{holder: e.holder, token: e.token, first: i, started: e.renew, ended: e.renew}
			if cur != nil {
				ms = append(ms, move{from: *cur, to: t, leaderless: t.started.Sub(cur.ended)})
			}
			ts = append(ts, t)
		}
	}
	// The moves' from fields hold the old term as it was when the move
	// was seen; its end is final by then (the new holder wrote after it).
	return ts, ms
}

// led reports whether the log's last record is a holder's own (not a
// release or a hand-off record not yet taken up).
func led(events []leaseEvent) bool {
	if len(events) == 0 {
		return false
	}
	last := events[len(events)-1]
	return last.holder != "" && last.handOffTo == ""
}
