package candidates

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Leases keeps candidate records as coordination.k8s.io/v1 Leases, which
// every cluster serves and the election's Role grants.
type Leases struct{ Client kubeapi.Client }

func (Leases) Kind() string { return "Lease" }

func (s Leases) Put(ctx context.Context, ns, lease string, r Record) (string, error) {
	name := RecordName(lease, r.Identity)
	holder, seconds, renew := r.Identity, int32(TTL/time.Second), metav1.NewMicroTime(r.RenewTime)
	return put(ctx, s.Client.Leases(ns), "lease", name, lease,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}} },
		func(l *coordinationv1.Lease) {
			l.Labels = map[string]string{OfLabel: ofValue(lease)}
			l.Annotations = annotations(r, OfLabel, lease)
			l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &renew, AcquireTime: &renew}
		})
}

func (s Leases) Remove(ctx context.Context, ns, lease, identity, rv string) error {
	return remove(ctx, s.Client.Leases(ns), lease, identity, rv)
}

func (s Leases) Watch(ctx context.Context, ns, lease, rv string) (watch.Interface, error) {
	return s.Client.Leases(ns).Watch(ctx, recordsFrom(lease, rv))
}

func (s Leases) List(ctx context.Context, ns, lease string) ([]Record, string, error) {
	l, err := s.Client.Leases(ns).List(ctx, recordsOf(lease))
	if err != nil {
		return nil, "", err
	}
	return recordsIn(l.Items, lease, recordOfLease), l.ResourceVersion, nil
}

func (s Leases) Get(ctx context.Context, ns, lease, identity string) (Record, bool, error) {
	return get(ctx, s.Client.Leases(ns), lease, identity, recordOfLease)
}

// recordOfLease reads a Lease kept as a candidate record of lease.
func recordOfLease(l *coordinationv1.Lease, lease string) (Record, bool) {
	if l.Annotations[OfLabel] != lease || l.Spec.HolderIdentity == nil {
		return Record{}, false // another lease whose name hashes alike, or not a record
	}
	return fromAnnotations(*l.Spec.HolderIdentity, l.Annotations, l.Spec.RenewTime), true
}
