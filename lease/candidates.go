package lease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Candidates describe themselves: every election registers a record of its
// candidacy (identity, and the version and priority it declares), so that a
// leader can tell whom it may hand the lease to, and an operator can list
// them with kubectl. Where the API server serves the Kubernetes
// LeaseCandidate API (coordination.k8s.io/v1beta1, with the
// CoordinatedLeaderElection feature gate) the records are LeaseCandidates;
// elsewhere (the default up to v1.37) they are coordination.k8s.io/v1
// Leases labelled CandidateOfLabel, which every cluster serves and the
// same Role grants.
//
// Load: one write when a candidacy starts, one per candidateRefresh while it
// lasts (0.0033 requests/s), and a delete when it ends; a write that fails
// is tried again with backoff, at most one write per 30 s while the
// failure lasts. Best effort: a record that cannot be written (RBAC) is
// logged once and changes nothing else, except that a hand-off to that
// candidate is refused as "not seen".
// A process that crashes leaves its record until candidateTTL passes: a
// hand-off to it times out and the lease is released.

const (
	// CandidateOfLabel labels a candidate record with the Lease it is a
	// candidate for (the name, or "h-<hash>" when the name cannot be a
	// label value).
	CandidateOfLabel = "k8s-lease.io/candidate-of"
	// CandidateVersionAnnotation and CandidatePriorityAnnotation hold what
	// the candidate declared.
	CandidateVersionAnnotation  = "k8s-lease.io/candidate-version"
	CandidatePriorityAnnotation = "k8s-lease.io/candidate-priority"
	// PreferredHolderAnnotation on the Lease names the identity an operator
	// wants to lead: the leader hands off to it while it campaigns. The
	// API server keeps spec.preferredHolder only with the
	// CoordinatedLeaderElection feature gate (off by default up to v1.37;
	// it drops the field otherwise): either is honoured.
	PreferredHolderAnnotation = "k8s-lease.io/preferred-holder"
	// candidateStrategy is our LeaseCandidate strategy: a custom one, so
	// Kubernetes' own coordinated leader election leaves our Leases alone.
	candidateStrategy = "k8s-lease.io/NewestVersion"
)

var (
	candidateRefresh = 5 * time.Minute
	candidateTTL     = 10 * time.Minute
)

// Policy is what a leader does on its own (ElectionOptions.Policy).
type Policy int

const (
	// PolicyHandOffOnCancel: cancelling a leading election hands the lease
	// to the best live candidate (highest version, then priority) instead of
	// releasing it to a race; with none, or if it does not take it within
	// the renew deadline, the lease is released as usual.
	PolicyHandOffOnCancel Policy = 1 << iota
	// PolicyYieldToNewer: the leader hands off as soon as a candidate with a
	// newer version campaigns (to the best of those).
	PolicyYieldToNewer

	policyAll = PolicyHandOffOnCancel | PolicyYieldToNewer
)

// ElectionOptions are the optional parts of a candidacy.
type ElectionOptions struct {
	// Version is the candidate's version, semantic ("1.4.2" or "v1.4.2");
	// "" declares none (older than any).
	Version string
	// Priority orders candidates of one version: higher is preferred.
	Priority int32
	Policy   Policy
}

func (o ElectionOptions) validate() error {
	if o.Version != "" {
		if _, err := version.ParseSemantic(o.Version); err != nil {
			return fmt.Errorf("%w: version %s: must be a semantic version such as 1.4.2 or v1.4.2: %v", ErrInvalidArgument, clip(o.Version), err)
		}
	}
	if o.Policy&^policyAll != 0 {
		return fmt.Errorf("%w: policy %d: unknown flags %d", ErrInvalidArgument, o.Policy, o.Policy&^policyAll)
	}
	return nil
}

// Candidate is one live candidacy on a lease, as its record says.
type Candidate struct {
	Identity  string    `json:"identity"`
	Version   string    `json:"version,omitempty"`
	Priority  int32     `json:"priority"`
	RenewTime time.Time `json:"renew_time"`
}

// better reports whether a is to be preferred over b: newer version, then
// higher priority, then (for a stable choice) the smaller identity.
func (a Candidate) better(b Candidate) bool {
	if c := compareVersions(a.Version, b.Version); c != 0 {
		return c > 0
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Identity < b.Identity
}

// compareVersions compares semantic versions; "" (none) is the oldest.
// Both were validated when declared; a record edited by hand that does not
// parse sorts as none.
func compareVersions(a, b string) int {
	va, errA := version.ParseSemantic(a)
	vb, errB := version.ParseSemantic(b)
	switch {
	case errA != nil && errB != nil:
		return 0
	case errA != nil:
		return -1
	case errB != nil:
		return 1
	}
	switch {
	case va.LessThan(vb):
		return -1
	case vb.LessThan(va):
		return 1
	}
	return 0
}

// bestCandidate is the best live candidate but exclude, and whether there is
// one; with onlyNewer, only candidates of a version newer than own count.
func bestCandidate(cs []Candidate, exclude string, onlyNewer bool, own string, now time.Time) (Candidate, bool) {
	var best Candidate
	found := false
	for _, c := range cs {
		if c.Identity == exclude || now.Sub(c.RenewTime) > candidateTTL {
			continue
		}
		if onlyNewer && compareVersions(c.Version, own) <= 0 {
			continue
		}
		if !found || c.better(best) {
			best, found = c, true
		}
	}
	return best, found
}

// candidateStore keeps the candidate records of one namespace.
type candidateStore interface {
	kind() string
	// put writes the record (a new one, or over our own record: never over
	// another object of that name) and returns its resource version.
	put(ctx context.Context, lease string, c Candidate) (string, error)
	// remove deletes the record if it is still at resource version rv (a
	// later candidacy of the same identity may have rewritten it).
	remove(ctx context.Context, lease, identity, rv string) error
	list(ctx context.Context, lease string) ([]Candidate, error)
	// get reads one candidate's record (found false: none).
	get(ctx context.Context, lease, identity string) (c Candidate, found bool, err error)
	// watch reports changes of the lease's records (any event: list again).
	watch(ctx context.Context, lease string) (watch.Interface, error)
}

// candidateRecordName is the record's name: "<lease>-candidate-<identity>"
// when that is a valid name (identities are usually Pod names), so that a
// Role can grant the records by name; else the identity's hash instead.
func candidateRecordName(lease, identity string) string {
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

// putAttempts bounds a record write's create-get-update rounds: a round is
// lost only to another writer of the same record (the delete of this
// identity's previous candidacy, or its last refresh), which happens once.
const putAttempts = 4

// errNotOurRecord: an object of the record's name exists that the library
// did not create (no CandidateOfLabel for this lease). It is never written
// over, so retrying soon would not help: the write waits for the refresh.
var errNotOurRecord = errors.New("exists and is not a candidate record")

// rewriteAgain reports an update lost to another writer of the record:
// deleted since the get (the previous candidacy's delete: create it again)
// or rewritten (its last refresh: read it again).
func rewriteAgain(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// deleteIfAt deletes only at resource version rv (none given: any).
func deleteIfAt(rv string) metav1.DeleteOptions {
	if rv == "" {
		return metav1.DeleteOptions{}
	}
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
}

// candidateOfValue is the lease's name as a label value, or a hash of it.
func candidateOfValue(lease string) string {
	if len(validation.IsValidLabelValue(lease)) == 0 {
		return lease
	}
	sum := sha256.Sum256([]byte(lease))
	return "h-" + hex.EncodeToString(sum[:])[:40]
}

// leaseRecords keeps candidate records as coordination.k8s.io/v1 Leases.
type leaseRecords struct{ client kubeapi.Client }

func (leaseRecords) kind() string { return "Lease" }

func (s leaseRecords) put(ctx context.Context, lease string, c Candidate) (string, error) {
	leases := s.client.Leases(nsOf(ctx))
	name := candidateRecordName(lease, c.Identity)
	holder, seconds, renew := c.Identity, int32(candidateTTL/time.Second), metav1.NewMicroTime(c.RenewTime)
	want := func(l *coordinationv1.Lease) {
		l.Labels = map[string]string{CandidateOfLabel: candidateOfValue(lease)}
		l.Annotations = map[string]string{CandidateVersionAnnotation: c.Version,
			CandidatePriorityAnnotation: strconv.Itoa(int(c.Priority)), CandidateOfLabel: lease}
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &renew, AcquireTime: &renew}
	}
	var err error
	for range putAttempts {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
		want(l)
		var got, cur *coordinationv1.Lease
		if got, err = leases.Create(ctx, l, metav1.CreateOptions{}); err == nil {
			return got.ResourceVersion, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", err
		}
		if cur, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				continue // deleted since the create: create it again
			}
			return "", err
		}
		if cur.Labels[CandidateOfLabel] != candidateOfValue(lease) {
			return "", fmt.Errorf("lease %s %w of %s: not overwritten", name, errNotOurRecord, lease)
		}
		want(cur)
		if got, err = leases.Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return got.ResourceVersion, nil
		}
		if !rewriteAgain(err) {
			return "", err
		}
	}
	return "", fmt.Errorf("lease %s: deleted or rewritten under each of %d writes: %w", name, putAttempts, err)
}

func (s leaseRecords) remove(ctx context.Context, lease, identity, rv string) error {
	err := s.client.Leases(nsOf(ctx)).Delete(ctx, candidateRecordName(lease, identity),
		deleteIfAt(rv))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or rewritten by a later candidacy: not ours to delete
	}
	return err
}

func (s leaseRecords) watch(ctx context.Context, lease string) (watch.Interface, error) {
	return s.client.Leases(nsOf(ctx)).Watch(ctx, metav1.ListOptions{LabelSelector: CandidateOfLabel + "=" + candidateOfValue(lease)})
}

func (s leaseRecords) list(ctx context.Context, lease string) ([]Candidate, error) {
	l, err := s.client.Leases(nsOf(ctx)).List(ctx, metav1.ListOptions{LabelSelector: CandidateOfLabel + "=" + candidateOfValue(lease)})
	if err != nil {
		return nil, err
	}
	var out []Candidate
	for i := range l.Items {
		if c, ok := candidateOfLease(&l.Items[i], lease); ok {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s leaseRecords) get(ctx context.Context, lease, identity string) (Candidate, bool, error) {
	r, err := s.client.Leases(nsOf(ctx)).Get(ctx, candidateRecordName(lease, identity), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Candidate{}, false, nil
	}
	if err != nil {
		return Candidate{}, false, err
	}
	c, ok := candidateOfLease(r, lease)
	return c, ok && c.Identity == identity, nil
}

// candidateOfLease reads a Lease kept as a candidate record of lease.
func candidateOfLease(r *coordinationv1.Lease, lease string) (Candidate, bool) {
	if r.Annotations[CandidateOfLabel] != lease || r.Spec.HolderIdentity == nil {
		return Candidate{}, false // another lease whose name hashes alike, or not a record
	}
	c := Candidate{Identity: *r.Spec.HolderIdentity, Version: r.Annotations[CandidateVersionAnnotation]}
	if p, err := strconv.ParseInt(r.Annotations[CandidatePriorityAnnotation], 10, 32); err == nil {
		c.Priority = int32(p)
	}
	if r.Spec.RenewTime != nil {
		c.RenewTime = r.Spec.RenewTime.Time
	}
	return c, true
}

// leaseCandidates keeps candidate records as Kubernetes LeaseCandidates.
// binaryVersion must be semantic: a candidate that declared none is
// recorded as 0.0.0; the identity is kept in an annotation (the name is
// derived from it).
type leaseCandidates struct{ client kubeapi.Client }

const candidateIdentityAnnotation = "k8s-lease.io/candidate-identity"

func (leaseCandidates) kind() string { return "LeaseCandidate" }

func (s leaseCandidates) put(ctx context.Context, lease string, c Candidate) (string, error) {
	api := s.client.LeaseCandidates(nsOf(ctx))
	name := candidateRecordName(lease, c.Identity)
	bin := "0.0.0"
	if v, err := version.ParseSemantic(c.Version); err == nil {
		bin = v.String()
	}
	renew := metav1.NewMicroTime(c.RenewTime)
	want := func(l *coordinationv1beta1.LeaseCandidate) {
		l.Labels = map[string]string{CandidateOfLabel: candidateOfValue(lease)}
		l.Annotations = map[string]string{CandidateVersionAnnotation: c.Version,
			CandidatePriorityAnnotation: strconv.Itoa(int(c.Priority)), candidateIdentityAnnotation: c.Identity}
		l.Spec = coordinationv1beta1.LeaseCandidateSpec{LeaseName: lease, RenewTime: &renew, BinaryVersion: bin,
			Strategy: candidateStrategy}
	}
	var err error
	for range putAttempts { // as leaseRecords.put
		l := &coordinationv1beta1.LeaseCandidate{ObjectMeta: metav1.ObjectMeta{Name: name}}
		want(l)
		var got, cur *coordinationv1beta1.LeaseCandidate
		if got, err = api.Create(ctx, l, metav1.CreateOptions{}); err == nil {
			return got.ResourceVersion, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", err
		}
		if cur, err = api.Get(ctx, name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", err
		}
		if cur.Labels[CandidateOfLabel] != candidateOfValue(lease) {
			return "", fmt.Errorf("leasecandidate %s %w of %s: not overwritten", name, errNotOurRecord, lease)
		}
		want(cur)
		if got, err = api.Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return got.ResourceVersion, nil
		}
		if !rewriteAgain(err) {
			return "", err
		}
	}
	return "", fmt.Errorf("leasecandidate %s: deleted or rewritten under each of %d writes: %w", name, putAttempts, err)
}

func (s leaseCandidates) remove(ctx context.Context, lease, identity, rv string) error {
	err := s.client.LeaseCandidates(nsOf(ctx)).Delete(ctx, candidateRecordName(lease, identity),
		deleteIfAt(rv))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (s leaseCandidates) watch(ctx context.Context, lease string) (watch.Interface, error) {
	return s.client.LeaseCandidates(nsOf(ctx)).Watch(ctx, metav1.ListOptions{LabelSelector: CandidateOfLabel + "=" + candidateOfValue(lease)})
}

func (s leaseCandidates) list(ctx context.Context, lease string) ([]Candidate, error) {
	l, err := s.client.LeaseCandidates(nsOf(ctx)).List(ctx, metav1.ListOptions{LabelSelector: CandidateOfLabel + "=" + candidateOfValue(lease)})
	if err != nil {
		return nil, err
	}
	var out []Candidate
	for i := range l.Items {
		if c, ok := candidateOfLeaseCandidate(&l.Items[i], lease); ok {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s leaseCandidates) get(ctx context.Context, lease, identity string) (Candidate, bool, error) {
	r, err := s.client.LeaseCandidates(nsOf(ctx)).Get(ctx, candidateRecordName(lease, identity), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Candidate{}, false, nil
	}
	if err != nil {
		return Candidate{}, false, err
	}
	c, ok := candidateOfLeaseCandidate(r, lease)
	return c, ok && c.Identity == identity, nil
}

// candidateOfLeaseCandidate reads a LeaseCandidate of ours for lease.
func candidateOfLeaseCandidate(r *coordinationv1beta1.LeaseCandidate, lease string) (Candidate, bool) {
	id := r.Annotations[candidateIdentityAnnotation]
	if r.Spec.LeaseName != lease || id == "" {
		return Candidate{}, false
	}
	c := Candidate{Identity: id, Version: r.Annotations[CandidateVersionAnnotation]}
	if p, err := strconv.ParseInt(r.Annotations[CandidatePriorityAnnotation], 10, 32); err == nil {
		c.Priority = int32(p)
	}
	if r.Spec.RenewTime != nil {
		c.RenewTime = r.Spec.RenewTime.Time
	}
	return c, true
}

type nsKey struct{}

// withNS carries the namespace to a store call (stores are per client,
// not per namespace).
func withNS(ctx context.Context, ns string) context.Context {
	return context.WithValue(ctx, nsKey{}, ns)
}

func nsOf(ctx context.Context) string { s, _ := ctx.Value(nsKey{}).(string); return s }

// candidateRegistry picks the store once per Manager: LeaseCandidates where
// served, Leases elsewhere.
type candidateRegistry struct {
	mu     sync.Mutex
	store  candidateStore
	warned map[Key]bool // a record that could not be written was reported
}

func (r *candidateRegistry) storeFor(client kubeapi.Client) candidateStore {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.store != nil {
		return r.store
	}
	var store candidateStore = leaseRecords{client}
	ctx, cancel := requestContext()
	defer cancel()
	served, err := client.ServedResources(ctx, coordinationv1beta1.SchemeGroupVersion.String())
	switch {
	case err == nil:
		for _, res := range served {
			if res == "leasecandidates" {
				store = leaseCandidates{client}
			}
		}
	case !apierrors.IsNotFound(err):
		// Not known yet: Leases this time, and ask again next time (a
		// choice fixed now could differ from the other processes' for good).
		logf(LevelDebug, "candidate records: cannot tell whether LeaseCandidates are served (%v); using Leases for now", err)
		return store
	}
	r.store = store
	logf(LevelDebug, "candidate records are %ss", r.store.kind())
	return r.store
}

// reportOnce logs, once per lease, that the record could not be written.
func (r *candidateRegistry) reportOnce(key Key, kind string, err error) {
	r.mu.Lock()
	first := !r.warned[key]
	if r.warned == nil {
		r.warned = map[Key]bool{}
	}
	r.warned[key] = true
	r.mu.Unlock()
	if first {
		logf(LevelWarning, "lease %s: cannot record this candidacy as a %s (elections are not affected; hand-offs to this candidate are refused as not seen): %v",
			key, kind, err)
	}
}

// candidacy keeps an election's candidate record: written when the
// candidacy starts and every candidateRefresh (a timer: no goroutine while
// it waits, so a thousand elections cost no thousand goroutines), deleted
// when it ends. A write that fails is tried again with backoff
// (candidateRetryMin doubling to candidateRetryMax), not a refresh later:
// until it lands, hand-offs to this candidate are refused. Writes and the
// delete are serialized, so a delete never precedes the write it undoes.
// Never on the renewal path.
type candidacy struct {
	e    *Election
	reg  *candidateRegistry
	done chan struct{} // closed once the record is deleted (or was never written)

	startOnce sync.Once  // the first write (Election.recordCandidacy)
	ops       sync.Mutex // one write or delete at a time
	retry     *backoff   // of failed writes; under ops
	mu        sync.Mutex
	timer     *time.Timer
	ended     bool
	written   bool
	rv        string // of our last write: the delete is conditional on it
}

// The backoff of a failed record write: soon after a transient error, and
// at most every candidateRetryMax while one lasts (an operator's fix of
// RBAC shows within that).
const (
	candidateRetryMin = time.Second
	candidateRetryMax = 30 * time.Second
)

func newCandidacy(e *Election, reg *candidateRegistry) *candidacy {
	return &candidacy{e: e, reg: reg, done: make(chan struct{}), retry: newBackoff(candidateRetryMin, candidateRetryMax)}
}

// put writes the record and schedules the next write, unless ended: a
// refresh after a success (or a foreign object of the record's name, which
// is never written over), a retry with backoff after a failure.
func (c *candidacy) put() {
	c.ops.Lock()
	defer c.ops.Unlock()
	c.mu.Lock()
	ended := c.ended
	c.mu.Unlock()
	if ended {
		return
	}
	e := c.e
	store := e.candidateStore()
	ctx, cancel := context.WithTimeout(withNS(context.Background(), e.key.Namespace), requestTimeout)
	defer cancel()
	rv, err := store.put(ctx, e.key.Name, Candidate{Identity: e.identity, Version: e.opts.Version, Priority: e.opts.Priority, RenewTime: time.Now()})
	next := candidateRefresh
	switch {
	case err == nil:
		c.retry.reset()
	case errors.Is(err, errNotOurRecord):
		c.reg.reportOnce(e.key, store.kind(), err)
	default:
		c.reg.reportOnce(e.key, store.kind(), err)
		next = c.retry.next()
		logf(LevelDebug, "lease %s: writing the candidate record of %s again in %v: %v", e.key, e.identity, next.Round(time.Millisecond), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.rv, c.written = rv, true
	}
	if !c.ended {
		if c.timer != nil {
			c.timer.Stop() // a put called besides the timer's: one pending write at most
		}
		c.timer = time.AfterFunc(next, c.put)
	}
}

// end stops the writes and deletes the record, on a goroutine of its own
// (the election's goroutine calls it on its way out).
func (c *candidacy) end() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	go func() {
		defer close(c.done)
		c.ops.Lock() // after a write in progress
		defer c.ops.Unlock()
		c.mu.Lock()
		written, rv := c.written, c.rv
		c.mu.Unlock()
		if !written {
			return
		}
		e := c.e
		ctx, cancel := context.WithTimeout(withNS(context.Background(), e.key.Namespace), requestTimeout)
		defer cancel()
		if err := e.candidateStore().remove(ctx, e.key.Name, e.identity, rv); err != nil {
			logf(LevelDebug, "lease %s: removing the candidate record of %s: %v", e.key, e.identity, err)
		}
	}()
}

// Candidates lists the live candidates of ns/name (their records renewed
// within candidateTTL), best first.
func (m *Manager) Candidates(ns, name string) ([]Candidate, error) {
	return m.candidatesWithin(ns, name, requestTimeout)
}

func (m *Manager) candidatesWithin(ns, name string, within time.Duration) ([]Candidate, error) {
	if err := ValidateKey(ns, name); err != nil {
		return nil, err
	}
	client, err := m.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(withNS(context.Background(), ns), within)
	defer cancel()
	all, err := m.candidates.storeFor(client).list(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("list candidates of lease %s/%s: %w", ns, name, err)
	}
	now := time.Now()
	live := all[:0]
	for _, c := range all {
		if now.Sub(c.RenewTime) <= candidateTTL {
			live = append(live, c)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].better(live[j]) })
	return live, nil
}

// errTargetNotSeen: the hand-off target has no live candidate record.
var errTargetNotSeen = errors.New("target not seen campaigning")
