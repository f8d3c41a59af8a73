package telemetry

import (
	"strings"
	"testing"
	"time"

	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry/telemetrytest"
)

func TestLabelsEscaped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ns/l", `x{name="ns/l"} 1`},
		{`a"b`, `x{name="a\"b"} 1`},
		{`a\b`, `x{name="a\\b"} 1`},
		{"a\nb", `x{name="a\nb"} 1`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var p promWriter
			p.sample("x", 1, "name", tc.in)
			if got := strings.TrimSuffix(p.b.String(), "\n"); got != tc.want {
				t.Fatalf("sample = %s, want %s", got, tc.want)
			}
			fams := telemetrytest.Parse(t, "# TYPE x gauge\n"+p.b.String())
			if v := telemetrytest.Value(fams, "x", map[string]string{"name": tc.in}); v != 1 {
				t.Fatalf("the parser read the label back as something else (value %v)", v)
			}
		})
	}
}

// An elected lease gets the election families, a watched one only the
// watch restarts; histograms count what was observed.
func TestMetricsTextParses(t *testing.T) {
	var elected, watched LeaseCounters
	elected.CampaignStarted(15*time.Second, 10*time.Second, 2*time.Second)
	elected.Elected(30*time.Millisecond, 2*time.Second)
	elected.Renewed(3 * time.Millisecond)
	elected.EndpointSuperseded()
	elected.StaleEndpointCleared()
	elected.StaleEndpointCleared()
	watched.WatchStarted()
	watched.WatchRestarted()
	leases := []LeaseMetrics{{Name: "ns/w", Counters: &watched},
		{Name: "ns/e", Counters: &elected, Leading: true, Token: 7, ValidFor: 3500 * time.Millisecond, Candidate: true}}
	fams := telemetrytest.Parse(t, MetricsText(leases, 7, 0))
	e, w := map[string]string{"name": "ns/e"}, map[string]string{"name": "ns/w"}
	for _, tc := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"leader_election_master_status", e, 1},
		{"leader_election_master_status", w, -1},
		{"k8s_lease_elections_won_total", e, 1},
		{"k8s_lease_fencing_token", e, 7},
		{"k8s_lease_fencing_token", w, -1},
		{"k8s_lease_validity_remaining_seconds", e, 3.5},
		{"k8s_lease_candidate", e, 1},
		{"k8s_lease_candidate", w, -1},
		{"k8s_lease_lease_duration_seconds", e, 15},
		{"k8s_lease_renew_deadline_seconds", e, 10},
		{"k8s_lease_retry_period_seconds", e, 2},
		{"k8s_lease_renew_deadline_seconds", w, -1},
		{"k8s_lease_campaign_duration_seconds", e, 1},
		{"k8s_lease_renewal_duration_seconds", e, 1},
		{"k8s_lease_endpoint_writes_total", map[string]string{"name": "ns/e", "result": "superseded"}, 1},
		{"k8s_lease_endpoint_writes_total", map[string]string{"name": "ns/e", "result": "success"}, 0},
		{"k8s_lease_stale_endpoints_cleared_total", e, 2},
		{"k8s_lease_stale_endpoints_cleared_total", w, -1},
		{"k8s_lease_watch_restarts_total", w, 1},
		{"k8s_lease_log_lines_dropped_total", nil, 7},
	} {
		if got := telemetrytest.Value(fams, tc.family, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.family, tc.labels, got, tc.want)
		}
	}
}
