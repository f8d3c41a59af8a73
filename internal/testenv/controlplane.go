package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/internal/proctree"
)

// Control-plane faults: a process envtest-server started is frozen
// (SIGSTOP/SIGCONT), stopped (SIGTERM) or killed (SIGKILL), and started
// again with the same command line and environment, so the same ports,
// certificates and etcd data. Each etcd member and kube-apiserver has a
// handle (EtcdMember, APIServer: index 0 on a single bed); on an HA bed an
// API server can also be cut off from etcd (CutFromEtcd) and the load
// balancer steered (PinLB).

// The control-plane processes, in the order they start.
const (
	Etcd          = "etcd"
	KubeAPIServer = "kube-apiserver"
)

// processStopTimeout bounds a SIGTERM'd process's exit (then SIGKILL).
const processStopTimeout = 20 * time.Second

// component is a control-plane process this package restarted (or will).
type component struct {
	argv, env []string
	cmd       *exec.Cmd // nil while stopped, or while envtest-server's runs
	done      chan struct{}
	// out: the last output of the process Start started, and how it
	// ended (once done is closed): what WaitReady reports if it exits.
	out  *tailBuffer
	exit error
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 4096; over > 0 {
		b.buf = b.buf[over:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Proc is a handle on one control-plane process: etcd member Index or
// kube-apiserver Index. Its methods may be called from any goroutine.
type Proc struct {
	s     *Server
	Name  string // Etcd or KubeAPIServer
	Index int
}

// EtcdMember is the handle on etcd member i (0 on a single bed).
func (s *Server) EtcdMember(i int) Proc { return Proc{s, Etcd, i} }

// APIServer is the handle on kube-apiserver k (0 on a single bed).
func (s *Server) APIServer(k int) Proc { return Proc{s, KubeAPIServer, k} }

// EtcdMembers and APIServers are how many the bed has.
func (s *Server) EtcdMembers() int { return s.count(Etcd) }
func (s *Server) APIServers() int  { return s.count(KubeAPIServer) }

func (s *Server) count(name string) int {
	switch {
	case s.Topology == nil:
		return 1
	case name == Etcd:
		return len(s.Topology.Etcd)
	default:
		return len(s.Topology.APIServers)
	}
}

func (p Proc) String() string { return fmt.Sprintf("%s %d", p.Name, p.Index) }

func (p Proc) key() string { return p.String() }

func (p Proc) check() error {
	if n := p.s.count(p.Name); p.Index < 0 || p.Index >= n {
		return fmt.Errorf("%s: the bed has %d (0 to %d)", p, n, n-1)
	}
	return nil
}

// flags are the command-line arguments that tell this process from the
// others of its name: none on a single bed.
func (p Proc) flags() []string {
	switch {
	case p.s.Topology == nil:
		return nil
	case p.Name == Etcd:
		return []string{p.s.Topology.Etcd[p.Index].NameFlag()}
	default:
		return []string{p.s.Topology.APIServers[p.Index].PortFlag()}
	}
}

// PID is the pid of the process running now: envtest-server's child, or
// the one Start started.
func (p Proc) PID() (int, error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	if c := p.s.component(p); c != nil {
		if cmd, _ := p.s.running(c); cmd != nil {
			return cmd.Process.Pid, nil
		}
	}
	return proctree.Child(p.s.Cmd.Process.Pid, p.Name, p.flags()...)
}

// Freeze stops the process with SIGSTOP: its connections stay open and
// the kernel accepts new ones, but it answers nothing.
func (p Proc) Freeze() error { return p.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process.
func (p Proc) Thaw() error { return p.signal(syscall.SIGCONT) }

func (p Proc) signal(sig syscall.Signal) error {
	pid, err := p.PID()
	if err != nil {
		return err
	}
	return syscall.Kill(pid, sig)
}

// Stop ends the process with SIGTERM (SIGKILL after 20 s), remembering how
// to Start it again.
func (p Proc) Stop() error { return p.end(syscall.SIGTERM) }

// Kill ends the process with SIGKILL (a crash: no clean shutdown),
// remembering how to Start it again.
func (p Proc) Kill() error { return p.end(syscall.SIGKILL) }

func (p Proc) end(sig syscall.Signal) error {
	pid, err := p.PID()
	if err != nil {
		return err
	}
	c := p.s.component(p)
	if c == nil {
		c = &component{}
		if c.argv, err = proctree.Args(pid); err != nil {
			return err
		}
		if c.env, err = proctree.Environ(pid); err != nil {
			return err
		}
		p.s.mu.Lock()
		p.s.restarted[p.key()] = c
		p.s.mu.Unlock()
	}
	_ = syscall.Kill(pid, syscall.SIGCONT) // a frozen one cannot exit on SIGTERM
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	cmd, done := p.s.running(c)
	if cmd == nil { // envtest-server's child: it reaps it
		return waitGone(pid, processStopTimeout)
	}
	err = waitDone(done, pid, processStopTimeout)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = waitDone(done, pid, 5*time.Second)
	}
	p.s.mu.Lock()
	c.cmd = nil
	p.s.mu.Unlock()
	return err
}

// Start starts the process again as it ran before Stop or Kill, without
// waiting for it to be ready (WaitReady does).
func (p Proc) Start() error {
	if err := p.check(); err != nil {
		return err
	}
	c := p.s.component(p)
	if c == nil {
		return fmt.Errorf("start %s: it was not stopped", p)
	}
	if cmd, _ := p.s.running(c); cmd != nil {
		return fmt.Errorf("start %s: it runs (pid %d)", p, cmd.Process.Pid)
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = c.env
	out := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Killed if the test binary dies, so never orphaned. Pdeathsig follows
	// the forking *thread*, so that thread is locked and kept until the
	// process exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		p.s.mu.Lock()
		c.exit = err
		p.s.mu.Unlock()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("restart %s: %w", p, err)
	}
	p.s.mu.Lock()
	c.cmd, c.done, c.out = cmd, done, out
	p.s.mu.Unlock()
	return nil
}

// WaitReady waits until the process answers its health check: an API
// server's /readyz, an etcd member's /health (HA beds only: a single bed's
// etcd address is not known here).
func (p Proc) WaitReady(timeout time.Duration) error {
	if err := p.check(); err != nil {
		return err
	}
	var probe func(ctx context.Context) error
	if p.Name == KubeAPIServer {
		cfg, err := p.s.APIServerConfig(p.Index)
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		probe = func(ctx context.Context) error {
			body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err == nil && string(body) != "ok" {
				err = fmt.Errorf("/readyz: %s", body)
			}
			return err
		}
	} else {
		if p.s.Topology == nil {
			return fmt.Errorf("%s: WaitReady needs an HA bed (its etcd address)", p)
		}
		u := p.s.Topology.Etcd[p.Index].ClientURL + "/health"
		probe = func(ctx context.Context) error {
			var h struct{ Health string }
			if err := etcdCall(ctx, http.MethodGet, u, &h); err != nil {
				return err
			}
			if h.Health != "true" {
				return fmt.Errorf("/health: %+v", h)
			}
			return nil
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := probe(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if exited := p.exited(); exited != nil {
			return exited
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", p, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exited says how a process Start started ended, with its last output,
// or nil while it runs (or was not started by Start).
func (p Proc) exited() error {
	c := p.s.component(p)
	if c == nil {
		return nil
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if c.done == nil || c.out == nil {
		return nil
	}
	select {
	case <-c.done:
		return fmt.Errorf("%s exited (%v) before it was ready; its last output:\n%s", p, c.exit, c.out.String())
	default:
		return nil
	}
}

// PID is the pid of the named control-plane process (index 0).
func (s *Server) PID(name string) (int, error) { return Proc{s, name, 0}.PID() }

// FreezeAPIServer freezes kube-apiserver 0 (see Proc.Freeze).
func (s *Server) FreezeAPIServer() error { return s.APIServer(0).Freeze() }

// ThawAPIServer resumes kube-apiserver 0.
func (s *Server) ThawAPIServer() error { return s.APIServer(0).Thaw() }

// StopControlPlane terminates every kube-apiserver, then every etcd member
// (SIGTERM; SIGKILL after 20 s each), remembering how to start them again.
func (s *Server) StopControlPlane() error {
	for _, p := range s.procs() {
		if err := p.Stop(); err != nil {
			return fmt.Errorf("stop %s: %w", p, err)
		}
	}
	return nil
}

// StartControlPlane starts every etcd member, then every kube-apiserver,
// as they ran before StopControlPlane, and waits (up to 60 s) until each
// API server answers /readyz.
func (s *Server) StartControlPlane() error {
	procs := s.procs()
	slices.Reverse(procs)
	for _, p := range procs {
		if err := p.Start(); err != nil {
			return err
		}
	}
	for k := range s.APIServers() {
		if err := s.APIServer(k).WaitReady(60 * time.Second); err != nil {
			return err
		}
	}
	return nil
}

// procs lists every control-plane process in stop order: API servers,
// then etcd members.
func (s *Server) procs() []Proc {
	var ps []Proc
	for k := range s.APIServers() {
		ps = append(ps, s.APIServer(k))
	}
	for i := range s.EtcdMembers() {
		ps = append(ps, s.EtcdMember(i))
	}
	return ps
}

// APIServerConfig is the admin's configuration straight to kube-apiserver
// k, past the load balancer (on a single bed, Config).
func (s *Server) APIServerConfig(k int) (*rest.Config, error) {
	if err := s.APIServer(k).check(); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(s.Config)
	if s.Topology != nil {
		cfg.Host = s.Topology.APIServers[k].URL
	}
	return cfg, nil
}

// EtcdLeader is the index of the etcd member that says it is the Raft
// leader (asked with the maintenance Status call; a member that does not
// answer within 2 s is passed over). A single bed's member is 0.
func (s *Server) EtcdLeader() (int, error) {
	if s.Topology == nil {
		return 0, nil
	}
	var errs []error
	for i := range s.Topology.Etcd {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		leads, err := s.EtcdMemberLeads(ctx, i)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, err)
		case leads:
			return i, nil
		}
	}
	return -1, fmt.Errorf("no etcd member says it leads: %w", errors.Join(errs...))
}

// EtcdMemberLeads asks etcd member i whether it leads (a member that does
// not says which one it follows, if any: not asked here).
func (s *Server) EtcdMemberLeads(ctx context.Context, i int) (bool, error) {
	if s.Topology == nil || i < 0 || i >= len(s.Topology.Etcd) {
		return false, fmt.Errorf("no etcd member %d on this bed", i)
	}
	m := s.Topology.Etcd[i]
	// The gRPC gateway's JSON: uint64s as strings.
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		}
		Leader string
	}
	if err := etcdCall(ctx, http.MethodPost, m.ClientURL+"/v3/maintenance/status", &st); err != nil {
		return false, fmt.Errorf("%s: %w", m.Name, err)
	}
	return st.Header.MemberID != "" && st.Header.MemberID == st.Leader, nil
}

// WaitEtcdLeader waits up to timeout for a member to lead (after a leader
// was killed, the election) and returns its index.
func (s *Server) WaitEtcdLeader(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		i, err := s.EtcdLeader()
		if err == nil || time.Now().After(deadline) {
			return i, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// etcdCall asks an etcd member's HTTP endpoint (a POST sends {}) and
// decodes its JSON answer into v.
func etcdCall(ctx context.Context, method, url string, v any) error {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// CutFromEtcd black-holes every link from kube-apiserver k to etcd: its
// clients stay connected to it and what it serves from its watch cache
// goes stale; what needs etcd hangs. HA beds only.
func (s *Server) CutFromEtcd(k int) error {
	if err := s.needHA(k); err != nil {
		return err
	}
	return s.Control.Cut(k)
}

// HealEtcd ends CutFromEtcd: what was held is forwarded.
func (s *Server) HealEtcd(k int) error {
	if err := s.needHA(k); err != nil {
		return err
	}
	return s.Control.Heal(k)
}

// PinLB sends the load balancer's next n new connections to kube-apiserver
// k (0: ends a pin). HA beds only.
func (s *Server) PinLB(k, n int) error {
	if err := s.needHA(k); err != nil {
		return err
	}
	return s.Control.Pin(k, n)
}

// ResetLB resets the client connections the load balancer sent to
// kube-apiserver k: their clients connect again (to whichever is next).
func (s *Server) ResetLB(k int) error {
	if err := s.needHA(k); err != nil {
		return err
	}
	return s.Control.Reset(k)
}

// LandedOn is the kube-apiserver the load balancer sent the client
// connection from localAddr (host:port, the client's side) to.
func (s *Server) LandedOn(localAddr string) (int, error) {
	if err := s.needHA(0); err != nil {
		return -1, err
	}
	conns, err := s.Control.Conns()
	if err != nil {
		return -1, err
	}
	for _, c := range conns {
		if c.Client == localAddr {
			return c.APIServer, nil
		}
	}
	return -1, fmt.Errorf("the load balancer holds no connection from %s", localAddr)
}

// needHA fails unless the bed is HA and has kube-apiserver k.
func (s *Server) needHA(k int) error {
	if s.Topology == nil {
		return errors.New("needs an HA bed (StartHA with EtcdMembers or APIServers above 1)")
	}
	return s.APIServer(k).check()
}

// stopProcesses ends every control-plane process still running, whether
// envtest-server or this package started it: the API servers first, then
// the etcd members one by one, so that every API server drains while etcd
// still has its quorum (a majority restarted by the test, stopped first,
// would leave envtest-server's API servers unable to finish their requests).
// envtest-server then finds its children gone and removes their
// certificates and data.
func (s *Server) stopProcesses() error {
	var errs []error
	for _, p := range s.procs() {
		if c := s.component(p); c != nil {
			if cmd, _ := s.running(c); cmd == nil {
				continue // stopped or killed by the test, not started again
			}
		}
		if err := p.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) component(p Proc) *component {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.restarted == nil {
		s.restarted = map[string]*component{}
	}
	return s.restarted[p.key()]
}

func (s *Server) running(c *component) (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.cmd, c.done
}

func waitDone(done <-chan struct{}, pid int, timeout time.Duration) error {
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("pid %d did not exit within %v", pid, timeout)
	}
}

// waitGone waits until pid has exited (its parent reaps it), and kills it
// if it has not within timeout.
func waitGone(pid int, timeout time.Duration) error {
	err := proctree.WaitGone(timeout, pid)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return err
}
