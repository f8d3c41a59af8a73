package monitoring

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// RuleFile is a Prometheus rules file (the part these tests read).
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of rules.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is one alerting or recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Dir is deploy/monitoring of the checkout at root.
func Dir(root string) string { return filepath.Join(root, "deploy", "monitoring") }

// LoadRules reads a rules file.
func LoadRules(path string) (RuleFile, error) {
	var f RuleFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Alerts returns the names of the alerting rules of f, in file order.
func (f RuleFile) Alerts() []string {
	var names []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

var (
	stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	rangeOrOffset = regexp.MustCompile(`\[[^\]]*\]|\boffset\s+\w+`)
	braces        = regexp.MustCompile(`\{([^}]*)\}`)
	matcher       = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	grouping      = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	identifier    = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords      = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "inf": true, "nan": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// Names returns the metric names and the label names a PromQL expression
// refers to, sorted: the selectors' metrics, the labels of their matchers
// and of by, without, on, ignoring and group_left/right. Functions and
// keywords are not names; string literals and durations are skipped. It
// reads an expression Prometheus accepts (promtool parses it first), not
// any text.
func Names(expr string) (metrics, labels []string) {
	ms, ls := map[string]bool{}, map[string]bool{}
	// String literals first, with the matchers' values: a label value
	// such as "ns/lease" or "5.." is not a name.
	s := stringLiteral.ReplaceAllString(expr, `""`)
	s = rangeOrOffset.ReplaceAllString(s, " ")
	for _, m := range braces.FindAllStringSubmatch(s, -1) {
		for _, l := range matcher.FindAllStringSubmatch(m[1], -1) {
			if l[1] != "__name__" {
				ls[l[1]] = true
			}
		}
	}
	s = braces.ReplaceAllString(s, " ")
	for _, g := range grouping.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				ls[l] = true
			}
		}
	}
	s = grouping.ReplaceAllString(s, " ")
	for _, loc := range identifier.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if keywords[strings.ToLower(word)] || strings.HasPrefix(rest, "(") {
			continue // a keyword, or a function or aggregation called
		}
		ms[word] = true
	}
	return sortedKeys(ms), sortedKeys(ls)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
