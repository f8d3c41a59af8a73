package lease

import (
	"math"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Metrics in the Prometheus text exposition format (version 0.0.4), so a
// host that already serves /metrics appends them. Written by hand rather
// than with client_golang: the library would otherwise carry a registry
// and its dependencies for a few counters, and a host's own registry must
// not see ours twice.
//
// Cardinality is bounded: per-lease families carry only name="<ns>/<lease>"
// (plus a fixed reason or result), for leases an election or a holder
// watch of this process used (not those only GetHolder asked about); API
// requests carry verb, resource and code of the few calls the library
// makes. No identity appears in a label.

// histogram counts observations in fixed buckets (upper bounds in
// seconds, given at each call), lock-free, as Prometheus cumulative
// buckets. Its zero value is ready.
type histogram struct {
	counts [histogramBounds + 1]atomic.Int64 // counts[i]: in (bounds[i-1], bounds[i]]; last: +Inf
	sum    atomic.Int64                      // nanoseconds
}

const histogramBounds = 13

type buckets = [histogramBounds]float64

// Bucket bounds: requests take milliseconds to seconds; campaigns last
// from milliseconds (a free lease) to hours (a standby).
var (
	requestBuckets  = buckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	campaignBuckets = buckets{0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600}
)

func (h *histogram) observe(bounds *buckets, d time.Duration) {
	i := sort.SearchFloat64s(bounds[:], d.Seconds()) // first bound >= d
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// apiRequests counts the library's HTTP requests to the API server by
// verb, resource and status code, process-wide (every client NewClient
// builds counts here, as client-go's own rest_client metrics do).
var apiRequests struct {
	mu     sync.Mutex
	counts map[apiRequestKey]*atomic.Int64
}

type apiRequestKey struct{ verb, resource, code string }

func countAPIRequest(verb, resource, code string) {
	k := apiRequestKey{verb, resource, code}
	apiRequests.mu.Lock()
	c := apiRequests.counts[k]
	if c == nil {
		if apiRequests.counts == nil {
			apiRequests.counts = map[apiRequestKey]*atomic.Int64{}
		}
		c = &atomic.Int64{}
		apiRequests.counts[k] = c
	}
	apiRequests.mu.Unlock()
	c.Add(1)
}

// countingTransport counts every request by what it asked and what came
// back (code "error" when no response came).
type countingTransport struct{ next http.RoundTripper }

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb, resource := requestKind(req)
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil && resp != nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	countAPIRequest(verb, resource, code)
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport beneath.
func (t countingTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// requestKind names a request as Kubernetes does: the verb (get, list,
// watch, create, update, patch, delete) and the resource, from the method
// and the path (/api/v1/namespaces/NS/RESOURCE[/NAME] or
// /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME]). Anything else is
// "other", so a label never holds a name.
func requestKind(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	rest := []string(nil)
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	resource, named := "other", false
	if len(rest) >= 1 && len(rest) <= 3 {
		resource, named = rest[0], len(rest) >= 2
		if len(rest) == 3 {
			resource += "/" + rest[2] // a subresource
		}
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	default:
		verb = "other"
	}
	return verb, resource
}

// Metrics returns the library's metrics in the Prometheus text format.
func (m *Manager) Metrics() string {
	// At 1000 elections the text is about 5 MB: sized from the last scrape,
	// it is built in place rather than grown by doubling.
	last := m.metricsSize.Load()
	p := promWriter{}
	p.b.Grow(int(last + last/8 + 4096))
	m.writeMetrics(&p)
	m.metricsSize.Store(int64(p.b.Len()))
	return p.b.String()
}

// leaseMetrics is what one lease contributes, read under m.mu.
type leaseMetrics struct {
	name    string // <ns>/<lease>
	stats   *leaseStats
	elected bool // an election of this process ran on it
	leading bool
}

func (m *Manager) writeMetrics(p *promWriter) {
	m.mu.Lock()
	leases := make([]leaseMetrics, 0, len(m.stats))
	for key, s := range m.stats {
		if s.unusedByElectionsAndWatches() {
			continue
		}
		lm := leaseMetrics{name: key.String(), stats: s, elected: s.campaigns.Load() > 0}
		if e := m.elections[key]; e != nil {
			lm.leading, _, _ = e.IsLeader()
		}
		leases = append(leases, lm)
	}
	m.mu.Unlock()
	sort.Slice(leases, func(i, j int) bool { return leases[i].name < leases[j].name })

	p.family("leader_election_master_status", "gauge",
		"1 while this process leads the lease named by name (<namespace>/<lease>), else 0 (the client-go metric).")
	for _, l := range leases {
		if l.elected {
			p.sample("leader_election_master_status", b2f(l.leading), "name", l.name)
		}
	}
	p.family("k8s_lease_elections_won_total", "counter", "Terms of leadership this process began on the lease.")
	for _, l := range leases {
		if l.elected {
			p.sample("k8s_lease_elections_won_total", float64(l.stats.acquisitions.Load()), "name", l.name)
		}
	}
	p.family("k8s_lease_leadership_ended_total", "counter",
		"Terms of leadership that ended, by reason: released (cancel or shutdown), handed_off (to a chosen candidate), renew_deadline, taken (another holder), deleted, edited (another writer changed the record).")
	for _, l := range leases {
		if !l.elected {
			continue
		}
		s := l.stats
		for _, r := range []struct {
			reason string
			n      int64
		}{{"deleted", s.lossDeleted.Load()}, {"edited", s.lossEdited.Load()}, {"handed_off", s.handOffs.Load()}, {"released", s.releases.Load()},
			{"renew_deadline", s.lossDeadline.Load()}, {"taken", s.lossTaken.Load()}} {
			p.sample("k8s_lease_leadership_ended_total", float64(r.n), "name", l.name, "reason", r.reason)
		}
	}
	p.family("k8s_lease_renewals_total", "counter", "Renewal requests of a held lease, by result (success, error).")
	for _, l := range leases {
		if l.elected {
			p.sample("k8s_lease_renewals_total", float64(l.stats.renewErrors.Load()), "name", l.name, "result", "error")
			p.sample("k8s_lease_renewals_total", float64(l.stats.renewals.Load()), "name", l.name, "result", "success")
		}
	}
	p.family("k8s_lease_renewal_duration_seconds", "histogram", "Round trip of successful renewals.")
	for _, l := range leases {
		if l.elected {
			p.histogram("k8s_lease_renewal_duration_seconds", l.name, &requestBuckets, &l.stats.renewLatency)
		}
	}
	p.family("k8s_lease_campaign_duration_seconds", "histogram", "From the start of a candidacy to being elected (standbys wait long: that is their job).")
	for _, l := range leases {
		if l.elected {
			p.histogram("k8s_lease_campaign_duration_seconds", l.name, &campaignBuckets, &l.stats.campaignTime)
		}
	}
	p.family("k8s_lease_acquire_duration_seconds", "histogram",
		"Hand-off latency seen here: from this process judging the lease free (released, expired or absent) to holding it, conflicts lost on the way included.")
	for _, l := range leases {
		if l.elected {
			p.histogram("k8s_lease_acquire_duration_seconds", l.name, &requestBuckets, &l.stats.acquireTime)
		}
	}
	p.family("k8s_lease_conflicts_total", "counter", "Acquisitions refused with 409 Conflict: another writer was first.")
	for _, l := range leases {
		if l.elected {
			p.sample("k8s_lease_conflicts_total", float64(l.stats.conflicts.Load()), "name", l.name)
		}
	}
	p.family("k8s_lease_watch_restarts_total", "counter", "Times the list-and-watch of the lease was restarted after an error.")
	for _, l := range leases {
		p.sample("k8s_lease_watch_restarts_total", float64(l.stats.watchRestarts.Load()), "name", l.name)
	}

	p.family("k8s_lease_api_requests_total", "counter", "Requests to the API server by verb, resource and HTTP status code (\"error\": no response).")
	apiRequests.mu.Lock()
	keys := make([]apiRequestKey, 0, len(apiRequests.counts))
	for k := range apiRequests.counts {
		keys = append(keys, k)
	}
	counts := make(map[apiRequestKey]int64, len(keys))
	for _, k := range keys {
		counts[k] = apiRequests.counts[k].Load()
	}
	apiRequests.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.verb+"\x00"+a.resource+"\x00"+a.code < b.verb+"\x00"+b.resource+"\x00"+b.code
	})
	for _, k := range keys {
		p.sample("k8s_lease_api_requests_total", float64(counts[k]), "code", k.code, "resource", k.resource, "verb", k.verb)
	}
	p.family("k8s_lease_log_lines_dropped_total", "counter", "Log lines dropped because the host's log callback could not keep up.")
	p.sample("k8s_lease_log_lines_dropped_total", float64(LogsDropped()))
	// A C host has no other way to see the library's goroutines (one per
	// election that leads or follows, plus a constant few). Not under
	// client_golang's go_goroutines: a host that appends this text to its
	// own, with a Go collector of its own, would export that family twice.
	p.family("k8s_lease_goroutines", "gauge", "Goroutines of the library's Go runtime.")
	p.sample("k8s_lease_goroutines", float64(runtime.NumGoroutine()))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// promWriter builds the text in one buffer: no string per label set,
// number or escaped value (a scrape at 1000 elections writes about 90000
// samples).
type promWriter struct {
	b   strings.Builder
	num [32]byte // room for one formatted number
}

func (p *promWriter) family(name, typ, help string) {
	p.b.WriteString("# HELP ")
	p.b.WriteString(name)
	p.b.WriteByte(' ')
	p.escaped(help, false)
	p.b.WriteString("\n# TYPE ")
	p.b.WriteString(name)
	p.b.WriteByte(' ')
	p.b.WriteString(typ)
	p.b.WriteByte('\n')
}

// sample writes one line: name, the label pairs (name, value, ...: already
// in name order) and the value.
func (p *promWriter) sample(name string, v float64, pairs ...string) {
	p.sampleSuffixed(name, "", v, pairs...)
}

// sampleSuffixed is sample for name+suffix (a histogram's _bucket, _sum,
// _count), without building that string.
func (p *promWriter) sampleSuffixed(name, suffix string, v float64, pairs ...string) {
	p.b.WriteString(name)
	p.b.WriteString(suffix)
	if len(pairs) > 0 {
		p.b.WriteByte('{')
		for i := 0; i+1 < len(pairs); i += 2 {
			if i > 0 {
				p.b.WriteByte(',')
			}
			p.b.WriteString(pairs[i])
			p.b.WriteString(`="`)
			p.escaped(pairs[i+1], true)
			p.b.WriteByte('"')
		}
		p.b.WriteByte('}')
	}
	p.b.WriteByte(' ')
	p.number(v)
	p.b.WriteByte('\n')
}

// escaped writes v as the text format requires: backslash and line feed
// escaped, and in a label value also the double quote.
func (p *promWriter) escaped(v string, labelValue bool) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			p.b.WriteString(`\\`)
		case c == '\n':
			p.b.WriteString(`\n`)
		case c == '"' && labelValue:
			p.b.WriteString(`\"`)
		default:
			p.b.WriteByte(c)
		}
	}
}

func (p *promWriter) number(v float64) { p.b.Write(appendFloat(p.num[:0], v)) }

func (p *promWriter) histogram(name, lease string, bounds *buckets, h *histogram) {
	var cum int64
	les, ok := bucketLabels[bounds]
	if !ok {
		les = formatBounds(bounds)
	}
	for i := range bounds {
		cum += h.counts[i].Load()
		p.sampleSuffixed(name, "_bucket", float64(cum), "le", les[i], "name", lease)
	}
	cum += h.counts[histogramBounds].Load()
	p.sampleSuffixed(name, "_bucket", float64(cum), "le", "+Inf", "name", lease)
	p.sampleSuffixed(name, "_sum", time.Duration(h.sum.Load()).Seconds(), "name", lease)
	p.sampleSuffixed(name, "_count", float64(cum), "name", lease)
}

// bucketLabels are the le="..." values of the library's sets of bounds,
// formatted once.
var bucketLabels = map[*buckets][histogramBounds]string{
	&requestBuckets:  formatBounds(&requestBuckets),
	&campaignBuckets: formatBounds(&campaignBuckets),
}

func formatBounds(bounds *buckets) (out [histogramBounds]string) {
	for i, b := range bounds {
		out[i] = string(appendFloat(nil, b))
	}
	return out
}

// appendFloat appends v as the text format writes numbers.
func appendFloat(dst []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(dst, "+Inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-Inf"...)
	case math.IsNaN(v):
		return append(dst, "NaN"...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}
