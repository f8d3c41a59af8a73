// Package topology describes an HA test bed (envtest-server with
// -etcd-members or -apiservers above 1): where each etcd member and API
// server listens, the load balancer in front of the API servers, and the
// control endpoint that cuts an API server off from etcd and steers the
// load balancer. envtest-server writes it as JSON next to the kubeconfig
// (Path) and serves the control endpoint; internal/testenv reads the file
// and calls the endpoint through Control. A C++ test can do the same with
// any HTTP client (curl -X POST <control>/apiservers/1/etcd/cut).
package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Topology is one HA bed.
type Topology struct {
	// LoadBalancer is the address the kubeconfig's current context points
	// at (https://127.0.0.1:<port>): a TCP load balancer, round-robin per
	// connection over APIServers, without health checks.
	LoadBalancer string `json:"loadBalancer"`
	// Control is the control endpoint (http://127.0.0.1:<port>).
	Control    string      `json:"control"`
	Etcd       []Member    `json:"etcd"`
	APIServers []APIServer `json:"apiservers"`
}

// Member is one etcd member.
type Member struct {
	Name      string `json:"name"`      // member-<index>, its --name
	ClientURL string `json:"clientURL"` // http://127.0.0.1:<port>, straight to the member
	PeerURL   string `json:"peerURL"`
	DataDir   string `json:"dataDir"`
}

// APIServer is one kube-apiserver.
type APIServer struct {
	URL        string `json:"url"`        // https://127.0.0.1:<port>, straight to it
	SecurePort int    `json:"securePort"` // its --secure-port
	// EtcdServers is its --etcd-servers: one link (a TCP forwarder that
	// Cut black-holes) to each member, in the order of Topology.Etcd.
	EtcdServers []string `json:"etcdServers"`
}

// NameFlag is the command-line argument that tells this member's process
// from the other members'.
func (m Member) NameFlag() string { return "--name=" + m.Name }

// PortFlag is the command-line argument that tells this API server's
// process from the others'.
func (a APIServer) PortFlag() string { return "--secure-port=" + strconv.Itoa(a.SecurePort) }

// LBContext is the kubeconfig's context (and current context) for the load
// balancer; APIServerContext(k) is the one straight to API server k.
const LBContext = "envtest"

// APIServerContext is the kubeconfig context that reaches API server k
// without the load balancer.
func APIServerContext(k int) string { return LBContext + "-apiserver-" + strconv.Itoa(k) }

// Path is where envtest-server writes the topology of the bed whose
// kubeconfig is at kubeconfig.
func Path(kubeconfig string) string { return kubeconfig + ".topology.json" }

// Read loads a topology file.
func Read(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Topology
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	return &t, nil
}

// Write saves t at path (mode 0600).
func (t *Topology) Write(path string) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

// The control endpoint's requests. {k} is an API server's index in
// Topology.APIServers. Bad input is answered 400 with a message saying
// what is wrong.
const (
	// CutPath black-holes every link from API server k to etcd (its
	// clients stay connected to it); HealPath ends that.
	CutPath  = "/apiservers/{k}/etcd/cut"  // POST
	HealPath = "/apiservers/{k}/etcd/heal" // POST
	// PinPath sends the load balancer's next n new connections
	// (?connections=n) to API server k.
	PinPath = "/apiservers/{k}/pin" // POST
	// ResetPath resets the client connections the load balancer sent to
	// API server k, so their clients connect again.
	ResetPath = "/apiservers/{k}/reset" // POST
	// ConnsPath lists the client connections the load balancer holds
	// (JSON: [{"client":"127.0.0.1:<port>","apiserver":k}]).
	ConnsPath = "/lb/conns" // GET
	// TopologyPath answers the topology (JSON).
	TopologyPath = "/topology" // GET
)

// Conn is a client connection the load balancer holds: the client's
// address as the load balancer sees it (the client's local address) and
// the API server it went to.
type Conn struct {
	Client    string `json:"client"`
	APIServer int    `json:"apiserver"`
}

// Control calls a bed's control endpoint.
type Control struct {
	URL    string
	Client *http.Client // nil: one with a 10 s timeout
}

// Cut cuts API server k off from etcd.
func (c Control) Cut(k int) error { return c.post(CutPath, k, nil) }

// Heal restores API server k's links to etcd.
func (c Control) Heal(k int) error { return c.post(HealPath, k, nil) }

// Pin sends the load balancer's next n new connections to API server k.
func (c Control) Pin(k, n int) error {
	return c.post(PinPath, k, url.Values{"connections": {strconv.Itoa(n)}})
}

// Reset resets the client connections the load balancer sent to API server k.
func (c Control) Reset(k int) error { return c.post(ResetPath, k, nil) }

// Conns lists the client connections the load balancer holds.
func (c Control) Conns() ([]Conn, error) {
	var conns []Conn
	body, err := c.do(http.MethodGet, ConnsPath)
	if err == nil {
		err = json.Unmarshal(body, &conns)
	}
	return conns, err
}

func (c Control) post(path string, k int, q url.Values) error {
	p := expand(path, k)
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	_, err := c.do(http.MethodPost, p)
	return err
}

// expand puts k into a path's {k}.
func expand(path string, k int) string { return strings.Replace(path, "{k}", strconv.Itoa(k), 1) }

func (c Control) do(method, path string) ([]byte, error) {
	if c.URL == "" {
		return nil, errors.New("topology: no control endpoint")
	}
	client := c.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequest(method, c.URL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("control %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("control %s %s: %s: %s", method, path, resp.Status, b)
	}
	return b, nil
}
