package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/k8s-lease/k8s-lease/lease"
)

// transport counts a candidate's requests and can cut it off (a crash that
// releases nothing: the process is frozen or partitioned).
type transport struct {
	next     http.RoundTripper
	requests *atomic.Int64
	cut      *atomic.Bool
}

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.cut.Load() {
		return nil, errors.New("bench: candidate crashed")
	}
	t.requests.Add(1)
	return t.next.RoundTrip(r)
}

// conn is one candidate's own client connection, counted and cuttable.
type conn struct {
	cfg      *rest.Config
	requests atomic.Int64
	cut      atomic.Bool
}

func newConn(base *rest.Config) *conn {
	c := &conn{}
	cfg := rest.CopyConfig(base)
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext // a connection of its own
	cfg.QPS = -1                                                    // no client-side throttling, for either side
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return transport{next: rt, requests: &c.requests, cut: &c.cut}
	}
	c.cfg = cfg
	return c
}

// candidate is one campaigning process, of either implementation.
type candidate interface {
	elected() <-chan struct{}
	electedAt() time.Time
	stop() // graceful: release if leading
	conn() *conn
}

type impl string

const (
	ours     impl = "k8s-lease"
	clientGo impl = "client-go"
)

func start(which impl, base *rest.Config, ns, name, id string, t lease.Timing) (candidate, error) {
	c := newConn(base)
	if which == ours {
		return startOurs(c, ns, name, id, t)
	}
	return startClientGo(c, ns, name, id, t)
}

type electedSignal struct {
	once sync.Once
	ch   chan struct{}
	at   time.Time
}

func newElectedSignal() *electedSignal { return &electedSignal{ch: make(chan struct{})} }

func (s *electedSignal) fire() {
	s.once.Do(func() { s.at = time.Now(); close(s.ch) })
}

type oursCandidate struct {
	*electedSignal
	c *conn
	m *lease.Manager
	e *lease.Election
}

func startOurs(c *conn, ns, name, id string, t lease.Timing) (candidate, error) {
	client, err := lease.NewClient(c.cfg)
	if err != nil {
		return nil, err
	}
	m := lease.NewManager(nil)
	m.SetClient(client)
	e, err := m.RunElection(ns, name, id, t)
	if err != nil {
		return nil, err
	}
	oc := &oursCandidate{electedSignal: newElectedSignal(), c: c, m: m, e: e}
	go func() {
		if _, err := e.WaitElected(time.Hour); err == nil {
			oc.fire()
		}
	}()
	return oc, nil
}

func (o *oursCandidate) elected() <-chan struct{} { return o.ch }
func (o *oursCandidate) electedAt() time.Time     { return o.at }
func (o *oursCandidate) conn() *conn              { return o.c }
func (o *oursCandidate) stop()                    { _ = o.m.Shutdown(10 * time.Second) }

type clientGoCandidate struct {
	*electedSignal
	c      *conn
	cancel context.CancelFunc
	done   chan struct{}
}

func startClientGo(c *conn, ns, name, id string, t lease.Timing) (candidate, error) {
	client, err := kubernetes.NewForConfig(c.cfg)
	if err != nil {
		return nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, name, nil, client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, err
	}
	cc := &clientGoCandidate{electedSignal: newElectedSignal(), c: c, done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true,
		LeaseDuration: t.LeaseDuration, RenewDeadline: t.RenewDeadline, RetryPeriod: t.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { cc.fire() },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cc.cancel = cancel
	go func() { defer close(cc.done); le.Run(ctx) }()
	return cc, nil
}

func (g *clientGoCandidate) elected() <-chan struct{} { return g.ch }
func (g *clientGoCandidate) electedAt() time.Time     { return g.at }
func (g *clientGoCandidate) conn() *conn              { return g.c }
func (g *clientGoCandidate) stop()                    { g.cancel(); <-g.done }
