package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
	cmd := exec.Command(cfg.haServer, namespace, leaseName, id, id,
		strconv.Itoa(cfg.leaseSeconds), strconv.Itoa(cfg.renewMs), strconv.Itoa(cfg.retryMs))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+g.kubeconfig)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	r := &replica{identity: id, cmd: cmd, exited: make(chan struct{})}
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
