package lease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lead renews every retry period until the renew deadline passes without a
// successful renewal, another writer is observed on the Lease, or the
// election is cancelled (nil).
func (e *Election) lead(notify <-chan struct{}) error {
	renew := e.clock.NewTimer(e.timing.RetryPeriod)
	defer renew.Stop()
	for {
		e.mu.Lock()
		left := e.validUntil.Sub(e.clock.Now())
		lastErr := e.lastAPIErr
		e.mu.Unlock()
		if left <= 0 {
			return fmt.Errorf("%w (%v): last error: %v", ErrRenewDeadline, e.timing.RenewDeadline, lastErr)
		}
		deadline := e.clock.NewTimer(left)
		select {
		case <-e.ctx.Done():
			deadline.Stop()
			return nil
		case <-deadline.C():
		case <-notify:
			if reason := e.foreignWrite(e.obs.snapshot()); reason != nil {
				deadline.Stop()
				return reason
			}
		case <-renew.C():
			next := e.timing.RetryPeriod
			if err := e.renew(); err != nil {
				if e.ctx.Err() != nil {
					deadline.Stop()
					return nil // cancelled mid-renewal: not a failure
				}
				if reason := e.fatalRenewError(err); reason != nil {
					deadline.Stop()
					return reason
				}
				e.setAPIErr(err)
				e.stats.renewErrors.Add(1)
				e.stats.apiErrors.Add(1)
				logf(LevelWarning, "lease %s: renewal failed (will retry within the renew deadline): %v", e.key, err)
				next = e.timing.RetryPeriod / 2 // retry sooner while the deadline runs
			}
			renew.Reset(next)
		}
		deadline.Stop()
	}
}

// foreignWrite reports why the observed Lease is no longer ours, or nil.
// States not newer than our own last write are stale and ignored.
func (e *Election) foreignWrite(s snapshot) error {
	e.mu.Lock()
	written, token := e.written, e.token
	e.mu.Unlock()
	if !s.synced || !rvNewer(s.rec.resourceVersion, written.ResourceVersion) {
		return nil
	}
	switch r := s.rec; {
	case !r.exists:
		return ErrLeaseDeleted
	case !r.heldBy(e.identity, e.incarnation):
		return fmt.Errorf("%w: holder is now %q", ErrLeaseTaken, r.holder)
	case r.token != token || r.durationSeconds != e.timing.leaseDurationSeconds():
		return fmt.Errorf("%w: leaseTransitions %d, leaseDurationSeconds %d", ErrLeaseEdited, r.token, r.durationSeconds)
	}
	// Our own write, seen on the watch before its response: adopt it.
	e.mu.Lock()
	if rvNewer(s.rec.resourceVersion, e.written.ResourceVersion) {
		e.written = s.lease
	}
	e.mu.Unlock()
	return nil
}

// fatalRenewError turns a renewal error into a loss reason when the Lease is
// gone or changed by someone else; nil means "transient, keep trying".
func (e *Election) fatalRenewError(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return ErrLeaseDeleted
	case apierrors.IsConflict(err):
		// Someone wrote since our last write. If it was us (a renewal whose
		// response was lost), the observer has it and the next renewal uses it.
		return e.foreignWrite(e.obs.snapshot())
	}
	return nil
}

// renew writes a fresh renewTime with compare-and-swap on our last write,
// bounded by what remains of the renew deadline.
func (e *Election) renew() error {
	e.mu.Lock()
	l := e.written.DeepCopy()
	token, until := e.token, e.validUntil
	e.mu.Unlock()
	sent := e.clock.Now()
	holdSpec(l, e.identity, e.incarnation, token, e.timing, sent, false)
	ctx, cancel := context.WithDeadline(e.ctx, minTime(until, sent.Add(requestTimeout)))
	defer cancel()
	got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	e.stats.renewed(e.clock.Since(sent))
	e.obs.apply(got, got.ResourceVersion)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.written = got
	if e.phase == phaseLeader {
		e.validUntil = sent.Add(e.timing.RenewDeadline)
	}
	return nil
}

// release clears the holder (client-go's release record) if the Lease is
// still ours, so a standby can take over at once.
func (e *Election) release(held *coordinationv1.Lease, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l := held
	for attempt := 0; attempt < 3; attempt++ {
		next := l.DeepCopy()
		releaseSpec(next, e.clock.Now())
		got, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			e.obs.apply(got, got.ResourceVersion)
			e.stats.releases.Add(1)
			logf(LevelInfo, "lease %s: %s released", e.key, e.identity)
			return nil
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("release lease %s: %w", e.key, err)
		}
		// A renewal in flight may have landed: release only what is still ours.
		cur, err := e.leases.Get(ctx, e.key.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("release lease %s: %w", e.key, err)
		}
		if !recordOf(cur).heldBy(e.identity, e.incarnation) {
			return nil
		}
		l = cur
	}
	return fmt.Errorf("release lease %s: kept conflicting", e.key)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
