package lease

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"
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
			fams := parseMetrics(t, "# TYPE x gauge\n"+p.b.String())
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
		s.campaigns.Add(1)
		s.renewed(3 * time.Millisecond)
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
