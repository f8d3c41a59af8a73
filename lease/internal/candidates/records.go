// Package candidates keeps candidate records on the API server: one object
// per candidacy on a lease, saying who campaigns and the version and
// priority it declares. Where the API server serves LeaseCandidates
// (coordination.k8s.io/v1beta1) they are those; elsewhere they are
// coordination.k8s.io/v1 Leases labelled OfLabel.
//
// It stores and reads records only: when they are written, and which
// candidate is preferred, are the election's decisions (package lease,
// which it must not import: the core depends on it through an interface of
// its own).
package candidates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
)

const (
	// OfLabel labels a record with the Lease it is a candidate for (the
	// name, or "h-<hash>" when the name cannot be a label value).
	OfLabel = "k8s-lease.io/candidate-of"
	// VersionAnnotation and PriorityAnnotation hold what the candidate
	// declared.
	VersionAnnotation  = "k8s-lease.io/candidate-version"
	PriorityAnnotation = "k8s-lease.io/candidate-priority"
	// SeenTokenAnnotation holds the highest fencing token of the lease the
	// candidate had seen when it wrote the record, SeenLeaseAnnotation the
	// UID of the Lease that token was on.
	SeenTokenAnnotation = "k8s-lease.io/candidate-seen-token"
	SeenLeaseAnnotation = "k8s-lease.io/candidate-seen-lease"
	// Strategy is our LeaseCandidate strategy: a custom one, so
	// Kubernetes' own coordinated leader election leaves our Leases alone.
	Strategy = "k8s-lease.io/NewestVersion"
	// identityAnnotation keeps a LeaseCandidate's identity (its name is
	// derived from it).
	identityAnnotation = "k8s-lease.io/candidate-identity"
)

// TTL is how long a record stays live without a refresh: Lease records
// declare it as their duration.
const TTL = 10 * time.Minute

// Record is one candidacy on a lease, as its record says.
type Record struct {
	Identity  string    `json:"identity"`
	Version   string    `json:"version,omitempty"`
	Priority  int32     `json:"priority"`
	RenewTime time.Time `json:"renew_time"`
	// SeenToken is the highest fencing token of the lease the candidate had
	// seen when it wrote the record, on the Lease object SeenLease (its
	// UID): a record that names the current term's token on the current
	// Lease was written by a process alive during that term.
	SeenToken int64  `json:"seen_token"`
	SeenLease string `json:"seen_lease_uid,omitempty"`
}

// Store is what Leases and LeaseCandidates do, the store Registry picks:
// Put writes the record (a new one, or over our own record: never over
// another object of that name) and returns its resource version; Remove
// deletes it if still at that version; Get's found is false when there is
// none; Watch reports any change of the lease's records.
type Store interface {
	Kind() string
	Put(ctx context.Context, ns, lease string, r Record) (rv string, err error)
	Remove(ctx context.Context, ns, lease, identity, rv string) error
	List(ctx context.Context, ns, lease string) (records []Record, rv string, err error)
	Get(ctx context.Context, ns, lease, identity string) (r Record, found bool, err error)
	Watch(ctx context.Context, ns, lease, rv string) (watch.Interface, error)
}

// RecordName is the record's name: "<lease>-candidate-<identity>" when
// that is a valid name (identities are usually Pod names), so that a Role
// can grant the records by name; else the identity's hash instead.
func RecordName(lease, identity string) string {
	if name := lease + "-candidate-" + identity; len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(identity))
	suffix := "-candidate-h" + hex.EncodeToString(sum[:])[:12]
	if len(lease)+len(suffix) > validation.DNS1123SubdomainMaxLength {
		lease = lease[:validation.DNS1123SubdomainMaxLength-len(suffix)]
	}
	return lease + suffix
}

// ofValue is the lease's name as a label value, or a hash of it.
func ofValue(lease string) string {
	if len(validation.IsValidLabelValue(lease)) == 0 {
		return lease
	}
	sum := sha256.Sum256([]byte(lease))
	return "h-" + hex.EncodeToString(sum[:])[:40]
}

// recordsOf selects the records of lease (list and watch).
func recordsOf(lease string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: OfLabel + "=" + ofValue(lease)}
}

// recordsFrom selects the records of lease for a watch from rv (the
// version a list answered at: a watch from none starts with every record
// as an event).
func recordsFrom(lease, rv string) metav1.ListOptions {
	opts := recordsOf(lease)
	opts.ResourceVersion = rv
	return opts
}

// ErrNotOurRecord: an object of the record's name exists that the library
// did not create (no OfLabel for this lease). It is never written over, so
// retrying soon would not help: the write waits for the refresh.
var ErrNotOurRecord = errors.New("exists and is not a candidate record")

// putAttempts bounds a record write's create-get-update rounds: a round is
// lost only to another writer of the same record (the delete of this
// identity's previous candidacy, or its last refresh), which happens once.
const putAttempts = 4

// objects is the API of one kind of record object T (kubeapi.Leases and
// kubeapi.LeaseCandidates are both, for their types).
type objects[T metav1.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// put writes the record name of lease: fresh is a new object of that name,
// want sets what the record says. It creates the record, or updates it if
// it is ours (never another object of that name), and returns its resource
// version.
func put[T metav1.Object](ctx context.Context, api objects[T], kind, name, lease string, fresh func() T, want func(T)) (string, error) {
	var err error
	for range putAttempts {
		obj := fresh()
		want(obj)
		var got, cur T
		if got, err = api.Create(ctx, obj, metav1.CreateOptions{}); err == nil {
			return got.GetResourceVersion(), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", err
		}
		if cur, err = api.Get(ctx, name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				continue // deleted since the create: create it again
			}
			return "", err
		}
		if cur.GetLabels()[OfLabel] != ofValue(lease) {
			return "", fmt.Errorf("%s %s %w of %s: not overwritten", kind, name, ErrNotOurRecord, lease)
		}
		want(cur)
		if got, err = api.Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return got.GetResourceVersion(), nil
		}
		if !rewriteAgain(err) {
			return "", err
		}
	}
	return "", fmt.Errorf("%s %s: deleted or rewritten under each of %d writes: %w", kind, name, putAttempts, err)
}

// rewriteAgain reports an update lost to another writer of the record:
// deleted since the get (the previous candidacy's delete: create it again)
// or rewritten (its last refresh: read it again).
func rewriteAgain(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// remove deletes the record of identity if it is still at rv.
func remove[T metav1.Object](ctx context.Context, api objects[T], lease, identity, rv string) error {
	err := api.Delete(ctx, RecordName(lease, identity), deleteIfAt(rv))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or rewritten by a later candidacy: not ours to delete
	}
	return err
}

// deleteIfAt deletes only at resource version rv (none given: any).
func deleteIfAt(rv string) metav1.DeleteOptions {
	if rv == "" {
		return metav1.DeleteOptions{}
	}
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
}

// get reads the record of identity; read takes it for a record of lease
// and says whose it is.
func get[T metav1.Object](ctx context.Context, api objects[T], lease, identity string, read func(T, string) (Record, bool)) (Record, bool, error) {
	obj, err := api.Get(ctx, RecordName(lease, identity), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	r, ok := read(obj, lease)
	return r, ok && r.Identity == identity, nil
}

// recordsIn reads the records of lease among listed objects.
func recordsIn[T any](items []T, lease string, read func(*T, string) (Record, bool)) []Record {
	var out []Record
	for i := range items {
		if r, ok := read(&items[i], lease); ok {
			out = append(out, r)
		}
	}
	return out
}

// annotations are what a record declares, and key: value of its kind.
func annotations(r Record, key, value string) map[string]string {
	return map[string]string{VersionAnnotation: r.Version, PriorityAnnotation: strconv.Itoa(int(r.Priority)),
		SeenTokenAnnotation: strconv.FormatInt(r.SeenToken, 10), SeenLeaseAnnotation: r.SeenLease, key: value}
}

// fromAnnotations is the record of identity, renewed at renew (nil: never),
// with what its annotations declare.
func fromAnnotations(identity string, annotations map[string]string, renew *metav1.MicroTime) Record {
	r := Record{Identity: identity, Version: annotations[VersionAnnotation]}
	if p, err := strconv.ParseInt(annotations[PriorityAnnotation], 10, 32); err == nil {
		r.Priority = int32(p)
	}
	if t, err := strconv.ParseInt(annotations[SeenTokenAnnotation], 10, 64); err == nil {
		r.SeenToken = t
	}
	r.SeenLease = annotations[SeenLeaseAnnotation]
	if renew != nil {
		r.RenewTime = renew.Time
	}
	return r
}
