package candidates

import (
	"context"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// LeaseCandidates keeps candidate records as Kubernetes LeaseCandidates
// (coordination.k8s.io/v1beta1, served with the CoordinatedLeaderElection
// feature gate). binaryVersion must be semantic: a candidate that declared
// none is recorded as 0.0.0; the identity is kept in an annotation (the
// name is derived from it).
type LeaseCandidates struct{ Client kubeapi.Client }

func (LeaseCandidates) Kind() string { return "LeaseCandidate" }

func (s LeaseCandidates) Put(ctx context.Context, ns, lease string, r Record) (string, error) {
	name := RecordName(lease, r.Identity)
	bin := "0.0.0"
	if v, err := version.ParseSemantic(r.Version); err == nil {
		bin = v.String()
	}
	renew := metav1.NewMicroTime(r.RenewTime)
	return put(ctx, s.Client.LeaseCandidates(ns), "leasecandidate", name, lease,
		func() *coordinationv1beta1.LeaseCandidate {
			return &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Name: name}}
		},
		func(l *coordinationv1beta1.LeaseCandidate) {
			l.Labels = map[string]string{OfLabel: ofValue(lease)}
			l.Annotations = annotations(r, identityAnnotation, r.Identity)
			l.Spec = coordinationv1beta1.LeaseCandidateSpec{LeaseName: lease, RenewTime: &renew, BinaryVersion: bin,
				Strategy: Strategy}
		})
}

func (s LeaseCandidates) Remove(ctx context.Context, ns, lease, identity, rv string) error {
	return remove(ctx, s.Client.LeaseCandidates(ns), lease, identity, rv)
}

func (s LeaseCandidates) Watch(ctx context.Context, ns, lease, rv string) (watch.Interface, error) {
	return s.Client.LeaseCandidates(ns).Watch(ctx, recordsFrom(lease, rv))
}

func (s LeaseCandidates) List(ctx context.Context, ns, lease string) ([]Record, string, error) {
	l, err := s.Client.LeaseCandidates(ns).List(ctx, recordsOf(lease))
	if err != nil {
		return nil, "", err
	}
	return recordsIn(l.Items, lease, recordOfLeaseCandidate), l.ResourceVersion, nil
}

func (s LeaseCandidates) Get(ctx context.Context, ns, lease, identity string) (Record, bool, error) {
	return get(ctx, s.Client.LeaseCandidates(ns), lease, identity, recordOfLeaseCandidate)
}

// recordOfLeaseCandidate reads a LeaseCandidate of ours for lease.
func recordOfLeaseCandidate(l *coordinationv1beta1.LeaseCandidate, lease string) (Record, bool) {
	id := l.Annotations[identityAnnotation]
	if l.Spec.LeaseName != lease || id == "" {
		return Record{}, false
	}
	return fromAnnotations(id, l.Annotations, l.Spec.RenewTime), true
}
