package lease

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/lease/internal/kubeconfig"
	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// requestTimeout bounds every single API request (watches excepted, which
// have their own bound), so one hung request cannot eat a renew deadline.
// Renewals are further bounded by what remains of the renew deadline.
const requestTimeout = 10 * time.Second

// LoadConfig finds the cluster: in-cluster service account first, then the
// standard kubeconfig loading rules ($KUBECONFIG, then ~/.kube/config). The
// error is ErrNoConfig and names every source it tried.
func LoadConfig() (*rest.Config, string, error) {
	cfg, source, err := kubeconfig.Load()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrNoConfig, err)
	}
	return cfg, source, nil
}

// NewClient builds the client the library uses (package kubeapi), its
// requests counted in the metrics. Client-side rate limiting is off:
// renewals must never wait behind a token bucket, and the API server's own
// priority and fairness protects it.
func NewClient(cfg *rest.Config) (kubeapi.Client, error) {
	return kubeconfig.NewClient(cfg, Version, telemetry.CountingTransport)
}

// silentCloser is what a redialer asks of the client (kubeapi.Client).
type silentCloser interface {
	CloseSilentConnections(since time.Time) int
}

// urgentPool is what a redialer asks of the client's urgent pool
// (kubeapi.Client's Urgent).
type urgentPool interface {
	silentCloser
	Connections() int
	CloseIdleConnections()
	CloseConnections()
}

// redialer closes the connections of a Manager's client that received
// nothing while a request of the library waited on them (a frozen or
// vanished API server keeps the one HTTP/2 connection every request
// shares): the next request dials anew and, behind a load balancer,
// reaches another API server. At most one round that closed something per
// period of the one who asks (a retry period), for the whole Manager (a
// process has one), so a hung API server costs a new connection per period
// and one that recovers no storm of them; a round that closed nothing
// dialled nothing, and does not count. nil: nothing to close (elections
// built by hand).
//
// The client's urgent pool (kubeapi.Client's Urgent; nil: none) carries
// the renewals a leader sends when its term is about to lapse
// (renewUrgently), so that they do not wait on a connection of the
// client's own pool that a round could not find silent: one the load
// balancer put on the frozen server again, which answered its handshake
// (see kubeapi's conns.closeSilent). It has a pace of its own, so that its
// rounds never hold back the client pool's, which the pace's renewals
// need: a round there is a close and the dial that follows (or a dial
// into the empty pool), at most one per period. While leaders are urgent
// the process may so dial two connections per retry period, one per
// pool; otherwise one. The pool is emptied of idle connections once no
// leader of the process is urgent, and of all its connections when one
// turns urgent again: a connection kept busy past the end of urgency (an
// extra hung on a frozen server) must not take the next urgent renewals.
type redialer struct {
	conns  silentCloser
	urgent urgentPool

	mu   sync.Mutex
	last time.Time // the last round that closed something, by the asker's clock
	// urgentRound: when the urgent pool's last round began (its dial made:
	// urgentDialled); urgentUsers: the leaders urgent now.
	urgentRound   time.Time
	urgentDialled bool
	urgentUsers   int
}

// leaseAPI is how an election reaches its Lease.
type leaseAPI struct {
	leases kubeapi.Leases
	// urgent: the Lease through the client's urgent pool (see redialer);
	// nil: none, urgent renewals go through leases.
	urgent kubeapi.Leases
	// redial closes the connections that went silent under a renewal;
	// nil: none.
	redial *redialer
}

// closeSilent closes the connections silent since since (see
// kubeapi.Client), unless the pace refuses a round: it reports how many it
// closed and, when refused, when a round is allowed again.
func (r *redialer) closeSilent(since, now time.Time, period time.Duration, why string) (closed int, next time.Time) {
	if r == nil {
		return 0, time.Time{}
	}
	return r.round(&r.last, now, period, why, now.Sub(since), func() int { return r.conns.CloseSilentConnections(since) })
}

// closeSilentUrgent is closeSilent for the urgent pool, whose rule also
// finds silent a connection that received nothing past its handshake. A
// round that closed something begins one of the urgent pool's rounds,
// whose dial then follows at once (useUrgent).
func (r *redialer) closeSilentUrgent(since, now time.Time, period time.Duration, why string) {
	if r == nil || r.urgent == nil {
		return
	}
	r.round(&r.urgentRound, now, period, why+" (urgent pool, where a connection that answered nothing past its handshake counts too)", now.Sub(since), func() int {
		n := r.urgent.CloseSilentConnections(since)
		if n > 0 {
			r.urgentDialled = false
		}
		return n
	})
}

// urgentLeases is the Lease client an urgent renewal sent at now goes
// through: the urgent pool's when the redialer allows it (useUrgent),
// else the client's own; throughUrgent says which.
func (a leaseAPI) urgentLeases(now time.Time, period time.Duration) (leases kubeapi.Leases, throughUrgent bool) {
	if a.urgent != nil && a.redial.useUrgent(now, period) {
		return a.urgent, true
	}
	return a.leases, false
}

// useUrgent reports whether an urgent renewal goes through the urgent
// pool: while it holds a connection, or when its pace allows the dial
// that sending one there makes. Otherwise the renewal goes through the
// client's own pool.
func (r *redialer) useUrgent(now time.Time, period time.Duration) bool {
	if r == nil || r.urgent == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.urgent.Connections() > 0:
	case !within(r.urgentRound, now, period):
		r.urgentRound, r.urgentDialled = now, true
	case !r.urgentDialled:
		r.urgentDialled = true // the dial of the round a close began
	default:
		return false
	}
	return true
}

// within reports whether now lies in the period that began at start
// (never when start is zero; a clock that went back ends it).
func within(start, now time.Time, period time.Duration) bool {
	return !start.IsZero() && now.Sub(start) < period && !now.Before(start)
}

// urgencyBegins counts a leader that turned urgent; the first closes what
// the urgent pool kept from an earlier urgency (renewals nobody waits for
// any more; see redialer). urgencyOver counts it out, and once none is
// urgent closes the urgent pool's connections with nothing in flight: the
// process is back to the client's one connection.
func (r *redialer) urgencyBegins() {
	if r == nil || r.urgent == nil {
		return
	}
	r.mu.Lock()
	r.urgentUsers++
	first := r.urgentUsers == 1
	if first {
		r.urgent.CloseConnections() // under the lock: before any useUrgent of this urgency
	}
	r.mu.Unlock()
}

func (r *redialer) urgencyOver() {
	if r == nil || r.urgent == nil {
		return
	}
	r.mu.Lock()
	r.urgentUsers = max(0, r.urgentUsers-1)
	idle := r.urgentUsers == 0
	r.mu.Unlock()
	if idle {
		r.urgent.CloseIdleConnections()
	}
}

// round closes what closeConns finds silent unless the pace whose last
// round began at *last refuses (closeConns runs under r.mu).
func (r *redialer) round(last *time.Time, now time.Time, period time.Duration, why string, silentFor time.Duration, closeConns func() int) (int, time.Time) {
	r.mu.Lock()
	if within(*last, now, period) {
		next := last.Add(period)
		r.mu.Unlock()
		return 0, next
	}
	// Closed under the lock: two askers at once make one round.
	n := closeConns()
	if n > 0 {
		*last = now
	}
	r.mu.Unlock()
	if n > 0 {
		logf(LevelWarning, "%s: closed %d connection(s) to the API server that answered nothing for %v; the next requests dial anew",
			why, n, silentFor.Round(time.Millisecond))
	}
	return n, time.Time{}
}

// Version is the library version, reported in the user agent.
const Version = "0.1.0"
