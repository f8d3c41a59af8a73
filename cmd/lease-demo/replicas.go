package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// event is one line a replica printed: "<mono ms> <identity> <event> [k=v ...]".
type event struct {
	at       time.Time // when the demo read it
	identity string
	name     string
	detail   string
}

type replica struct {
	identity string
	cmd      *exec.Cmd
	exited   chan struct{}
	health   string // http://127.0.0.1:PORT of its HEALTH_PORT
}

type replicaGroup struct {
	cfg        config
	kubeconfig string
	tl         *timeline
	mu         sync.Mutex
	replicas   map[string]*replica
}

func startReplicas(cfg config, kubeconfig string, tl *timeline) (*replicaGroup, error) {
	g := &replicaGroup{cfg: cfg, kubeconfig: kubeconfig, tl: tl, replicas: map[string]*replica{}}
	for i := 0; i < replicas; i++ {
		if err := g.start(fmt.Sprintf("replica-%d", i)); err != nil {
			g.stopAll()
			return nil, err
		}
	}
	return g, nil
}

// start runs one replica; its Pod has the same name as its identity.
func (g *replicaGroup) start(id string) error {
	cfg := g.cfg
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	// Configured as deploy/statefulset.yaml configures it: the timings and
	// the health port in the environment.
	cmd := exec.Command(cfg.haServer, namespace, leaseName, id, id)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+g.kubeconfig,
		"LEASE_DURATION_MS="+strconv.Itoa(cfg.leaseSeconds*1000), "RENEW_DEADLINE_MS="+strconv.Itoa(cfg.renewMs),
		"RETRY_PERIOD_MS="+strconv.Itoa(cfg.retryMs), "HEALTH_PORT="+strconv.Itoa(port))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	r := &replica{identity: id, cmd: cmd, exited: make(chan struct{}), health: fmt.Sprintf("http://127.0.0.1:%d", port)}
	g.mu.Lock()
	g.replicas[id] = r
	g.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if ev, ok := parseEvent(sc.Text()); ok {
				g.tl.add(ev)
			}
		}
		_ = cmd.Wait()
		close(r.exited)
	}()
	return nil
}

// restart starts a replica again once its previous process has exited.
func (g *replicaGroup) restart(id string) error {
	if err := g.waitExit(id, 10*time.Second); err != nil {
		return err
	}
	return g.start(id)
}

func parseEvent(line string) (event, bool) {
	f := strings.SplitN(line, " ", 4)
	if len(f) < 3 {
		return event{}, false
	}
	ev := event{at: time.Now(), identity: f[1], name: f[2]}
	if len(f) == 4 {
		ev.detail = f[3]
	}
	return ev, true
}

func (g *replicaGroup) signal(id string, sig syscall.Signal) error {
	g.mu.Lock()
	r := g.replicas[id]
	g.mu.Unlock()
	if r == nil {
		return fmt.Errorf("no replica %s", id)
	}
	return r.cmd.Process.Signal(sig)
}

func (g *replicaGroup) waitExit(id string, within time.Duration) error {
	g.mu.Lock()
	r := g.replicas[id]
	g.mu.Unlock()
	select {
	case <-r.exited:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s did not exit within %v", id, within)
	}
}

// stopAll ends every replica still running: SIGTERM, then SIGKILL.
func (g *replicaGroup) stopAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.replicas {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, r := range g.replicas {
		select {
		case <-r.exited:
		case <-time.After(10 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	}
}

// checkHealth asks the replica id's health port what deploy/statefulset.yaml's
// probes and scrape ask: /readyz and /livez answer 200, and /metrics names
// the lease; it returns the metrics text.
func (g *replicaGroup) checkHealth(id string) (string, error) {
	g.mu.Lock()
	r := g.replicas[id]
	g.mu.Unlock()
	if r == nil {
		return "", fmt.Errorf("no replica %s", id)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	var metrics string
	for _, path := range []string{"/readyz", "/livez", "/metrics"} {
		resp, err := client.Get(r.health + path)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", id, path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", id, path, err)
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s %s: %s: %s", id, path, resp.Status, body)
		}
		metrics = string(body)
	}
	return metrics, nil
}
