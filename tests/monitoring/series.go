package monitoring

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Recording is what a Prometheus would have stored from scraping some
// targets at ticks 0, 1, 2, ...: per series, a value at each tick it was
// scraped, a staleness marker at the first tick its target failed (as
// Prometheus writes one when a scrape fails or a series disappears), and
// nothing while it is gone.
type Recording struct {
	ticks  int
	series map[string][]sample // series selector -> a sample per tick
	// names and labels seen in the scrapes (metric names as stored:
	// histograms as _bucket, _sum, _count).
	names, labels map[string]bool
	// of: the series each target's last successful scrape had.
	of map[string]map[string]bool
}

type sampleKind uint8

const (
	missing sampleKind = iota
	value
	stale
)

type sample struct {
	kind sampleKind
	v    float64
}

// NewRecording starts an empty recording.
func NewRecording() *Recording {
	return &Recording{series: map[string][]sample{}, names: map[string]bool{}, labels: map[string]bool{},
		of: map[string]map[string]bool{}}
}

// Add records target's scrape at tick: text in the Prometheus text
// format, its series given the target labels; err, a failed scrape (every
// series the target had goes stale).
func (r *Recording) Add(tick int, target string, targetLabels map[string]string, text io.Reader, err error) error {
	if tick < 0 {
		return fmt.Errorf("tick %d: want 0 or more", tick)
	}
	if tick >= r.ticks {
		r.ticks = tick + 1
	}
	seen := map[string]bool{}
	if err == nil {
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, perr := p.TextToMetricFamilies(text)
		if perr != nil {
			return fmt.Errorf("scrape of %s at tick %d: %w", target, tick, perr)
		}
		for _, f := range fams {
			for _, s := range flatten(f.GetName(), f) {
				labels := map[string]string{}
				for k, v := range targetLabels {
					labels[k] = v
				}
				for k, v := range s.labels {
					labels[k] = v
					r.labels[k] = true
				}
				for k := range targetLabels {
					r.labels[k] = true
				}
				r.names[s.name] = true
				key := selector(s.name, labels)
				r.set(key, tick, sample{kind: value, v: s.value})
				seen[key] = true
			}
		}
	}
	for key := range r.of[target] {
		if !seen[key] {
			r.set(key, tick, sample{kind: stale})
		}
	}
	r.of[target] = seen
	return nil
}

func (r *Recording) set(key string, tick int, s sample) {
	v := r.series[key]
	for len(v) <= tick {
		v = append(v, sample{})
	}
	v[tick] = s
	r.series[key] = v
}

// Ticks is the number of ticks recorded.
func (r *Recording) Ticks() int { return r.ticks }

// Has reports whether a scrape had the metric name (as stored) or label.
func (r *Recording) Has(name string) bool { return r.names[name] }

// HasLabel reports whether a scrape had the label.
func (r *Recording) HasLabel(label string) bool { return r.labels[label] }

// InputSeries is the recording as promtool's input_series.
func (r *Recording) InputSeries() []InputSeries {
	keys := make([]string, 0, len(r.series))
	for k := range r.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]InputSeries, 0, len(keys))
	for _, k := range keys {
		samples := r.series[k]
		words := make([]string, r.ticks)
		for i := range words {
			words[i] = "_"
			if i < len(samples) {
				switch samples[i].kind {
				case value:
					words[i] = strconv.FormatFloat(samples[i].v, 'g', -1, 64)
				case stale:
					words[i] = "stale"
				}
			}
		}
		out = append(out, InputSeries{Series: k, Values: strings.Join(words, " ")})
	}
	return out
}

// InputSeries is one series of a promtool test.
type InputSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type flatSample struct {
	name   string
	labels map[string]string
	value  float64
}

// flatten turns a family into the series Prometheus stores.
func flatten(name string, f *dto.MetricFamily) []flatSample {
	var out []flatSample
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.GetCounter() != nil:
			out = append(out, flatSample{name, labels, m.GetCounter().GetValue()})
		case m.GetGauge() != nil:
			out = append(out, flatSample{name, labels, m.GetGauge().GetValue()})
		case m.GetUntyped() != nil:
			out = append(out, flatSample{name, labels, m.GetUntyped().GetValue()})
		case m.GetHistogram() != nil:
			h := m.GetHistogram()
			inf := false
			for _, b := range h.GetBucket() {
				inf = inf || math.IsInf(b.GetUpperBound(), 1)
				out = append(out, flatSample{name + "_bucket", with(labels, "le", formatLe(b.GetUpperBound())), float64(b.GetCumulativeCount())})
			}
			if !inf {
				out = append(out, flatSample{name + "_bucket", with(labels, "le", "+Inf"), float64(h.GetSampleCount())})
			}
			out = append(out, flatSample{name + "_sum", labels, h.GetSampleSum()},
				flatSample{name + "_count", labels, float64(h.GetSampleCount())})
		}
	}
	return out
}

func formatLe(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func with(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for lk, lv := range labels {
		out[lk] = lv
	}
	return out
}

// selector writes a series as promtool reads it: name{label="value",...}.
func selector(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(labels[k])
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}
