package lease

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry/telemetrytest"
)

// The reference parser's reading of a scrape (package telemetry's tests
// read theirs with the same helpers).
var (
	parseMetrics = telemetrytest.Parse
	metricValue  = telemetrytest.Value
)

// After an election on the fake clientset, the metrics parse and say so.
func TestMetricsAfterElection(t *testing.T) {
	m, _, _ := fakeManager()
	t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
	before := parseMetrics(t, m.Metrics())
	if v := metricValue(before, "leader_election_master_status", nil); v != -1 {
		t.Fatalf("a master status before any election: %v", v)
	}
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WatchHolder("ns", "watched", func(HolderState) {}); err != nil {
		t.Fatal(err)
	}
	_, _ = m.GetHolder("ns", "only-asked-about")
	fams := parseMetrics(t, m.Metrics())
	name := map[string]string{"name": "ns/l"}
	for _, tc := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"leader_election_master_status", name, 1},
		{"k8s_lease_elections_won_total", name, 1},
		{"k8s_lease_fencing_token", name, 1},
		{"k8s_lease_candidate", name, 1},
		{"k8s_lease_campaign_duration_seconds", name, 1},
		{"k8s_lease_acquire_duration_seconds", name, 1},
		{"k8s_lease_leadership_ended_total", map[string]string{"name": "ns/l", "reason": "released"}, 0},
		{"k8s_lease_watch_restarts_total", map[string]string{"name": "ns/watched"}, 0},
		{"k8s_lease_watch_restarts_total", map[string]string{"name": "ns/only-asked-about"}, -1},
		{"leader_election_master_status", map[string]string{"name": "ns/watched"}, -1},
		{"k8s_lease_log_lines_dropped_total", nil, float64(LogsDropped())},
	} {
		t.Run(tc.family, func(t *testing.T) {
			if got := metricValue(fams, tc.family, tc.labels); got != tc.want {
				t.Fatalf("%s%v = %v, want %v", tc.family, tc.labels, got, tc.want)
			}
		})
	}
	if v := metricValue(fams, "k8s_lease_validity_remaining_seconds", name); v <= 0 || v > unitTiming.RenewDeadline.Seconds() {
		t.Fatalf("k8s_lease_validity_remaining_seconds = %v, want in (0, %v]", v, unitTiming.RenewDeadline.Seconds())
	}
	// The election's goroutine at least; the exact count moves.
	if g := metricValue(fams, "k8s_lease_goroutines", nil); g < 1 {
		t.Fatalf("k8s_lease_goroutines = %v, want the running goroutines", g)
	}
	if err := e.Cancel(); err != nil {
		t.Fatal(err)
	}
	fams = parseMetrics(t, m.Metrics())
	if v := metricValue(fams, "leader_election_master_status", name); v != 0 {
		t.Fatalf("master status after cancel = %v, want 0", v)
	}
	for _, family := range []string{"k8s_lease_fencing_token", "k8s_lease_validity_remaining_seconds", "k8s_lease_candidate"} {
		if v := metricValue(fams, family, name); v != 0 {
			t.Fatalf("%s after cancel = %v, want 0", family, v)
		}
	}
	if v := metricValue(fams, "k8s_lease_leadership_ended_total", map[string]string{"name": "ns/l", "reason": "released"}); v != 1 {
		t.Fatalf("released = %v, want 1", v)
	}
}

// A scrape at 1000 elections is about 5 MB of text. Building it must not
// allocate several times that (it did: a Builder doubling from empty, a
// label string and an fmt call per sample, 7 times the text; before that,
// a strings.Replacer per label value, 300 MB): a scrape after the first
// allocates little more than its own text. The C scale bench's RSS showed
// both.
func TestScrapeAllocatesAboutItsText(t *testing.T) {
	m := NewManager(clock.RealClock{})
	m.mu.Lock()
	for i := range 300 {
		s := m.statsLocked(Key{Namespace: "ns", Name: fmt.Sprintf("lease-%d", i)})
		s.CampaignStarted(unitTiming.LeaseDuration, unitTiming.RenewDeadline, unitTiming.RetryPeriod)
		s.Renewed(3 * time.Millisecond)
	}
	m.mu.Unlock()
	_ = m.Metrics() // the first scrape learns the size
	// The least of a few scrapes: TotalAlloc counts the whole process,
	// where goroutines of earlier tests may still allocate.
	var text string
	allocated := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		text = m.Metrics()
		runtime.ReadMemStats(&after)
		allocated = min(allocated, after.TotalAlloc-before.TotalAlloc)
	}
	t.Logf("a scrape of %d bytes allocated %d bytes", len(text), allocated)
	if limit := uint64(len(text)) * 3 / 2; allocated > limit {
		t.Fatalf("a scrape of %d bytes allocated %d bytes, want at most %d", len(text), allocated, limit)
	}
	if fams := parseMetrics(t, text); metricValue(fams, "k8s_lease_renewals_total", map[string]string{"name": "ns/lease-299", "result": "success"}) != 1 {
		t.Fatal("the scrape lost a lease's renewals")
	}
}

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

// The timing gauges are those of the election that ran on the lease, and
// stay once it ended, beside its other gauges (a dashboard or an alert
// comparing a latency with them keeps its reference).
func TestTheTimingGaugesOutliveTheElection(t *testing.T) {
	m, _, _ := fakeManager()
	t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
	e, err := m.RunElection("ns", "l", "a", unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitElected(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	lease := map[string]string{"name": "ns/l"}
	check := func(when string) {
		t.Helper()
		fams := parseMetrics(t, m.Metrics())
		for family, want := range map[string]time.Duration{"k8s_lease_lease_duration_seconds": unitTiming.LeaseDuration,
			"k8s_lease_renew_deadline_seconds": unitTiming.RenewDeadline, "k8s_lease_retry_period_seconds": unitTiming.RetryPeriod} {
			if got := metricValue(fams, family, lease); got != want.Seconds() {
				t.Errorf("%s: %s = %v, want %v", when, family, got, want.Seconds())
			}
		}
		if got := metricValue(fams, "k8s_lease_candidate", lease); got == -1 {
			t.Errorf("%s: no k8s_lease_candidate series", when)
		}
	}
	check("leading")
	if err := m.CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	check("after CancelElection")
}
