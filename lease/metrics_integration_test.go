//go:build integration

package lease

import (
	"testing"
	"time"
)

// The metrics after a real election, renewals and a hand-off between two
// processes, read with the Prometheus reference parser.
func TestMetricsOnARealAPIServer(t *testing.T) {
	a, b := newProcess(t), newProcess(t)
	name := leaseName(t)
	full := itNamespace + "/" + name
	ea := mustRun(t, a, name, "a")
	mustElect(t, ea, 10*time.Second)
	eb := mustRun(t, b, name, "b")
	eventually(t, 10*time.Second, "renewals", func() bool {
		return metricValue(parseMetrics(t, a.Metrics()), "k8s_lease_renewals_total",
			map[string]string{"name": full, "result": "success"}) >= 2
	})
	if err := ea.Cancel(); err != nil {
		t.Fatal(err)
	}
	mustElect(t, eb, 10*time.Second)

	t.Logf("a's metrics:\n%s", a.Metrics())
	fa, fb := parseMetrics(t, a.Metrics()), parseMetrics(t, b.Metrics())
	lease := map[string]string{"name": full}
	for _, tc := range []struct {
		process string
		labels  map[string]string
		family  string
		atLeast float64
		atMost  float64
	}{
		{"a", lease, "leader_election_master_status", 0, 0},
		{"b", lease, "leader_election_master_status", 1, 1},
		{"a", lease, "k8s_lease_elections_won_total", 1, 1},
		{"b", lease, "k8s_lease_elections_won_total", 1, 1},
		{"a", map[string]string{"name": full, "reason": "released"}, "k8s_lease_leadership_ended_total", 1, 1},
		{"a", map[string]string{"name": full, "reason": "renew_deadline"}, "k8s_lease_leadership_ended_total", 0, 0},
		{"a", lease, "k8s_lease_renewal_duration_seconds", 2, 1e9},
		{"a", map[string]string{"name": full, "result": "error"}, "k8s_lease_renewals_total", 0, 0},
		{"b", lease, "k8s_lease_campaign_duration_seconds", 1, 1},
		{"b", lease, "k8s_lease_acquire_duration_seconds", 1, 1},
		// Process-wide: every test's clients count here.
		{"a", map[string]string{"verb": "patch", "resource": "leases", "code": "200"}, "k8s_lease_api_requests_total", 2, 1e9},
		{"a", map[string]string{"verb": "update", "resource": "leases", "code": "200"}, "k8s_lease_api_requests_total", 2, 1e9},
		{"a", map[string]string{"verb": "watch", "resource": "leases", "code": "200"}, "k8s_lease_api_requests_total", 1, 1e9},
		{"a", map[string]string{"verb": "list", "resource": "leases", "code": "200"}, "k8s_lease_api_requests_total", 1, 1e9},
	} {
		t.Run(tc.process+" "+tc.family, func(t *testing.T) {
			fams := fa
			if tc.process == "b" {
				fams = fb
			}
			if v := metricValue(fams, tc.family, tc.labels); v < tc.atLeast || v > tc.atMost {
				t.Fatalf("%s%v = %v, want %v..%v", tc.family, tc.labels, v, tc.atLeast, tc.atMost)
			}
		})
	}
}
