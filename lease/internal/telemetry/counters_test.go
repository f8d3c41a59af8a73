package telemetry

import (
	"testing"
	"time"
)

func TestLeaseStatsCounters(t *testing.T) {
	var s LeaseCounters
	s.Renewed(2 * time.Millisecond)
	s.Renewed(4 * time.Millisecond)
	s.Renewed(time.Millisecond)
	if s.renewals.Load() != 3 || s.renewNanosMax.Load() != int64(4*time.Millisecond) || s.renewNanosLast.Load() != int64(time.Millisecond) {
		t.Fatalf("renewal counters: %d renewals, max %d, last %d", s.renewals.Load(), s.renewNanosMax.Load(), s.renewNanosLast.Load())
	}
	for _, reason := range []string{LostRenewDeadline, LostDeleted, LostTaken, LostEdited, LostEdited, ""} {
		s.Lost(reason)
	}
	if s.lossDeadline.Load() != 1 || s.lossDeleted.Load() != 1 || s.lossTaken.Load() != 1 || s.lossEdited.Load() != 2 {
		t.Fatal("loss counters by reason wrong")
	}
	s.EndpointSuperseded()
	s.StaleEndpointCleared()
	s.StaleEndpointCleared()
	es := s.Stats("ns", "l").Election
	if es.EndpointSuperseded != 1 || es.StaleEndpointsCleared != 2 {
		t.Fatalf("endpoint counters: %d superseded, %d stale cleared; want 1 and 2", es.EndpointSuperseded, es.StaleEndpointsCleared)
	}
	// The mean is of whole nanoseconds: 7 ms / 3.
	if es.Renewals != 3 || es.RenewMeanMs != 2.333333 || es.RenewMaxMs != 4 || es.Losses[LostEdited] != 2 {
		t.Fatalf("snapshot: %+v", es)
	}
}
