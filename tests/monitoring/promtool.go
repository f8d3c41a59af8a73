package monitoring

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// TestFile is a `promtool test rules` file.
type TestFile struct {
	RuleFiles          []string    `json:"rule_files"`
	EvaluationInterval string      `json:"evaluation_interval"`
	Tests              []TestGroup `json:"tests"`
}

// TestGroup is one test of a TestFile: series and what to expect of them.
type TestGroup struct {
	Name           string        `json:"name"`
	Interval       string        `json:"interval"`
	InputSeries    []InputSeries `json:"input_series"`
	PromQLExprTest []ExprTest    `json:"promql_expr_test,omitempty"`
}

// ExprTest expects the samples of an expression at a time.
type ExprTest struct {
	Expr     string `json:"expr"`
	EvalTime string `json:"eval_time"`
	// ExpSamples: empty (not nil) expects no sample.
	ExpSamples []ExpSample `json:"exp_samples"`
}

// ExpSample is one expected sample.
type ExpSample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

// Promtool is the path of promtool, or an error that says how to get it.
func Promtool() (string, error) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		return "", fmt.Errorf("promtool is not on PATH: install Debian's prometheus package (bash hack/ensure-deps.sh does, as root): %w", err)
	}
	return path, nil
}

// RunRuleTests writes f to dir/name and runs `promtool test rules` on it,
// returning promtool's output and an error if a test failed.
func RunRuleTests(dir, name string, f TestFile) (string, error) {
	promtool, err := Promtool()
	if err != nil {
		return "", err
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", err
	}
	return RunPromtool(promtool, "test", "rules", path)
}

// RunPromtool runs promtool with args: an error unless it exits 0 and
// says SUCCESS.
func RunPromtool(promtool string, args ...string) (string, error) {
	out, err := exec.Command(promtool, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		return string(out), fmt.Errorf("promtool %s said no SUCCESS:\n%s", strings.Join(args, " "), out)
	}
	return string(out), nil
}

// Seconds writes a duration of promtool's time, n seconds.
func Seconds(n int) string { return fmt.Sprintf("%ds", n) }
