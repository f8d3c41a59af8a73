package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/k8s-lease/k8s-lease/lease"
)

// scaleResult is what a child process reports for N elections as leader.
type scaleResult struct {
	Elections   int     `json:"elections"`
	ElectedAll  bool    `json:"elected_all"`
	Losses      int64   `json:"losses"`
	RSSMB       float64 `json:"rss_mb"`
	Goroutines  int     `json:"goroutines"`
	CPUPercent  float64 `json:"cpu_percent"`
	RequestsSec float64 `json:"requests_per_sec"`
}

// runScaleChild runs n elections as leader in this process (one shared
// client, client-side rate limit off for both implementations) and prints
// a scaleResult after window.
func runScaleChild(which impl, n int, window time.Duration) error {
	cfg, err := kubeconfigFromEnv()
	if err != nil {
		return err
	}
	c := newConn(cfg)
	t := lease.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	prefix := fmt.Sprintf("scale-%s-%d-%d", strings.ReplaceAll(string(which), "-", ""), n, time.Now().UnixNano()%1e6)
	var losses atomic.Int64
	elected := make(chan struct{}, n)
	var stop func()
	if which == ours {
		stop, err = scaleOurs(c, prefix, n, t, elected, &losses)
	} else {
		stop, err = scaleClientGo(c, prefix, n, t, elected, &losses)
	}
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	res := scaleResult{Elections: n, ElectedAll: true}
	deadline := time.After(120 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-elected:
		case <-deadline:
			res.ElectedAll = false
			i = n
		}
	}
	reqs, cpu := c.requests.Load(), cpuSeconds()
	time.Sleep(window)
	res.RequestsSec = float64(c.requests.Load()-reqs) / window.Seconds()
	res.CPUPercent = 100 * (cpuSeconds() - cpu) / window.Seconds()
	res.RSSMB = rssMB()
	res.Goroutines = runtime.NumGoroutine()
	stop() // counts, for k8s-lease, the elections that ended in the window
	stopped = true
	res.Losses = losses.Load()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// scaleOurs starts n elections; one goroutine (not one per election, which
// would weigh on the measured memory) reports elections, and losses are
// counted from the elections that ended.
func scaleOurs(c *conn, prefix string, n int, t lease.Timing, elected chan<- struct{}, losses *atomic.Int64) (func(), error) {
	client, err := lease.NewClient(c.cfg)
	if err != nil {
		return nil, err
	}
	m := lease.NewManager(nil)
	m.SetClient(client)
	var es []*lease.Election
	for i := 0; i < n; i++ {
		e, err := m.RunElection(benchNamespace, fmt.Sprintf("%s-%d", prefix, i), "scale", t)
		if err != nil {
			return nil, err
		}
		es = append(es, e)
	}
	done := make(chan struct{})
	go func() {
		reported := make([]bool, n)
		for left := n; ; time.Sleep(10 * time.Millisecond) {
			for i, e := range es {
				if leader, _, _ := e.IsLeader(); leader && !reported[i] {
					reported[i] = true
					left--
					elected <- struct{}{}
				}
			}
			select {
			case <-done:
				return
			default:
			}
			if left == 0 {
				<-done
				return
			}
		}
	}()
	return func() {
		close(done)
		for _, e := range es {
			if e.Ended() {
				losses.Add(1)
			}
		}
		_ = m.Shutdown(30 * time.Second)
	}, nil
}

func scaleClientGo(c *conn, prefix string, n int, t lease.Timing, elected chan<- struct{}, losses *atomic.Int64) (func(), error) {
	client, err := kubernetes.NewForConfig(c.cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	for i := 0; i < n; i++ {
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, benchNamespace, fmt.Sprintf("%s-%d", prefix, i),
			nil, client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "scale"})
		if err != nil {
			cancel()
			return nil, err
		}
		var leading atomic.Bool
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: t.LeaseDuration, RenewDeadline: t.RenewDeadline, RetryPeriod: t.RetryPeriod,
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

// runScale runs a child process of this binary for one (impl, n).
func runScale(kubeconfig string, which impl, n int, window time.Duration) (scaleResult, error) {
	cmd := exec.Command(os.Args[0], "-child-scale", strconv.Itoa(n), "-child-impl", string(which), "-window", window.String())
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return scaleResult{}, fmt.Errorf("scale child %s/%d: %w", which, n, err)
	}
	var res scaleResult
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return res, json.Unmarshal([]byte(lines[len(lines)-1]), &res)
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
