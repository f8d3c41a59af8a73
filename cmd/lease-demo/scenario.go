package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

func isElected(ev event) bool { return ev.name == "elected" }

// scenario runs the fail-over and the hand-off and returns the measured
// gaps (for the picture).
func scenario(ctx context.Context, cfg config, g *replicaGroup, tl *timeline, renewals *renewalLog, client kubernetes.Interface) ([]gap, error) {
	leaseDuration := time.Duration(cfg.leaseSeconds) * time.Second
	first, next, err := tl.waitFor(0, 60*time.Second, isElected)
	if err != nil {
		return nil, fmt.Errorf("no replica was elected: %w", err)
	}
	if err := pause(ctx, 3*time.Second); err != nil {
		return nil, err
	}

	say(fmt.Sprintf("[1/2] crash: SIGKILL the leader %s (no release; standbys must wait out the lease)", first.identity))
	holder, lastRenewal := renewals.last()
	killedAt := time.Now()
	if err := g.signal(first.identity, syscall.SIGKILL); err != nil {
		return nil, err
	}
	tl.mark(killedAt, first.identity, "SIGKILL", "KILLED")
	second, next, err := tl.waitFor(next, leaseDuration+15*time.Second, isElected)
	if err != nil {
		return nil, fmt.Errorf("no fail-over after the kill: %w", err)
	}
	failover := second.at.Sub(killedAt)
	overshoot := "n/a"
	if holder == first.identity && !lastRenewal.IsZero() {
		overshoot = fmt.Sprintf("%d ms", second.at.Sub(lastRenewal.Add(leaseDuration)).Milliseconds())
	}
	// As kubelet would, restart the crashed replica: it clears the stale
	// leader label on its Pod and stands by.
	if err := g.restart(first.identity); err != nil {
		return nil, err
	}
	tl.mark(time.Now(), first.identity, "restarted", "RESTARTED")
	if err := pause(ctx, 3*time.Second); err != nil {
		return nil, err
	}

	say(fmt.Sprintf("[2/2] graceful: SIGTERM the leader %s (it releases the lease)", second.identity))
	termAt := time.Now()
	if err := g.signal(second.identity, syscall.SIGTERM); err != nil {
		return nil, err
	}
	tl.mark(termAt, second.identity, "SIGTERM", "SIGTERM")
	third, _, err := tl.waitFor(next, leaseDuration+15*time.Second, func(ev event) bool {
		return isElected(ev) && ev.identity != second.identity
	})
	if err != nil {
		return nil, fmt.Errorf("no hand-off after SIGTERM: %w", err)
	}
	handoff := third.at.Sub(termAt)
	if err := g.waitExit(second.identity, 15*time.Second); err != nil {
		return nil, err
	}
	if err := pause(ctx, 500*time.Millisecond); err != nil {
		return nil, err
	}

	pods, err := leaderPods(ctx, client)
	if err != nil {
		return nil, err
	}
	say("result")
	fmt.Printf("  fail-over after SIGKILL: %s elected %d ms after the kill (lease duration %v; past last renewal + lease duration: %s)\n",
		second.identity, failover.Milliseconds(), leaseDuration, overshoot)
	fmt.Printf("  graceful hand-off after SIGTERM: %s elected %d ms after the signal\n", third.identity, handoff.Milliseconds())
	fmt.Printf("  lease now: %s\n", leaseHolder(ctx, client))
	fmt.Printf("  pods labelled %s=true: %s\n", leaderLabel, pods)
	fmt.Printf("  elections: %d, watch callbacks seen by replicas: %d\n", tl.count("elected"), tl.count("holder"))
	if pods != third.identity {
		return nil, fmt.Errorf("leader label on %q, want only %s", pods, third.identity)
	}
	if !strings.HasPrefix(leaseHolder(ctx, client), "holder "+third.identity) {
		return nil, fmt.Errorf("lease does not name %s", third.identity)
	}
	// The endpoints the manifest's probes and scrape use, on the leader.
	metrics, err := g.checkHealth(third.identity)
	if err != nil {
		return nil, err
	}
	status := fmt.Sprintf("leader_election_master_status{name=%q} 1", namespace+"/"+leaseName)
	token := fmt.Sprintf("k8s_lease_fencing_token{name=%q} %s", namespace+"/"+leaseName, tokenOf(third.detail))
	for _, want := range []string{status, token} {
		if !strings.Contains(metrics, want) {
			return nil, fmt.Errorf("%s's /metrics lacks %q", third.identity, want)
		}
	}
	fmt.Printf("  %s's health port: /readyz and /livez 200, /metrics says %s\n", third.identity, token)
	return []gap{
		{killedAt, second.at, fmt.Sprintf("fail-over %d ms", failover.Milliseconds())},
		{termAt, third.at, fmt.Sprintf("hand-off %d ms", handoff.Milliseconds())},
	}, nil
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("interrupted")
	case <-time.After(d):
		return nil
	}
}
