// Package endpoints keeps the EndpointSlice that routes a selector-less
// Service to its leader: one slice per Service, of the library's own
// (labelled managed-by ManagedBy, so the EndpointSlice controller leaves it
// alone and kube-proxy and CoreDNS use it as a custom slice), listing the
// leader's address:port. Every write is a compare-and-swap on the slice's
// resourceVersion, and the slice carries the fencing token of the term that
// wrote it: a writer never replaces a higher token's slice, so a resumed
// old leader cannot route the Service back to itself.
//
// It reaches the API server through package kubeapi only (neither
// k8s.io/api/core/v1 nor discovery/v1 is linked), and must not import
// package lease: the core calls it.
package endpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// slices of ours. A label value has no '/' (the API server refuses
// "k8s-lease.io/leader-endpoint"), so it is named as Kubernetes names its
// own ("endpointslice-controller.k8s.io"): the manager, then the domain.
const ManagedBy = "leader-endpoint.k8s-lease.io"

// The annotations on a slice of ours: the fencing token (decimal) and the
// identity of the term that wrote it, and the Lease of its election.
const (
	TokenAnnotation  = "k8s-lease.io/fencing-token"
	HolderAnnotation = "k8s-lease.io/holder"
	LeaseAnnotation  = "k8s-lease.io/lease"
	// LeaseUIDAnnotation is the UID of the Lease the term held: tokens of
	// a Lease deleted and re-created do not compare with the new one's.
	LeaseUIDAnnotation = "k8s-lease.io/lease-uid"
)

// The labels of discovery.k8s.io/v1 that make a slice a Service's and keep
// its controller away.
const (
	ServiceNameLabel = "kubernetes.io/service-name"
	ManagedByLabel   = "endpointslice.kubernetes.io/managed-by"
)

// maxAttempts bounds the compare-and-swaps a Publish or Withdraw may lose
// (each lost one re-reads the slice) before it returns the conflict.
const maxAttempts = 5

var (
	// ErrSuperseded: the slice carries a higher fencing token (a newer
	// leader's); nothing was written.
	ErrSuperseded = errors.New("superseded: the EndpointSlice carries a higher fencing token (a newer leader's)")
	// ErrLeaseRecreated: with ErrSuperseded, the slice is of a Lease
	// object that exists now, and this term's Lease is gone (deleted and
	// re-created): not a stale token.
	ErrLeaseRecreated = errors.New("this term's Lease was deleted and re-created")
	// ErrNotOurs: an object of the slice's name exists and is not this
	// election's (not managed by ManagedBy, or published for another Lease);
	// nothing was written, and it is never overwritten.
	ErrNotOurs = errors.New("not ours: the EndpointSlice is not managed by k8s-lease for this lease")
)

// Publication is one term's endpoint: the Service in Namespace is to be
// routed to Address:Port while Identity leads Lease (in Namespace) with
// fencing token Token.
type Publication struct {
	Namespace, Service, Lease, Identity, Address string
	Port                                         int32
	Token                                        int64
	// LeaseUID is the UID of the Lease the term holds ("": unknown; the
	// tokens alone then decide).
	LeaseUID types.UID
	// PrevToken is the token of the term this one followed on the Lease
	// (0: unknown). The slice most likely carries it (its leader's, or the
	// empty slice of its withdrawal): one patch testing for it replaces the
	// slice without reading it first.
	PrevToken int64
}

// SliceName is the name of the one slice the library keeps for service:
// "<service>-leader" (a Service name has at most 63 characters, so this
// has at most 70 < 253: always a valid name; the EndpointSlice controller's
// generated names end in 5 random characters, never "leader").
func SliceName(service string) string { return service + "-leader" }

// Store publishes and withdraws endpoints through Client.
type Store struct{ Client kubeapi.Client }

// Publish makes the slice list exactly p.Address:p.Port (ready, serving,
// port unnamed, TCP), carrying p.Token, p.Identity and p.Lease: created when
// absent; updated, on the resourceVersion read, when it is ours with a token
// <= p.Token (nothing is written when it already says all that). It returns
// ErrSuperseded when the slice carries a higher token, ErrNotOurs when it
// is not ours, and the conflict when maxAttempts compare-and-swaps were
// lost in a row. A slice is created empty, then filled (see create). As
// addressType is immutable, a change of address family deletes the slice
// (precondition: the resourceVersion read) and creates it anew: a moment
// with no endpoint, never one with a wrong one. A slice of
// ours whose token annotation is missing or not a number counts as older
// than any term. p is checked first (validate.Endpoint and the others):
// ErrInvalidArgument, nothing sent.
func (s Store) Publish(ctx context.Context, p Publication) error {
	addr, err := p.check()
	if err != nil {
		return err
	}
	slices := s.Client.EndpointSlices(p.Namespace)
	if p.PrevToken > 0 && p.PrevToken < p.Token {
		want := p.slice(nil, addr)
		done, err := p.patchIf(ctx, slices, "publish", p.PrevToken, "", want.AddressType, []patchOp{
			{"replace", annotationPath(TokenAnnotation), want.Annotations[TokenAnnotation]},
			{"replace", annotationPath(HolderAnnotation), p.Identity},
			{"replace", "/endpoints", want.Endpoints},
			{"replace", "/ports", want.Ports},
		})
		if done || err != nil {
			return err
		}
	}
	return p.retry("publish", func() (lost, err error) { return s.publishOnce(ctx, p, slices, addr) })
}

// patchOp is one operation of an RFC 6902 patch.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

func annotationPath(key string) string {
	return "/metadata/annotations/" + jsonPointerEscaper.Replace(key)
}

var jsonPointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// patchIf applies ops to the slice in one request if it is ours, for
// p.Lease (and p.LeaseUID when known), of address type addressType ("":
// any), and carries token (and holder, when not ""): the patch's tests
// make it a compare-and-swap on those. done is false, with no error, when
// it failed but for the caller's context: the caller then reads the slice
// and decides as usual.
func (p Publication) patchIf(ctx context.Context, slices kubeapi.EndpointSlices, what string, token int64, holder, addressType string,
	ops []patchOp) (done bool, err error) {
	tests := []patchOp{
		{"test", "/metadata/labels/" + jsonPointerEscaper.Replace(ManagedByLabel), ManagedBy},
		{"test", annotationPath(LeaseAnnotation), p.Lease},
		{"test", annotationPath(TokenAnnotation), strconv.FormatInt(token, 10)},
	}
	if holder != "" {
		tests = append(tests, patchOp{"test", annotationPath(HolderAnnotation), holder})
	}
	if p.LeaseUID != "" {
		tests = append(tests, patchOp{"test", annotationPath(LeaseUIDAnnotation), string(p.LeaseUID)})
	}
	if addressType != "" {
		tests = append(tests, patchOp{"test", "/addressType", addressType})
	}
	body, err := json.Marshal(append(tests, ops...))
	if err != nil {
		return false, p.fail(what, err)
	}
	_, err = slices.JSONPatch(ctx, p.name(), body)
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, p.fail(what, err)
	default:
		// A failed test (the API server's 422), no slice, or any other
		// error: the reading path decides, and reports its own error.
		return false, nil
	}
}

// publishOnce is one attempt of Publish, from the read of the slice.
func (s Store) publishOnce(ctx context.Context, p Publication, slices kubeapi.EndpointSlices, addr netip.Addr) (lost, err error) {
	cur, err := slices.Get(ctx, p.name())
	if apierrors.IsNotFound(err) {
		return p.create(ctx, slices, addr)
	}
	if err != nil {
		return nil, p.fail("read", err)
	}
	if err := s.mayReplace(ctx, p, cur); err != nil {
		return nil, err
	}
	want := p.slice(cur, addr)
	switch {
	case want.AddressType != cur.AddressType:
		err = slices.Delete(ctx, want.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}})
		if err == nil || apierrors.IsNotFound(err) {
			return p.create(ctx, slices, addr)
		}
		return p.outcome(fmt.Sprintf("delete (address type %s to %s)", cur.AddressType, want.AddressType), err)
	case says(cur, want):
		return nil, nil
	default:
		_, err = slices.Update(ctx, want)
		return p.outcome("update", err)
	}
}

// create creates p's slice in two writes: a fence (no endpoint, no
// holder), then the endpoint, by an update of what the create returned. A
// create may land long after it was sent (its answer never came), when
// the name is free again: after the delete of a later term's change of
// address family. Landing then, it must route nowhere. The update is a
// compare-and-swap on the create's version: landing late, it fails if
// anything was written since, as a withdrawal of the term does (it takes
// a fence without a holder over as its own).
func (p Publication) create(ctx context.Context, slices kubeapi.EndpointSlices, addr netip.Addr) (lost, err error) {
	created, err := slices.Create(ctx, p.fence(addr))
	if lost, err := p.outcome("create", err); lost != nil || err != nil {
		return lost, err
	}
	_, err = slices.Update(ctx, p.slice(created, addr))
	return p.outcome("update", err)
}

// fence is p's slice listing nothing and naming no holder: it takes the
// name and refuses earlier terms, and a later write of p's term, or of
// any later term, replaces it.
func (p Publication) fence(addr netip.Addr) *kubeapi.EndpointSlice {
	s := p.slice(nil, addr)
	s.Endpoints = []kubeapi.Endpoint{}
	delete(s.Annotations, HolderAnnotation)
	return s
}

// Withdraw makes the slice list nothing as of this term: it empties the
// slice when it is this term's (endpoints: []; the token and holder
// annotations kept, so that a later term with a lower token stays
// refused), and empties an earlier term's slice as this term's (this
// term's fence too, which names no holder: see create), or creates
// an empty one of this term when there is none, so that a write of this
// term still on its way (cut short, its answer never come) fails when it
// lands. It writes nothing and returns nil when the slice is already empty
// or a later term's;
// ErrNotOurs when it is not ours (a misconfiguration worth a log line).
// Only p.Namespace, p.Service, p.Lease, p.Identity and p.Token are used.
// Compare-and-swap with retries, as Publish.
func (s Store) Withdraw(ctx context.Context, p Publication) error {
	if err := validate.Key(p.Namespace, p.Lease); err != nil {
		return err
	}
	if err := validate.Service(p.Service); err != nil {
		return err
	}
	slices := s.Client.EndpointSlices(p.Namespace)
	// The slice most likely is this term's own, listing its address: one
	// patch empties it (the test on the address makes a slice already
	// empty go the reading way, which writes nothing).
	if addr, err := validate.EndpointAddress(p.Address); err == nil {
		if done, err := p.patchIf(ctx, slices, "withdraw", p.Token, p.Identity, "", []patchOp{
			{"test", "/endpoints/0/addresses/0", addr.String()},
			{"replace", "/endpoints", []kubeapi.Endpoint{}},
		}); done || err != nil {
			return err
		}
	}
	return p.retry("withdraw", func() (lost, err error) {
		cur, err := slices.Get(ctx, p.name())
		if apierrors.IsNotFound(err) {
			// An empty slice of this term takes the name: a create of
			// this term sent earlier, whose answer never came, may still
			// land, and must then find the name taken.
			_, err = slices.Create(ctx, p.tombstone())
			return p.outcome("withdraw (an empty slice in place of none)", err)
		}
		if err != nil {
			return nil, p.fail("read", err)
		}
		if err := p.ours(cur); err != nil {
			return nil, err
		}
		uid := types.UID(cur.Annotations[LeaseUIDAnnotation])
		own := token(cur) == p.Token && cur.Annotations[HolderAnnotation] == p.Identity &&
			(uid == "" || p.LeaseUID == "" || uid == p.LeaseUID)
		empty := *cur
		switch {
		case own && len(cur.Endpoints) == 0:
			return nil, nil
		case own:
		case s.mayReplace(ctx, p, cur) == nil:
			// An earlier term's slice: this term's write of it (a patch
			// over it, an update on its version) may still be on its
			// way. Emptied as this term's, the slice changes version and
			// token, so that such a write fails. The earlier term's
			// endpoint is no leader's either.
			empty = *p.slice(cur, netip.IPv4Unspecified())
			empty.AddressType = cur.AddressType
		default:
			return nil, nil // a later term's: not ours to touch
		}
		empty.Endpoints = []kubeapi.Endpoint{}
		_, err = slices.Update(ctx, &empty)
		return p.outcome("withdraw", err)
	})
}

// Term is a term of leadership on a Lease: the Lease's UID ("": unknown),
// its fencing token and holder.
type Term struct {
	LeaseUID types.UID
	Token    int64
	Holder   string
}

// Retired is what RetireStale found: the slice as read (Exists false:
// none), and, when it emptied it, the Lease's record that ended the
// slice's term.
type Retired struct {
	Published
	Emptied bool
	// LeaseGone: the Lease no longer exists; else Now is its term.
	LeaseGone bool
	Now       Term
}

// RetireStale empties the slice of service when the term that wrote it is
// over by the record of lease: a read of the Lease (a quorum read, sent
// after the slice was read) shows no Lease, another Lease (UID), or
// another token or holder. That term's leader no longer leads by the
// record, yet its address still routes: it died without withdrawing, and
// whoever leads now publishes nothing (a plain client-go candidate, one of
// ours without an endpoint, a term whose token is below the slice's). A
// slice of the term seen (the one the caller believes current; nil: none)
// is left alone without reading the Lease, and so is a slice when the
// Lease is held by self (the caller's identity, "": none: its own
// publisher writes the slice of its term; a check it began as a standby
// can end after it was elected).
//
// The write is an update on the version read: a slice written since (the
// current leader's) is never touched; objects not ours, slices of another
// Lease and slices listing nothing are never written; nothing is created.
// When the Lease is of a later term (a higher token, or another UID) the
// emptied slice carries that term, so that no write of the ended one
// lands after it; else it keeps its own: a token never falls. Retries as
// Publish.
func (s Store) RetireStale(ctx context.Context, namespace, service, lease, self string, seen *Term) (Retired, error) {
	if err := validate.Key(namespace, lease); err != nil {
		return Retired{}, err
	}
	if err := validate.Service(service); err != nil {
		return Retired{}, err
	}
	p := Publication{Namespace: namespace, Service: service, Lease: lease}
	slices := s.Client.EndpointSlices(namespace)
	var out Retired
	err := p.retry("retire a stale endpoint", func() (lost, err error) {
		out = Retired{}
		cur, err := slices.Get(ctx, p.name())
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, p.fail("read", err)
		}
		out.Published = published(cur)
		was := termOf(cur)
		if cur.Labels[ManagedByLabel] != ManagedBy || cur.Annotations[LeaseAnnotation] != lease || len(cur.Endpoints) == 0 ||
			(seen != nil && was.is(*seen)) {
			return nil, nil
		}
		l, err := s.Client.Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out.LeaseGone = true
		case err != nil:
			return nil, p.fail("read the lease", err)
		default:
			out.Now = Term{LeaseUID: l.UID, Token: int64(ptrOr(l.Spec.LeaseTransitions, 0)), Holder: ptrOr(l.Spec.HolderIdentity, "")}
			if was.is(out.Now) || (self != "" && out.Now.Holder == self) {
				return nil, nil // the current term's, or the caller's own to write
			}
		}
		empty := *cur
		empty.ObjectMeta = *cur.ObjectMeta.DeepCopy()
		empty.Endpoints = []kubeapi.Endpoint{}
		if now := out.Now; !out.LeaseGone && (now.Token > was.Token || (now.LeaseUID != "" && was.LeaseUID != "" && now.LeaseUID != was.LeaseUID)) {
			empty.Annotations[TokenAnnotation] = strconv.FormatInt(now.Token, 10)
			empty.Annotations[HolderAnnotation] = now.Holder
			if now.LeaseUID != "" {
				empty.Annotations[LeaseUIDAnnotation] = string(now.LeaseUID)
			}
		}
		_, err = slices.Update(ctx, &empty)
		if lost, err = p.outcome("retire", err); lost == nil && err == nil {
			out.Emptied = true
		}
		return lost, err
	})
	return out, err
}

// termOf is the term cur carries (its token -1 when unreadable: no
// Lease's term).
func termOf(cur *kubeapi.EndpointSlice) Term {
	return Term{LeaseUID: types.UID(cur.Annotations[LeaseUIDAnnotation]), Token: token(cur), Holder: cur.Annotations[HolderAnnotation]}
}

// is reports whether t and o are one term; an unknown UID matches any.
func (t Term) is(o Term) bool {
	return t.Token == o.Token && t.Holder == o.Holder && (t.LeaseUID == "" || o.LeaseUID == "" || t.LeaseUID == o.LeaseUID)
}

func ptrOr[T any](p *T, or T) T {
	if p == nil {
		return or
	}
	return *p
}

// retry runs attempt (a read of the slice, then at most one
// compare-and-swap) until it is done, failed, or lost maxAttempts
// compare-and-swaps in a row; then it is the last conflict.
func (p Publication) retry(what string, attempt func() (lost, err error)) error {
	var lost error
	for range maxAttempts {
		var err error
		if lost, err = attempt(); err != nil || lost == nil {
			return err
		}
	}
	return p.fail(fmt.Sprintf("%s: %d compare-and-swaps lost in a row", what, maxAttempts), lost)
}

// outcome sorts the error of a write, the step what: nil (done), lost (a
// 409, a conflict or AlreadyExists, or an update's 404: the slice changed
// since it was read, read it again), or err (failed).
func (p Publication) outcome(what string, werr error) (lost, err error) {
	switch {
	case werr == nil:
		return nil, nil
	case apierrors.IsConflict(werr) || apierrors.IsAlreadyExists(werr):
		return werr, nil
	case apierrors.IsNotFound(werr) && (what == "update" || what == "withdraw" || what == "retire"):
		return werr, nil // deleted since it was read (a family change, kubectl): read again
	default:
		return nil, p.fail(what, werr)
	}
}

// Published is what a slice lists.
type Published struct {
	// Addresses are the addresses of all its endpoints, in order.
	Addresses []string
	// Port is its first port's number (0: none).
	Port int32
	// Token is its fencing token annotation, -1 when absent or not a number.
	Token int64
	// Holder is its holder annotation.
	Holder string
	// Exists is false when there is no object of the slice's name (and
	// then all else is zero).
	Exists          bool
	ResourceVersion string
}

// Read reports what the slice of service lists. An object of the slice's
// name that is not managed by ManagedBy is reported too, with ErrNotOurs.
func (s Store) Read(ctx context.Context, namespace, service string) (Published, error) {
	if err := validate.Service(service); err != nil {
		return Published{}, err
	}
	// The slice's name is valid once service is: Key can only refuse the
	// namespace.
	if err := validate.Key(namespace, SliceName(service)); err != nil {
		return Published{}, err
	}
	p := Publication{Namespace: namespace, Service: service}
	cur, err := s.Client.EndpointSlices(namespace).Get(ctx, p.name())
	if apierrors.IsNotFound(err) {
		return Published{}, nil
	}
	if err != nil {
		return Published{}, p.fail("read", err)
	}
	pub := published(cur)
	if by := cur.Labels[ManagedByLabel]; by != ManagedBy {
		return pub, p.notOurs(fmt.Sprintf("managed by %q", by))
	}
	return pub, nil
}

// published is what cur lists.
func published(cur *kubeapi.EndpointSlice) Published {
	pub := Published{Token: token(cur), Holder: cur.Annotations[HolderAnnotation], Exists: true, ResourceVersion: cur.ResourceVersion}
	for _, e := range cur.Endpoints {
		pub.Addresses = append(pub.Addresses, e.Addresses...)
	}
	if len(cur.Ports) > 0 && cur.Ports[0].Port != nil {
		pub.Port = *cur.Ports[0].Port
	}
	return pub
}

// check applies the rules to p, and is its address parsed.
func (p Publication) check() (netip.Addr, error) {
	if err := validate.Key(p.Namespace, p.Lease); err != nil {
		return netip.Addr{}, err
	}
	if err := validate.Identity(p.Identity); err != nil {
		return netip.Addr{}, err
	}
	if err := validate.Endpoint(p.Service, p.Address, int(p.Port)); err != nil {
		return netip.Addr{}, err
	}
	if p.Token < 0 {
		return netip.Addr{}, validate.Invalid("fencing token: must be >= 0, got %d", p.Token)
	}
	return validate.EndpointAddress(p.Address)
}

func (p Publication) name() string { return SliceName(p.Service) }

// fail is err, from the step what, naming the slice (apierrors' checks
// still hold on it).
func (p Publication) fail(what string, err error) error {
	return fmt.Errorf("endpointslice %s/%s: %s: %w", p.Namespace, p.name(), what, err)
}

func (p Publication) notOurs(why string) error {
	return fmt.Errorf("endpointslice %s/%s: %w: %s; nothing written", p.Namespace, p.name(), ErrNotOurs, why)
}

// ours is nil if cur is a slice of ours for p.Lease (one without a lease
// annotation counts as p.Lease's), ErrNotOurs otherwise.
func (p Publication) ours(cur *kubeapi.EndpointSlice) error {
	if by := cur.Labels[ManagedByLabel]; by != ManagedBy {
		return p.notOurs(fmt.Sprintf("managed by %q, not %q", by, ManagedBy))
	}
	if l, ok := cur.Annotations[LeaseAnnotation]; ok && l != p.Lease {
		return p.notOurs(fmt.Sprintf("published for lease %q, not %q (fencing tokens of two Leases do not compare)", l, p.Lease))
	}
	return nil
}

// mayReplace is nil if p may overwrite cur: ours, and of an earlier term.
// A term is the Lease's UID, a token and its holder. Terms of one Lease
// order by token; the same token with another holder is another term,
// never overwritten. A slice of another Lease UID (the Lease was deleted
// and re-created, restarting its tokens) is replaced only by a term of the
// Lease that exists now (read to know). When either UID is unknown, the
// tokens alone decide.
func (s Store) mayReplace(ctx context.Context, p Publication, cur *kubeapi.EndpointSlice) error {
	if err := p.ours(cur); err != nil {
		return err
	}
	uid := types.UID(cur.Annotations[LeaseUIDAnnotation])
	switch {
	case uid != "" && p.LeaseUID != "" && uid != p.LeaseUID:
		l, err := s.Client.Leases(p.Namespace).Get(ctx, p.Lease, metav1.GetOptions{})
		if err != nil {
			return p.fail("read the lease of another UID's slice", err)
		}
		if l.UID != p.LeaseUID {
			return fmt.Errorf("%w: %w (UID %s; the Lease is now UID %s)", p.superseded(cur, "the slice is of the Lease that exists now"), ErrLeaseRecreated, p.LeaseUID, l.UID)
		}
		return nil // the slice is of a Lease that no longer exists
	}
	t, holder := token(cur), cur.Annotations[HolderAnnotation]
	if t > p.Token || (t == p.Token && holder != "" && holder != p.Identity) {
		return p.superseded(cur, "")
	}
	return nil
}

// superseded is ErrSuperseded for cur, with why ("": the tokens).
func (p Publication) superseded(cur *kubeapi.EndpointSlice, why string) error {
	if why == "" {
		why = fmt.Sprintf("it carries fencing token %d (holder %q), this term's is %d (holder %q)",
			token(cur), cur.Annotations[HolderAnnotation], p.Token, p.Identity)
	}
	return fmt.Errorf("endpointslice %s/%s: %w: %s; nothing written", p.Namespace, p.name(), ErrSuperseded, why)
}

// tombstone is an empty slice of p's term (IPv4 unless p's address says
// otherwise: a later term of another family re-creates it).
func (p Publication) tombstone() *kubeapi.EndpointSlice {
	addr, err := validate.EndpointAddress(p.Address)
	if err != nil {
		addr = netip.IPv4Unspecified()
	}
	empty := p.slice(nil, addr)
	empty.Endpoints = []kubeapi.Endpoint{}
	if p.Port == 0 {
		empty.Ports = []kubeapi.EndpointPort{}
	}
	return empty
}

// token is cur's fencing token, -1 when absent or not a number.
func token(cur *kubeapi.EndpointSlice) int64 {
	t, err := strconv.ParseInt(cur.Annotations[TokenAnnotation], 10, 64)
	if err != nil || t < 0 {
		return -1
	}
	return t
}

// slice is p's slice: on cur's metadata (its resourceVersion, for the
// compare-and-swap, and the labels and annotations of others), or new.
func (p Publication) slice(cur *kubeapi.EndpointSlice, addr netip.Addr) *kubeapi.EndpointSlice {
	out := &kubeapi.EndpointSlice{}
	if cur != nil {
		out.ObjectMeta = *cur.ObjectMeta.DeepCopy()
	}
	out.Name, out.Namespace = p.name(), p.Namespace
	out.Labels = with(out.Labels, map[string]string{ServiceNameLabel: p.Service, ManagedByLabel: ManagedBy})
	out.Annotations = with(out.Annotations, map[string]string{
		TokenAnnotation: strconv.FormatInt(p.Token, 10), HolderAnnotation: p.Identity, LeaseAnnotation: p.Lease})
	if p.LeaseUID != "" {
		out.Annotations[LeaseUIDAnnotation] = string(p.LeaseUID)
	} else {
		delete(out.Annotations, LeaseUIDAnnotation)
	}
	out.AddressType = kubeapi.AddressTypeIPv6
	if addr.Is4() {
		out.AddressType = kubeapi.AddressTypeIPv4
	}
	yes, no := true, false
	out.Endpoints = []kubeapi.Endpoint{{Addresses: []string{addr.String()},
		Conditions: kubeapi.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}}}
	name, protocol, port := "", "TCP", p.Port
	out.Ports = []kubeapi.EndpointPort{{Name: &name, Protocol: &protocol, Port: &port}}
	return out
}

// with is m (nil: empty) with set's entries set.
func with(m, set map[string]string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, set)
	return m
}

// says reports whether cur already lists what want does.
func says(cur, want *kubeapi.EndpointSlice) bool {
	return maps.Equal(cur.Labels, want.Labels) && maps.Equal(cur.Annotations, want.Annotations) &&
		cur.AddressType == want.AddressType && reflect.DeepEqual(cur.Endpoints, want.Endpoints) &&
		reflect.DeepEqual(cur.Ports, want.Ports)
}
