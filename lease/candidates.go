package lease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/internal/candidates"
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
// same Role grants. internal/candidates keeps them.
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
	CandidateOfLabel = candidates.OfLabel
	// CandidateVersionAnnotation and CandidatePriorityAnnotation hold what
	// the candidate declared.
	CandidateVersionAnnotation  = candidates.VersionAnnotation
	CandidatePriorityAnnotation = candidates.PriorityAnnotation
)

var (
	candidateRefresh = 5 * time.Minute
	candidateTTL     = candidates.TTL
)

// candidateStore keeps the candidate records of an API server
// (internal/candidates' stores).
type candidateStore interface {
	Kind() string
	// Put writes the record (a new one, or over our own record: never over
	// another object of that name) and returns its resource version.
	Put(ctx context.Context, ns, lease string, c Candidate) (string, error)
	// Remove deletes the record if it is still at resource version rv (a
	// later candidacy of the same identity may have rewritten it).
	Remove(ctx context.Context, ns, lease, identity, rv string) error
	// List also returns the resource version it answered at, to Watch from.
	List(ctx context.Context, ns, lease string) (cs []Candidate, rv string, err error)
	// Get reads one candidate's record (found false: none).
	Get(ctx context.Context, ns, lease, identity string) (c Candidate, found bool, err error)
	// Watch reports changes of the lease's records (any event: list again).
	Watch(ctx context.Context, ns, lease, rv string) (watch.Interface, error)
}

// noCandidateStore keeps no records: the store of an election built
// without the Manager's (newElection). Writes and deletes succeed and keep
// nothing; reads find nothing; a watch reports nothing until stopped.
type noCandidateStore struct{}

func (noCandidateStore) Kind() string { return "no store" }
func (noCandidateStore) Put(context.Context, string, string, Candidate) (string, error) {
	return "", nil
}
func (noCandidateStore) Remove(context.Context, string, string, string, string) error { return nil }
func (noCandidateStore) List(context.Context, string, string) ([]Candidate, string, error) {
	return nil, "", nil
}
func (noCandidateStore) Get(context.Context, string, string, string) (Candidate, bool, error) {
	return Candidate{}, false, nil
}
func (noCandidateStore) Watch(context.Context, string, string, string) (watch.Interface, error) {
	return watch.NewFake(), nil
}

// candidateRegistry is a Manager's candidate records: the store picked
// once for its client, and the leases whose record could not be written
// (reported once each).
type candidateRegistry struct {
	stores candidates.Registry
	mu     sync.Mutex
	warned map[Key]bool
}

func (r *candidateRegistry) storeFor(client kubeapi.Client) candidateStore {
	return r.stores.StoreFor(client, requestTimeout, func(format string, args ...any) { logf(LevelDebug, format, args...) })
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
		logf(LevelWarning, "lease %s: cannot record this candidacy as a %s (elections are not affected; the preferred holder and the policies will not hand the lease to this candidate, an explicit hand-off goes ahead unchecked): %v",
			key, kind, err)
	}
}

// candidacyState is an election's candidate record and where it is kept.
type candidacyState struct {
	// store gives the store of candidate records (noCandidateStore in an
	// election built without the Manager's).
	store  func() candidateStore
	record *candidacy
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
	timer     clock.Timer
	started   bool // the first write was asked for
	ended     bool
	written   bool
	rv        string // of our last write: the delete is conditional on it
	// asked is the highest token a write was asked for (see sawToken).
	asked int64
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
	store := e.candidacy.store()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	s := e.obs.snapshot()
	var lease string
	if s.lease != nil {
		lease = string(s.lease.UID)
	}
	rv, err := store.Put(ctx, e.key.Namespace, e.key.Name, Candidate{Identity: e.identity, Version: e.opts.Version, Priority: e.opts.Priority,
		RenewTime: time.Now(), SeenToken: s.highestToken, SeenLease: lease})
	next := candidateRefresh
	switch {
	case err == nil:
		c.retry.reset()
	case errors.Is(err, candidates.ErrNotOurRecord):
		c.reg.reportOnce(e.key, store.Kind(), err)
	default:
		c.reg.reportOnce(e.key, store.Kind(), err)
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
		// The election's clock (a fake one in tests, whose Step runs the
		// callback holding its lock: put, which sets a timer, runs apart).
		c.timer = e.clock.AfterFunc(next, func() { go c.put() })
	}
}

// sawToken writes the record again, on a goroutine of its own, when the
// candidate has seen a term (token) newer than any it was written for: a
// leader hands off on its own only to a candidate whose record names its
// term (alivePastTermStart), which a replica that died before the term
// began cannot write. One write per leadership change per candidate.
func (c *candidacy) sawToken(token int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started || c.ended || token <= c.asked {
		return
	}
	c.asked = token
	go c.put()
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
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		if err := e.candidacy.store().Remove(ctx, e.key.Namespace, e.key.Name, e.identity, rv); err != nil {
			logf(LevelDebug, "lease %s: removing the candidate record of %s: %v", e.key, e.identity, err)
		}
	}()
}

// awaitCandidateRecordDeleted waits until the election's candidate record
// is deleted (the election's goroutine starts the delete on its way out),
// or ctx ends.
func (e *Election) awaitCandidateRecordDeleted(ctx context.Context) {
	select {
	case <-e.candidacy.record.done:
	case <-ctx.Done():
		logf(LevelInfo, "lease %s: the candidate record of %s is still being deleted; not waiting for it", e.key, e.identity)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	all, _, err := m.candidates.storeFor(client).List(ctx, ns, name)
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
	sort.Slice(live, func(i, j int) bool { return better(live[i], live[j]) })
	return live, nil
}

// errTargetNotSeen: the hand-off target has no live candidate record.
var errTargetNotSeen = errors.New("target not seen campaigning")
