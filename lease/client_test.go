package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// A Manager closes silent connections at most once per period of the one
// who asks, whoever asks: a hung API server costs a new connection per
// retry period, not one per election or per renewal.
func TestRedialsArePacedPerProcess(t *testing.T) {
	closer := &closerLog{}
	r := &redialer{conns: closer}
	t0 := testNow
	for _, step := range []struct {
		at     time.Duration
		period time.Duration
		want   int
	}{
		{0, time.Second, 1},
		{100 * time.Millisecond, time.Second, 0},             // another election, same period
		{900 * time.Millisecond, time.Second, 0},             // still within it
		{time.Second, time.Second, 1},                        // the next period
		{1500 * time.Millisecond, 400 * time.Millisecond, 1}, // a shorter period has passed
	} {
		if got, _ := r.closeSilent(t0, t0.Add(step.at), step.period, "test"); got != step.want {
			t.Fatalf("at +%v (period %v): closed %d; want %d", step.at, step.period, got, step.want)
		}
	}
	if n := len(closer.sinces()); n != 3 {
		t.Fatalf("%d rounds; want 3", n)
	}
	var none *redialer
	if n, _ := none.closeSilent(t0, t0, time.Second, "test"); n != 0 {
		t.Fatal("a nil redialer closed something")
	}
}

// closesNothing is a client whose connections all answer.
type closesNothing struct{ asked int }

func (c *closesNothing) CloseSilentConnections(time.Time) int { c.asked++; return 0 }

// A round that closed nothing dialled nothing: it does not hold back the
// next one (an observer's round on a busy connection, an acquisition
// answered 5xx, must not delay a leader's round by a retry period).
func TestARoundThatClosedNothingDoesNotCount(t *testing.T) {
	c := &closesNothing{}
	r := &redialer{conns: c}
	t0 := testNow
	if n, _ := r.closeSilent(t0, t0, time.Second, "test"); n != 0 {
		t.Fatalf("closed %d", n)
	}
	if _, next := r.closeSilent(t0, t0.Add(200*time.Millisecond), time.Second, "test"); !next.IsZero() || c.asked != 2 {
		t.Fatalf("the second round was refused until %v (asked %d times); want it made", next, c.asked)
	}
}

// modelConn is one HTTP/2 connection as kubeapi's dialer sees it: when it
// last received a byte (zero: never, its TLS handshake unanswered),
// whether its server is frozen.
type modelConn struct {
	dialled  time.Time
	lastRead time.Time
	frozen   bool
	closed   chan struct{}
	inFlight int
}

// modelConns is a client's pool behind a load balancer: every renewal
// goes on the newest open connection, dialled when none is open;
// connection k (1-based) lands on a frozen API server when frozen(k).
type modelConns struct {
	coordclient.LeaseInterface
	frozen func(k int) bool
	// handshook: a connection dialled to a frozen server still answers its
	// TLS handshake (the server froze just after), so it has received
	// bytes when its first request is sent.
	handshook bool
	// lb: the load balancer's count of connections, shared with another
	// pool (nil: this pool's own).
	lb *modelLB
	// urgent: the pool's rule is kubeapi's for an urgent pool (a
	// connection that received nothing but its handshake is silent).
	urgent bool

	mu         sync.Mutex
	conns      []*modelConn
	after      time.Time // connection 1 freezes after this
	idleClosed int       // CloseIdleConnections calls
}

// modelLB numbers the connections of every pool behind one load balancer.
type modelLB struct {
	mu sync.Mutex
	n  int
}

func (m *modelConns) current() *modelConn {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.conns); n > 0 {
		if c := m.conns[n-1]; !isClosed(c.closed) {
			return c
		}
	}
	k := len(m.conns) + 1
	if m.lb != nil {
		m.lb.mu.Lock()
		m.lb.n++
		k = m.lb.n
		m.lb.mu.Unlock()
	}
	c := &modelConn{dialled: time.Now(), frozen: m.frozen(k), closed: make(chan struct{})}
	if m.handshook {
		c.lastRead = c.dialled
	}
	m.conns = append(m.conns, c)
	return c
}

func (m *modelConns) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*coordinationv1.Lease, error) {
	c := m.current()
	m.mu.Lock()
	frozen := c.frozen && (len(m.conns) > 1 || time.Now().After(m.after))
	c.inFlight++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		c.inFlight--
		m.mu.Unlock()
	}()
	if frozen {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
			return nil, errors.New("http2: client connection lost")
		}
	}
	l, err := m.LeaseInterface.Patch(ctx, name, pt, data, opts, sub...)
	m.mu.Lock()
	c.lastRead = time.Now()
	m.mu.Unlock()
	return l, err
}

func (m *modelConns) close(silent func(c *modelConn) bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.conns {
		if !isClosed(c.closed) && silent(c) {
			close(c.closed)
			n++
		}
	}
	return n
}

// CloseSilentConnections is kubeapi's rule (without its handshake grace,
// shorter than a round's pace here anyway).
func (m *modelConns) CloseSilentConnections(since time.Time) int {
	return m.close(func(c *modelConn) bool {
		limit := since
		if m.urgent && c.dialled.Add(handshakeGraceModel).After(since) && time.Since(c.dialled) >= handshakeGraceModel {
			limit = c.dialled.Add(handshakeGraceModel)
		}
		return c.lastRead.Before(limit)
	})
}

// handshakeGraceModel is kubeapi's handshakeGrace.
const handshakeGraceModel = 250 * time.Millisecond

// CloseConnections closes them all.
func (m *modelConns) CloseConnections() { m.close(func(*modelConn) bool { return true }) }

// CloseIdleConnections closes the connections with nothing in flight.
func (m *modelConns) CloseIdleConnections() {
	m.mu.Lock()
	m.idleClosed++
	m.mu.Unlock()
	m.close(func(c *modelConn) bool { return c.inFlight == 0 })
}

func (m *modelConns) Connections() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.conns {
		if !isClosed(c.closed) {
			n++
		}
	}
	return n
}

func (m *modelConns) dialled() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns)
}

// freezeUnderLeader elects a leader whose renewals go through m (its
// urgent ones through urgent, unless nil), freezes the API server of m's
// connection 1 once a renewal was answered on it, and reports whether a
// renewal was answered within 5 s after.
func freezeUnderLeader(t *testing.T, m, urgent *modelConns, timing Timing) (e *Election, stats *leaseStats, renewedAfter bool) {
	t.Helper()
	m.current() // connection 1, the acquisition's
	obs := newObserver(m, "l", clock.RealClock{}, time.Minute, 0, &leaseStats{})
	obs.start()
	t.Cleanup(obs.stop)
	stats = &leaseStats{}
	e = newElection(Key{Namespace: "ns", Name: "l"}, "me", timing, ElectionOptions{}, electionParts{leases: m, obs: obs, clock: clock.RealClock{}, stats: stats})
	e.api.redial = &redialer{conns: m}
	if urgent != nil {
		e.api.redial.urgent, e.api.urgent = urgent, urgent
	}
	e.start()
	t.Cleanup(func() { _ = e.CancelWithin(time.Second) })
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	renewed := statsOf(stats).Election.Renewals
	eventually(t, 5*time.Second, "a renewal on connection 1", func() bool { return statsOf(stats).Election.Renewals > renewed })
	m.mu.Lock()
	m.after = time.Now() // connection 1's API server freezes
	m.mu.Unlock()
	renewed = statsOf(stats).Election.Renewals
	return e, stats, waitUntil(5*time.Second, func() bool { return statsOf(stats).Election.Renewals > renewed })
}

// The connection a round dials can land on the frozen API server again (a
// load balancer picks one per connection): the renewal that dialled it is
// older than the connection, yet the connection must be found silent at
// the next round. Connections 1 and 2 are frozen, 3 answers: the leader
// keeps its lease.
func TestARenewalsFreshConnectionThatLandsOnTheFrozenServerIsClosedToo(t *testing.T) {
	client := fake.NewClientset()
	m := &modelConns{LeaseInterface: client.CoordinationV1().Leases("ns"), frozen: func(k int) bool { return k <= 2 }, after: time.Now().Add(time.Hour)}
	e, stats, ok := freezeUnderLeader(t, m, nil, fastUnitTiming)
	if leads, _, _ := e.IsLeader(); !ok || !leads {
		t.Fatalf("no renewal answered after the freeze (leader: %v; %d connections dialled, want a third, which answers): %+v",
			leads, m.dialled(), statsOf(stats).Election)
	}
	if n := m.dialled(); n != 3 {
		t.Errorf("%d connections dialled; want 3", n)
	}
}

// soakRatioTiming is the HA soak's 4/3/0.5 s at half the scale: the pace's
// pipeline fills (and gives its oldest renewal up) only after most of the
// renew deadline, as there.
var soakRatioTiming = Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond}

// The traced loss of the soak hour: a round closed the connection a
// renewal hung on, and the load balancer put the new one on the frozen API
// server again, which answered its TLS handshake and froze just after.
// That connection received bytes after the oldest renewal in flight was
// sent (the renewal dialled it), so no round finds it silent, and every
// later renewal waited on it until the term lapsed. The urgent renewals go
// out on a pool of their own, dialled anew (connection 3, which answers):
// the leader keeps its term, and once it is no longer urgent that pool's
// idle connection is closed.
func TestARenewalsFreshConnectionFrozenAfterItsHandshakeIsRoutedAround(t *testing.T) {
	client := fake.NewClientset()
	lb := &modelLB{}
	frozen := func(k int) bool { return k <= 2 }
	m := &modelConns{LeaseInterface: client.CoordinationV1().Leases("ns"), frozen: frozen, handshook: true, lb: lb, after: time.Now().Add(time.Hour)}
	urgent := &modelConns{LeaseInterface: client.CoordinationV1().Leases("ns"), frozen: frozen, handshook: true, lb: lb, urgent: true}
	e, stats, ok := freezeUnderLeader(t, m, urgent, soakRatioTiming)
	if leads, _, _ := e.IsLeader(); !ok || !leads {
		t.Fatalf("no renewal answered after the freeze (leader: %v; connections dialled: %d in the pace's pool, %d in the urgent one; want the urgent one's to answer): %+v",
			leads, m.dialled(), urgent.dialled(), statsOf(stats).Election)
	}
	if n := urgent.dialled(); n != 1 {
		t.Errorf("%d connections dialled in the urgent pool; want 1", n)
	}
	// The pace's renewals hang on connection 2 until the oldest is given
	// up; a round then finds it silent, and the next renewal dials
	// connection 4, which answers: the leader is no longer urgent.
	eventually(t, 5*time.Second, "the urgent pool's idle connections closed once no longer urgent", func() bool {
		urgent.mu.Lock()
		defer urgent.mu.Unlock()
		return urgent.idleClosed > 0
	})
	if n := urgent.Connections(); n > 1 {
		t.Errorf("the urgent pool holds %d connections once no longer urgent; want at most 1 (an extra's still in flight)", n)
	}
	if leads, _, _ := e.IsLeader(); !leads {
		t.Fatalf("the leader lost its term: %+v", statsOf(stats).Election)
	}
}

// urgentPoolLog is an urgent pool whose connection count the test sets,
// recording its rounds and idle closes.
type urgentPoolLog struct {
	closerLog
	live, idleCloses, closes int
}

func (u *urgentPoolLog) Connections() int      { return u.live }
func (u *urgentPoolLog) CloseIdleConnections() { u.idleCloses++ }
func (u *urgentPoolLog) CloseConnections()     { u.closes++ }

// The urgent pool has a pace of its own: its dial never holds back the
// client pool's round (which the pace's renewals need), nor the reverse;
// a round of its own is a close and the dial that follows, at most one
// per period. Its idle connections are closed once no leader of the
// process is urgent, not when one of several stops being so; all of them
// when a leader turns urgent with none urgent before (a connection kept
// busy past an earlier urgency, by a renewal hung on a frozen server,
// must not take the new urgency's renewals).
func TestTheUrgentPoolsPaceAndLifeAreItsOwn(t *testing.T) {
	u := &urgentPoolLog{}
	r := &redialer{conns: &closerLog{}, urgent: u}
	t0, period := testNow, time.Second
	if n, _ := r.closeSilent(t0, t0, period, "test"); n != 1 {
		t.Fatal("the client pool's round was refused")
	}
	if !r.useUrgent(t0.Add(10*time.Millisecond), period) {
		t.Fatal("the urgent pool's first dial was refused by the client pool's round")
	}
	if r.useUrgent(t0.Add(20*time.Millisecond), period) {
		t.Fatal("a second dial into the empty urgent pool within the period was allowed")
	}
	u.live = 1
	if !r.useUrgent(t0.Add(30*time.Millisecond), period) {
		t.Fatal("the urgent pool's connection was not used")
	}
	u.live = 0
	r.closeSilentUrgent(t0, t0.Add(500*time.Millisecond), period, "test")
	if n := len(u.sinces()); n != 0 {
		t.Fatalf("the urgent pool closed within its round's period (%d rounds)", n)
	}
	u.live = 1
	r.closeSilentUrgent(t0, t0.Add(1100*time.Millisecond), period, "test") // closes (closerLog closes 1)
	u.live = 0
	if n := len(u.sinces()); n != 1 {
		t.Fatalf("%d urgent rounds after the period; want 1", n)
	}
	if !r.useUrgent(t0.Add(1110*time.Millisecond), period) {
		t.Fatal("the dial that follows the urgent pool's close was refused")
	}
	if r.useUrgent(t0.Add(1120*time.Millisecond), period) {
		t.Fatal("a second dial in the round of a close was allowed")
	}
	if n, _ := r.closeSilent(t0, t0.Add(1130*time.Millisecond), period, "test"); n != 1 {
		t.Fatal("the urgent pool's round held back the client pool's")
	}

	r.urgencyBegins()
	r.urgencyBegins()
	if u.closes != 1 {
		t.Fatalf("%d closes of the whole pool as two leaders turned urgent; want 1 (the first)", u.closes)
	}
	r.urgencyOver()
	if u.idleCloses != 0 {
		t.Fatal("the urgent pool's idle connections were closed while a leader is still urgent")
	}
	r.urgencyOver()
	if u.idleCloses != 1 {
		t.Fatalf("%d idle closes once no leader is urgent; want 1", u.idleCloses)
	}
	r.urgencyOver() // one too many (a panic between the count and the close): no harm
	r.urgencyBegins()
	if u.closes != 2 {
		t.Fatalf("%d closes of the whole pool; want 2 (the next urgency's first leader closes what the last left)", u.closes)
	}
}
