package lease

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// snapshot is what a process knows about one Lease, with local times taken
// from its monotonic clock.
type snapshot struct {
	synced bool // at least one list succeeded
	// live: the snapshot is kept current, by a follow loop that has listed
	// since it started, or by the renewals of an election of this process
	// that leads the lease. A snapshot that is not live may be any age:
	// nobody followed the lease for a while.
	live bool
	// seq counts the states applied: a read sent at seq is the newest
	// state only while nothing was applied since (see applyRead).
	seq   uint64
	rec   record // latest state; rec.exists false when absent
	lease *coordinationv1.Lease
	// observedAt is when rec's election record last changed here. Like
	// client-go's observedTime it is the base of expiry, immune to skew.
	observedAt time.Time
	// lastHeld and lastHeldAt keep the last record that had a holder, so
	// that a deleted Lease is not re-created before that holder's term ran out.
	lastHeld   record
	lastHeldAt time.Time
	// highestToken is the highest fencing token seen on this lease.
	highestToken int64
	// goneUID is the UID of the last Lease object this process saw deleted:
	// only a read sent after that shows the object again; a watch event or
	// an older read of it is older than its deletion, whatever its
	// resourceVersion (a renewal this process never saw is above the last
	// version it knew).
	goneUID types.UID
	// err is the last list or watch error, nil after a success; errAt is
	// when it happened.
	err   error
	errAt time.Time
}

// expiry is when the current holder's lease runs out, judged locally.
func (s snapshot) expiry() time.Time { return s.observedAt.Add(s.rec.duration()) }

// holderView is the (holder, token) a caller should see at now: no holder
// when the Lease is absent, released or expired. During a hand-off not yet
// taken up it is the target: only it may take the lease within the
// record's term (every other candidate waits), and it does in milliseconds.
func (s snapshot) holderView(now time.Time) (holder string, token int64, exists bool) {
	if !s.rec.exists {
		return "", 0, false
	}
	if s.rec.holder == "" || !now.Before(s.expiry()) {
		return "", s.rec.token, true
	}
	if s.rec.handingOff() {
		return s.rec.handOffTo, s.rec.token, true
	}
	return s.rec.holder, s.rec.token, true
}

// apply records a Lease state (nil for absent) seen at resource version rv
// on the watch, or in the answer to our own write, unless it is older than
// what we have. Writers call it with their own responses so that local
// reads never lag behind their writes.
func (o *observer) apply(l *coordinationv1.Lease, rv string) { o.applyState(l, rv, false, 0, 0) }

// applyRead records the state a fresh read (a list, a GET, both quorum
// reads) returned, at whatever resource version: a read is the truth.
//
// Two things a read can show that a watch followed without a gap cannot.
// Content can repeat: a renewal is a JSON patch without a resource version,
// which client-go's REST client retries after a 429 or a 5xx with
// Retry-After, so one that did land can land again after later renewals
// and put an older renewTime back; after a gap (a relist, a re-read after a
// conflict) an equal record at another version is therefore counted as a
// change, and its expiry from now. And versions can go back (etcd restored
// from a backup): refusing them would ignore the Lease until the next
// relist, so the older state is taken, as first seen (from now too).
//
// All of this only for the newest state: sent is the snapshot's seq when
// the read was sent (seqNow), and when anything was applied since (a watch
// event, the answer to a write), the read may be older than that and is
// applied as apply does (ignored unless newer).
func (o *observer) applyRead(l *coordinationv1.Lease, rv string, sent uint64) {
	o.applyState(l, rv, true, sent, 0)
}

// applyGone records that a read sent at seq sent found no Lease, unless
// anything was applied since (the read may then be older than that): the
// answer of a GET carries no resource version to compare.
func (o *observer) applyGone(sent uint64) { o.applyState(nil, "", true, sent, 0) }

// applyList is applyRead for the list of the follow loop numbered loop: its
// first success makes the snapshot live.
func (o *observer) applyList(l *coordinationv1.Lease, rv string, sent, loop uint64) {
	o.applyState(l, rv, true, sent, loop)
}

func (o *observer) applyState(l *coordinationv1.Lease, rv string, read bool, sent, loop uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	becameLive := loop != 0 && loop == o.loop && o.listedBy != loop
	if becameLive {
		o.listedBy = loop
		defer o.notifyLocked() // whatever follows: waiters for a live snapshot answer
	}
	// A read comes after a gap: what happened since the last state seen
	// may be unseen. It is the newest state only if nothing was applied
	// while it was in flight; else it may be older than that, and is taken
	// only if newer (a read that found nothing says not when: dropped).
	if l != nil && l.UID != "" && l.UID == o.snap.goneUID && (!read || sent != o.snap.seq) {
		// Older than the deletion this process learnt. A read sent after
		// it is the truth (etcd restored from a backup brings the object
		// back), and is taken below.
		return
	}
	gap := read
	if read && sent != o.snap.seq {
		if l == nil && rv == "" {
			return
		}
		read = false
	}
	if !read && o.snap.synced && o.snap.rec.resourceVersion != "" && !rvNewer(rv, o.snap.rec.resourceVersion) {
		return
	}
	rec := recordOf(l)
	rec.resourceVersion = rv
	if l == nil && rv == "" {
		// A GET that found nothing (applyGone) says not at which version:
		// keep the last one, so that a read older than the deletion is
		// not taken for newer.
		rec.resourceVersion = o.snap.rec.resourceVersion
	}
	now := o.clock.Now()
	changed := !o.snap.synced || !rec.sameSpec(o.snap.rec)
	if gap && !changed && rec.exists && rv != o.snap.rec.resourceVersion {
		changed = true // see applyRead: content repeated, or versions went back
		if old := o.snap.rec.resourceVersion; read && old != "" && rvNewer(old, rv) {
			logf(LevelWarning, "lease %s: its resourceVersion went back from %s to %s (etcd restored from a backup?): taking the Lease as first seen",
				o.name, old, rv)
		}
	}
	switch {
	case changed && rec.exists && rec.holder == "" && rec.incarnation == "":
		// Released by the holder (our release removes the incarnation):
		// its term is over, so a later deletion leaves nobody to wait for.
		o.snap.lastHeld, o.snap.lastHeldAt = record{}, time.Time{}
	case changed && o.snap.rec.exists && o.snap.rec.holder != "":
		o.snap.lastHeld, o.snap.lastHeldAt = o.snap.rec, o.snap.observedAt
	}
	if changed {
		o.snap.observedAt = now
	}
	switch {
	case l == nil && o.snap.lease != nil && o.snap.lease.UID != "":
		o.snap.goneUID = o.snap.lease.UID
	case l != nil && l.UID == o.snap.goneUID:
		o.snap.goneUID = "" // back, by a read sent after its deletion: followed as any
	}
	// A read of the very state we have is no news: waking subscribers for
	// it would turn a candidate's re-read after a conflict into a loop.
	moved := changed || rv != o.snap.rec.resourceVersion
	news := moved || o.snap.err != nil
	if moved {
		o.snap.seq++ // a read of the very state we have demotes no other read
	}
	o.snap.synced = true
	o.snap.err = nil
	o.snap.rec = rec
	o.snap.lease = l
	o.snap.highestToken = max(o.snap.highestToken, rec.token)
	if news {
		o.notifyLocked()
	}
}

// notifyLocked wakes every subscriber (coalesced: a pending wake-up is
// enough); o.mu held.
func (o *observer) notifyLocked() {
	for ch := range o.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
