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
// (see kubeapi's conns.closeSilent). Its connections are dialled under the
// same pace: a dial, or a round that closed one, counts as a round.
type redialer struct {
	conns  silentCloser
	urgent urgentPool

	mu   sync.Mutex
	last time.Time // the last round that closed or dialled something, by the asker's clock
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
	return r.round(now, period, why, now.Sub(since), func() int { return r.conns.CloseSilentConnections(since) })
}

// closeSilentUrgent is closeSilent for the urgent pool, whose rule also
// finds silent a connection that received nothing past its handshake.
func (r *redialer) closeSilentUrgent(since, now time.Time, period time.Duration, why string) {
	if r == nil || r.urgent == nil {
		return
	}
	r.round(now, period, why+" (urgent pool)", now.Sub(since), func() int { return r.urgent.CloseSilentConnections(since) })
}

// useUrgent reports whether an urgent renewal goes through the urgent
// pool: while it holds a connection, or when the pace allows the dial
// that sending one there makes (which then counts as a round). Otherwise
// the renewal goes through the client's own pool.
func (r *redialer) useUrgent(now time.Time, period time.Duration) bool {
	if r == nil || r.urgent == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.urgent.Connections() > 0 {
		return true
	}
	if !r.last.IsZero() && now.Sub(r.last) < period && !now.Before(r.last) {
		return false
	}
	r.last = now
	return true
}

// urgencyOver closes the urgent pool's connections with nothing in flight:
// a leader no longer urgent is back to the client's one connection.
// Another leader's urgent renewal in flight keeps its connection.
func (r *redialer) urgencyOver() {
	if r == nil || r.urgent == nil {
		return
	}
	r.urgent.CloseIdleConnections()
}

func (r *redialer) round(now time.Time, period time.Duration, why string, silentFor time.Duration, closeConns func() int) (int, time.Time) {
	r.mu.Lock()
	if !r.last.IsZero() && now.Sub(r.last) < period && !now.Before(r.last) {
		next := r.last.Add(period)
		r.mu.Unlock()
		return 0, next
	}
	// Closed under the lock: two askers at once make one round.
	n := closeConns()
	if n > 0 {
		r.last = now
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
