package lease

import (
	"errors"
	"sort"

	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
)

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
