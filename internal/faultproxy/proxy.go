// Package faultproxy is an HTTPS reverse proxy that sits between one
// candidate and the API server and injects faults at the HTTP level: added
// latency, a black hole (connections are accepted and requests read, never
// answered, and running watch streams stall), connection resets, and
// 429/503 answers with Retry-After.
//
// It terminates TLS with its own test CA (see Kubeconfig) and forwards with
// the credentials of the API server's admin kubeconfig, so a candidate
// pointed at it needs no credentials of its own. Each candidate gets its own
// proxy, which is how a single process is partitioned.
package faultproxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/blackhole"
)

// Proxy is one fault-injecting proxy. Its methods are safe for concurrent use.
type Proxy struct {
	URL string // https://127.0.0.1:<port>

	ca      *testCA
	srv     *http.Server
	forward *httputil.ReverseProxy

	mu       sync.Mutex
	latency  time.Duration
	hole     blackhole.Switch
	throttle throttleFault
	conns    map[net.Conn]struct{}

	requests, faulted atomic.Int64
}

type throttleFault struct {
	code       int
	retryAfter time.Duration
	remaining  int // < 0: until cleared
}

// NewForConfig starts a proxy in front of the API server that cfg reaches,
// forwarding with cfg's credentials.
func NewForConfig(cfg *rest.Config) (*Proxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: API server URL %q: %w", cfg.Host, err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: transport for %s: %w", cfg.Host, err)
	}
	return New(target, rt)
}

// New starts a proxy in front of target, forwarding through rt.
func New(target *url.URL, rt http.RoundTripper) (*Proxy, error) {
	ca, err := newTestCA()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{URL: "https://" + ln.Addr().String(), ca: ca, conns: map[net.Conn]struct{}{}}
	p.forward = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     rt,
		FlushInterval: -1, // watch events pass at once
		ErrorLog:      discardLogger,
	}
	p.srv = &http.Server{
		Handler:   p,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.serving}, NextProtos: []string{"h2", "http/1.1"}},
		ConnState: p.track,
		ErrorLog:  discardLogger,
	}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

// Close stops the proxy and drops every connection.
func (p *Proxy) Close() error {
	p.Heal()
	return p.srv.Close()
}

// SetLatency delays every request by d before it is forwarded (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// BlackHole makes the proxy accept and read requests but never answer, and
// stalls responses already streaming, until Heal.
func (p *Proxy) BlackHole() { p.hole.On() }

// Heal ends a black hole. The connections that lived through it are reset,
// as a real partition breaks them: clients reconnect.
func (p *Proxy) Heal() {
	if p.hole.Heal() {
		p.ResetConnections()
	}
}

// Throttle answers the next n requests (n < 0: all until Throttle(0, 0, 0))
// with code (429 or 503) and a Retry-After of retryAfter, rounded up to
// whole seconds as the header carries them.
func (p *Proxy) Throttle(code int, retryAfter time.Duration, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.throttle = throttleFault{code: code, retryAfter: retryAfter, remaining: n}
}

// ResetConnections closes every client connection with a TCP reset.
func (p *Proxy) ResetConnections() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		resetConn(c)
	}
}

// Requests is the number of requests received; Faulted how many of them a
// fault (black hole or throttle) answered.
func (p *Proxy) Requests() int64 { return p.requests.Load() }
func (p *Proxy) Faulted() int64  { return p.faulted.Load() }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	latency, hole, throttle := p.faults()
	if hole != nil {
		p.faulted.Add(1)
		swallow(r.Context(), hole)
	}
	if latency > 0 && !sleepCtx(r.Context(), latency) {
		return
	}
	if throttle.code != 0 {
		p.faulted.Add(1)
		writeThrottled(w, throttle)
		return
	}
	p.forward.ServeHTTP(&stallingWriter{ResponseWriter: w, p: p, ctx: r.Context()}, r)
}

// faults takes the current faults, counting one throttled request.
func (p *Proxy) faults() (time.Duration, <-chan struct{}, throttleFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.throttle
	if t.code != 0 && t.remaining != 0 {
		if t.remaining > 0 {
			p.throttle.remaining--
		}
	} else {
		t = throttleFault{}
	}
	return p.latency, p.hole.Hole(), t
}

// swallow never answers: it returns only by aborting the request when the
// client gives up or the hole is healed.
func swallow(ctx context.Context, hole <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-hole:
	}
	panic(http.ErrAbortHandler)
}

func writeThrottled(w http.ResponseWriter, t throttleFault) {
	secs := int((t.retryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(t.code)
	reason := map[int]string{http.StatusTooManyRequests: "TooManyRequests", http.StatusServiceUnavailable: "ServiceUnavailable"}[t.code]
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by faultproxy","reason":%q,"details":{"retryAfterSeconds":%d},"code":%d}`,
		reason, secs, t.code)
}

// stallingWriter holds back response bytes while the proxy is black-holed,
// so a watch stream that was open goes silent as it would in a partition.
type stallingWriter struct {
	http.ResponseWriter
	p   *Proxy
	ctx context.Context
}

func (s *stallingWriter) Write(b []byte) (int, error) {
	if hole := s.p.hole.Hole(); hole != nil {
		s.p.faulted.Add(1)
		swallow(s.ctx, hole)
	}
	return s.ResponseWriter.Write(b)
}

func (s *stallingWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *stallingWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (p *Proxy) track(c net.Conn, state http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch state {
	case http.StateNew:
		p.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(p.conns, c)
	}
}

func resetConn(c net.Conn) {
	raw := c
	if t, ok := c.(*tls.Conn); ok {
		raw = t.NetConn()
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // close sends RST, not FIN
	}
	_ = raw.Close()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var discardLogger = log.New(io.Discard, "", 0)
