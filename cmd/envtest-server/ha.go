package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/k8s-lease/k8s-lease/internal/tcpproxy"
	"github.com/k8s-lease/k8s-lease/internal/topology"
)

// The HA bed: N etcd members as one cluster, M kube-apiservers on it, our
// TCP load balancer in front of them, and a link of ours (a TCP forwarder
// that can be cut) from each API server to each member. The processes are
// envtest's own pieces (envtest.Etcd, envtest.APIServer: the binaries,
// default flags, health checks and stop of the single plane), configured as
// a cluster. The API servers share one certificate directory (the serving
// certificate, for 127.0.0.1 and localhost, which the load balancer's
// address therefore verifies against; the client CA; the service-account
// keys) and one service-account issuer (the load balancer's URL), so a
// client certificate or token valid on one is valid on all.

const (
	// haStartTimeout is each process's start timeout: on two cores, M API
	// servers starting side by side take longer than envtest's 20 s.
	haStartTimeout = 90 * time.Second
	// haStartAttempts: a start is tried again when a process could not
	// bind a port (taken between our choosing it and the process binding it).
	haStartAttempts = 3
)

// etcdClusterArgs are set on every member before -etcd-arg's. Raft's
// heartbeat is 200 ms instead of etcd's 100 (loopback has no latency to
// allow for): half the heartbeats; measured, a member's idle CPU fell from
// 0.31 to 0.26 s per 30 s on a quiet machine, and from about 0.43 to 0.3 s
// on a busy one (the rest is serving the API servers, as a single etcd
// does). The election timeout stays etcd's 1 s (5 heartbeats, the least
// etcd allows), so a killed leader is replaced in about a second, as on a
// production cluster.
var etcdClusterArgs = []string{"heartbeat-interval=200", "election-timeout=1000", "log-level=warn"}

type haPlane struct {
	dir      string // members' data dirs and the API servers' certificates; removed by stop
	members  []*envtest.Etcd
	apis     []*envtest.APIServer
	apiOuts  []*tail             // the API servers' output, for an error of their stop
	links    [][]*tcpproxy.Proxy // [API server][member]
	lb       *tcpproxy.Proxy
	control  *http.Server
	admin    *rest.Config // through the load balancer
	topology topology.Topology
	logf     func(string, ...any)
}

func (h *haPlane) host() string         { return h.topology.LoadBalancer }
func (h *haPlane) config() *rest.Config { return h.admin }

func startHA(assets string, opts options, logf func(string, ...any)) (*haPlane, error) {
	var errs []error
	for attempt := 1; attempt <= haStartAttempts; attempt++ {
		h, err := tryStartHA(assets, opts, logf)
		if err == nil {
			return h, nil
		}
		errs = append(errs, err)
		if !strings.Contains(err.Error(), "address already in use") || attempt == haStartAttempts {
			break
		}
		logf("a port was taken (attempt %d of %d): %v; starting again on other ports", attempt, haStartAttempts, err)
	}
	return nil, errors.Join(errs...)
}

func tryStartHA(assets string, opts options, logf func(string, ...any)) (_ *haPlane, err error) {
	dir, err := os.MkdirTemp("", "envtest-ha-")
	if err != nil {
		return nil, err
	}
	h := &haPlane{dir: dir, logf: logf}
	defer func() {
		if err != nil {
			_ = h.stop()
		}
	}()
	if err := h.plan(opts.etcdMembers, opts.apiservers); err != nil {
		return nil, err
	}
	started := time.Now()
	if err := h.startMembers(assets, opts); err != nil {
		return nil, err
	}
	logf("%d etcd members ready in %s", opts.etcdMembers, time.Since(started).Round(time.Millisecond))
	started = time.Now()
	if err := h.startAPIServers(assets, opts); err != nil {
		return nil, err
	}
	base := &rest.Config{Host: h.topology.LoadBalancer, QPS: 1000, Burst: 2000} // as envtest's admin
	base.CAData = h.apis[0].SecureServing.CA
	if h.admin, err = h.apis[0].SecureServing.Authn.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, base); err != nil {
		return nil, fmt.Errorf("provision the admin user: %w", err)
	}
	if err := h.waitReady(haStartTimeout); err != nil {
		return nil, err
	}
	logf("%d kube-apiservers ready in %s", opts.apiservers, time.Since(started).Round(time.Millisecond))
	return h, nil
}

// plan chooses the members' and API servers' ports and starts the load
// balancer and the control endpoint.
func (h *haPlane) plan(members, apiservers int) error {
	ports, err := topology.FreePorts(2*members + apiservers)
	if err != nil {
		return err
	}
	for i := range members {
		name := fmt.Sprintf("member-%d", i)
		h.topology.Etcd = append(h.topology.Etcd, topology.Member{
			Name:      name,
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			DataDir:   filepath.Join(h.dir, name),
		})
	}
	var addrs []string
	for _, port := range ports[2*members:] {
		h.topology.APIServers = append(h.topology.APIServers, topology.APIServer{URL: fmt.Sprintf("https://127.0.0.1:%d", port), SecurePort: port})
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	if h.lb, err = tcpproxy.Listen("127.0.0.1:0", addrs...); err != nil {
		return err
	}
	h.topology.LoadBalancer = "https://" + h.lb.Addr()
	return h.serveControl()
}

// startMembers starts the etcd members together: a member answers /health
// only once a quorum has elected a leader.
func (h *haPlane) startMembers(assets string, opts options) error {
	var cluster []string
	for _, mem := range h.topology.Etcd {
		cluster = append(cluster, mem.Name+"="+mem.PeerURL)
	}
	outs := make([]*tail, len(h.topology.Etcd))
	for i, mem := range h.topology.Etcd {
		clientURL, _ := url.Parse(mem.ClientURL)
		e := &envtest.Etcd{Path: filepath.Join(assets, "etcd"), URL: clientURL, DataDir: mem.DataDir, StartTimeout: haStartTimeout}
		outs[i] = newTail()
		e.Out, e.Err = outs[i], outs[i]
		args := e.Configure()
		args.Set("name", mem.Name)
		args.Set("listen-peer-urls", mem.PeerURL)
		args.Set("initial-advertise-peer-urls", mem.PeerURL)
		args.Set("initial-cluster", strings.Join(cluster, ","))
		args.Set("initial-cluster-state", "new")
		args.Set("initial-cluster-token", filepath.Base(h.dir)) // apart from any other bed's
		setArgs(args, etcdClusterArgs)
		setArgs(args, opts.etcdArgs)
		h.members = append(h.members, e)
	}
	return inParallel(len(h.members), func(i int) error {
		if err := h.members[i].Start(); err != nil {
			return fmt.Errorf("etcd %s: %w%s", h.topology.Etcd[i].Name, err, outs[i].last())
		}
		return nil
	})
}

// startAPIServers makes the links to etcd and starts the API servers: the
// first alone (it writes the certificates the others find in the shared
// directory), then the others together.
func (h *haPlane) startAPIServers(assets string, opts options) error {
	for k := range h.topology.APIServers {
		var links []*tcpproxy.Proxy
		for _, mem := range h.topology.Etcd {
			l, err := tcpproxy.Listen("127.0.0.1:0", strings.TrimPrefix(mem.ClientURL, "http://"))
			if err != nil {
				return err
			}
			links = append(links, l)
			h.topology.APIServers[k].EtcdServers = append(h.topology.APIServers[k].EtcdServers, "http://"+l.Addr())
		}
		h.links = append(h.links, links)
	}
	certDir := filepath.Join(h.dir, "certs")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		return err
	}
	start := func(k int) error {
		t := h.topology.APIServers[k]
		etcdURL, _ := url.Parse(t.EtcdServers[0])
		a := h.apis[k]
		a.Path, a.CertDir, a.EtcdURL, a.StartTimeout = filepath.Join(assets, "kube-apiserver"), certDir, etcdURL, haStartTimeout
		out := newTail()
		h.apiOuts[k] = out
		a.Out, a.Err = out, out
		a.SecureServing.ListenAddr = envtest.ListenAddr{Address: "127.0.0.1", Port: strconv.Itoa(t.SecurePort)}
		if k > 0 {
			a.SecureServing.Authn = h.apis[0].SecureServing.Authn // its client CA
		}
		args := a.Configure()
		args.Set("etcd-servers", strings.Join(t.EtcdServers, ","))
		args.Set("service-account-issuer", h.topology.LoadBalancer+"/")
		configureAPIServer(args, opts)
		if err := a.Start(); err != nil {
			return fmt.Errorf("kube-apiserver %d: %w%s", k, err, out.last())
		}
		return nil
	}
	for range h.topology.APIServers {
		h.apis = append(h.apis, &envtest.APIServer{})
	}
	h.apiOuts = make([]*tail, len(h.apis))
	if err := start(0); err != nil {
		return err
	}
	return inParallel(len(h.apis)-1, func(i int) error { return start(i + 1) })
}

// waitReady waits until every API server answers /readyz itself and the
// default namespace is there (as envtest waits for it).
func (h *haPlane) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for k, a := range h.topology.APIServers {
		cfg := rest.CopyConfig(h.admin)
		cfg.Host = a.URL
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		var last error
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if _, last = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); last != nil {
				return false, nil
			}
			_, last = client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("kube-apiserver %d not ready within %v: %v", k, timeout, last)
		}
	}
	return nil
}

func (h *haPlane) kubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos[topology.LBContext] = &clientcmdapi.AuthInfo{ClientCertificateData: h.admin.CertData, ClientKeyData: h.admin.KeyData}
	add := func(name, server string) {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: h.admin.CAData}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: topology.LBContext}
	}
	add(topology.LBContext, h.topology.LoadBalancer)
	for k, a := range h.topology.APIServers {
		add(topology.APIServerContext(k), a.URL)
	}
	cfg.CurrentContext = topology.LBContext
	return clientcmd.Write(*cfg)
}

// stop ends the load balancer, the API servers, their links and the
// members, in that order, and removes the bed's directory.
func (h *haPlane) stop() error {
	var errs []error
	if h.control != nil {
		_ = h.control.Close()
	}
	if h.lb != nil {
		_ = h.lb.Close()
	}
	started := time.Now()
	errs = append(errs, inParallel(len(h.apis), func(k int) error {
		if err := h.apis[k].Stop(); err != nil {
			return fmt.Errorf("kube-apiserver %d: %w%s", k, err, h.apiOuts[k].lastLines(12))
		}
		return nil
	}))
	apisStopped := time.Now()
	for _, links := range h.links {
		for _, l := range links {
			_ = l.Close()
		}
	}
	// One after another: a stopping leader hands its leadership to a
	// follower first, and waits 7 s (etcd's request timeout) for it when
	// that follower is stopping too.
	for _, m := range h.members {
		errs = append(errs, m.Stop())
	}
	h.logf("kube-apiservers stopped in %s, etcd members in %s", apisStopped.Sub(started).Round(time.Millisecond),
		time.Since(apisStopped).Round(time.Millisecond))
	if h.dir != "" {
		errs = append(errs, os.RemoveAll(h.dir))
	}
	return errors.Join(errs...)
}

// serveControl starts the control endpoint (see internal/topology).
func (h *haPlane) serveControl() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("control endpoint: %w", err)
	}
	h.topology.Control = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+topology.TopologyPath, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, h.topology) })
	mux.HandleFunc("GET "+topology.ConnsPath, func(w http.ResponseWriter, _ *http.Request) {
		conns := []topology.Conn{}
		for _, c := range h.lb.Conns() {
			conns = append(conns, topology.Conn{Client: c.Client, APIServer: c.Backend})
		}
		writeJSON(w, conns)
	})
	h.handleAPIServer(mux, topology.CutPath, func(k int, _ *http.Request) error {
		for _, l := range h.links[k] {
			l.BlackHole()
		}
		h.logf("kube-apiserver %d cut off from etcd", k)
		return nil
	})
	h.handleAPIServer(mux, topology.HealPath, func(k int, _ *http.Request) error {
		for _, l := range h.links[k] {
			l.Heal()
		}
		h.logf("kube-apiserver %d reaches etcd again", k)
		return nil
	})
	h.handleAPIServer(mux, topology.PinPath, func(k int, r *http.Request) error {
		q := r.URL.Query().Get("connections")
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 {
			return fmt.Errorf("connections=%q: want a count (0 ends a pin)", q)
		}
		h.logf("load balancer: the next %d connections go to kube-apiserver %d", n, k)
		return h.lb.Pin(k, n)
	})
	h.handleAPIServer(mux, topology.ResetPath, func(k int, _ *http.Request) error {
		h.lb.Reset(k)
		h.logf("load balancer: connections to kube-apiserver %d reset", k)
		return nil
	})
	h.control = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.control.Serve(ln) }()
	return nil
}

// handleAPIServer serves POST path for the API server its {k} names.
func (h *haPlane) handleAPIServer(mux *http.ServeMux, path string, do func(k int, r *http.Request) error) {
	mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
		k, err := strconv.Atoi(r.PathValue("k"))
		if err != nil || k < 0 || k >= len(h.topology.APIServers) {
			http.Error(w, fmt.Sprintf("API server %q: want an index from 0 to %d", r.PathValue("k"), len(h.topology.APIServers)-1), http.StatusBadRequest)
			return
		}
		if k >= len(h.links) {
			http.Error(w, "the bed is still starting", http.StatusServiceUnavailable)
			return
		}
		if err := do(k, r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, struct{}{})
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// tail keeps the end of a process's output (and copies it all to also,
// if set).
type tail struct {
	mu   sync.Mutex
	buf  []byte
	also io.Writer
}

// newTail is where a process's output goes: its end is kept for the error
// should it fail to start, and with envtest's switch for the control
// plane's output all of it goes to our stderr too (stdout carries only the
// kubeconfig path).
func newTail() *tail {
	if os.Getenv("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT") == "true" {
		return &tail{also: os.Stderr}
	}
	return &tail{}
}

const tailBytes = 16 << 10

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	if t.also != nil {
		_, _ = t.also.Write(b)
	}
	return len(b), nil
}

// last is "; its last output: " and the process's last three lines, or ""
// if it wrote nothing.
func (t *tail) last() string { return t.lastLines(3) }

// lastLines is last with the last n lines.
func (t *tail) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	return "; its last output: " + strings.Join(lines[max(len(lines)-n, 0):], " | ")
}

// inParallel runs f(0) ... f(n-1) side by side and joins their errors.
func inParallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
