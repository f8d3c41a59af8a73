package main

import (
	"fmt"
	"time"
)

const handOffTimeout = 5 * time.Second

// handOffTo: a leader and two campaigning standbys (ours only: client-go
// has no hand-off to a chosen candidate). The leader calls
// Manager.HandOff to standby i%2; the sample is the time from the call to
// the target's WaitElected returning (returned: until HandOff returned, once
// the old leader saw the target lead). others counts the records of the
// lease, seen by an admin watch from the call to the target's own first
// record, whose holder is neither the target nor (before the hand-off
// record, an in-flight renewal) the old leader.
func (b *bench) handOffTo(i int) (d, returned time.Duration, others int, err error) {
	name, leader, sbs, err := b.group(ours, fast, 2, "handoff-to")
	if err != nil {
		return 0, 0, 0, err
	}
	defer stopAll(append(sbs, leader))
	log, err := b.followLease(name)
	if err != nil {
		return 0, 0, 0, err
	}
	defer log.stop()
	if _, err := log.waitFor(0, 5*time.Second, func(e leaseEvent) bool { return e.holder == "leader" }); err != nil {
		return 0, 0, 0, fmt.Errorf("handoff-to: the leader's record: %w", err)
	}
	target, targetID := sbs[i%2], fmt.Sprintf("standby-%d", i%2)
	from := log.len()
	called := time.Now()
	herr := leader.(*oursCandidate).m.HandOff(benchNamespace, name, targetID, handOffTimeout)
	returned = time.Since(called)
	select {
	case <-target.elected():
	case <-time.After(handOffTimeout):
		return 0, 0, 0, fmt.Errorf("handoff-to %s on %s: the target did not lead within %v (HandOff: %v)", targetID, name, handOffTimeout, herr)
	}
	d = target.electedAt().Sub(called)
	if herr != nil {
		return 0, 0, 0, fmt.Errorf("handoff-to %s on %s: the target leads after %v, but HandOff returned: %w", targetID, name, d, herr)
	}
	own, err := log.waitFor(from, 5*time.Second, func(e leaseEvent) bool {
		return e.holder == targetID && e.handOffTo == "" && e.incarnation != ""
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("handoff-to %s on %s: the target's own record: %w", targetID, name, err)
	}
	events, _ := log.all()
	handed := false
	for _, e := range events[from : own+1] {
		switch {
		case e.holder == targetID && e.incarnation != "":
			// the target's own record
		case e.handOffTo == targetID && e.holder != "" && e.incarnation == "":
			// the hand-off record (its holder names nobody: see lease.HandOffAnnotation)
			handed = true
		case e.holder == "leader" && e.handOffTo == "" && !handed:
			// the old leader's renewal, written before its hand-off record
		default:
			others++
			progress("  handoff-to %s on %s: a record held by %q (hand-off to %q, rv %s) before the target led",
				targetID, name, e.holder, e.handOffTo, e.rv)
		}
	}
	if !handed {
		progress("  handoff-to %s on %s: no hand-off record seen by the admin watch", targetID, name)
	}
	// Where the time goes: renewTimes are written just before each request
	// is sent (the old leader's hand-off record, the target's acquisition).
	var handOffAt time.Time
	for _, e := range events[from:own] {
		if e.handOffTo == targetID {
			handOffAt = e.renew
		}
	}
	progress("  handoff-to %s: leads after %.1f ms (hand-off record sent at +%.1f, target's acquisition sent at +%.1f, HandOff returned at +%.1f)",
		targetID, ms(d), ms(handOffAt.Sub(called)), ms(events[own].renew.Sub(called)), ms(returned))
	return d, returned, others, nil
}
