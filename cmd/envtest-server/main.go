// Command envtest-server starts a real kube-apiserver and etcd (through
// controller-runtime's envtest) for tests written in any language.
//
// With -etcd-members N or -apiservers M above 1 it starts an HA bed
// instead: N etcd processes as one cluster and M kube-apiservers on it
// (each with its own watch cache), behind a TCP load balancer of ours,
// round-robin per connection and without health checks. Each API server
// reaches each member through a link of ours that can be cut. The
// kubeconfig's current context points at the load balancer, and a context
// per API server (envtest-apiserver-<k>) straight at it; the topology
// (ports, member names, the control endpoint that cuts links and steers the
// load balancer: see internal/topology) is written next to the kubeconfig,
// at <kubeconfig>.topology.json, before the path is printed.
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

// The largest beds: etcd's own limit of members, and as many API servers
// as a test machine can carry.
const (
	maxEtcdMembers = 7
	maxAPIServers  = 9
)

type options struct {
	kubeconfigPath string
	namespaces     stringList
	apiserverArgs  stringList // KEY=VALUE, set on kube-apiserver's command line
	etcdArgs       stringList // KEY=VALUE, set on etcd's command line
	etcdMembers    int
	apiservers     int
}

// ha is whether the options ask for more than envtest's one etcd and one
// API server.
func (o options) ha() bool { return o.etcdMembers != 1 || o.apiservers != 1 }

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("envtest-server", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfigPath, "kubeconfig", "", "where to write the kubeconfig (default: a new temporary file)")
	fs.Var(&o.namespaces, "namespace", "namespace to create before the kubeconfig path is printed (repeatable)")
	fs.Var(&o.apiserverArgs, "apiserver-arg", "KEY=VALUE: set kube-apiserver's --KEY=VALUE (repeatable), e.g. feature-gates=CoordinatedLeaderElection=true")
	fs.Var(&o.etcdArgs, "etcd-arg", "KEY=VALUE: set etcd's --KEY=VALUE (repeatable, every member), e.g. election-timeout=3000")
	fs.IntVar(&o.etcdMembers, "etcd-members", 1, fmt.Sprintf("etcd members, one cluster (1 to %d)", maxEtcdMembers))
	fs.IntVar(&o.apiservers, "apiservers", 1, fmt.Sprintf("kube-apiservers behind one load balancer (1 to %d)", maxAPIServers))
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, f := range []struct {
		name string
		args stringList
	}{{"apiserver-arg", o.apiserverArgs}, {"etcd-arg", o.etcdArgs}} {
		for _, a := range f.args {
			if k, _, ok := strings.Cut(a, "="); !ok || k == "" || strings.HasPrefix(k, "-") {
				return o, fmt.Errorf("-%s %q: want KEY=VALUE (without the leading --)", f.name, a)
			}
		}
	}
	if o.etcdMembers < 1 || o.etcdMembers > maxEtcdMembers {
		return o, fmt.Errorf("-etcd-members %d: want 1 to %d", o.etcdMembers, maxEtcdMembers)
	}
	if o.apiservers < 1 || o.apiservers > maxAPIServers {
		return o, fmt.Errorf("-apiservers %d: want 1 to %d", o.apiservers, maxAPIServers)
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
	stopping := time.Now()
	if err := srv.stop(); err != nil {
		logf("stop: %v", err)
		return 1
	}
	logf("stopped in %s", time.Since(stopping).Round(time.Millisecond))
	return 0
}
