package lease

import (
	"context"
	"errors"
	"math/rand/v2"
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
// landing late), compare-and-swap enforced; a monitor checks that no two
// hosts lead at once and that every new term has a greater token.
func TestHandOffRegressionStressNeverTwoLeaders(t *testing.T) {
	t.Parallel() // own fake API server and Managers; waits, mostly
	fc := fake.NewClientset()
	enforceResourceVersions(fc)
	client := withLatency{Clientset: fc, max: 40 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var hosts []*standingHost
	for _, id := range []string{"a", "b", "c"} {
		h := &standingHost{m: process(t, client), id: id, delay: 150 * time.Millisecond}
		hosts = append(hosts, h)
		go h.run(ctx)
	}
	violations := make(chan string, 10)
	go func() {
		type term struct {
			e   *Election
			tok int64
		}
		var last term
		for ctx.Err() == nil {
			n := 0
			for _, h := range hosts {
				h.mu.Lock()
				e := h.cur
				h.mu.Unlock()
				if e == nil {
					continue
				}
				if ok, tok, _ := e.IsLeader(); ok {
					n++
					if e != last.e {
						if tok <= last.tok {
							violations <- "token did not increase"
						}
						last = term{e, tok}
					}
				}
			}
			if n > 1 {
				violations <- "two leaders at once"
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	handed, failed := 0, 0
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
		var leader *standingHost
		for _, h := range hosts {
			if h.leads() {
				leader = h
			}
		}
		if leader == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		to := hosts[rand.N(len(hosts))]
		if to == leader {
			continue
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
	t.Logf("hand-offs: %d done, %d failed", handed, failed)
	select {
	case v := <-violations:
		t.Fatal(v)
	default:
	}
}
