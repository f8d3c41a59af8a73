// Command clientgocandidate is the fault suite's plain client-go candidate:
// a process that links client-go's leader election (tools/leaderelection,
// a LeaseLock) and nothing of ours, campaigns on one Lease as Kubernetes'
// own components do, and logs its history for internal/history's checker
// in lease_candidate's format:
//
//	elected   the moment OnStartedLeading was called, logged once a read
//	          of the Lease (retried every retry period) showed this process
//	          holding it (token = leaseTransitions, which client-go raises
//	          when the holder changes, as ours does)
//	lost      OnStoppedLeading ran after a term (client-go cancels the
//	          leading context before it calls OnStoppedLeading, so nothing
//	          gated on that context acts after this line)
//	released  SIGTERM while leading, logged before the context is cancelled
//	exit      it is about to exit
//
// Its configuration is kube-controller-manager's: no ReleaseOnCancel (with
// it, client-go releases after a failed renewal before it cancels the
// leading context, and its release trusts the holder it last saw: once a
// hung API server answers again, it can write over a newer holder's
// record), an identity of --identity plus a random suffix (client-go
// keeps leaseTransitions when a process finds its own identity on the
// Lease, so a restarted process under the same name would reuse the
// token), and an exit after a lost term, with status 3, for whoever runs it
// to start it again. SIGTERM exits 0 without releasing: the Lease expires.
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
	// First: the suite may SIGTERM a candidate a moment after starting it.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM)
	ns := flag.String("namespace", "", "namespace of the Lease")
	name := flag.String("lease", "", "name of the Lease")
	id := flag.String("identity", "", "identity (a random suffix is added)")
	logPath := flag.String("log", "", "the history log to append to")
	timing := flag.String("timing", "4000,3000,500", "LEASE_MS,RENEW_MS,RETRY_MS")
	flag.Parse()
	code, err := run(*ns, *name, *id, *logPath, *timing, signals)
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
	leading       bool  // a term's elected line is logged and its end is not
	token         int64 // that term's
	released      bool  // SIGTERM came
	lost          bool  // a term ended by client-go
}

func (c *candidate) append(kind string, token int64, detail string) {
	c.appendAt(history.Now(), kind, token, detail)
}

func (c *candidate) appendAt(at int64, kind string, token int64, detail string) {
	if err := history.Append(c.log, history.Event{At: at, PID: c.pid, Kind: kind, Token: token, Detail: detail}); err != nil {
		fmt.Fprintln(os.Stderr, "clientgocandidate: history log:", err)
		os.Exit(1)
	}
}

func run(ns, name, id, logPath, timing string, signals <-chan os.Signal) (int, error) {
	if ns == "" || name == "" || id == "" || logPath == "" {
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
	// readToken reads the Lease until it shows this process holding it
	// (its token), the term ends, or it shows another holder.
	readToken := func(lctx context.Context) (int64, bool) {
		for {
			rctx, rcancel := context.WithTimeout(lctx, renewDeadline)
			l, err := reader.CoordinationV1().Leases(ns).Get(rctx, name, metav1.GetOptions{})
			rcancel()
			switch {
			case lctx.Err() != nil:
				return 0, false
			case err == nil && (l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != c.identity || l.Spec.LeaseTransitions == nil):
				fmt.Fprintln(os.Stderr, "clientgocandidate: elected, but the Lease read shows another holder: this term is not acted on")
				return 0, false
			case err == nil:
				return int64(*l.Spec.LeaseTransitions), true
			}
			fmt.Fprintf(os.Stderr, "clientgocandidate: elected; reading the token: %v (retrying)\n", err)
			select {
			case <-lctx.Done():
				return 0, false
			case <-time.After(retryPeriod):
			}
		}
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: name,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				// A worker gated on lctx may act from here: the term is
				// logged from this moment, once its token is known.
				startedAt := history.Now()
				token, ok := readToken(lctx)
				c.mu.Lock()
				defer c.mu.Unlock()
				if ok && !c.released && lctx.Err() == nil {
					c.leading, c.token = true, token
					c.appendAt(startedAt, history.Elected, token, "")
				}
			},
			OnStoppedLeading: func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.leading {
					c.append(history.Lost, c.token, "client-go OnStoppedLeading")
				}
				c.leading = false
				// Run calls this also when it ends without a term (its
				// context cancelled while campaigning).
				if !c.released {
					c.lost = true
				}
			},
		},
	})
	if err != nil {
		return 0, err
	}
	go func() {
		<-signals
		c.mu.Lock()
		if c.leading {
			c.append(history.Released, c.token, "")
			c.leading = false
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
