// Package tcpproxy forwards TCP connections for the HA test bed. With
// several backends it is the load balancer in front of the API servers:
// each new connection goes to the next backend in turn (round-robin per
// connection, no health checks, so a frozen backend keeps the connections it
// has and gets its share of new ones, as a cloud load balancer's would for a
// while). With one backend it is the link from one API server to one etcd
// member, which can be cut (a black hole) and healed.
//
// Bytes are copied as they come, without looking at them: TLS passes
// through, so clients verify the backends' own certificates.
package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/blackhole"
)

// dialTimeout bounds the connect to a backend; a refused or timed-out
// connect closes the client's connection.
const dialTimeout = 5 * time.Second

// Proxy listens on one address and forwards to its backends. Its methods
// are safe for concurrent use.
type Proxy struct {
	ln       net.Listener
	backends []string
	hole     blackhole.Switch
	wg       sync.WaitGroup

	mu      sync.Mutex
	next    int // round-robin position
	pinTo   int
	pinLeft int
	links   map[*link]struct{}
	closed  bool
}

// link is one client connection and where it went.
type link struct {
	client  net.Conn
	backend int
	gone    chan struct{} // closed when the link ends (Close ends every link)
	once    sync.Once
	mu      sync.Mutex
	peer    net.Conn // the backend connection, once dialed
}

// Conn is a client connection the proxy holds: the client's address as the
// proxy sees it (the client's local address) and the backend it went to.
type Conn struct {
	Client  string `json:"client"`
	Backend int    `json:"backend"`
}

// Listen starts a proxy on addr (e.g. "127.0.0.1:0") in front of backends
// (host:port each).
func Listen(addr string, backends ...string) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("tcpproxy: no backends")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen on %s: %w", addr, err)
	}
	p := &Proxy{ln: ln, backends: backends, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Backends are the addresses the proxy forwards to, by index.
func (p *Proxy) Backends() []string { return append([]string(nil), p.backends...) }

// Pin sends the next n new connections to backend (n <= 0: none; round
// robin carries on from where it was afterwards).
func (p *Proxy) Pin(backend, n int) error {
	if err := p.checkBackend(backend); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pinTo, p.pinLeft = backend, max(n, 0)
	return nil
}

// BlackHole makes the proxy forward nothing until Heal: connections stay
// open and bytes already read are held, new connections are accepted and
// held without a connect to the backend, and closes are not passed on, as
// in a network partition.
func (p *Proxy) BlackHole() { p.hole.On() }

// Heal ends a black hole: what was held is forwarded and connections carry
// on (unless an end gave up on them meanwhile), as after a short partition.
func (p *Proxy) Heal() { p.hole.Heal() }

// BlackHoled reports whether the proxy is black-holed.
func (p *Proxy) BlackHoled() bool { return p.hole.Hole() != nil }

// Conns lists the client connections open now.
func (p *Proxy) Conns() []Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Conn, 0, len(p.links))
	for l := range p.links {
		out = append(out, Conn{Client: l.client.RemoteAddr().String(), Backend: l.backend})
	}
	return out
}

// Reset closes, with a TCP reset, every client connection that went to
// backend (< 0: every connection), and its backend connection.
func (p *Proxy) Reset(backend int) {
	p.mu.Lock()
	var reset []*link
	for l := range p.links {
		if backend < 0 || l.backend == backend {
			reset = append(reset, l)
		}
	}
	p.mu.Unlock()
	for _, l := range reset {
		p.drop(l, true)
	}
}

// Close stops listening and ends every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset(-1)
	p.wg.Wait()
	return err
}

func (p *Proxy) checkBackend(backend int) error {
	if backend < 0 || backend >= len(p.backends) {
		return fmt.Errorf("tcpproxy: backend %d out of range (have %d)", backend, len(p.backends))
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: the next accept may work
			continue
		}
		l := &link{client: c, gone: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		if p.pinLeft > 0 {
			l.backend = p.pinTo
			p.pinLeft--
		} else {
			l.backend = p.next
			p.next = (p.next + 1) % len(p.backends)
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.drop(l, false)
	if !p.hole.Pass(l.gone) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	go func() { // a reset or Close abandons the connect
		select {
		case <-l.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	var d net.Dialer
	peer, err := d.DialContext(ctx, "tcp", p.backends[l.backend])
	if err != nil {
		return // refused (the backend is down) or timed out: the client sees a close
	}
	if !l.attach(peer) {
		return
	}
	copied := make(chan struct{}, 2)
	go func() { p.copy(l, peer, l.client); copied <- struct{}{} }()
	go func() { p.copy(l, l.client, peer); copied <- struct{}{} }()
	<-copied // one direction ended: end both
	l.end(false)
	<-copied
}

// copy forwards src to dst, holding each chunk while black-holed.
func (p *Proxy) copy(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hole.Pass(l.gone) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// A close or reset is held like data in a black hole.
			p.hole.Pass(l.gone)
			return
		}
	}
}

// drop forgets l and ends it (with a reset if rst): forgotten first, so
// Conns no longer lists a connection its client saw closed.
func (p *Proxy) drop(l *link, rst bool) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.end(rst)
}

// attach records the backend connection; false (and closes it) if the link
// already ended.
func (l *link) attach(peer net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.gone:
		_ = peer.Close()
		return false
	default:
		l.peer = peer
		return true
	}
}

// end closes both connections once (with a reset if rst).
func (l *link) end(rst bool) {
	l.once.Do(func() {
		l.mu.Lock()
		close(l.gone)
		peer := l.peer
		l.mu.Unlock()
		for _, c := range []net.Conn{l.client, peer} {
			if c == nil {
				continue
			}
			if tcp, ok := c.(*net.TCPConn); ok && rst {
				_ = tcp.SetLinger(0) // close sends RST, not FIN
			}
			_ = c.Close()
		}
	})
}
