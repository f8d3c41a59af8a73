package lease

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// handOffTo is the hand-off record to id written at t0 (token 3, 10 s);
	// renewedBy moves its renewTime as any other writer's write would.
	handOffTo := func(id string) record {
		r := record{exists: true, holder: handOffHolder(id), handOffTo: id, durationSeconds: 10, token: 3, renewTime: t0}
		r.handOffAt = microString(t0)
		return r
	}
	renewedBy := func(r record, later time.Duration) record { r.renewTime = r.renewTime.Add(later); return r }
	const ownLease = 12 * time.Second // the deciding candidate's lease duration
	held := record{exists: true, holder: "a", durationSeconds: 10, token: 3}
	tests := []struct {
		name      string
		snap      snapshot
		now       time.Time
		wantAct   action
		wantUntil time.Time
	}{
		{"not synced", snapshot{}, t0, actWaitSync, time.Time{}},
		{"absent", snapshot{synced: true}, t0, actCreate, time.Time{}},
		{"released", snapshot{synced: true, rec: record{exists: true, token: 3}}, t0, actAcquire, time.Time{}},
		{"held, fresh", snapshot{synced: true, rec: held, observedAt: t0}, t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"held, expired", snapshot{synced: true, rec: held, observedAt: t0}, t0.Add(10 * time.Second), actAcquire, time.Time{}},
		{"deleted while held, term running", snapshot{synced: true, lastHeld: held, lastHeldAt: t0}, t0.Add(2 * time.Second), actWait, t0.Add(10 * time.Second)},
		{"deleted while held, term over", snapshot{synced: true, lastHeld: held, lastHeldAt: t0}, t0.Add(11 * time.Second), actCreate, time.Time{}},
		{"deleted after release", snapshot{synced: true, lastHeld: record{exists: true}, lastHeldAt: t0}, t0, actCreate, time.Time{}},
		// A release written by someone other than the holder (a plain
		// client-go candidate's tryRelease after a partition healed keeps
		// our incarnation annotation): the holder may still act until its
		// next renewal, so its term is waited out.
		{"released by another writer, term running", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: held, lastHeldAt: t0}, t0.Add(2 * time.Second), actWait, t0.Add(ownLease)},
		{"released by another writer, term over", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: held, lastHeldAt: t0}, t0.Add(ownLease), actAcquire, time.Time{}},
		{"released by another writer, the holder's longer term", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: record{exists: true, holder: "a", durationSeconds: 20, token: 3, incarnation: "x"}, lastHeldAt: t0},
			t0.Add(15 * time.Second), actWait, t0.Add(20 * time.Second)},
		// First seen by a fresh observer (or after renewals were missed):
		// the release landed after the holder's last renewal, so waiting a
		// lease duration (the longer of ours and the holder's) from its
		// first sight is safe.
		{"released by another writer, first seen now", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			observedAt: t0}, t0.Add(time.Second), actWait, t0.Add(ownLease)},
		{"released by another writer, seen after missed renewals", snapshot{synced: true, rec: record{exists: true, token: 3, incarnation: "x"},
			lastHeld: held, lastHeldAt: t0, observedAt: t0.Add(30 * time.Second)}, t0.Add(31 * time.Second), actWait, t0.Add(30*time.Second + ownLease)},
		{"deleted while held, seen after missed renewals", snapshot{synced: true, lastHeld: held, lastHeldAt: t0, observedAt: t0.Add(30 * time.Second)},
			t0.Add(31 * time.Second), actWait, t0.Add(40 * time.Second)},
		// A hand-off record (K8sLeaseHandOff): the target takes it at once;
		// every other candidate waits its term out, as for a live holder.
		{"handed off to me", snapshot{synced: true, rec: handOffTo("me"), observedAt: t0}, t0, actAcquire, time.Time{}},
		{"handed off to another", snapshot{synced: true, rec: handOffTo("b"), observedAt: t0}, t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"handed off to another, who never took it", snapshot{synced: true, rec: handOffTo("b"), observedAt: t0}, t0.Add(10 * time.Second), actAcquire, time.Time{}},
		// The record renewed by someone else since (a client-go candidate
		// named like its holder): no hand-off any more, a live holder.
		{"a hand-off record renewed by another writer", snapshot{synced: true, rec: renewedBy(handOffTo("me"), time.Second), observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"held by me in another incarnation (a restart): not a hand-off", snapshot{synced: true,
			rec: record{exists: true, holder: "me", incarnation: "old", durationSeconds: 10, token: 3}, observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		// client-go, whatever its identity, never takes a hand-off record
		// over (it is nobody's): a record naming us as holder is not one.
		{"held by me (no incarnation: client-go named like us), not a hand-off", snapshot{synced: true,
			rec: record{exists: true, holder: "me", handOffTo: "me", durationSeconds: 10, token: 3}, observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
		{"a hand-off to me already taken up (incarnation set)", snapshot{synced: true,
			rec: record{exists: true, holder: "me", incarnation: "other", handOffTo: "me", durationSeconds: 10, token: 4}, observedAt: t0},
			t0.Add(time.Second), actWait, t0.Add(10 * time.Second)},
	}
	for _, tt := range tests {
		act, until := decide(tt.snap, tt.now, ownLease, "me", record{})
		if act != tt.wantAct || !until.Equal(tt.wantUntil) {
			t.Errorf("%s: decide = %v, %v; want %v, %v", tt.name, act, until, tt.wantAct, tt.wantUntil)
		}
	}
}

// An acquisition of this very candidacy whose answer was lost (or refused
// after it landed) is adopted: only that very write (its incarnation, token
// and renewTime), and not once a later term was seen (a restore brought it
// back while another leads).
func TestDecideAdoptsOnlyTheWriteLeftUnanswered(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mine := record{exists: true, holder: "me", incarnation: "mine", durationSeconds: 10, token: 3, renewTime: t0}
	later := mine
	later.renewTime = t0.Add(time.Second)
	for _, tc := range []struct {
		name       string
		snap       snapshot
		unanswered record
		want       action
	}{
		{"the write whose answer was lost", snapshot{synced: true, rec: mine, highestToken: 3, observedAt: t0}, mine, actAdopt},
		{"the same write, after a later term was seen", snapshot{synced: true, rec: mine, highestToken: 4, observedAt: t0}, mine, actWait},
		{"another write of this incarnation", snapshot{synced: true, rec: later, highestToken: 3, observedAt: t0}, mine, actWait},
		{"no write unanswered", snapshot{synced: true, rec: mine, highestToken: 3, observedAt: t0}, record{}, actWait},
	} {
		if got, _ := decide(tc.snap, t0.Add(time.Second), 12*time.Second, "me", tc.unanswered); got != tc.want {
			t.Errorf("%s: decide = %v; want %v", tc.name, got, tc.want)
		}
	}
}
