// Command clientgocandidate is the fault suite's plain client-go candidate:
// a process that links client-go's leader election (tools/leaderelection,
// a LeaseLock) and nothing of ours, campaigns on one Lease as Kubernetes'
// own components do, and logs its history for internal/history's checker
// in lease_candidate's format:
//
//	elected   OnStartedLeading ran and a read of the Lease showed this
//	          process holding it (token = leaseTransitions, which client-go
//	          raises when the holder changes, as ours does)
//	lost      OnStoppedLeading ran after a term (client-go cancels the
//	          leading context before it calls OnStoppedLeading, so nothing
//	          gated on that context acts after this line)
//	released  SIGTERM while leading, logged before the context is cancelled
//	          and client-go releases the Lease (ReleaseOnCancel)
//	exit      it is about to exit
//
// As kube-controller-manager does, its identity is --identity plus a
// random suffix (client-go keeps leaseTransitions when a process finds its
// own identity on the Lease, so a restarted process under the same name
// would reuse the token), and it exits when it loses a term, with status 3,
// for whoever runs it to start it again. SIGTERM exits 0.
//
// usage: clientgocandidate --namespace NS --lease NAME --identity ID --log FILE
//
//	[--timing LEASE_MS,RENEW_MS,RETRY_MS]   (KUBECONFIG names the cluster)
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// exitLost is the status after a lost term.
const exitLost = 3

func main() {
	ns := flag.String("namespace", "", "namespace of the Lease")
	name := flag.String("lease", "", "name of the Lease")
	id := flag.String("identity", "", "identity (a random suffix is added)")
	logPath := flag.String("log", "", "the history log to append to")
	timing := flag.String("timing", "4000,3000,500", "LEASE_MS,RENEW_MS,RETRY_MS")
	flag.Parse()
	code, err := run(*ns, *name, *id, *logPath, *timing)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientgocandidate:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// parseTiming reads LEASE_MS,RENEW_MS,RETRY_MS.
func parseTiming(s string) (lease, renew, retry time.Duration, err error) {
	f := strings.Split(s, ",")
	if len(f) != 3 {
		return 0, 0, 0, fmt.Errorf("--timing %q: want LEASE_MS,RENEW_MS,RETRY_MS", s)
	}
	var d [3]time.Duration
	for i, v := range f {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, 0, 0, fmt.Errorf("--timing %q: %q is not a positive number of milliseconds", s, v)
		}
		d[i] = time.Duration(n) * time.Millisecond
	}
	return d[0], d[1], d[2], nil
}

// candidate is one process's state, shared by client-go's callbacks and
// the SIGTERM handler.
type candidate struct {
	log, identity string
	pid           int
	mu            sync.Mutex
	token         int64 // the open term's (0: none logged)
	released      bool  // SIGTERM came
	lost          bool  // a term ended by client-go
}

func (c *candidate) append(kind string, token int64, detail string) {
	if err := history.Append(c.log, history.Event{At: history.Now(), PID: c.pid, Kind: kind, Token: token, Detail: detail}); err != nil {
		fmt.Fprintln(os.Stderr, "clientgocandidate: history log:", err)
		os.Exit(1)
	}
}

func run(ns, name, id, logPath, timing string) (int, error) {
	switch {
	case ns == "" || name == "" || id == "" || logPath == "":
		return 0, errors.New("--namespace, --lease, --identity and --log are required")
	}
	leaseDuration, renewDeadline, retryPeriod, err := parseTiming(timing)
	if err != nil {
		return 0, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return 0, fmt.Errorf("KUBECONFIG: %w", err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	c := &candidate{log: logPath, identity: id + "_" + hex.EncodeToString(suffix), pid: os.Getpid()}
	// One client for the elector, another for reading the token: the lock
	// is not safe to read beside the elector that uses it.
	electorClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	reader, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Client: electorClient.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: name,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				rctx, rcancel := context.WithTimeout(lctx, renewDeadline)
				l, err := reader.CoordinationV1().Leases(ns).Get(rctx, name, metav1.GetOptions{})
				rcancel()
				c.mu.Lock()
				defer c.mu.Unlock()
				switch {
				case c.released || lctx.Err() != nil:
				case err != nil:
					fmt.Fprintf(os.Stderr, "clientgocandidate: elected, but reading the token failed (this term is not acted on): %v\n", err)
				case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != c.identity || l.Spec.LeaseTransitions == nil:
					fmt.Fprintf(os.Stderr, "clientgocandidate: elected, but the Lease read shows another holder (this term is not acted on)\n")
				default:
					c.token = int64(*l.Spec.LeaseTransitions)
					c.append(history.Elected, c.token, "")
				}
			},
			OnStoppedLeading: func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.token != 0 && !c.released {
					c.append(history.Lost, c.token, "client-go OnStoppedLeading")
					c.lost = true
				}
				c.token = 0
			},
		},
	})
	if err != nil {
		return 0, err
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM)
	go func() {
		<-signals
		c.mu.Lock()
		if c.token != 0 {
			c.append(history.Released, c.token, "")
		}
		c.released = true
		c.mu.Unlock()
		cancel()
	}()
	le.Run(ctx) // returns when a term ends or ctx is cancelled
	c.mu.Lock()
	defer c.mu.Unlock()
	c.append(history.Exit, 0, "")
	if c.lost && !c.released {
		return exitLost, nil
	}
	return 0, nil
}
