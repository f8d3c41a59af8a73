package endpoints

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Two terms with one token are two terms when their holders differ: the
// one written first is not overwritten by the other (within one Lease the
// case cannot arise: tokens rise).
func TestSameTokenOtherHolderIsRefused(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 1, "10.0.0.1"))
	err := a.store.Publish(context.Background(), term("b", 1, "10.0.0.2"))
	if !errors.Is(err, ErrSuperseded) {
		t.Fatalf("b's publish over a's with the same token: %v; want ErrSuperseded", err)
	}
	a.lists("10.0.0.1", 1, "a")
}

// A Lease deleted and re-created restarts its tokens: the term of the
// Lease that exists now replaces the old Lease's slice whatever its
// token, and the old Lease's term, resumed, is refused.
func TestATermOfARecreatedLeaseReplacesTheOldLeasesSlice(t *testing.T) {
	a := newAPI(t)
	old := term("a", 7, "10.0.0.1")
	old.LeaseUID = "uid-old"
	a.publish(old)
	if err := a.client.Tracker().Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-lease", Namespace: testNS, UID: "uid-new"}}); err != nil {
		t.Fatal(err)
	}
	b := term("b", 1, "10.0.0.2")
	b.LeaseUID = "uid-new"
	a.publish(b)
	a.lists("10.0.0.2", 1, "b")
	if err := a.store.Publish(context.Background(), old); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the old Lease's term after the new one's: %v; want ErrSuperseded", err)
	}
	a.lists("10.0.0.2", 1, "b")
	if err := a.store.Withdraw(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	a.lists("10.0.0.2", 1, "b")
}

// An update whose slice was deleted since the read (another writer's
// address-family change: delete, then create; kubectl delete) answers 404.
// That is a lost compare-and-swap like a 409 (read again: create), not a
// failure: as it is, the attempt fails, an Event is raised, WaitElected
// returns with the Service not routed, and the next try is 0.5-1 s later.
func TestUpdateOfADeletedSliceIsALostRace(t *testing.T) {
	a := newAPI(t)
	a.publish(term("a", 3, "10.0.0.1"))
	done := false
	a.client.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if !done {
			done = true
			if err := a.client.Tracker().Delete(slicesGVR, testNS, sliceName); err != nil {
				t.Error(err)
			}
		}
		return false, nil, nil // the update itself then finds no slice: 404
	})
	if err := a.store.Publish(context.Background(), term("b", 5, "10.0.0.2")); err != nil {
		t.Fatalf("publish after the slice was deleted under it: %v; want it created", err)
	}
	a.lists("10.0.0.2", 5, "b")
}

// A create whose answer never came (the publisher's client timeout: the
// lease core then withdraws and releases) may still be applied by the API
// server afterwards. Withdraw found no slice and wrote nothing, so that
// create lands after the withdrawal and the Lease's release: the Service
// routes to a leader that stopped, until the next leader writes. A
// tombstone (an empty slice carrying the term, created when absent) makes
// the late create fail with AlreadyExists. Here the create is held on its
// way to the "server" while Withdraw runs, then applied.
func TestALateCreateCannotLandAfterTheWithdrawal(t *testing.T) {
	a := newAPI(t)
	held, release, landed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	late := Store{Client: lateWrite{a.store.Client, held, release, landed}}
	ctx, giveUp := context.WithCancel(context.Background())
	published := make(chan error, 1)
	go func() { published <- late.Publish(ctx, term("a", 3, "10.0.0.1")) }()
	<-held
	giveUp() // the client's timeout: Publish returns, its create is still on its way
	if err := <-published; err == nil {
		t.Fatal("Publish whose create was given up returned nil")
	}
	if err := a.store.Withdraw(context.Background(), term("a", 3, "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	close(release) // the server applies the create now
	<-landed
	if got, _ := a.store.Read(context.Background(), testNS, "db"); len(got.Addresses) > 0 {
		t.Fatalf("after a's withdrawal the slice lists %v of %s/%d", got.Addresses, got.Holder, got.Token)
	}
}

// A new term's write over its predecessor's slice (an update on the
// version it read, or the patch testing the previous token), cut short
// and landing after the term's withdrawal, must find the slice changed.
//
// lateWrite's writes (its first: held closes) return when their caller
// gives up (ctx), and are applied on the server only once release is
// closed (landed gets the outcome): an answer that never came, of a write
// that still lands.
type lateWrite struct {
	kubeapi.Client
	held, release chan struct{}
	landed        chan error
}

func (l lateWrite) EndpointSlices(ns string) kubeapi.EndpointSlices {
	return lateWriteSlices{l.Client.EndpointSlices(ns), l}
}

type lateWriteSlices struct {
	kubeapi.EndpointSlices
	l lateWrite
}

func (s lateWriteSlices) hold(ctx context.Context, apply func() error) error {
	close(s.l.held)
	go func() { <-s.l.release; s.l.landed <- apply() }()
	<-ctx.Done()
	return ctx.Err()
}

func (s lateWriteSlices) Create(ctx context.Context, slice *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	return nil, s.hold(ctx, func() error { _, err := s.EndpointSlices.Create(context.Background(), slice); return err })
}

func (s lateWriteSlices) Update(ctx context.Context, slice *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	return nil, s.hold(ctx, func() error { _, err := s.EndpointSlices.Update(context.Background(), slice); return err })
}

func (s lateWriteSlices) JSONPatch(ctx context.Context, name string, patch []byte) (*kubeapi.EndpointSlice, error) {
	return nil, s.hold(ctx, func() error { _, err := s.EndpointSlices.JSONPatch(context.Background(), name, patch); return err })
}

func testLateWriteAfterWithdrawal(t *testing.T, prevToken int64) {
	a := newAPI(t)
	a.publish(term("old", 4, "10.0.0.1"))
	held, release, landed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	late := Store{Client: lateWrite{a.store.Client, held, release, landed}}
	b := term("b", 5, "10.0.0.2")
	b.PrevToken = prevToken
	ctx, giveUp := context.WithCancel(context.Background())
	published := make(chan error, 1)
	go func() { published <- late.Publish(ctx, b) }()
	<-held
	giveUp()
	if err := <-published; err == nil {
		t.Fatal("Publish whose write was given up returned nil")
	}
	if err := a.store.Withdraw(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-landed
	if got, _ := a.store.Read(context.Background(), testNS, "db"); got.Holder == "b" && len(got.Addresses) > 0 {
		t.Fatalf("after b's withdrawal the slice routes to b: %v (token %d)", got.Addresses, got.Token)
	}
}

func TestALateUpdateCannotLandAfterTheWithdrawal(t *testing.T) { testLateWriteAfterWithdrawal(t, 0) }
func TestALatePatchCannotLandAfterTheWithdrawal(t *testing.T)  { testLateWriteAfterWithdrawal(t, 4) }

// A change of address family deletes the slice (addressType is immutable)
// and creates it anew: until that create lands the name is free. A create
// of a deposed term, sent before its withdrawal and stalled in the API
// server (its answer never came, so the withdrawal's empty slice took the
// name), can land in that gap. It must not route to the deposed leader,
// even when the newer term's create then fails (a webhook timing out, or
// its process killed) and nothing else writes the slice for a while.
func TestALateCreateCannotRouteAfterAnAddressFamilyChange(t *testing.T) {
	a := newAPI(t)
	held, release, landed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	late := Store{Client: lateWrite{a.store.Client, held, release, landed}}
	ctx, giveUp := context.WithCancel(context.Background())
	published := make(chan error, 1)
	go func() { published <- late.Publish(ctx, term("a", 5, "10.0.0.1")) }()
	<-held
	giveUp()
	if err := <-published; err == nil {
		t.Fatal("Publish whose create was given up returned nil")
	}
	if err := a.store.Withdraw(context.Background(), term("a", 5, "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	// b, of the other family, deletes a's empty slice; a's stalled create
	// lands before b's create, which is then refused.
	refused := apierrors.NewInternalError(errors.New("failed calling webhook: context deadline exceeded"))
	b := Store{Client: beforeCreate{a.store.Client, func() error {
		close(release)
		if err := <-landed; err != nil {
			t.Errorf("a's late create: %v", err)
		}
		return refused
	}}}
	if err := b.Publish(context.Background(), term("b", 6, "2001:db8::6")); !errors.Is(err, refused) {
		t.Fatalf("b's publish: %v; want its create's error", err)
	}
	if got, _ := a.store.Read(context.Background(), testNS, "db"); len(got.Addresses) > 0 {
		t.Fatalf("after b's delete, a's late create routes the Service to %v (token %d, holder %q)", got.Addresses, got.Token, got.Holder)
	}
	// b's next attempt routes to b.
	a.publish(term("b", 6, "2001:db8::6"))
	a.lists("2001:db8::6", 6, "b")
}

// beforeCreate runs hook before each create of a slice: an error it
// returns is the create's answer (nothing created), nil lets it through.
type beforeCreate struct {
	kubeapi.Client
	hook func() error
}

func (b beforeCreate) EndpointSlices(ns string) kubeapi.EndpointSlices {
	return beforeCreateSlices{b.Client.EndpointSlices(ns), b.hook}
}

type beforeCreateSlices struct {
	kubeapi.EndpointSlices
	hook func() error
}

func (s beforeCreateSlices) Create(ctx context.Context, slice *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	if err := s.hook(); err != nil {
		return nil, err
	}
	return s.EndpointSlices.Create(ctx, slice)
}

// The update that fills a created slice, cut short and landing after the
// term's withdrawal, must find the slice changed: the withdrawal takes the
// holder-less fence over as its term's, though it lists nothing already.
func TestALateFillCannotLandAfterTheWithdrawal(t *testing.T) {
	a := newAPI(t)
	held, release, landed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	late := Store{Client: lateFill{lateWrite{a.store.Client, held, release, landed}}}
	ctx, giveUp := context.WithCancel(context.Background())
	published := make(chan error, 1)
	go func() { published <- late.Publish(ctx, term("a", 3, "10.0.0.1")) }()
	select { // created; the update that fills it is on its way
	case <-held:
	case err := <-published:
		t.Fatalf("Publish wrote the slice without an update after its create (%v): no fill to hold", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no write of the slice held within 10 s")
	}
	giveUp()
	if err := <-published; err == nil {
		t.Fatal("Publish whose update was given up returned nil")
	}
	if err := a.store.Withdraw(context.Background(), term("a", 3, "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-landed; !apierrors.IsConflict(err) {
		t.Fatalf("the late fill: %v; want a conflict", err)
	}
	if got, _ := a.store.Read(context.Background(), testNS, "db"); len(got.Addresses) > 0 || got.Holder != "a" {
		t.Fatalf("after a's withdrawal the slice lists %v of %q/%d; want nothing, of a", got.Addresses, got.Holder, got.Token)
	}
}

// lateFill is lateWrite whose creates go through at once: its first
// update (or patch) is the write held.
type lateFill struct{ lateWrite }

func (l lateFill) EndpointSlices(ns string) kubeapi.EndpointSlices {
	return lateFillSlices{lateWriteSlices{l.Client.EndpointSlices(ns), l.lateWrite}}
}

type lateFillSlices struct{ lateWriteSlices }

func (s lateFillSlices) Create(ctx context.Context, slice *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	return s.lateWriteSlices.EndpointSlices.Create(ctx, slice)
}
