package lease

import (
	"fmt"
)

// GetHolder returns the current holder of ns/name, from this process's
// observer of the lease: the first call on a lease starts one (a list, then
// a watch) and waits for the list; later calls answer locally, with expiry
// judged on the monotonic clock from when this process saw the record
// change, never from the holder's renewTime. An observer that was not
// following the lease (nothing used it for a while) lists before it
// answers. A holder seen for the first
// time is therefore reported for up to a lease duration after that first
// sight, even if it stopped renewing earlier: the rule a campaign uses, so
// that "no holder" here means a campaign can take the lease at once. The
// observer lives on while the lease is asked about or used by an election
// or watch (see idleObserverTimeout).
func (m *Manager) GetHolder(ns, name string) (HolderState, error) {
	if err := ValidateKey(ns, name); err != nil {
		return HolderState{}, err
	}
	client, err := m.client()
	if err != nil {
		return HolderState{}, err
	}
	key := Key{ns, name}
	m.mu.Lock()
	ol := m.observeLocked(client, key, watchLife(0, client.FindsDeadConnections()), true)
	// A share while waiting: an observer a caller waits on is not idle, and
	// asking about more leases at once must not evict it mid-list.
	ol.refs++
	obs := ol.obs
	m.mu.Unlock()
	snap, err := obs.awaitSynced(requestTimeout)
	m.releaseObserver(key) // idle again (unless used): reaped after idleObserverTimeout
	if err == nil && snap.err != nil {
		// The watch broke and the observer is retrying: what it knows may
		// be stale, so say so rather than answer from it.
		err = fmt.Errorf("%w (following the lease, retrying)", snap.err)
	}
	if err != nil {
		return HolderState{}, fmt.Errorf("get lease %s: %w", key, err)
	}
	holder, token, exists := snap.holderView(m.clock.Now())
	return HolderState{Holder: holder, Token: token, Exists: exists}, nil
}
