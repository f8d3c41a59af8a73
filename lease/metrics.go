package lease

import (
	"errors"
	"sort"
	"time"

	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
)

// metricsSink is what an election and its observer report about a lease
// (telemetry.LeaseCounters counts it; leaseStats below).
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
			l.Leading, l.Token, l.ValidFor = e.IsLeader()
			l.Candidate = !e.Ended()
		}
		leases = append(leases, l)
	}
	m.mu.Unlock()
	text := telemetry.MetricsText(leases, LogsDropped(), int(m.metricsSize.Load()))
	m.metricsSize.Store(int64(len(text)))
	return text
}

// leaseStats are the cumulative counters of one lease in this process,
// kept by the Manager across elections and watches on it.
type leaseStats = telemetry.LeaseCounters

// LeaseStats is a snapshot of one lease's counters (see include/k8s_lease.h,
// K8sLeaseStats, for what each means).
type LeaseStats = telemetry.LeaseStats

// ElectionStats are the election counters of a lease.
type ElectionStats = telemetry.ElectionStats

// lossReason names the reason a term was lost for the counters ("": one
// they do not count).
func lossReason(err error) string {
	switch {
	case errors.Is(err, ErrRenewDeadline):
		return telemetry.LostRenewDeadline
	case errors.Is(err, ErrLeaseDeleted):
		return telemetry.LostDeleted
	case errors.Is(err, ErrLeaseTaken):
		return telemetry.LostTaken
	case errors.Is(err, ErrLeaseEdited):
		return telemetry.LostEdited
	}
	return ""
}

// statsLocked returns the counters of key, creating them; m.mu held.
func (m *Manager) statsLocked(key Key) *leaseStats {
	s := m.stats[key]
	if s == nil {
		s = &leaseStats{}
		m.stats[key] = s
	}
	return s
}

// Stats returns a snapshot of every lease this process has used, sorted.
func (m *Manager) Stats() []LeaseStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]LeaseStats, 0, len(m.stats))
	for key, s := range m.stats {
		ls := s.Stats(key.Namespace, key.Name)
		ls.Watching = m.watches.running[key] != nil
		if e := m.elections.running[key]; e != nil {
			es := ls.Election
			es.Running = !e.Ended()
			es.Leader, es.Token, _ = e.IsLeader()
			if err := e.lastAPIError(); err != nil {
				es.LastAPIError = err.Error()
			}
		} else if ls.Election.Acquisitions == 0 {
			ls.Election = nil // no election of this process won or runs here
		}
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}
