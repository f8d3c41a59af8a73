package lease

import (
	"fmt"
	"testing"
	"time"
)

func TestLeaseStatsCounters(t *testing.T) {
	var s leaseStats
	s.renewed(2 * time.Millisecond)
	s.renewed(4 * time.Millisecond)
	s.renewed(time.Millisecond)
	if s.renewals.Load() != 3 || s.renewNanosMax.Load() != int64(4*time.Millisecond) || s.renewNanosLast.Load() != int64(time.Millisecond) {
		t.Fatalf("renewal counters: %d renewals, max %d, last %d", s.renewals.Load(), s.renewNanosMax.Load(), s.renewNanosLast.Load())
	}
	for _, reason := range []error{
		fmt.Errorf("%w: x", ErrRenewDeadline), ErrLeaseDeleted, fmt.Errorf("%w: y", ErrLeaseTaken),
		ErrLeaseEdited, ErrLeaseEdited,
	} {
		s.lost(reason)
	}
	if s.lossDeadline.Load() != 1 || s.lossDeleted.Load() != 1 || s.lossTaken.Load() != 1 || s.lossEdited.Load() != 2 {
		t.Fatal("loss counters by reason wrong")
	}
}

func TestManagerStatsSnapshot(t *testing.T) {
	m, _, _ := fakeManager()
	t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
	if _, err := m.RunElection("ns", "b", "me", unitTiming); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WatchHolder("ns", "a", func(HolderState) {}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.statsLocked(Key{"ns", "b"}).renewed(3 * time.Millisecond)
	m.mu.Unlock()
	got := m.Stats()
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("stats = %+v", got)
	}
	if !got[0].Watching || got[0].Election != nil {
		t.Fatalf("watch-only lease: %+v", got[0])
	}
	e := got[1].Election
	if e == nil || !e.Running || e.Renewals != 1 || e.RenewMeanMs != 3 || e.Losses["taken"] != 0 {
		t.Fatalf("election stats: %+v", e)
	}
}
