package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// series is a named set of samples in milliseconds (or another unit), of
// one section of the bench (sectionNames).
type series struct {
	Section string    `json:"section"`
	Name    string    `json:"name"`
	Impl    string    `json:"impl"`
	Unit    string    `json:"unit"`
	Samples []float64 `json:"samples"`
}

func (s series) quantile(q float64) float64 {
	if len(s.Samples) == 0 {
		return math.NaN()
	}
	v := append([]float64(nil), s.Samples...)
	sort.Float64s(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// table prints one row per measurement, with the two implementations side
// by side.
func table(all []series) string {
	var b strings.Builder
	b.WriteString("| measurement | unit | k8s-lease min / p50 / p90 / max (n) | client-go min / p50 / p90 / max (n) |\n")
	b.WriteString("| --- | --- | --- | --- |\n")
	var names []string
	seen := map[string]bool{}
	by := map[string]map[string]series{}
	for _, s := range all {
		if !seen[s.Name] {
			seen[s.Name] = true
			names = append(names, s.Name)
			by[s.Name] = map[string]series{}
		}
		by[s.Name][s.Impl] = s
	}
	for _, n := range names {
		row := by[n]
		unit := row[string(ours)].Unit
		if unit == "" {
			unit = row[string(clientGo)].Unit
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", n, unit, cell(row[string(ours)]), cell(row[string(clientGo)]))
	}
	return b.String()
}

func cell(s series) string {
	if len(s.Samples) == 0 {
		return "–"
	}
	if len(s.Samples) == 1 {
		return num(s.Samples[0])
	}
	return fmt.Sprintf("%s / %s / %s / %s (%d)", num(s.quantile(0)), num(s.quantile(0.5)), num(s.quantile(0.9)),
		num(s.quantile(1)), len(s.Samples))
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
