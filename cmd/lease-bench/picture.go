package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The distributions beside a table: for each row (a measurement), one
// axis, every sample of ours and of client-go as a dot on it, the p50 of
// each marked and labelled as the table writes it. The axis is logarithmic:
// ours and client-go differ by orders of magnitude in the rows drawn.

// drawnSections are the sections whose tables get a picture.
var drawnSections = map[string]bool{"handoff": true, "failover": true}

// pictureLink is the markdown the page puts under a drawn table.
func pictureLink(section string) string {
	return fmt.Sprintf("\n![Samples of each row above, ours and client-go on one logarithmic axis](images/bench-%s.svg)\n", section)
}

// distributionSVG draws rows (one section's, in the table's order).
func distributionSVG(rows []series, title string) (string, error) {
	var names []string
	by := map[string]map[string]series{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range rows {
		if by[s.Name] == nil {
			by[s.Name] = map[string]series{}
			names = append(names, s.Name)
		}
		by[s.Name][s.Impl] = s
		for _, v := range s.Samples {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if len(names) == 0 || math.IsInf(lo, 1) {
		return "", fmt.Errorf("no positive samples to draw for %q", title)
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	const (
		left, right, top, rowH, width = 30.0, 50.0, 50.0, 78.0, 900.0
	)
	x := func(v float64) float64 {
		return left + (width-left-right)*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	height := top + rowH*float64(len(names)) + 30
	colors := map[string]string{string(ours): "#1565c0", string(clientGo): "#ef6c00"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="38" fill="%s">● k8s-lease</text><text x="%.0f" y="38" fill="%s">● client-go</text>`+"\n",
		left, colors[string(ours)], left+100, colors[string(clientGo)])
	for i, name := range names {
		y := top + rowH*float64(i)
		axis := y + 44
		fmt.Fprintf(&b, `<text class="row" x="%.0f" y="%.1f">%s</text>`+"\n", left, y+12, html.EscapeString(name))
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#888"/>`+"\n", left, width-right, axis, axis)
		for d := lo; d <= hi*1.0001; d *= 10 {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888"/><text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n",
				x(d), x(d), axis, axis+4, x(d), axis+16, html.EscapeString(num(d)+" "+by[name][string(ours)].unitOr(by[name][string(clientGo)])))
		}
		for k, impl := range []string{string(ours), string(clientGo)} {
			s, ok := by[name][impl]
			if !ok || len(s.Samples) == 0 {
				continue
			}
			dy := axis - 8 - 10*float64(k)
			for _, v := range s.Samples {
				if v > 0 {
					fmt.Fprintf(&b, `<circle class="sample %s" cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="0.6"/>`+"\n", impl, x(v), dy, colors[impl])
				}
			}
			p50 := s.quantile(0.5)
			fmt.Fprintf(&b, `<line class="p50" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x(p50), x(p50), dy-6, dy+6, colors[impl])
			fmt.Fprintf(&b, `<text class="p50-label" x="%.1f" y="%.1f" fill="%s">p50 %s</text>`+"\n", x(p50)+5, y+24+10*float64(k), colors[impl], num(p50))
		}
	}
	b.WriteString("</svg>\n")
	return b.String(), nil
}

// unitOr is s's unit, or other's when s has none.
func (s series) unitOr(other series) string {
	if s.Unit != "" {
		return s.Unit
	}
	return other.Unit
}
