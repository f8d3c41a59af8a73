package kubeapi

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Connections that went silent. Every request of a client, renewals
// included, goes over one HTTP/2 connection per API server address, and a
// load balancer in front of several API servers balances per connection:
// while the server behind it is frozen (or its host gone, with no reset),
// every request waits on that connection until client-go's HTTP/2 health
// check gives up (30 s without a frame, then 15 s for a ping), long past a
// renew deadline. Only a new connection reaches another API server. The
// dialer below keeps the connections the client dials and when each last
// received a byte, so that the library can close those that received
// nothing since a request it gave up waiting for: the HTTP/2 transport then
// fails what was in flight on them and dials anew for the next request.
// Where the client does not dial its own connections (a custom transport,
// a fake), there is nothing to close.

// conns is the set of a client's live connections.
type conns struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	now  func() time.Time
	// base: instants are kept as durations since base, on the monotonic
	// clock (a wall-clock step must not make a healthy connection look
	// silent, nor hide a frozen one).
	base time.Time

	// urgent: the pool of an urgent client (Client.Urgent), whose
	// closeSilent also closes a connection that received nothing past
	// its handshake.
	urgent bool

	mu   sync.Mutex
	live map[*conn]struct{}
}

// newConns dials with dial (nil: client-go's own dialer settings).
func newConns(dial func(ctx context.Context, network, address string) (net.Conn, error)) *conns {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &conns{dial: dial, now: time.Now, base: time.Now(), live: map[*conn]struct{}{}}
}

// at is t as kept: nanoseconds since base, at least 1 (0 is "never").
func (cs *conns) at(t time.Time) int64 { return max(1, int64(t.Sub(cs.base))) }

func (cs *conns) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := cs.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, set: cs, dialled: cs.at(cs.now())}
	cs.mu.Lock()
	cs.live[tc] = struct{}{}
	cs.mu.Unlock()
	return tc, nil
}

// closeSilent closes the live connections that have received nothing since
// since, and returns how many. One that never received a byte (its TLS
// handshake unanswered: dialled to a frozen server, whose kernel accepts
// the connection for it) is silent too, however recently it was dialled,
// once handshakeGrace has passed: a request that dialled it can be older
// than the connection, and must not keep it.
//
// In an urgent pool, one dialled after since counts as silent when it
// received nothing past handshakeGrace after its dial: a server that
// answered the TLS handshake and froze just after (traced: a load balancer
// put the redialled connection on the frozen server again) leaves bytes
// younger than the request that dialled the connection, yet answers
// nothing. A slow server looks the same, so the pool that carries the
// requests the others wait for does not judge so (see Client.Urgent).
func (cs *conns) closeSilent(since time.Time) int {
	limit, fresh := cs.at(since), cs.at(cs.now().Add(-handshakeGrace))
	return cs.closeIf(func(c *conn) bool {
		last, limit := c.lastRead.Load(), limit
		if cs.urgent && c.dialled <= fresh {
			// Its handshake had its grace: bytes within it were the
			// handshake's (or an answer as fast, which then counts as
			// the handshake's: a close costs this pool a dial, nothing
			// more).
			limit = max(limit, c.dialled+int64(handshakeGrace))
		}
		return last < limit && (last != 0 || c.dialled <= fresh)
	})
}

// handshakeGrace is how long a new connection may go without its first
// byte before it counts as silent: a TLS handshake with a live API server
// takes milliseconds.
const handshakeGrace = 250 * time.Millisecond

func (cs *conns) closeIf(silent func(*conn) bool) int {
	cs.mu.Lock()
	var closing []*conn
	for c := range cs.live {
		if silent(c) {
			closing = append(closing, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
	return len(closing)
}

func (cs *conns) count() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.live)
}

// conn is a connection of the set, with the times it was dialled and last
// received a byte.
type conn struct {
	net.Conn
	set      *conns
	dialled  int64        // conns.at
	lastRead atomic.Int64 // conns.at; 0: nothing received yet
	closed   sync.Once
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.lastRead.Store(c.set.at(c.set.now()))
	}
	return n, err
}

func (c *conn) Close() error {
	c.closed.Do(func() {
		c.set.mu.Lock()
		delete(c.set.live, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}
