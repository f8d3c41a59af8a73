// Command clientgoscale is the plain client-go side of lease-bench's scale
// rows: N client-go LeaderElectors on Leases as leader in one process, a
// program that links client-go's leader election and nothing of ours (the
// k8s-lease side is tests/bench/scale_child.c on the shared library). It
// waits until all N lead (at most 120 s) and 30 s more, as the C child
// does, measures for -window and prints
// one JSON line with the fields of the C child's.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

type result struct {
	Elections   int     `json:"elections"`
	ElectedAll  bool    `json:"elected_all"`
	Losses      int64   `json:"losses"`
	RSSMB       float64 `json:"rss_mb"`
	Goroutines  int     `json:"goroutines"`
	CPUPercent  float64 `json:"cpu_percent"`
	RequestsSec float64 `json:"requests_per_sec"`
}

type counting struct {
	next     http.RoundTripper
	requests *atomic.Int64
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	return c.next.RoundTrip(r)
}

func main() {
	ns := flag.String("namespace", "", "namespace of the Leases")
	prefix := flag.String("prefix", "", "Lease names are PREFIX-0 .. PREFIX-(N-1)")
	n := flag.Int("n", 0, "elections")
	window := flag.Duration("window", time.Minute, "measuring window")
	flag.Parse()
	if err := run(*ns, *prefix, *n, *window); err != nil {
		fmt.Fprintln(os.Stderr, "clientgoscale:", err)
		os.Exit(1)
	}
}

func run(ns, prefix string, n int, window time.Duration) error {
	if ns == "" || prefix == "" || n <= 0 {
		return fmt.Errorf("-namespace, -prefix and a positive -n are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	var requests atomic.Int64
	cfg.QPS = -1 // no client-side throttling, as for the library
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counting{rt, &requests} })
	elected := make(chan struct{}, n)
	var losses atomic.Int64
	cancel, err := start(cfg, ns, prefix, n, elected, &losses)
	if err != nil {
		return err
	}
	res := result{Elections: n, ElectedAll: true}
	deadline := time.After(120 * time.Second)
	for i := 0; i < n && res.ElectedAll; i++ {
		select {
		case <-elected:
		case <-deadline:
			res.ElectedAll = false
		}
	}
	time.Sleep(30 * time.Second)
	reqs, cpu, begin := requests.Load(), cpuSeconds(), time.Now()
	time.Sleep(window)
	elapsed := time.Since(begin).Seconds()
	res.RequestsSec = float64(requests.Load()-reqs) / elapsed
	res.CPUPercent = 100 * (cpuSeconds() - cpu) / elapsed
	res.RSSMB = rssMB()
	res.Goroutines = runtime.NumGoroutine()
	res.Losses = losses.Load()
	cancel()
	return json.NewEncoder(os.Stdout).Encode(res)
}

func start(cfg *rest.Config, ns, prefix string, n int, elected chan<- struct{}, losses *atomic.Int64) (context.CancelFunc, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	for i := 0; i < n; i++ {
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, fmt.Sprintf("%s-%d", prefix, i),
			nil, client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "scale"})
		if err != nil {
			cancel()
			return nil, err
		}
		var leading atomic.Bool
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { leading.Store(true); elected <- struct{}{} },
				OnStoppedLeading: func() {
					if leading.Load() && ctx.Err() == nil {
						losses.Add(1)
					}
				},
			},
		})
		if err != nil {
			cancel()
			return nil, err
		}
		go le.Run(ctx)
	}
	return cancel, nil
}

func rssMB() float64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds is this process's user+system CPU time.
func cpuSeconds() float64 {
	data, _ := os.ReadFile("/proc/self/stat")
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
