package telemetry

import (
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Metrics in the Prometheus text exposition format (version 0.0.4), so a
// host that already serves /metrics appends them. Written by hand rather
// than with client_golang: the library would otherwise carry a registry
// and its dependencies for a few counters, and a host's own registry must
// not see ours twice.
//
// Cardinality is bounded: per-lease families carry only name="<ns>/<lease>"
// (plus a fixed reason or result), for the leases the caller passes; API
// requests carry verb, resource and code of the few calls the library
// makes. No identity appears in a label.

// LeaseMetrics is what one lease contributes to the text.
type LeaseMetrics struct {
	Name     string // <ns>/<lease>
	Counters *LeaseCounters
	Leading  bool
	// Token and ValidFor: the fencing token of the term this process leads
	// and how long that leadership stays valid without another renewal
	// (both 0 when it does not lead). Candidate: an election of this
	// process campaigns on or leads the lease (it has not ended).
	Token     int64
	ValidFor  time.Duration
	Candidate bool
}

// elected: an election of this process ran on the lease (only those get
// the election families).
func (l *LeaseMetrics) elected() bool { return l.Counters.campaigns.Load() > 0 }

// MetricsText returns the metrics of leases (in any order), the process's
// API requests, logLinesDropped and the goroutine count. lastSize, the
// length of the previous text, sizes the buffer: at 1000 elections the text
// is about 5 MB, built in place rather than grown by doubling.
func MetricsText(leases []LeaseMetrics, logLinesDropped int64, lastSize int) string {
	p := promWriter{}
	p.b.Grow(lastSize + lastSize/8 + 4096)
	writeMetrics(&p, leases, logLinesDropped)
	return p.b.String()
}

func writeMetrics(p *promWriter, leases []LeaseMetrics, logLinesDropped int64) {
	sort.Slice(leases, func(i, j int) bool { return leases[i].Name < leases[j].Name })

	writeTermMetrics(p, leases)
	writeLeaseMetrics(p, leases)

	p.family("k8s_lease_api_requests_total", "counter", "Requests to the API server by verb, resource and HTTP status code (\"error\": no response).")
	keys, counts := apiRequestCounts()
	for _, k := range keys {
		p.sample("k8s_lease_api_requests_total", float64(counts[k]), "code", k.code, "resource", k.resource, "verb", k.verb)
	}
	p.family("k8s_lease_log_lines_dropped_total", "counter", "Log lines dropped because the host's log callback could not keep up.")
	p.sample("k8s_lease_log_lines_dropped_total", float64(logLinesDropped))
	// A C host has no other way to see the library's goroutines (one per
	// election that leads or follows, plus a constant few). Not under
	// client_golang's go_goroutines: a host that appends this text to its
	// own, with a Go collector of its own, would export that family twice.
	p.family("k8s_lease_goroutines", "gauge", "Goroutines of the library's Go runtime.")
	p.sample("k8s_lease_goroutines", float64(runtime.NumGoroutine()))
}

// writeTimingMetrics writes the timing of each lease's last election (it
// stays once the election ended, as the other election families do): the
// slack a renewal may take (renew deadline minus retry period) is a ratio
// of these, not a constant of a rule.
func writeTimingMetrics(p *promWriter, leases []LeaseMetrics) {
	for _, f := range []struct {
		family, help string
		of           func(*LeaseCounters) int64
	}{
		{"k8s_lease_lease_duration_seconds", "The lease duration of this process's last election on the lease: how long standbys wait after the last renewal.",
			func(c *LeaseCounters) int64 { return c.leaseDuration.Load() }},
		{"k8s_lease_renew_deadline_seconds", "The renew deadline of this process's last election on the lease: how long a leader goes without an answered renewal before it steps down.",
			func(c *LeaseCounters) int64 { return c.renewDeadline.Load() }},
		{"k8s_lease_retry_period_seconds", "The retry period of this process's last election on the lease: how often it renews, or tries to acquire.",
			func(c *LeaseCounters) int64 { return c.retryPeriod.Load() }},
	} {
		p.family(f.family, "gauge", f.help)
		for _, l := range leases {
			if l.elected() {
				p.sample(f.family, time.Duration(f.of(l.Counters)).Seconds(), "name", l.Name)
			}
		}
	}
}

// writeTermMetrics writes the families of the terms of leadership of each
// lease: status, terms begun and ended, renewals, how long it took.
func writeTermMetrics(p *promWriter, leases []LeaseMetrics) {
	p.family("leader_election_master_status", "gauge",
		"1 while this process leads the lease named by name (<namespace>/<lease>), else 0 (the client-go metric).")
	for _, l := range leases {
		if l.elected() {
			p.sample("leader_election_master_status", b2f(l.Leading), "name", l.Name)
		}
	}
	// Per replica, never an identity in a label: which term it leads (two
	// replicas reporting leadership at once show two tokens, the lower
	// one's term over), how close it is to stepping down, whether it
	// still campaigns (a replica whose election ended stands by no more).
	p.family("k8s_lease_fencing_token", "gauge", "The fencing token (leaseTransitions) of the term this process leads on the lease, 0 when it does not lead.")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_fencing_token", float64(l.Token), "name", l.Name)
		}
	}
	p.family("k8s_lease_validity_remaining_seconds", "gauge",
		"How long this process's leadership of the lease stays valid without another renewal (the renew deadline from the send of the last renewal answered), 0 when it does not lead.")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_validity_remaining_seconds", l.ValidFor.Seconds(), "name", l.Name)
		}
	}
	p.family("k8s_lease_candidate", "gauge", "1 while an election of this process campaigns on or leads the lease, 0 once it ended (cancelled, lost, handed off).")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_candidate", b2f(l.Candidate), "name", l.Name)
		}
	}
	writeTimingMetrics(p, leases)
	p.family("k8s_lease_elections_won_total", "counter", "Terms of leadership this process began on the lease.")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_elections_won_total", float64(l.Counters.acquisitions.Load()), "name", l.Name)
		}
	}
	p.family("k8s_lease_leadership_ended_total", "counter",
		"Terms of leadership that ended, by reason: released (cancel or shutdown), handed_off (to a chosen candidate), renew_deadline, taken (another holder), deleted, edited (another writer changed the record).")
	for _, l := range leases {
		if !l.elected() {
			continue
		}
		s := l.Counters
		for _, r := range []struct {
			reason string
			n      int64
		}{{LostDeleted, s.lossDeleted.Load()}, {LostEdited, s.lossEdited.Load()}, {"handed_off", s.handOffs.Load()}, {"released", s.releases.Load()},
			{LostRenewDeadline, s.lossDeadline.Load()}, {LostTaken, s.lossTaken.Load()}} {
			p.sample("k8s_lease_leadership_ended_total", float64(r.n), "name", l.Name, "reason", r.reason)
		}
	}
	p.family("k8s_lease_renewals_total", "counter", "Renewal requests of a held lease, by result (success, error).")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_renewals_total", float64(l.Counters.renewErrors.Load()), "name", l.Name, "result", "error")
			p.sample("k8s_lease_renewals_total", float64(l.Counters.renewals.Load()), "name", l.Name, "result", "success")
		}
	}
	p.family("k8s_lease_renewal_duration_seconds", "histogram", "Round trip of successful renewals.")
	for _, l := range leases {
		if l.elected() {
			p.histogram("k8s_lease_renewal_duration_seconds", l.Name, &requestBuckets, &l.Counters.renewLatency)
		}
	}
	p.family("k8s_lease_campaign_duration_seconds", "histogram", "From the start of a candidacy to being elected (standbys wait long: that is their job).")
	for _, l := range leases {
		if l.elected() {
			p.histogram("k8s_lease_campaign_duration_seconds", l.Name, &campaignBuckets, &l.Counters.campaignTime)
		}
	}
	p.family("k8s_lease_acquire_duration_seconds", "histogram",
		"Hand-off latency seen here: from this process judging the lease free (released, expired or absent) to holding it, conflicts lost on the way included.")
	for _, l := range leases {
		if l.elected() {
			p.histogram("k8s_lease_acquire_duration_seconds", l.Name, &requestBuckets, &l.Counters.acquireTime)
		}
	}
}

// writeLeaseMetrics writes the families of each lease's other writes and
// its watch.
func writeLeaseMetrics(p *promWriter, leases []LeaseMetrics) {
	p.family("k8s_lease_conflicts_total", "counter", "Acquisitions refused with 409 Conflict: another writer was first.")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_conflicts_total", float64(l.Counters.conflicts.Load()), "name", l.Name)
		}
	}
	p.family("k8s_lease_endpoint_writes_total", "counter",
		"Writes of the leader's endpoint to its Service's EndpointSlice (K8sLeasePublishEndpoint), by result (success, error, superseded: refused, the slice carries a higher fencing token).")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_endpoint_writes_total", float64(l.Counters.endpointWrites.Load()), "name", l.Name, "result", "success")
			p.sample("k8s_lease_endpoint_writes_total", float64(l.Counters.endpointFailures.Load()), "name", l.Name, "result", "error")
			p.sample("k8s_lease_endpoint_writes_total", float64(l.Counters.endpointRefused.Load()), "name", l.Name, "result", "superseded")
		}
	}
	p.family("k8s_lease_stale_endpoints_cleared_total", "counter",
		"EndpointSlices of the lease's Service this process emptied: the term that wrote them was over by the Lease's record and nobody withdrew them (a leader killed, and the next holder publishes no endpoint).")
	for _, l := range leases {
		if l.elected() {
			p.sample("k8s_lease_stale_endpoints_cleared_total", float64(l.Counters.staleCleared.Load()), "name", l.Name)
		}
	}
	p.family("k8s_lease_watch_restarts_total", "counter", "Times the list-and-watch of the lease was restarted after an error.")
	for _, l := range leases {
		p.sample("k8s_lease_watch_restarts_total", float64(l.Counters.watchRestarts.Load()), "name", l.Name)
	}
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
