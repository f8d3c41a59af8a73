package lease

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parseMetrics parses the text with the Prometheus reference parser.
func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the reference parser refuses the metrics: %v\n%s", err, text)
	}
	return fams
}

// metricValue is the value of the sample of family name whose labels
// include want (a counter, gauge, or a histogram's count), or -1 if none.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

func TestRequestKind(t *testing.T) {
	for _, tc := range []struct {
		method, path, query string
		verb, resource      string
	}{
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "", "get", "leases"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "fieldSelector=metadata.name%3Dl", "list", "leases"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "watch=true&fieldSelector=x", "watch", "leases"},
		{"PATCH", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "", "patch", "leases"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "", "update", "leases"},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "", "create", "leases"},
		{"PATCH", "/api/v1/namespaces/ns/pods/p", "", "patch", "pods"},
		{"POST", "/api/v1/namespaces/ns/events", "", "create", "events"},
		{"PATCH", "/api/v1/namespaces/ns/pods/p/status", "", "patch", "pods/status"},
		{"DELETE", "/api/v1/namespaces/ns", "", "delete", "namespaces"},
		{"GET", "/version", "", "list", "other"},
		{"GET", "/apis/a/v1/namespaces/ns/r/n/s/extra", "", "list", "other"},
		{"OPTIONS", "/api/v1/namespaces/ns/pods", "", "other", "pods"},
	} {
		t.Run(tc.method+" "+tc.path+"?"+tc.query, func(t *testing.T) {
			req := &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path, RawQuery: tc.query}}
			verb, resource := requestKind(req)
			if verb != tc.verb || resource != tc.resource {
				t.Fatalf("requestKind = %s %s, want %s %s", verb, resource, tc.verb, tc.resource)
			}
		})
	}
}

func TestHistogramBuckets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      time.Duration
		bucket int
	}{
		{"zero", 0, 0},
		{"on a bound", time.Millisecond, 0},
		{"just above a bound", time.Millisecond + 1, 1},
		{"mid", 30 * time.Millisecond, 5},
		{"last bound", 10 * time.Second, 12},
		{"beyond every bound", time.Hour, histogramBounds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			h.observe(&requestBuckets, tc.d)
			for i := range h.counts {
				want := int64(0)
				if i == tc.bucket {
					want = 1
				}
				if got := h.counts[i].Load(); got != want {
					t.Fatalf("bucket %d = %d, want %d", i, got, want)
				}
			}
			if h.sum.Load() != int64(tc.d) {
				t.Fatalf("sum = %d, want %d", h.sum.Load(), tc.d)
			}
		})
	}
}

func TestLabelsEscaped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ns/l", `{name="ns/l"}`},
		{`a"b`, `{name="a\"b"}`},
		{`a\b`, `{name="a\\b"}`},
		{"a\nb", `{name="a\nb"}`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := labels("name", tc.in); got != tc.want {
				t.Fatalf("labels = %s, want %s", got, tc.want)
			}
			fams := parseMetrics(t, "# TYPE x gauge\nx"+labels("name", tc.in)+" 1\n")
			if v := metricValue(fams, "x", map[string]string{"name": tc.in}); v != 1 {
				t.Fatalf("the parser read the label back as something else (value %v)", v)
			}
		})
	}
}

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
	if v := metricValue(fams, "k8s_lease_leadership_ended_total", map[string]string{"name": "ns/l", "reason": "released"}); v != 1 {
		t.Fatalf("released = %v, want 1", v)
	}
}

// A scrape at 1000 elections escapes thousands of label values: escaping
// one must not build a strings.Replacer each time (it did: about 300 MB
// allocated per K8sLeaseMetrics call at 1000 elections, which the C scale
// bench's RSS showed).
func TestEscapingAllocatesAtMostTheResult(t *testing.T) {
	for _, tc := range []struct {
		name   string
		escape func(string) string
		in     string
	}{
		{"label value, nothing to escape", escapeLabelValue, "ns/lease-1"},
		{"label value, a quote", escapeLabelValue, `ns/le"ase`},
		{"help text", escapeHelp, "Leases\\this process leads."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if allocs := testing.AllocsPerRun(100, func() { _ = tc.escape(tc.in) }); allocs > 1 {
				t.Fatalf("%v allocations per call, want at most 1 (the result)", allocs)
			}
		})
	}
}
