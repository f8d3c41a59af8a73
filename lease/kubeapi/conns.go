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

	mu   sync.Mutex
	live map[*conn]struct{}
}

// newConns dials with dial (nil: client-go's own dialer settings).
func newConns(dial func(ctx context.Context, network, address string) (net.Conn, error)) *conns {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &conns{dial: dial, now: time.Now, live: map[*conn]struct{}{}}
}

func (cs *conns) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := cs.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, set: cs}
	tc.lastRead.Store(cs.now().UnixNano()) // a connection is not silent before it was asked anything
	cs.mu.Lock()
	cs.live[tc] = struct{}{}
	cs.mu.Unlock()
	return tc, nil
}

// closeSilent closes the live connections that have received nothing since
// since (nor were dialled after it), and returns how many.
func (cs *conns) closeSilent(since time.Time) int {
	cs.mu.Lock()
	var silent []*conn
	for c := range cs.live {
		if c.lastRead.Load() < since.UnixNano() {
			silent = append(silent, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range silent {
		_ = c.Close()
	}
	return len(silent)
}

func (cs *conns) count() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.live)
}

// conn is a connection of the set, with the time it last received a byte.
type conn struct {
	net.Conn
	set      *conns
	lastRead atomic.Int64 // unix nanoseconds
	closed   sync.Once
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.lastRead.Store(c.set.now().UnixNano())
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
