package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
)

// statsOf is the snapshot of the counters behind an election's or an
// observer's sink.
func statsOf(sink metricsSink) LeaseStats { return sink.(*leaseStats).Stats("", "") }

func TestLossReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: x", ErrRenewDeadline), telemetry.LostRenewDeadline},
		{ErrLeaseDeleted, telemetry.LostDeleted},
		{fmt.Errorf("%w: y", ErrLeaseTaken), telemetry.LostTaken},
		{ErrLeaseEdited, telemetry.LostEdited},
		{ErrInternal, ""},
	} {
		if got := lossReason(tc.err); got != tc.want {
			t.Errorf("lossReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
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
	m.statsLocked(Key{"ns", "b"}).Renewed(3 * time.Millisecond)
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
