package monitoring

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

const runbookPrefix = "https://github.com/k8s-lease/k8s-lease/blob/main/docs/operations.md#"

func rulesPath() string { return filepath.Join(Dir(testenv.RepoRoot()), "k8s-lease-rules.yaml") }

func TestThePrometheusRuleHoldsTheRulesFilesGroups(t *testing.T) {
	rules, err := LoadRules(rulesPath())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(Dir(testenv.RepoRoot()), "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Spec       RuleFile `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("prometheusrule.yaml is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	if !reflect.DeepEqual(pr.Spec, rules) {
		t.Errorf("prometheusrule.yaml's spec.groups differ from k8s-lease-rules.yaml's groups:\n%+v\nwant\n%+v", pr.Spec, rules)
	}
}

func TestTheRulesFileIsValid(t *testing.T) {
	promtool, err := Promtool()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := RunPromtool(promtool, "check", "rules", rulesPath()); err != nil {
		t.Fatal(err)
	} else {
		t.Log(strings.TrimSpace(out))
	}
}

// Every alert says what is wrong and points at an entry of the runbook
// that exists; its templates use only labels the alert has.
func TestEveryAlertHasASummaryADescriptionAndARunbookEntry(t *testing.T) {
	rules, err := LoadRules(rulesPath())
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(t, filepath.Join(testenv.RepoRoot(), "docs", "operations.md"))
	templateLabel := regexp.MustCompile(`\{\{\s*\$labels\.(\w+)\s*\}\}`)
	anyTemplate := regexp.MustCompile(`\{\{[^}]*\}\}`)
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s has no %s", r.Alert, a)
				}
			}
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, sev)
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookPrefix)
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is not a heading of docs/operations.md (%s<anchor>)", r.Alert, r.Annotations["runbook_url"], runbookPrefix)
			}
			_, labels := Names(r.Expr)
			for name, text := range r.Annotations {
				for _, m := range templateLabel.FindAllStringSubmatch(text, -1) {
					if !slices.Contains(labels, m[1]) {
						t.Errorf("%s: %s uses $labels.%s, which the alert's expression does not keep", r.Alert, name, m[1])
					}
				}
				if rest := templateLabel.ReplaceAllString(text, ""); anyTemplate.MatchString(rest) {
					t.Errorf("%s: %s has a template other than {{ $labels.<label> }}: %s", r.Alert, name, anyTemplate.FindString(rest))
				}
			}
		}
	}
	if alerts < 8 {
		t.Errorf("%d alerts, want the 8 kinds the runbook covers or more", alerts)
	}
}

// The hand-written cases: two leaders, client-go's series, endpoint
// writes, RBAC that stays wrong.
func TestTheHandWrittenRuleCasesPass(t *testing.T) {
	promtool, err := Promtool()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RunPromtool(promtool, "test", "rules", filepath.Join(Dir(testenv.RepoRoot()), "k8s-lease-rules.test.yaml")); err != nil {
		t.Fatal(err)
	}
}

// headingAnchors are the anchors GitHub gives the headings of a Markdown
// file.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	fence := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")] = true
	}
	return out
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		expr            string
		metrics, labels []string
	}{
		{`max by (name) (leader_election_master_status and k8s_lease_candidate) == 0`,
			[]string{"k8s_lease_candidate", "leader_election_master_status"}, []string{"name"}},
		{`histogram_quantile(0.99, sum by (name, le) (rate(k8s_lease_renewal_duration_seconds_bucket{name=~"ns/.+"}[5m]))) > 0.5`,
			[]string{"k8s_lease_renewal_duration_seconds_bucket"}, []string{"le", "name"}},
		{`sum(increase(x_total{code=~"5..|error", verb!="get"}[2m] offset 5m)) without (pod) / on (job) group_left y`,
			[]string{"x_total", "y"}, []string{"code", "job", "pod", "verb"}},
		{`absent(k8s_lease_candidate)`, []string{"k8s_lease_candidate"}, nil},
	} {
		m, l := Names(tc.expr)
		if !slices.Equal(m, tc.metrics) || !slices.Equal(l, tc.labels) && !(len(l) == 0 && len(tc.labels) == 0) {
			t.Errorf("Names(%s) = %v, %v; want %v, %v", tc.expr, m, l, tc.metrics, tc.labels)
		}
	}
}

// A recording keeps each scrape's values, marks a target's series stale
// at its first failed scrape (and a series its target stopped
// exporting), and stores histograms as Prometheus does.
func TestARecordingIsWhatPrometheusWouldHaveStored(t *testing.T) {
	r := NewRecording()
	target := map[string]string{"pod": "p-0"}
	scrapes := []string{
		"# TYPE g gauge\ng{name=\"a\"} 1\ng{name=\"b\"} 2\n",
		"# TYPE g gauge\ng{name=\"a\"} 3\n",
		"",
		"# TYPE g gauge\ng{name=\"a\"} 4\n# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1.5\nh_count 2\n",
	}
	for i, text := range scrapes {
		var err error
		if text == "" {
			err = os.ErrDeadlineExceeded
		}
		if err := r.Add(i, "p-0", target, strings.NewReader(text), err); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for _, s := range r.InputSeries() {
		got[s.Series] = s.Values
	}
	want := map[string]string{
		`g{name="a",pod="p-0"}`:         "1 3 stale 4",
		`g{name="b",pod="p-0"}`:         "2 stale _ _",
		`h_bucket{le="0.5",pod="p-0"}`:  "_ _ _ 1",
		`h_bucket{le="+Inf",pod="p-0"}`: "_ _ _ 2",
		`h_sum{pod="p-0"}`:              "_ _ _ 1.5",
		`h_count{pod="p-0"}`:            "_ _ _ 2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("input series:\n%v\nwant\n%v", got, want)
	}
	if !r.Has("h_bucket") || r.Has("h") || !r.HasLabel("le") || !r.HasLabel("pod") {
		t.Errorf("names and labels seen: h_bucket %v, h %v, le %v, pod %v", r.Has("h_bucket"), r.Has("h"), r.HasLabel("le"), r.HasLabel("pod"))
	}
	if err := r.Add(4, "p-0", target, strings.NewReader("not metrics {"), nil); err == nil {
		t.Error("a scrape that does not parse was accepted")
	}
}

// The scrape job for a Prometheus without the operator loads the rules and
// labels the series as the rules and the dashboard group them (namespace,
// pod), copying no Pod label (promtool of Debian cannot check a
// kubernetes_sd job: this reads it).
func TestTheScrapeConfigLabelsSeriesAsTheRulesExpect(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(Dir(testenv.RepoRoot()), "scrape-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			RelabelConfigs []struct {
				Action      string `json:"action"`
				TargetLabel string `json:"target_label"`
			} `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("scrape-config.yaml: %v", err)
	}
	if !slices.Contains(cfg.RuleFiles, "k8s-lease-rules.yaml") {
		t.Errorf("rule_files %v lacks k8s-lease-rules.yaml", cfg.RuleFiles)
	}
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("%d scrape jobs, want 1", len(cfg.ScrapeConfigs))
	}
	targets := map[string]bool{}
	for _, r := range cfg.ScrapeConfigs[0].RelabelConfigs {
		targets[r.TargetLabel] = true
		if r.Action == "labelmap" {
			t.Error("a labelmap copies Pod labels (the leader label) onto every series")
		}
	}
	for _, l := range []string{"namespace", "pod"} {
		if !targets[l] {
			t.Errorf("no relabelling sets %s, which the rules group by", l)
		}
	}
}
