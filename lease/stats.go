package lease

import (
	"errors"
	"sort"
	"sync/atomic"
	"time"
)

// leaseStats are cumulative counters for one lease in this process, kept
// across elections and watches on it (a host exports them as metrics).
type leaseStats struct {
	acquisitions     atomic.Int64
	releases         atomic.Int64
	renewals         atomic.Int64
	renewErrors      atomic.Int64
	apiErrors        atomic.Int64
	lossDeadline     atomic.Int64
	lossDeleted      atomic.Int64
	lossTaken        atomic.Int64
	lossEdited       atomic.Int64
	renewNanosTotal  atomic.Int64
	renewNanosMax    atomic.Int64
	renewNanosLast   atomic.Int64
	watchRestarts    atomic.Int64
	watchCallbacks   atomic.Int64
	observerRequests atomic.Int64
	campaigns        atomic.Int64 // elections started
	watchesStarted   atomic.Int64
	conflicts        atomic.Int64 // acquisitions refused with 409 (another writer was first)
	handOffs         atomic.Int64 // terms ended by handing the lease to a chosen candidate
	renewLatency     histogram    // requestBuckets
	campaignTime     histogram    // campaignBuckets: start of candidacy to elected
	acquireTime      histogram    // requestBuckets: lease judged free to held
}

// unusedByElectionsAndWatches: only GetHolder ever asked about this lease.
func (s *leaseStats) unusedByElectionsAndWatches() bool {
	return s.campaigns.Load() == 0 && s.watchesStarted.Load() == 0
}

func (s *leaseStats) renewed(took time.Duration) {
	s.renewals.Add(1)
	s.renewLatency.observe(&requestBuckets, took)
	n := int64(took)
	s.renewNanosTotal.Add(n)
	s.renewNanosLast.Store(n)
	for {
		old := s.renewNanosMax.Load()
		if n <= old || s.renewNanosMax.CompareAndSwap(old, n) {
			return
		}
	}
}

func (s *leaseStats) lost(reason error) {
	switch {
	case errors.Is(reason, ErrRenewDeadline):
		s.lossDeadline.Add(1)
	case errors.Is(reason, ErrLeaseDeleted):
		s.lossDeleted.Add(1)
	case errors.Is(reason, ErrLeaseTaken):
		s.lossTaken.Add(1)
	case errors.Is(reason, ErrLeaseEdited):
		s.lossEdited.Add(1)
	}
}

// LeaseStats is a snapshot of one lease's counters (see include/k8s_lease.h,
// K8sLeaseStats, for what each means).
type LeaseStats struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Election  *ElectionStats `json:"election"`
	Watching  bool           `json:"watching"`
	Callbacks int64          `json:"watch_callbacks"`
	Restarts  int64          `json:"watch_restarts"`
	Requests  int64          `json:"watch_requests"`
}

// ElectionStats are the election counters of a lease.
type ElectionStats struct {
	Running      bool             `json:"running"`
	Leader       bool             `json:"leader"`
	Token        int64            `json:"fencing_token"`
	Acquisitions int64            `json:"acquisitions"`
	Releases     int64            `json:"releases"`
	HandOffs     int64            `json:"hand_offs"`
	Losses       map[string]int64 `json:"losses"`
	Renewals     int64            `json:"renewals"`
	RenewErrors  int64            `json:"renew_errors"`
	APIErrors    int64            `json:"api_errors"`
	Conflicts    int64            `json:"conflicts"`
	RenewLastMs  float64          `json:"renew_latency_last_ms"`
	RenewMaxMs   float64          `json:"renew_latency_max_ms"`
	RenewMeanMs  float64          `json:"renew_latency_mean_ms"`
	// LastAPIError is the last error an API request of the running (or
	// last) election met: why a candidate is not elected, for instance.
	LastAPIError string `json:"last_api_error,omitempty"`
}

func ms(n int64) float64 { return float64(n) / float64(time.Millisecond) }

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
		ls := LeaseStats{Namespace: key.Namespace, Name: key.Name, Watching: m.watches[key] != nil,
			Callbacks: s.watchCallbacks.Load(), Restarts: s.watchRestarts.Load(), Requests: s.observerRequests.Load()}
		if acq, renewals := s.acquisitions.Load(), s.renewals.Load(); acq > 0 || m.elections[key] != nil {
			es := &ElectionStats{Acquisitions: acq, Releases: s.releases.Load(), HandOffs: s.handOffs.Load(), Renewals: renewals,
				RenewErrors: s.renewErrors.Load(), APIErrors: s.apiErrors.Load(), Conflicts: s.conflicts.Load(),
				RenewLastMs: ms(s.renewNanosLast.Load()), RenewMaxMs: ms(s.renewNanosMax.Load()),
				Losses: map[string]int64{"renew_deadline": s.lossDeadline.Load(), "deleted": s.lossDeleted.Load(),
					"taken": s.lossTaken.Load(), "edited": s.lossEdited.Load()}}
			if renewals > 0 {
				es.RenewMeanMs = ms(s.renewNanosTotal.Load() / renewals)
			}
			if e := m.elections[key]; e != nil {
				es.Running = !e.Ended()
				es.Leader, es.Token, _ = e.IsLeader()
				if err := e.lastAPIError(); err != nil {
					es.LastAPIError = err.Error()
				}
			}
			ls.Election = es
		}
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}
