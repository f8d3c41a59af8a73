package candidates

import (
	"context"
	"slices"
	"sync"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Registry picks the store once: LeaseCandidates where served, Leases
// elsewhere. The zero Registry is ready to use.
type Registry struct {
	mu    sync.Mutex
	store Store
}

// StoreFor returns the store picked, asking client's discovery (within
// timeout) until it answers; debugf reports the choice.
func (r *Registry) StoreFor(client kubeapi.Client, timeout time.Duration, debugf func(format string, args ...any)) Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.store != nil {
		return r.store
	}
	var store Store = Leases{client}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	served, err := client.ServedResources(ctx, coordinationv1beta1.SchemeGroupVersion.String())
	switch {
	case err == nil:
		if slices.Contains(served, "leasecandidates") {
			store = LeaseCandidates{client}
		}
	case !apierrors.IsNotFound(err):
		// Not known yet: Leases this time, and ask again next time (a
		// choice fixed now could differ from the other processes' for good).
		debugf("candidate records: cannot tell whether LeaseCandidates are served (%v); using Leases for now", err)
		return store
	}
	r.store = store
	debugf("candidate records are %ss", r.store.Kind())
	return r.store
}
