package lease

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GetHolder returns the current holder of ns/name. When this process
// observes the lease (an election or watch on it) the answer is local, with
// expiry judged on the monotonic clock; otherwise it is one GET, and expiry
// falls back to the holder's renewTime against the local wall clock.
func (m *Manager) GetHolder(ns, name string) (HolderState, error) {
	if err := ValidateKey(ns, name); err != nil {
		return HolderState{}, err
	}
	key := Key{ns, name}
	m.mu.Lock()
	client, err := m.clientLocked()
	var obs *observer
	if ol := m.observers[key]; ol != nil {
		obs = ol.obs
	}
	m.mu.Unlock()
	if err != nil {
		return HolderState{}, err
	}
	if obs != nil {
		if snap := obs.snapshot(); snap.synced {
			holder, token, exists := snap.holderView(m.clock.Now())
			return HolderState{Holder: holder, Token: token, Exists: exists}, nil
		}
	}
	ctx, cancel := requestContext()
	defer cancel()
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return HolderState{}, nil
	}
	if err != nil {
		return HolderState{}, fmt.Errorf("get lease %s: %w", key, err)
	}
	r := recordOf(l)
	st := HolderState{Holder: r.holder, Token: r.token, Exists: true}
	if r.holder != "" && !m.clock.Now().Before(r.renewTime.Add(r.duration())) {
		st.Holder = "" // expired by the holder's own clock: a first look can do no better
	}
	return st, nil
}
