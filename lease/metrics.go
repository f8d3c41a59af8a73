package lease

import (
	"time"

	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
)

// metricsSink is what an election and its observer report about a lease
// (telemetry.LeaseCounters counts it; stats.go aliases it leaseStats).
type metricsSink interface {
	Elected(acquireTook, campaignTook time.Duration)
	Renewed(took time.Duration)
	RenewFailed()
	Lost(reason string) // a telemetry.Lost* reason, from lossReason
	Released()
	HandedOff()
	Conflict() // an acquisition refused with 409: another writer was first
	APIError()
	ObserverRequest()
	WatchRestarted()
	EndpointWritten() // the leader's endpoint written to its Service's slice (endpoint.go)
	EndpointFailed()  // a write of the slice failed (it is retried)
	// EndpointSuperseded: a write of the slice refused, it carries a
	// higher fencing token (endpoint.go).
	EndpointSuperseded()
	// StaleEndpointCleared: a slice emptied, the term that wrote it is
	// over by the Lease's record (endpoint.go).
	StaleEndpointCleared()
}

// Metrics returns the library's metrics in the Prometheus text format: the
// leases an election or a holder watch of this process used (not those
// only GetHolder asked about), and the process's API requests.
func (m *Manager) Metrics() string {
	m.mu.Lock()
	leases := make([]telemetry.LeaseMetrics, 0, len(m.stats))
	for key, s := range m.stats {
		if s.UnusedByElectionsAndWatches() {
			continue
		}
		l := telemetry.LeaseMetrics{Name: key.String(), Counters: s}
		if e := m.elections.running[key]; e != nil {
			l.Leading, _, _ = e.IsLeader()
		}
		leases = append(leases, l)
	}
	m.mu.Unlock()
	text := telemetry.MetricsText(leases, LogsDropped(), int(m.metricsSize.Load()))
	m.metricsSize.Store(int64(len(text)))
	return text
}
