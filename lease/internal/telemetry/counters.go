// Package telemetry counts what the library's elections, watches and API
// requests do and prints it: per-lease counters, their JSON snapshot
// (LeaseStats) and the Prometheus text of the library's metrics. Package
// lease decides which leases to report; this package must not import it
// (it takes plain values: names, durations, reasons as strings).
package telemetry

import (
	"sync/atomic"
	"time"
)

// Why a term of leadership ended, other than by a release or a hand-off:
// the reason label of k8s_lease_leadership_ended_total and the keys of
// ElectionStats.Losses.
const (
	LostRenewDeadline = "renew_deadline"
	LostDeleted       = "deleted"
	LostTaken         = "taken"
	LostEdited        = "edited"
)

// LeaseCounters are cumulative counters for one lease in this process,
// kept across elections and watches on it. Its zero value is ready.
type LeaseCounters struct {
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
	endpointWrites   atomic.Int64 // the leader's endpoint written to its Service's slice
	endpointFailures atomic.Int64 // writes of the slice that failed
	endpointRefused  atomic.Int64 // writes of the slice refused: it carries a higher fencing token
	staleCleared     atomic.Int64 // slices emptied: the Lease's record ended the term that wrote them
	renewLatency     histogram    // requestBuckets
	campaignTime     histogram    // campaignBuckets: start of candidacy to elected
	acquireTime      histogram    // requestBuckets: lease judged free to held

	// The timing of the last election started on the lease, in ns.
	leaseDuration, renewDeadline, retryPeriod atomic.Int64
}

// What the Manager, an election and its observer report, one count each.

// CampaignStarted counts an election started on the lease, whose timing
// (lease duration, renew deadline, retry period) the timing gauges report
// from then on, after it ended too.
func (s *LeaseCounters) CampaignStarted(leaseDuration, renewDeadline, retryPeriod time.Duration) {
	s.leaseDuration.Store(int64(leaseDuration))
	s.renewDeadline.Store(int64(renewDeadline))
	s.retryPeriod.Store(int64(retryPeriod))
	s.campaigns.Add(1)
}

func (s *LeaseCounters) WatchStarted()    { s.watchesStarted.Add(1) }
func (s *LeaseCounters) WatchCallback()   { s.watchCallbacks.Add(1) }
func (s *LeaseCounters) WatchRestarted()  { s.watchRestarts.Add(1) }
func (s *LeaseCounters) ObserverRequest() { s.observerRequests.Add(1) }
func (s *LeaseCounters) APIError()        { s.apiErrors.Add(1) }
func (s *LeaseCounters) Conflict()        { s.conflicts.Add(1) }
func (s *LeaseCounters) RenewFailed()     { s.renewErrors.Add(1) }
func (s *LeaseCounters) Released()        { s.releases.Add(1) }
func (s *LeaseCounters) HandedOff()       { s.handOffs.Add(1) }
func (s *LeaseCounters) EndpointWritten() { s.endpointWrites.Add(1) }
func (s *LeaseCounters) EndpointFailed()  { s.endpointFailures.Add(1) }

// EndpointSuperseded counts a write of the leader's endpoint refused
// because the slice carries a higher fencing token; StaleEndpointCleared a
// slice emptied because the term that wrote it is over by the Lease's
// record and nobody withdrew it.
func (s *LeaseCounters) EndpointSuperseded()   { s.endpointRefused.Add(1) }
func (s *LeaseCounters) StaleEndpointCleared() { s.staleCleared.Add(1) }

// UnusedByElectionsAndWatches: only GetHolder ever asked about this lease.
func (s *LeaseCounters) UnusedByElectionsAndWatches() bool {
	return s.campaigns.Load() == 0 && s.watchesStarted.Load() == 0
}

// Elected counts a term begun: acquireTook from judging the lease free to
// holding it, campaignTook from the start of the candidacy.
func (s *LeaseCounters) Elected(acquireTook, campaignTook time.Duration) {
	s.acquireTime.observe(&requestBuckets, acquireTook)
	s.campaignTime.observe(&campaignBuckets, campaignTook)
	s.acquisitions.Add(1)
}

func (s *LeaseCounters) Renewed(took time.Duration) {
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

// Lost counts a term lost for reason (one of the Lost constants; any other
// is not counted).
func (s *LeaseCounters) Lost(reason string) {
	switch reason {
	case LostRenewDeadline:
		s.lossDeadline.Add(1)
	case LostDeleted:
		s.lossDeleted.Add(1)
	case LostTaken:
		s.lossTaken.Add(1)
	case LostEdited:
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
	// EndpointWrites and EndpointFailures count the writes of the
	// leader's endpoint (K8sLeasePublishEndpoint) that landed and failed.
	EndpointWrites   int64   `json:"endpoint_writes"`
	EndpointFailures int64   `json:"endpoint_failures"`
	RenewLastMs      float64 `json:"renew_latency_last_ms"`
	RenewMaxMs       float64 `json:"renew_latency_max_ms"`
	RenewMeanMs      float64 `json:"renew_latency_mean_ms"`
	// EndpointSuperseded counts the writes of the leader's endpoint
	// refused because the slice carries a higher fencing token;
	// StaleEndpointsCleared the slices this process emptied because the
	// term that wrote them was over by the Lease's record and nobody
	// withdrew them.
	EndpointSuperseded    int64 `json:"endpoint_superseded"`
	StaleEndpointsCleared int64 `json:"stale_endpoints_cleared"`
	// LastAPIError is the last error an API request of the running (or
	// last) election met: why a candidate is not elected, for instance.
	LastAPIError string `json:"last_api_error,omitempty"`
}

// Stats is the snapshot of the counters of lease namespace/name, with
// Election always set: what only the caller knows (whether the lease is
// watched, the running election's state) it fills in.
func (s *LeaseCounters) Stats(namespace, name string) LeaseStats {
	renewals := s.renewals.Load()
	es := &ElectionStats{Acquisitions: s.acquisitions.Load(), Releases: s.releases.Load(), HandOffs: s.handOffs.Load(), Renewals: renewals,
		RenewErrors: s.renewErrors.Load(), APIErrors: s.apiErrors.Load(), Conflicts: s.conflicts.Load(),
		EndpointWrites: s.endpointWrites.Load(), EndpointFailures: s.endpointFailures.Load(),
		EndpointSuperseded: s.endpointRefused.Load(), StaleEndpointsCleared: s.staleCleared.Load(),
		RenewLastMs: ms(s.renewNanosLast.Load()), RenewMaxMs: ms(s.renewNanosMax.Load()),
		Losses: map[string]int64{LostRenewDeadline: s.lossDeadline.Load(), LostDeleted: s.lossDeleted.Load(),
			LostTaken: s.lossTaken.Load(), LostEdited: s.lossEdited.Load()}}
	if renewals > 0 {
		es.RenewMeanMs = ms(s.renewNanosTotal.Load() / renewals)
	}
	return LeaseStats{Namespace: namespace, Name: name, Election: es,
		Callbacks: s.watchCallbacks.Load(), Restarts: s.watchRestarts.Load(), Requests: s.observerRequests.Load()}
}

func ms(n int64) float64 { return float64(n) / float64(time.Millisecond) }
