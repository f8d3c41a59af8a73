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

// transport counts a candidate's requests, can cut it off (a crash that
// releases nothing: the process is frozen or partitioned), and times them
// into its conn's log, if it has one.
type transport struct {
	next http.RoundTripper
	c    *conn
}

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.c.cut.Load() {
		return nil, errors.New("bench: candidate crashed")
	}
	t.c.requests.Add(1)
	if t.c.log == nil {
		return t.next.RoundTrip(r)
	}
	sent := time.Now()
	resp, err := t.next.RoundTrip(r)
	t.c.log.add(request{sent: sent, method: r.Method, path: r.URL.Path, took: time.Since(sent)})
	return resp, err
}

// conn is one candidate's own client connection, counted and cuttable.
type conn struct {
	cfg      *rest.Config
	requests atomic.Int64
	cut      atomic.Bool
	log      *requestLog // nil: requests are not timed; set before the first request
}

func newConn(base *rest.Config) *conn {
	c := &conn{}
	cfg := rest.CopyConfig(base)
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext // a connection of its own
	cfg.QPS = -1                                                    // no client-side throttling, for either side
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return transport{next: rt, c: c} }
	c.cfg = cfg
	return c
}

// request is one request a candidate sent, timed at its transport from
// sending it to the response's headers.
type request struct {
	sent         time.Time
	method, path string
	took         time.Duration
}

// requestLog collects the requests of the conns that share it.
type requestLog struct {
	mu   sync.Mutex
	reqs []request
}

func (l *requestLog) add(r request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, r)
}

// all returns a copy of the requests so far.
func (l *requestLog) all() []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]request(nil), l.reqs...)
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
	oc, err := campaign(c, m, ns, name, id, t, nil)
	if err != nil {
		return nil, err // not a nil *oursCandidate in a candidate
	}
	return oc, nil
}

// campaign runs an election of m on ns/name, publishing ep (nil: no
// endpoint) before anyone waits for it to lead.
func campaign(c *conn, m *lease.Manager, ns, name, id string, t lease.Timing, ep *lease.Endpoint) (*oursCandidate, error) {
	e, err := m.RunElection(ns, name, id, t)
	if err != nil {
		return nil, err
	}
	if ep != nil {
		if err := m.PublishEndpoint(ns, name, e.ID(), *ep); err != nil {
			_ = m.CancelElectionID(ns, name, e.ID())
			return nil, err
		}
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
