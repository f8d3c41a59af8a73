package lease

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Hand-offs in a loop among three hosts, with request latency: never two
// leaders, and every term's token greater.

// withLatency delays Lease writes before (request) and after (response) they
// land, up to max each.
type withLatency struct {
	*fake.Clientset
	max time.Duration
}

func (c withLatency) CoordinationV1() coordclient.CoordinationV1Interface {
	return latencyCoord{c.Clientset.CoordinationV1(), c.max}
}

type latencyCoord struct {
	coordclient.CoordinationV1Interface
	max time.Duration
}

func (s latencyCoord) Leases(ns string) coordclient.LeaseInterface {
	return latencyLeases{s.CoordinationV1Interface.Leases(ns), s.max}
}

type latencyLeases struct {
	coordclient.LeaseInterface
	max time.Duration
}

func (l latencyLeases) nap() { time.Sleep(rand.N(l.max)) }

func (l latencyLeases) Update(ctx context.Context, x *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	l.nap()
	r, err := l.LeaseInterface.Update(ctx, x, o)
	l.nap()
	return r, err
}

func (l latencyLeases) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	l.nap()
	r, err := l.LeaseInterface.Patch(ctx, name, pt, data, o, sub...)
	l.nap()
	return r, err
}

// Soundness probe (passes when nothing is wrong): hand-offs in a loop among
// three hosts, with request and response latencies (renewals pipelined and
// landing late), compare-and-swap enforced; as each host's term starts,
// a check that no other host leads, and at the end one that every term's
// token is greater than the one before.
func TestHandOffRegressionStressNeverTwoLeaders(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	client := withLatency{Clientset: fc, max: 40 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type term struct {
		token, rv int64 // rv: of a write of the term, which orders the terms
	}
	var mu sync.Mutex
	var terms []term
	violations := make(chan string, 10)
	var hosts []*standingHost
	leading := func() (n int, leader *standingHost) {
		for _, h := range hosts {
			if h.leads() {
				n, leader = n+1, h
			}
		}
		return n, leader
	}
	elected := func(e *Election) { // a term starts: two leaders at once can only begin now
		if n, _ := leading(); n > 1 {
			select {
			case violations <- "two leaders at once":
			default:
			}
		}
		e.mu.Lock()
		rv, _ := strconv.ParseInt(e.term.written.ResourceVersion, 10, 64)
		tm := term{e.term.token, rv}
		e.mu.Unlock()
		mu.Lock()
		terms = append(terms, tm)
		mu.Unlock()
	}
	for _, id := range []string{"a", "b", "c"} {
		hosts = append(hosts, &standingHost{t: t, m: process(t, client), id: id, awaitRecordDelete: true, onElected: elected})
	}
	for _, h := range hosts {
		go h.run(ctx)
	}
	handed, failed := 0, 0
	for attempt := 0; handed < 40 && attempt < 200; attempt++ {
		var leader *standingHost
		if !waitUntil(10*time.Second, func() bool { _, leader = leading(); return leader != nil }) {
			t.Fatalf("no leader for 10 s (after %d hand-offs, %d failed)", handed, failed)
		}
		to := leader
		for to == leader {
			to = hosts[rand.N(len(hosts))]
		}
		if err := leader.m.HandOff("ns", "l", to.id, time.Second); err != nil {
			failed++
			if !errors.Is(err, errTargetNotSeen) { // the record race (see TestHandOffRegressionRecordSurvivesStandingAgain)
				t.Logf("HandOff %s -> %s: %v", leader.id, to.id, err)
			}
		} else {
			handed++
		}
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("hand-offs: %d done, %d failed; %d terms", handed, failed, len(terms))
	select {
	case v := <-violations:
		t.Fatal(v)
	default:
	}
	slices.SortFunc(terms, func(a, b term) int { return cmp.Compare(a.rv, b.rv) })
	for i := 1; i < len(terms); i++ {
		if terms[i].token <= terms[i-1].token {
			t.Fatalf("token did not increase: term at rv %d has token %d after token %d", terms[i].rv, terms[i].token, terms[i-1].token)
		}
	}
}
