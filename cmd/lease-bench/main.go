// Command lease-bench measures k8s-lease side by side with plain client-go
// leader election, in one run, against a real API server (envtest-server,
// or $KUBECONFIG with -use-kubeconfig). Each candidate has its own client
// connection; the two implementations alternate. It prints progress to
// stderr, a markdown table as its last lines, writes the samples as JSON,
// and updates the benchmarks page (docs/benchmarks.md, see page.go) with
// the tables of the sections it ran.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
	"github.com/k8s-lease/k8s-lease/lease"
)

type options struct {
	quick         bool
	jsonPath      string
	abiProgram    string
	candidate     string
	library       string
	loadTime      string
	scale         scalePrograms
	useKubeconfig bool
	only          string
	page          string
	quickPage     string
	sections      map[string]bool
}

// sectionNames are the parts of the benchmark, all run by default.
var sectionNames = []string{"elected", "handoff", "handoff-to", "routing", "failover", "ha", "rolling", "steady", "abi", "user", "scale"}

var (
	fast = lease.Timing{LeaseDuration: 5 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}
	slow = lease.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
)

func timingName(t lease.Timing) string {
	return fmt.Sprintf("%d/%d/%d s", int(t.LeaseDuration.Seconds()), int(t.RenewDeadline.Seconds()), int(t.RetryPeriod.Seconds()))
}

func main() {
	var o options
	flag.BoolVar(&o.quick, "quick", false, "few samples and short windows (a smoke run, not a measurement)")
	flag.StringVar(&o.jsonPath, "json", "build/bench.json", "where to write the samples")
	flag.StringVar(&o.abiProgram, "abi-bench", "build/bin/abi-bench", "the C program that measures the ABI")
	flag.StringVar(&o.library, "lib", "build/libk8s_lease_wrapper.so", "the shipped library (its size and load time are reported)")
	flag.StringVar(&o.loadTime, "load-time", "build/bin/load-time", "the C program that times loading the library (tests/bench/load_time.c)")
	flag.StringVar(&o.scale.ours, "scale-child", "build/bin/scale-child", "the C program on the library for the scale rows (tests/bench/scale_child.c)")
	flag.StringVar(&o.scale.clientGo, "clientgo-scale", "build/bin/clientgo-scale", "the client-go program for the scale rows (cmd/lease-bench/clientgoscale)")
	flag.StringVar(&o.candidate, "candidate", "build/bin/lease-candidate", "the C++ replica program (tests/cpp/lease_candidate.cpp) for the user-pattern table")
	flag.StringVar(&o.only, "only", "", "comma-separated sections to run ("+strings.Join(sectionNames, ",")+"); empty: all")
	flag.BoolVar(&o.useKubeconfig, "use-kubeconfig", false, "use $KUBECONFIG instead of starting envtest-server")
	flag.StringVar(&o.page, "page", "docs/benchmarks.md", "the benchmarks page: the tables of the sections run replace theirs (written unless a check failed)")
	flag.StringVar(&o.quickPage, "quick-page", "build/benchmarks-quick.md", "where a -quick run writes the page (-page's, with this run's tables): a smoke run is no measurement")
	flag.Parse()
	o.sections = map[string]bool{}
	for _, name := range sectionNames {
		o.sections[name] = o.only == ""
	}
	for _, name := range strings.Split(o.only, ",") {
		if _, known := o.sections[name]; name != "" && !known {
			fmt.Fprintf(os.Stderr, "lease-bench: -only: unknown section %q (known: %s)\n", name, strings.Join(sectionNames, ","))
			os.Exit(2)
		}
		if name != "" {
			o.sections[name] = true
		}
	}
	lease.SetLogSink(nil) // client-go's klog through our quiet default (warnings and errors only)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "lease-bench:", err)
		os.Exit(1)
	}
}

func kubeconfigFromEnv() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
}

func run(o options) error {
	kubeconfig := os.Getenv("KUBECONFIG")
	if !o.useKubeconfig {
		srv, err := testenv.Start(nil, "--namespace", benchNamespace)
		if err != nil {
			return err
		}
		defer func() { _ = srv.Stop(60 * time.Second) }()
		kubeconfig = srv.Kubeconfig
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}
	_, _ = admin.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renews, err := watchRenewals(ctx, admin)
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, admin: admin, renews: renews}
	started := time.Now()
	if err := b.runAll(o, kubeconfig); err != nil {
		return err
	}
	if data, err := json.MarshalIndent(b.results, "", " "); err == nil {
		_ = os.WriteFile(o.jsonPath, data, 0o644)
	}
	ri := runInfo{date: time.Now().UTC().Format("2006-01-02"), machine: machine(), versions: versions(admin), command: o.command()}
	fmt.Printf("\nk8s-lease vs client-go leader election. %s Bench took %s.\n\n", ri.line(), time.Since(started).Round(time.Second))
	fmt.Print(table(b.results))
	out := o.page
	if o.quick {
		out = o.quickPage
	}
	if len(b.failures) > 0 {
		progress("%s not written: a check failed", out)
		return fmt.Errorf("%d check(s) failed:\n  %s", len(b.failures), strings.Join(b.failures, "\n  "))
	}
	updated, err := writePage(o.page, out, ri, b.results)
	if err != nil {
		return err
	}
	progress("%s: the tables of %s", out, strings.Join(updated, ", "))
	return nil
}

// samples is full, or quick in a -quick run.
func (o options) samples(full, quick int) int {
	if o.quick {
		return quick
	}
	return full
}

// command is how this run was asked for, as make bench runs it.
func (o options) command() string {
	var flags []string
	if o.quick {
		flags = append(flags, "-quick")
	}
	if o.only != "" {
		flags = append(flags, "-only="+o.only)
	}
	if o.useKubeconfig {
		flags = append(flags, "-use-kubeconfig")
	}
	switch len(flags) {
	case 0:
		return "make bench"
	case 1:
		return "make bench BENCH_FLAGS=" + flags[0]
	}
	return "make bench BENCH_FLAGS='" + strings.Join(flags, " ") + "'"
}

// machine: cores, memory (GiB, rounded) and host name.
func machine() string {
	host, _ := os.Hostname()
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, line := range strings.Split(string(data), "\n") {
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				mem = fmt.Sprintf(", %d GiB", (kb+512*1024)/(1024*1024))
				break
			}
		}
	}
	return fmt.Sprintf("%d cores%s (%s)", runtime.NumCPU(), mem, host)
}

// versions: this library's, the client-go linked here, the API server's
// and Go's.
func versions(admin kubernetes.Interface) string {
	clientGoVersion := "?"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "k8s.io/client-go" {
				clientGoVersion = m.Version
			}
		}
	}
	server := "?"
	if v, err := admin.Discovery().ServerVersion(); err == nil {
		server = v.GitVersion
	}
	return fmt.Sprintf("k8s-lease %s, client-go %s, kube-apiserver %s, %s", lease.Version, clientGoVersion, server, runtime.Version())
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lease-bench: "+format+"\n", args...)
}

func (b *bench) runAll(o options, kubeconfig string) error {
	n, nFailFast, nFailSlow := 15, 8, 4
	// The steady window spans two of a standby's watches (2 min each at
	// 15 s leases, see lease.watchLife): a shorter one would show 0 or 1
	// request per standby, not the rate.
	steadyWindow, scaleWindow := 4*time.Minute, 60*time.Second
	scales := []int{1, 100, 1000}
	if o.quick {
		n, nFailFast, nFailSlow = 2, 1, 1
		steadyWindow, scaleWindow = 10*time.Second, 10*time.Second
		scales = []int{1, 100}
	}
	both := []impl{ours, clientGo}

	userWindow, userKills, userTerms := 60*time.Second, 8, 15
	if o.quick {
		userWindow, userKills, userTerms = 15*time.Second, 2, 3
	}
	b.section = "elected"
	nElected := n // not n itself: the hand-off below takes n samples too
	if !o.sections["elected"] {
		nElected = 0
	}
	progress("time to elected on a free lease (n=%d each)", nElected)
	for i := 0; i < nElected; i++ {
		for _, w := range both {
			d, err := b.timeToElected(w, fast)
			if err != nil {
				return err
			}
			b.add("RunElection -> elected, free lease", w, "ms", ms(d))
		}
	}
	b.section = "handoff"
	for _, t := range []lease.Timing{fast, slow} {
		for _, standbys := range []int{1, 5} {
			if !o.sections["handoff"] {
				continue
			}
			progress("graceful hand-off, %s, %d standbys (n=%d each)", timingName(t), standbys, n)
			for i := 0; i < n; i++ {
				for _, w := range both {
					d, err := b.handoff(w, t, standbys)
					if err != nil {
						return err
					}
					b.add(fmt.Sprintf("graceful hand-off, %s, %d standby(s)", timingName(t), standbys), w, "ms", ms(d))
				}
			}
		}
	}
	b.section = "handoff-to"
	if o.sections["handoff-to"] {
		nTo := o.samples(30, 3)
		progress("K8sLeaseHandOff to a campaigning replica, %s, 2 standbys (n=%d, ours only)", timingName(fast), nTo)
		others := 0
		for i := 0; i < nTo; i++ {
			d, returned, seen, err := b.handOffTo(i)
			if err != nil {
				return err
			}
			others += seen
			b.add(fmt.Sprintf("K8sLeaseHandOff to a campaigning replica -> it leads, %s, 2 standbys", timingName(fast)), ours, "ms", ms(d))
			b.add("K8sLeaseHandOff call -> it returns (the old leader saw the target lead)", ours, "ms", ms(returned))
		}
		b.add("others taking the lease during a hand-off (all hand-offs)", ours, "count", float64(others))
		if others != 0 {
			b.failures = append(b.failures, fmt.Sprintf("handoff-to: %d record(s) of another holder than the target between a hand-off and the target leading", others))
		}
	}
	b.section = "routing"
	if o.sections["routing"] {
		nRoute := o.samples(30, 3)
		progress("leader-only routing, %s: 3 replicas on 3 Leases, %d rounds of a hand-off with an endpoint, one without, a release (ours only)", timingName(fast), nRoute)
		if err := b.routing(nRoute); err != nil {
			return err
		}
	}
	b.section = "failover"
	for _, tc := range []struct {
		t lease.Timing
		n int
	}{{fast, nFailFast}, {slow, nFailSlow}} {
		if !o.sections["failover"] {
			continue
		}
		progress("crash fail-over, %s (n=%d each)", timingName(tc.t), tc.n)
		for i := 0; i < tc.n; i++ {
			for _, w := range both {
				d, err := b.failover(w, tc.t, 1)
				if err != nil {
					return err
				}
				b.add(fmt.Sprintf("crash fail-over overshoot past renewTime + lease, %s", timingName(tc.t)), w, "ms", ms(d))
			}
		}
	}
	b.section = "ha"
	if o.sections["ha"] {
		nHA, nHAFail := o.samples(15, 2), o.samples(8, 1)
		progress("the HA bed beside this one: graceful hand-off (n=%d) and crash fail-over (n=%d), %s, 1 standby, each implementation on each bed", nHA, nHAFail, timingName(fast))
		if err := b.haRows(nHA, nHAFail); err != nil {
			return err
		}
	}
	b.section = "rolling"
	if o.sections["rolling"] {
		runs := o.samples(3, 1)
		progress("rolling update of 3 replicas, 3 updates per run, %s (n=%d runs each of ours, ours with the newest-version policy, client-go)", timingName(fast), runs)
		if err := b.rolling(runs); err != nil {
			return err
		}
	}
	b.section = "steady"
	for _, w := range both {
		if !o.sections["steady"] {
			continue
		}
		progress("steady-state requests/s at %s over %v, %s", timingName(slow), steadyWindow, w)
		leader, standbys, err := b.steadyRequests(w, slow, steadyWindow)
		if err != nil {
			return err
		}
		b.add("leader requests/s, "+timingName(slow), w, "req/s", leader)
		for _, r := range standbys {
			b.add("standby requests/s (each of 5), "+timingName(slow), w, "req/s", r)
		}
	}
	b.section = "abi"
	if !o.sections["abi"] {
	} else if costs, err := abiCosts(o.abiProgram, kubeconfig); err != nil {
		progress("ABI costs skipped: %v", err)
	} else {
		b.add("IsLeader from C", ours, "µs/call", costs["isleader_ns"]/1000)
		b.add("GetHolder from C, lease of an election of this process", ours, "µs/call", costs["getholder_observed_ns"]/1000)
		b.add("GetHolder from C, first call on a lease (a list, then a watch)", ours, "µs/call", costs["getholder_first_ns"]/1000)
		b.add("GetHolder from C, lease asked about before (no election or watch)", ours, "µs/call", costs["getholder_asked_before_ns"]/1000)
	}
	b.section = "user"
	if o.sections["user"] {
		progress("user pattern: 3 replicas, 5/3/1 s, requests over %v, %d SIGKILLs, %d SIGTERMs", userWindow, userKills, userTerms)
		if err := b.userPattern(o.candidate, kubeconfig, userWindow, userKills, userTerms); err != nil {
			return err
		}
	}
	b.section = "scale"
	for _, s := range scales {
		if !o.sections["scale"] {
			continue
		}
		for _, w := range both {
			progress("%d elections as leader in one process, %s, window %v", s, w, scaleWindow)
			res, err := o.scale.runScale(kubeconfig, w, s, scaleWindow)
			if err != nil {
				return err
			}
			label := fmt.Sprintf("%d election(s) as leader", s)
			b.add(label+": RSS", w, "MB", res.RSSMB)
			if res.RSSAfterScrapeMB > 0 {
				b.add(label+": RSS after a metrics scrape", w, "MB", res.RSSAfterScrapeMB)
			}
			b.add(label+": goroutines", w, "count", float64(res.Goroutines))
			b.add(label+": CPU", w, "% of a core", res.CPUPercent)
			b.add(label+": requests/s", w, "req/s", res.RequestsSec)
			lost := float64(res.Losses)
			if !res.ElectedAll {
				lost = -1 // not all elected within 120 s
			}
			b.add(label+": leaderships lost in window", w, "count", lost)
		}
	}
	if !o.sections["scale"] {
		return nil
	}
	info, err := os.Stat(o.library)
	if err != nil {
		return err
	}
	b.add("shipped .so size (stripped)", ours, "MB", float64(info.Size())/1e6)
	progress("loading %s: dlopen + K8sLeaseInit, 15 runs", o.library)
	dlopenMs, initMs, rss, err := loadCost(o.loadTime, o.library, kubeconfig, 15)
	if err != nil {
		return err
	}
	for i := range dlopenMs {
		b.add("load: dlopen of the .so", ours, "ms", dlopenMs[i])
		b.add("load: K8sLeaseInit", ours, "ms", initMs[i])
		b.add("load: RSS after dlopen + Init", ours, "MB", rss[i])
	}
	return nil
}
