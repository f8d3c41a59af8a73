// Command envtest-server starts a real kube-apiserver and etcd (through
// controller-runtime's envtest) for tests written in any language.
//
// It prints the path of a kubeconfig for the API server as the only line on
// stdout once the server answers, logs to stderr, and runs until SIGTERM or
// SIGINT. It also stops by itself when its parent process dies (it watches
// for being re-parented), so a crashed test never leaves a control plane
// running. On stop it removes the kubeconfig and every temporary directory it
// made, and exits 0.
//
// The binaries come from KUBEBUILDER_ASSETS, filled by `make envtest-assets`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// exitSetupFailed is the exit code when the control plane could not start.
const exitSetupFailed = 2

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	kubeconfigPath string
	namespaces     stringList
	apiserverArgs  stringList // KEY=VALUE, set on kube-apiserver's command line
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("envtest-server", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfigPath, "kubeconfig", "", "where to write the kubeconfig (default: a new temporary file)")
	fs.Var(&o.namespaces, "namespace", "namespace to create before the kubeconfig path is printed (repeatable)")
	fs.Var(&o.apiserverArgs, "apiserver-arg", "KEY=VALUE: set kube-apiserver's --KEY=VALUE (repeatable), e.g. feature-gates=CoordinatedLeaderElection=true")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, a := range o.apiserverArgs {
		if k, _, ok := strings.Cut(a, "="); !ok || k == "" || strings.HasPrefix(k, "-") {
			return o, fmt.Errorf("-apiserver-arg %q: want KEY=VALUE (without the leading --)", a)
		}
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return o, nil
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "envtest-server:", err)
		os.Exit(exitSetupFailed)
	}
	os.Exit(run(opts))
}

func run(opts options) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "envtest-server: "+format+"\n", args...)
	}
	stopSignals := make(chan os.Signal, 1)
	signal.Notify(stopSignals, syscall.SIGTERM, syscall.SIGINT)

	started := time.Now()
	srv, err := startServer(opts, logf)
	if err != nil {
		logf("cannot start: %v", err)
		return exitSetupFailed
	}
	logf("API server %s ready in %s; kubeconfig %s", srv.host(), time.Since(started).Round(time.Millisecond), srv.kubeconfigPath)
	fmt.Println(srv.kubeconfigPath)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orphaned := watchParent(ctx, 200*time.Millisecond)

	select {
	case sig := <-stopSignals:
		logf("received %v, stopping", sig)
	case <-orphaned:
		logf("parent process died, stopping")
	}
	if err := srv.stop(); err != nil {
		logf("stop: %v", err)
		return 1
	}
	logf("stopped")
	return 0
}
