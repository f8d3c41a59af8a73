// Command lease-demo shows k8s-lease at work: it starts a real API server
// (envtest-server), runs three replicas of examples/ha_server, prints a live
// timeline of who leads and why, SIGKILLs the leader (fail-over), SIGTERMs
// the next one (graceful hand-off), prints the measured times, and cleans up
// everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

const (
	namespace = "demo"
	leaseName = "metadata-master"
	replicas  = 3
)

type config struct {
	haServer     string
	picture      string // where the run's SVG timeline goes
	leaseSeconds int
	renewMs      int
	retryMs      int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.haServer, "ha-server", "build/demo/cmake/examples/ha_server", "the ha_server example binary")
	envtestServer := flag.String("envtest-server", "", "the envtest-server binary (default: $ENVTEST_SERVER, else the one beside this program, else build/bin/envtest-server)")
	flag.StringVar(&cfg.picture, "timeline-svg", "", "where to write the run's SVG timeline (default: timeline.svg beside this program's directory)")
	flag.IntVar(&cfg.leaseSeconds, "lease-duration", 5, "lease duration, seconds")
	flag.IntVar(&cfg.renewMs, "renew-deadline-ms", 4000, "renew deadline, milliseconds")
	flag.IntVar(&cfg.retryMs, "retry-period-ms", 1000, "retry period, milliseconds")
	flag.Parse()
	if *envtestServer == "" && os.Getenv("ENVTEST_SERVER") == "" {
		*envtestServer = besideSelf("envtest-server")
	}
	if *envtestServer != "" {
		os.Setenv("ENVTEST_SERVER", *envtestServer)
	}
	if cfg.picture == "" {
		cfg.picture = filepath.Join(filepath.Dir(filepath.Dir(os.Args[0])), "timeline.svg")
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "lease-demo:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	if _, err := os.Stat(cfg.haServer); err != nil {
		return fmt.Errorf("%s not built (run `make demo`): %w", cfg.haServer, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	say("starting a real kube-apiserver + etcd (envtest-server)...")
	srv, err := testenv.Start(nil, "--namespace", namespace)
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.Stop(30 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "lease-demo: stop envtest-server:", err)
		}
	}()
	client, err := srv.Client()
	if err != nil {
		return err
	}
	if err := createPods(ctx, client); err != nil {
		return err
	}
	// Stopped before the API server (defers run last-first): an open watch
	// would hold up its graceful shutdown.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	renewals := watchRenewals(watchCtx, client)

	tl := newTimeline()
	say(fmt.Sprintf("lease %s/%s, timings %d s / %d ms / %d ms; replicas label their Pod %s=true while leading",
		namespace, leaseName, cfg.leaseSeconds, cfg.renewMs, cfg.retryMs, leaderLabel))
	group, err := startReplicas(cfg, srv.Kubeconfig, tl)
	if err != nil {
		return err
	}
	defer group.stopAll()
	gaps, err := scenario(ctx, cfg, group, tl, renewals, client)
	if err != nil {
		return err
	}
	if err := writePicture(cfg.picture, tl, gaps, cfg); err != nil {
		return err
	}
	say("cleaning up (replicas, then the API server)")
	return nil
}

// writePicture writes the run's timeline to path and says where.
func writePicture(path string, tl *timeline, gaps []gap, cfg config) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("the timeline picture: %w", err)
	}
	title := fmt.Sprintf("k8s-lease demo: %d replicas of ha_server, lease %d s / renew %d ms / retry %d ms", replicas, cfg.leaseSeconds, cfg.renewMs, cfg.retryMs)
	if err := tl.picture(f, gaps, title); err != nil {
		f.Close()
		return fmt.Errorf("the timeline picture: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("the timeline picture: %w", err)
	}
	fmt.Printf("  timeline picture: %s\n", path)
	return nil
}

func say(s string) { fmt.Println("==> " + s) }

// besideSelf is the program name in this program's directory, or "" if
// there is none there: make demo builds envtest-server beside lease-demo
// (build/demo/bin), make test its own -race pair (build/bin).
func besideSelf(name string) string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(self), name)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}
