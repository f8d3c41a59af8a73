package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// scaleResult is what a scale child reports for N elections as leader.
type scaleResult struct {
	Elections  int     `json:"elections"`
	ElectedAll bool    `json:"elected_all"`
	Losses     int64   `json:"losses"`
	RSSMB      float64 `json:"rss_mb"`
	// RSSAfterScrapeMB: ours only, after the metrics scrape that reads
	// the request count (client-go's side has none).
	RSSAfterScrapeMB float64 `json:"rss_after_scrape_mb,omitempty"`
	Goroutines       int     `json:"goroutines"`
	CPUPercent       float64 `json:"cpu_percent"`
	RequestsSec      float64 `json:"requests_per_sec"`
}

// scalePrograms are the two children, each a process that holds only its
// own implementation, as its users run it: ours is a C program on the
// shared library (tests/bench/scale_child.c), client-go's a Go program
// that links client-go's leader election and nothing of ours
// (cmd/lease-bench/clientgoscale). Timings 15/10/2 s, client-side rate
// limits off, one connection per process for both.
type scalePrograms struct {
	ours, clientGo string
}

// runScale runs the child of one implementation for n elections.
func (p scalePrograms) runScale(kubeconfig string, which impl, n int, window time.Duration) (scaleResult, error) {
	prefix := fmt.Sprintf("scale-%s-%d-%d", strings.ReplaceAll(string(which), "-", ""), n, time.Now().UnixNano()%1e6)
	var cmd *exec.Cmd
	if which == ours {
		cmd = exec.Command(p.ours, benchNamespace, prefix, strconv.Itoa(n), strconv.Itoa(int(window.Seconds())))
	} else {
		cmd = exec.Command(p.clientGo, "-namespace", benchNamespace, "-prefix", prefix, "-n", strconv.Itoa(n), "-window", window.String())
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return scaleResult{}, fmt.Errorf("scale child %s/%d (%s): %w", which, n, cmd.Path, err)
	}
	var res scaleResult
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return scaleResult{}, fmt.Errorf("scale child %s/%d: %w in %q", which, n, err, out)
	}
	return res, nil
}

// loadCost is what loading the shared library costs a host
// (tests/bench/load_time.c): dlopen and K8sLeaseInit, in ms, and the RSS
// after them.
func loadCost(program, library, kubeconfig string, runs int) (dlopenMs, initMs, rssMB []float64, err error) {
	for i := 0; i < runs; i++ {
		cmd := exec.Command(program, library)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s %s: %w", program, library, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %q: %w", program, line, err)
			}
			switch f[0] {
			case "dlopen_ms":
				dlopenMs = append(dlopenMs, v)
			case "init_ms":
				initMs = append(initMs, v)
			case "rss_mb":
				rssMB = append(rssMB, v)
			}
		}
	}
	return dlopenMs, initMs, rssMB, nil
}
