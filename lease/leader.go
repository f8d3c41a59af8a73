package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// lead renews every retry period until the renew deadline passes without a
// successful renewal, a renewal finds another writer's change, or the
// election is cancelled (nil). It does not wait on the observer: its watch
// is paused while we lead (pauseWhileLeading), so the only changes it would
// report are our own writes.
//
// One renewal at a time is the rule, as in client-go; each success extends
// leadership to its own send time + renewDeadline. With one at a time, a
// request latency L loses leadership once 2L + retryPeriod > renewDeadline,
// so when the latency (the last answer's, or the age of the renewal still
// unanswered) comes near that, renewals are pipelined: one goes out every
// retry period while earlier ones are in flight (up to
// maxRenewalsInFlight), which holds leadership while L + retryPeriod <
// renewDeadline. Only then, so that an API server slow from overload is not
// sent more. A leader left with little validity, because its renewals
// hang (an etcd leader lost), sends more beside the pace (renewUrgently).
// This needs renewals that do not depend on each other's answers: see
// renewPatch.
//
// While answers come fast, a renewal goes out on this goroutine
// (renewInline): on a worker it cost two more goroutine wake-ups, and at
// 1000 elections 1500 goroutines instead of 1000. One unanswered at
// inlineCut (half a retry period) is abandoned and replaced at once by one
// on a worker, and renewals stay on workers, beside each other when slow
// enough, until answers come fast again. The price: across that first
// slow renewal, leadership holds while L < renewDeadline - retryPeriod -
// inlineCut, and while 2L < renewDeadline + hungAfter once it is urgent
// (6.7 s at 15/10/2; 1.9 s is held at 4/3/0.5, 2 s is not: measured),
// not L < renewDeadline - retryPeriod; once on workers, while L +
// retryPeriod < renewDeadline, as before. Renewals go out at the start of
// their slot (renewalSlot).
func (e *Election) lead() error {
	leading.Add(1)
	defer leading.Add(-1)
	e.mu.Lock()
	token, validity := e.term.token, e.term.validUntil.Sub(e.clock.Now())
	e.mu.Unlock()
	renew := e.clock.NewTimer(renewalSlot(e.clock.Now(), firstRenewal(e.timing, validity), e.timing.RetryPeriod, leading.Load()))
	defer renew.Stop()
	// Renewals in flight are not cancelled when the leadership ends:
	// cancelling one whose answer is on its way only makes client-go log an
	// error (the write may land all the same). One on a worker is left to
	// end by its own deadline (if it lands after the release, it fails its
	// holder test); one on this goroutine (renewInline) is waited for, and
	// the release then writes over what it left. (Only a renewal on this
	// goroutine unanswered at inlineCut is cancelled: it is replaced.)
	ctx := context.WithoutCancel(e.ctx)
	patch, err := newRenewPatch(e.identity, e.incarnation, token, e.timing)
	if err != nil {
		return err
	}
	results := make(chan renewal, maxRenewalsInFlight+maxExtraInFlight) // senders never block: no more are in flight
	p := pipeline{}
	// extra: the turns of renewUrgently, every urgentPace while urgent,
	// beside the pace's (renew), which urgency leaves as it is.
	extra := e.clock.NewTimer(time.Hour)
	extra.Stop()
	defer extra.Stop()
	settle := func(r renewal) error {
		// A given-up renewal's failure is its cancel's doing (or its
		// connection's), no news of the API server. An answer of the API
		// server that beat the cancel is taken as any. Either way what
		// replaces it (replacement) takes its turn now.
		extraOne := p.extraAt[r.sent]
		givenUp, replace := p.givenUp(r)
		if givenUp && r.err != nil {
			switch replace {
			case byPace:
				renew.Reset(0)
			case urgently, freed:
				extra.Reset(0)
			}
			if !fromAPIServer(r.err) {
				p.forget(r.sent)
				return nil
			}
		}
		p.done(r, e.clock.Now())
		if r.err == nil {
			p.supersede(r.sent)
		}
		if r.err != nil && !givenUp && !extraOne {
			renew.Reset(e.timing.RetryPeriod / 2) // retry sooner while the deadline runs
		}
		return e.renewed(r)
	}
	urgent := false
	defer func() {
		if urgent {
			urgent = false
			e.api.redial.urgencyOver()
		}
	}()
	for {
		e.mu.Lock()
		left := e.term.validUntil.Sub(e.clock.Now())
		lastErr := e.term.lastAPIErr
		e.mu.Unlock()
		if left <= 0 {
			if lastErr == nil {
				lastErr = fmt.Errorf("no answer to %d renewal(s) in flight", len(p.sent))
			}
			return fmt.Errorf("%w (%v): last error: %v", ErrRenewDeadline, e.timing.RenewDeadline, lastErr)
		}
		// The wake-up is the deadline, or before it the point where
		// renewals turn urgent (renewUrgently), whose first turn is then.
		wake := left
		if left > urgentWithin(e.timing) {
			if urgent {
				extra.Stop()
				urgent = false
				e.api.redial.urgencyOver()
			}
			wake = left - urgentWithin(e.timing)
		} else if !urgent {
			urgent = true
			e.api.redial.urgencyBegins()
			extra.Reset(0)
		}
		deadline := e.clock.NewTimer(wake)
		var reason error
		select {
		case <-e.ctx.Done():
			deadline.Stop()
			return nil
		case <-deadline.C():
		case r := <-results:
			reason = settle(r)
		case <-renew.C():
			if e.ctx.Err() != nil {
				// Cancelled while a renewal was answered: the cancel
				// wins over a renewal fallen due meanwhile.
				deadline.Stop()
				return nil
			}
			reason = e.renewDue(ctx, renew, &p, patch, results, settle)
		case <-extra.C():
			if e.ctx.Err() != nil {
				deadline.Stop()
				return nil
			}
			if urgent {
				extra.Reset(urgentPace(e.timing))
				e.renewUrgently(ctx, &p, e.clock.Now(), patch, results)
			}
		}
		deadline.Stop()
		if reason != nil {
			return reason
		}
	}
}

// renewDue is lead's turn when the renewal timer fires: it sends a renewal
// (on this goroutine or on a worker) unless the pipeline says to wait, and
// returns the reason to end that a renewal answered here gives.
func (e *Election) renewDue(ctx context.Context, renew clock.Timer, p *pipeline, patch renewPatch, results chan renewal, settle func(renewal) error) (reason error) {
	now := e.clock.Now()
	renew.Reset(renewalSlot(now, e.timing.RetryPeriod, e.timing.RetryPeriod, leading.Load()))
	// The oldest renewal in flight is past the cut: its connection
	// may hang (a frozen API server), and the next one would wait
	// on it too. Closing it fails what is in flight on it, so the
	// next goes out at once on a new connection, whatever the
	// latency rule says. That connection can land on the frozen
	// server again (a load balancer picks per connection): then
	// the next round comes as soon as the pace allows.
	redialed := false
	if n, oldest := p.paced(); n > 0 && now.Sub(oldest) >= inlineCut(e.timing) {
		n, next := e.api.redial.closeSilent(oldest, now, e.timing.RetryPeriod, "lease "+e.key.String()+": renewal unanswered")
		redialed = n > 0
		if !next.IsZero() && next.Before(now.Add(e.timing.RetryPeriod)) {
			renew.Reset(next.Sub(now))
		}
	}
	// A full pipeline with no answer since its oldest renewal was sent,
	// which is late: the renewals hang behind the API server (an etcd
	// member frozen: the requests it routed there wait, later ones would
	// go to live members) and would hold the pipeline until their
	// deadlines. The oldest is given up (cancelled; it may land all the
	// same, which harms nothing); once its cancel is answered, a fresh one
	// goes out in its place. An API server that is merely slow answers
	// now and then: nothing is given up. (The renewals an urgent leader
	// sends beside the pace are not counted: see shouldSend.)
	if n, oldest := p.paced(); n >= maxRenewalsInFlight && p.lastAnswer.Before(oldest) &&
		now.Sub(oldest) >= max(pipelineAfter(e.timing), e.timing.RetryPeriod) {
		p.giveUpOldest()
	}
	switch {
	case !p.shouldSend(now, e.timing) && !(redialed && p.room()):
	case len(p.sent) == 0 && p.inline(e.timing):
		p.sent, p.cancels = append(p.sent, now), append(p.cancels, nil)
		r, slow := e.renewInline(ctx, patch, now)
		if !slow {
			reason = settle(r)
			break
		}
		// Unanswered at the cut: from now on renewals go out on
		// workers (beside each other when slow enough), the next
		// at once, on a new connection if this one received
		// nothing meanwhile (a frozen API server).
		e.api.redial.closeSilent(now, e.clock.Now(), e.timing.RetryPeriod, "lease "+e.key.String()+": renewal unanswered")
		p.done(r, e.clock.Now())
		p.latency = max(p.latency, e.clock.Since(now))
		if e.ctx.Err() == nil { // cancelled meanwhile: not counted, as in renewed
			e.stats.RenewFailed()
		}
		renew.Reset(0)
	default:
		e.renewOnWorker(ctx, p, now, patch, results, false)
	}
	return reason
}

// renewOnWorker sends a renewal on a worker, counted in flight in p (as
// an urgent leader's extra one beside the pace if extra).
func (e *Election) renewOnWorker(ctx context.Context, p *pipeline, now time.Time, patch renewPatch, results chan renewal, extra bool) {
	rctx, cancel := context.WithCancel(ctx)
	leases := e.api.leases
	if extra {
		if p.extraAt == nil {
			p.extraAt = map[time.Time]bool{}
		}
		p.extraAt[now] = true
		var throughUrgent bool
		if leases, throughUrgent = e.api.urgentLeases(now, e.timing.RetryPeriod); throughUrgent {
			if p.urgentPoolAt == nil {
				p.urgentPoolAt = map[time.Time]bool{}
			}
			p.urgentPoolAt[now] = true
		}
	}
	p.sent = append(p.sent, now)
	p.cancels = append(p.cancels, cancel)
	renewers.Go(func() {
		defer cancel()
		e.sendRenewal(rctx, leases, patch, now, results)
	})
}

// renewUrgently sends a renewal beside those the pace sends (renewDue),
// every urgentPace while the leader has little validity left
// (urgentWithin) and its renewals hang: nothing heard since the youngest
// in flight was sent, which is older than twice the usual latency. Up to
// maxExtraInFlight of these; when that many are in flight, the youngest of
// them is given up for a fresh one. Each draws on urgentTries, shared by
// the process, so that an API server that leaves every election's
// renewals hanging is not sent more than that. The pace's rules count
// none of them, and their answers do not move its timer.
//
// This is for an etcd leader lost (frozen, partitioned): every write
// stalls until etcd has elected another (1 to 1.4 s on an idle bed, more
// under load), and the renewals sent meanwhile hang until the old leader
// comes back. After the stall the API server still routes a part of its
// requests (a half or a third: its etcd client takes the members in turn)
// to the lost member, where they hang as well. At the pace, the one or two
// renewals left before the deadline can all be among those; at urgentPace
// four times as many go out, each as likely to be answered at once. Those
// hung hold their API server's seats, so those unanswered for hungAfter,
// but the oldest, are given up (freeSeats).
//
// A server grown slow answers every renewal, late, oldest first; until
// the first answer it looks like a stall. Once its slow successes are the
// usual latency (the least of those in the last renew deadline:
// pipeline.usual, which a renewal that waited through a stall does not
// inflate), nothing looks hung. A server that answers fast, if with
// failures, is never sent one; one that fails slowly is, while urgent.
func (e *Election) renewUrgently(ctx context.Context, p *pipeline, now time.Time, patch renewPatch, results chan renewal) {
	if len(p.sent) == 0 {
		return
	}
	youngest, twiceUsual := p.sent[len(p.sent)-1], 2*p.usual(now, e.timing.RenewDeadline)
	if now.Sub(youngest) < max(urgentPace(e.timing), twiceUsual) || !p.lastHeard.Before(youngest) {
		return
	}
	p.freeSeats(now, max(hungAfter(e.timing), twiceUsual))
	// The urgent pool's connection received nothing since the oldest
	// renewal sent through it, or nothing past its handshake: closed, so
	// that the next one dials anew (when the pace allows).
	if oldest, ok := p.oldestThroughUrgentPool(); ok && now.Sub(oldest) >= inlineCut(e.timing) {
		e.api.redial.closeSilentUrgent(oldest, now, e.timing.RetryPeriod, "lease "+e.key.String()+": urgent renewal unanswered")
	}
	full := len(p.extraAt) >= maxExtraInFlight
	if full && len(p.givenUpAt) > 0 || !p.prepaid && !urgentTries.AllowN(now, 1) {
		return
	}
	if full {
		// Paid for the fresh one, which its cancel's answer sends (lead's
		// settle).
		for i := len(p.sent) - 1; i >= 0; i-- {
			if p.extraAt[p.sent[i]] {
				p.prepaid = p.giveUp(i, urgently) || p.prepaid
				break
			}
		}
		return
	}
	p.prepaid = false
	e.renewOnWorker(ctx, p, now, patch, results, true)
}

// oldestThroughUrgentPool is the send time of the oldest renewal in flight
// sent through the urgent pool, if any.
func (p *pipeline) oldestThroughUrgentPool() (time.Time, bool) {
	for _, s := range p.sent {
		if p.urgentPoolAt[s] {
			return s, true
		}
	}
	return time.Time{}, false
}

// freeSeats gives up every renewal in flight unanswered for `after` but
// the oldest not given up. None replaces them, but a cancel that fails
// one brings renewUrgently's next turn at once (freed): the turn that gave
// it up sends nothing while a give-up is pending with its extras full. A
// request hung at a lost etcd member holds its API Priority and Fairness
// seat until cancelled, and the leader-election level has few
// (3 per API server on the HA bed): traced there, two hung renewals and
// another client's request held all three while the fresh renewals queued
// behind them until the term lapsed. The oldest is kept because a server
// grown slow answers it first (see hungAfter for what that costs).
func (p *pipeline) freeSeats(now time.Time, after time.Duration) {
	kept := false
	for i := range p.sent {
		if _, done := p.givenUpAt[p.sent[i]]; done {
			continue
		}
		if kept && now.Sub(p.sent[i]) >= after {
			p.giveUp(i, freed)
		}
		kept = true
	}
}

// hungAfter is how long an urgent leader whose renewals hang leaves one
// unanswered before freeSeats gives it up (unless twice the usual latency
// is longer): a third of the renew deadline, 1 s at 4/3/0.5 and 3.3 s at
// 15/10/2. Nothing tells a renewal hung in a seat from one a slow server
// will answer, so this trades one for the other:
//   - The traced case: the second renewal in flight, hung, must be given
//     up early enough for a fresh one to take its seat and be answered in
//     time. A third of the deadline keeps the term in its model
//     (TestHungRenewalsLeaveTheirSeatsToFreshOnes) with 1.1 s to spare
//     at 4/3/0.5 and 3.5 s at 15/10/2; two retry periods (4 s there)
//     lose it at 15/10/2 (measured).
//   - A latency L that sets in suddenly: the oldest kept is answered at L,
//     and the next kept was sent at most hungAfter before, so the term
//     holds while 2L < renewDeadline + hungAfter (2 s at 4/3/0.5, where
//     it was lost without this too; 6.7 s at 15/10/2, 7 s before).
//   - One renewal hung and the others answered slower than hungAfter:
//     each given up before its answer, the term is lost (1.2 s at
//     4/3/0.5, 3.6 s at 15/10/2: measured; both held before).
//   - The oldest hung in the only seat its flow has cannot be saved: until
//     the term ends it looks like a latency the leader must survive.
func hungAfter(t Timing) time.Duration { return t.RenewDeadline / 3 }

// urgentWithin is the validity left at which a leader turns urgent: half
// of what one renewing every retry period keeps at least. Urgency alone
// sends nothing: renewUrgently sends only while renewals hang.
func urgentWithin(t Timing) time.Duration {
	return (t.RenewDeadline - t.RetryPeriod) / 2
}

// maxExtraInFlight bounds the renewals an urgent leader has in flight
// beside the pace's (lead's results hold both).
const maxExtraInFlight = maxRenewalsInFlight

// urgentPace is how often an urgent leader sends a renewal.
func urgentPace(t Timing) time.Duration { return max(t.RetryPeriod/4, time.Millisecond) }

// urgentTries bounds the renewals the process sends beyond the pace when
// urgent: 64 a second, in bursts of 64.
var urgentTries = rate.NewLimiter(64, 64)

// renewalSlot moves a renewal due in d earlier, to the start of its slot:
// a period has renewalSlots slots, or one per renewalBurst leaders of the
// process when that is more, on a grid of the process's own (gridPhase).
// The elections of a process with the same retry period that would renew
// within one slot renew together, and a burst of renewals costs the
// process one wake-up of its threads where renewals spread out cost one
// each: at 100 elections in a C host, 2.2 % of a core against
// 4.8 % (docs/benchmarks.md, "Cost"). A renewal moves earlier, never later, which
// never shortens leadership; the period between renewals stays period.
func renewalSlot(now time.Time, d, period time.Duration, leaders int64) time.Duration {
	slot := period / max(renewalSlots, time.Duration(leaders/renewalBurst))
	if slot <= 0 || d < slot {
		return d
	}
	into := (now.Add(d).UnixNano() - gridPhase) % int64(slot)
	if into < 0 {
		into += int64(slot)
	}
	return d - time.Duration(into)
}

// renewalSlots is how many slots a retry period has at least, and
// renewalBurst how many renewals a slot holds before there are more slots:
// a burst of 16 costs about one wake-up as well as a burst of 125 (1000
// elections in 8 slots) does, and its requests in flight, a goroutine each
// in x/net/http2, stay few.
const (
	renewalSlots = 8
	renewalBurst = 16
)

// firstRenewal is when a new leader with validity left first renews: at a
// random point of the retry period, then moved to its slot (renewalSlot),
// which every later renewal keeps. Elections won together (a process that
// runs many, or all of them after an API server outage) would otherwise all
// renew in the same slot, one burst of a request per election every period;
// drawn from half the period only, they would fill half the slots, twice as
// full. Renewing early never shortens leadership.
//
// Never later than a leader renewing every retry period would: once
// validity left falls to renewDeadline - retryPeriod. An acquisition
// answered late (an API server that froze, then thawed) has little left,
// its validity counting from the send; a draw past the end of it would let
// the term lapse with no renewal sent.
func firstRenewal(t Timing, validity time.Duration) time.Duration {
	return min(1+rand.N(t.RetryPeriod), max(0, validity-(t.RenewDeadline-t.RetryPeriod)))
}

// maxRenewalsInFlight bounds pipelined renewals (see lead).
const maxRenewalsInFlight = 4

// pipeline tracks the renewals in flight and the latency seen, and decides
// when to send one more.
type pipeline struct {
	sent    []time.Time          // send times of the renewals in flight, oldest first
	cancels []context.CancelFunc // theirs, nil for the one on the leading goroutine
	latency time.Duration
	// lastAnswer: when the last answer to a renewal of the pace came (a
	// given-up renewal's cancel is none), lastHeard to any; givenUpAt:
	// the renewals given up, counted in sent until their answers come,
	// and what replaces each.
	lastAnswer, lastHeard time.Time
	givenUpAt             map[time.Time]replacement
	// successes: the last ones (their latency and when answered),
	// answered of them in all.
	successes [8]success
	answered  int
	// prepaid: urgentTries paid for the renewal that replaces one given
	// up (renewUrgently); extraAt: the renewals in flight it sent;
	// urgentPoolAt: those of them sent through the urgent pool (redialer).
	prepaid      bool
	extraAt      map[time.Time]bool
	urgentPoolAt map[time.Time]bool
}

// giveUpOldest cancels the oldest renewal in flight the pace sent not
// given up yet; a fresh one replaces it.
func (p *pipeline) giveUpOldest() {
	for i := range p.sent {
		if !p.extraAt[p.sent[i]] && p.giveUp(i, byPace) {
			return
		}
	}
}

// giveUp cancels the renewal in flight at i unless it is given up already
// or on the leading goroutine, noting what replaces it.
func (p *pipeline) giveUp(i int, replace replacement) bool {
	if _, done := p.givenUpAt[p.sent[i]]; done || i >= len(p.cancels) || p.cancels[i] == nil {
		return false
	}
	if p.givenUpAt == nil {
		p.givenUpAt = map[time.Time]replacement{}
	}
	p.givenUpAt[p.sent[i]] = replace
	p.cancels[i]()
	return true
}

// replacement says what sends the renewal that replaces one given up.
type replacement int

const (
	none     replacement = iota // superseded by a success
	byPace                      // renewDue, at once
	urgently                    // renewUrgently, at once
	// freed: given up to free its seat (freeSeats); renewUrgently's next
	// turn comes at once, as a turn may have been skipped for it.
	freed
)

// fromAPIServer reports whether a failed request's err is the API
// server's answer (a status), not a cancel, a deadline or a connection's.
func fromAPIServer(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// givenUp reports whether r answers a renewal given up, and what replaces
// it, and forgets it.
func (p *pipeline) givenUp(r renewal) (givenUp bool, replace replacement) {
	replace, givenUp = p.givenUpAt[r.sent]
	delete(p.givenUpAt, r.sent)
	return givenUp, replace
}

// supersede gives up the extra renewals (renewUrgently) in flight sent
// before sent, whose success was just answered: answered too, they would
// give less validity (it counts from the send), and unanswered after a
// younger one they have likely hung (behind an etcd member lost), holding
// places for extras. None replaces them. The pace's own are left to its
// rules.
func (p *pipeline) supersede(sent time.Time) {
	for i := 0; i < len(p.sent) && p.sent[i].Before(sent); i++ {
		if p.extraAt[p.sent[i]] {
			p.giveUp(i, none)
		}
	}
}

// shouldSend: always when nothing is in flight; beside renewals in flight
// only when the latency is high enough that one at a time would not keep
// up (2L + retryPeriod above 3/4 of the renew deadline).
//
// Renewals an urgent leader sent beside the pace (renewUrgently) are not
// counted.
func (p *pipeline) shouldSend(now time.Time, t Timing) bool {
	n, oldest := p.paced()
	switch {
	case n >= maxRenewalsInFlight:
		return false
	case n == 0:
		return true
	}
	return pipelined(max(p.latency, now.Sub(oldest)), t)
}

// room reports whether the pace may send one more beside those in flight.
func (p *pipeline) room() bool {
	n, _ := p.paced()
	return n < maxRenewalsInFlight
}

// paced counts the renewals in flight the pace sent, and says when the
// oldest of them was.
func (p *pipeline) paced() (n int, oldest time.Time) {
	for _, s := range p.sent {
		if !p.extraAt[s] {
			if n == 0 {
				oldest = s
			}
			n++
		}
	}
	return n, oldest
}

// pipelined reports whether at latency l one renewal at a time would not
// keep up (2l + retryPeriod above 3/4 of the renew deadline).
func pipelined(l time.Duration, t Timing) bool {
	return 4*(2*l+t.RetryPeriod) > 3*t.RenewDeadline
}

// inline reports whether the next renewal, with nothing in flight, goes
// out on the leading goroutine itself: while answers come in well under
// inlineCut. The alternative, a worker, costs two more goroutine wake-ups
// per renewal and, at 1000 elections, 500 more goroutines (docs/benchmarks.md, "Cost").
func (p *pipeline) inline(t Timing) bool {
	cut := inlineCut(t)
	return cut > 0 && 4*p.latency < cut
}

// inlineCut is how long a renewal on the leading goroutine may go
// unanswered before it is abandoned and replaced by one on a worker: half
// a retry period, and never past the point where shouldSend would send
// another beside it (pipelineAfter). The earlier the cut, the longer a
// latency that sets in suddenly is survived (see lead); the later, the
// rarer a renewal abandoned to a passing hiccup.
func inlineCut(t Timing) time.Duration {
	return min(t.RetryPeriod/2, pipelineAfter(t))
}

// pipelineAfter is the age of a lone renewal in flight past which
// shouldSend sends another beside it (2L + retryPeriod = 3/4 of the renew
// deadline); not positive when one at a time never keeps up.
func pipelineAfter(t Timing) time.Duration {
	return (3*t.RenewDeadline/4 - t.RetryPeriod) / 2
}

// done takes r's answer. The pace's rules see only the answers to its own
// renewals (lastAnswer, latency); renewUrgently sees all (lastHeard,
// successes).
func (p *pipeline) done(r renewal, now time.Time) {
	paced := !p.extraAt[r.sent]
	if paced {
		p.lastAnswer = now
	}
	p.lastHeard = now
	p.forget(r.sent)
	if r.err == nil {
		if paced {
			p.latency = now.Sub(r.sent)
		}
		p.successes[p.answered%len(p.successes)] = success{now, now.Sub(r.sent)}
		p.answered++
	}
}

type success struct {
	at      time.Time
	latency time.Duration
}

// usual is what the API server takes when nothing stalls it: the least
// latency of the last successes (up to 8) answered within the last
// `within`, or 0 if none was (a term's first renewal). A renewal that
// waited through a stall does not raise it; a server grown slow does, once
// its earlier answers are older than within.
func (p *pipeline) usual(now time.Time, within time.Duration) time.Duration {
	var u time.Duration
	seen := false
	for _, s := range p.successes[:min(p.answered, len(p.successes))] {
		if now.Sub(s.at) <= within && (!seen || s.latency < u) {
			u, seen = s.latency, true
		}
	}
	return u
}

// forget stops counting the renewal sent at sent as in flight.
func (p *pipeline) forget(sent time.Time) {
	delete(p.extraAt, sent)
	delete(p.urgentPoolAt, sent)
	for i, s := range p.sent {
		if s.Equal(sent) {
			p.sent = append(p.sent[:i], p.sent[i+1:]...)
			if i < len(p.cancels) {
				p.cancels = append(p.cancels[:i], p.cancels[i+1:]...)
			}
			return
		}
	}
}

type renewal struct {
	sent time.Time
	got  *coordinationv1.Lease
	err  error
}

// sendRenewal, on a worker, writes a fresh renewTime and reports the
// outcome on out.
func (e *Election) sendRenewal(ctx context.Context, leases kubeapi.Leases, patch renewPatch, sent time.Time, out chan<- renewal) {
	out <- e.renewal(ctx, leases, patch, sent)
}

// renewal writes a fresh renewTime (sent) and returns the outcome.
func (e *Election) renewal(ctx context.Context, leases kubeapi.Leases, patch renewPatch, sent time.Time) (r renewal) {
	r.sent = sent
	defer func() {
		if p := recover(); p != nil { // a failed renewal, not a dead host
			r.got, r.err = nil, panicError(p)
		}
	}()
	injectPanic("renew")
	// Useful until sent + renewDeadline (what it would extend leadership
	// to), not only until the leadership known now ends: renewals still in
	// flight may extend that first.
	ctx, cancel := context.WithDeadline(ctx, sent.Add(min(e.timing.RenewDeadline, requestTimeout)))
	defer cancel()
	r.got, r.err = leases.Patch(ctx, e.key.Name, types.JSONPatchType, patch.at(sent), metav1.PatchOptions{})
	return r
}

// renewInline sends the renewal on the leading goroutine and returns its
// outcome, unless it goes unanswered until inlineCut: then it is abandoned
// (it may land all the same, which harms nothing: renewals do not depend
// on each other) and slow is true. It waits at most until the leadership
// known now ends. ctx is not cancelled with the election: a cancel waits
// for the answer on its way (see lead), at most inlineCut.
func (e *Election) renewInline(ctx context.Context, patch renewPatch, sent time.Time) (r renewal, slow bool) {
	e.mu.Lock()
	until := e.term.validUntil
	e.mu.Unlock()
	cut := sent.Add(inlineCut(e.timing))
	ctx, cancel := context.WithDeadline(ctx, earliest(cut, until))
	defer cancel()
	r = e.renewal(ctx, e.api.leases, patch, sent)
	// Only our own deadline at the cut makes it slow: an answer of the API
	// server (a refusal) that comes back late is still that answer.
	if errors.Is(r.err, context.DeadlineExceeded) && !fromAPIServer(r.err) && ctx.Err() != nil &&
		!e.clock.Now().Before(cut) && until.After(cut) {
		if e.ctx.Err() == nil {
			logf(LevelInfo, "lease %s: renewal unanswered after %v: renewals now go out on workers, beside each other when slower still, until answers come fast again",
				e.key, inlineCut(e.timing))
		}
		return r, true
	}
	return r, false
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// renewed applies the outcome of one renewal: a success extends leadership
// to its send time + renewDeadline; an error is a loss reason when the Lease
// is gone or no longer ours, else counted and retried.
func (e *Election) renewed(r renewal) error {
	if r.err != nil {
		if e.ctx.Err() != nil {
			return nil // cancelled mid-renewal: not a failure
		}
		if reason := e.fatalRenewError(r.err); reason != nil {
			return reason
		}
		e.setAPIErr(r.err)
		e.stats.RenewFailed()
		e.stats.APIError()
		logf(LevelWarning, "lease %s: renewal failed (will retry within the renew deadline): %v", e.key, r.err)
		return nil
	}
	e.stats.Renewed(e.clock.Since(r.sent))
	e.obs.apply(r.got, r.got.ResourceVersion)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.term.lastAPIErr = nil // a loss by the deadline names only errors since
	e.preferredHolderSeenLocked(r.got)
	if rvNewer(r.got.ResourceVersion, e.term.written.ResourceVersion) {
		e.term.written = r.got
	}
	// Once validity has lapsed the term is over, even if lead has not yet
	// noticed: a late success must not bring IsLeader back from 0 to 1 (a
	// host that saw 0 has stopped serving and waits in WaitLost).
	if until := r.sent.Add(e.timing.RenewDeadline); e.term.phase == phaseLeader && until.After(e.term.validUntil) &&
		e.clock.Now().Before(e.term.validUntil) {
		e.term.validUntil = until
	}
	return nil
}

// foreignWrite reports why the observed Lease is no longer ours, or nil.
// States not newer than our own last write are stale and ignored.
func (e *Election) foreignWrite(s snapshot) error {
	e.mu.Lock()
	written, token := e.term.written, e.term.token
	e.mu.Unlock()
	if !s.synced || !rvNewer(s.rec.resourceVersion, written.ResourceVersion) {
		return nil
	}
	if reason := e.whyNotOurs(s.rec, token); reason != nil {
		return reason
	}
	// Our own write, seen on the watch before its response: adopt it.
	e.mu.Lock()
	if rvNewer(s.rec.resourceVersion, e.term.written.ResourceVersion) {
		e.term.written = s.lease
	}
	e.mu.Unlock()
	return nil
}

// whyNotOurs says how a Lease record differs from the one we hold, or nil.
func (e *Election) whyNotOurs(r record, token int64) error {
	switch {
	case !r.exists:
		return ErrLeaseDeleted
	case !r.heldBy(e.identity, e.incarnation):
		return fmt.Errorf("%w: holder is now %s", ErrLeaseTaken, clip(r.holder))
	case r.token != token || r.durationSeconds != e.timing.leaseDurationSeconds():
		return fmt.Errorf("%w: leaseTransitions %d, leaseDurationSeconds %d", ErrLeaseEdited, r.token, r.durationSeconds)
	}
	return nil
}

// fatalRenewError turns a renewal error into a loss reason when the Lease is
// gone or changed by someone else; nil means "transient, keep trying".
func (e *Election) fatalRenewError(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		e.revoke()
		return ErrLeaseDeleted
	case apierrors.IsInvalid(err):
		// A test operation of the patch failed: the Lease is no longer as
		// we hold it, and someone else may lead already. Leadership ends
		// here, before asking why (a GET of up to 2 s). The observer
		// usually knows by whom.
		e.revoke()
		if reason := e.foreignWrite(e.obs.snapshot()); reason != nil {
			return reason
		}
		return e.casFailureReason()
	case apierrors.IsConflict(err):
		return e.foreignWrite(e.obs.snapshot())
	}
	return nil
}

// revoke ends the leadership guarantee at once (IsLeader returns 0); the
// term's end, with its reason, follows. The observer's view, which our
// renewals kept current while its follow loop was paused, shows our last
// renewal, and the Lease is no longer that: the loop resumes (a list
// first), so that GetHolder and holder watches wait for the API server's
// answer instead of naming this process. It resumes even when nothing else
// uses the observer (an election's end otherwise leaves such an observer
// paused): a lost term is rare, and the reaper stops an unused observer.
func (e *Election) revoke() {
	e.mu.Lock()
	e.term.validUntil = time.Time{}
	e.mu.Unlock()
	e.obs.leadingEnded(e, true)
}

// release clears the holder (client-go's release record) if the Lease is
// still ours, so a standby can take over at once.
func (e *Election) release(held *coordinationv1.Lease, timeout time.Duration) error {
	got, err := e.endTerm(held, timeout, "release", releaseSpec)
	if err == nil && got != nil {
		e.stats.Released()
		logf(LevelInfo, "lease %s: %s released", e.key, e.identity)
	}
	return err
}

// endTerm writes the record that ends our term (spec: a release or a
// hand-off) over held (nil: over what a read finds, if ours), with a
// compare-and-swap, and returns what it wrote: nil when the Lease is gone
// or no longer ours (nothing to end). Leadership has already ended
// locally.
func (e *Election) endTerm(held *coordinationv1.Lease, timeout time.Duration, what string,
	spec func(*coordinationv1.Lease, time.Time)) (*coordinationv1.Lease, error) {
	got, _, err := e.casWrite(held, timeout, what, spec, e.holds)
	return got, err
}

// holds reports whether the record names this candidacy.
func (e *Election) holds(r record) bool { return r.heldBy(e.identity, e.incarnation) }

// casWrite writes spec over l with a compare-and-swap. After a conflict (a
// renewal in flight may have landed) it reads the Lease and writes over
// that while stillOurs says it is still the record to replace; l nil reads
// it first. It returns what it wrote, or nil and the Lease it found (nil:
// none) when there is nothing to replace (the Lease gone, or changed by
// someone else).
func (e *Election) casWrite(l *coordinationv1.Lease, timeout time.Duration, what string,
	spec func(*coordinationv1.Lease, time.Time), stillOurs func(record) bool) (written, found *coordinationv1.Lease, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for attempt := 0; attempt < 3; attempt++ {
		if l == nil {
			cur, err := e.api.leases.Get(ctx, e.key.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil, nil, nil
			case err != nil:
				return nil, nil, fmt.Errorf("%s lease %s: %w", what, e.key, err)
			case !stillOurs(recordOf(cur)):
				return nil, cur, nil
			}
			l = cur
		}
		next := l.DeepCopy()
		spec(next, e.clock.Now())
		got, err := e.api.leases.Update(ctx, next, metav1.UpdateOptions{})
		switch {
		case err == nil:
			e.obs.apply(got, got.ResourceVersion)
			return got, got, nil
		case apierrors.IsNotFound(err):
			return nil, nil, nil
		case !apierrors.IsConflict(err):
			return nil, nil, fmt.Errorf("%s lease %s: %w", what, e.key, err)
		}
		l = nil // read it again
	}
	return nil, nil, fmt.Errorf("%s lease %s: kept conflicting", what, e.key)
}

// casFailureReason reads the Lease to say why a renewal's test failed (the
// API server's answer does not say which test): leadership ends either way.
func (e *Election) casFailureReason() error {
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	e.mu.Lock()
	token := e.term.token
	e.mu.Unlock()
	sent := e.obs.seqNow()
	cur, err := e.api.leases.Get(ctx, e.key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		e.obs.applyGone(sent)
		return ErrLeaseDeleted
	case err != nil:
		return fmt.Errorf("%w: a renewal's compare-and-swap failed (re-reading the lease: %v)", ErrLeaseEdited, err)
	}
	e.obs.applyRead(cur, cur.ResourceVersion, sent) // a quorum read: what the others see too
	if reason := e.whyNotOurs(recordOf(cur), token); reason != nil {
		return reason
	}
	return fmt.Errorf("%w: a renewal's compare-and-swap failed", ErrLeaseEdited)
}
