package main

import (
	"strings"
	"testing"

	"github.com/k8s-lease/k8s-lease/internal/tcpproxy"
	"github.com/k8s-lease/k8s-lease/internal/topology"
)

// The control endpoint on a bed of two API servers and two members with
// no processes behind them: what each request does to the links and the
// load balancer, and the errors for bad input, as topology.Control (what
// internal/testenv calls) gets them.
func TestControlEndpoint(t *testing.T) {
	h := &haPlane{logf: t.Logf}
	t.Cleanup(func() { _ = h.stop() })
	var err error
	if h.lb, err = tcpproxy.Listen("127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		h.topology.APIServers = append(h.topology.APIServers, topology.APIServer{})
		var links []*tcpproxy.Proxy
		for range 2 {
			l, err := tcpproxy.Listen("127.0.0.1:0", "127.0.0.1:1")
			if err != nil {
				t.Fatal(err)
			}
			links = append(links, l)
		}
		h.links = append(h.links, links)
	}
	if err := h.serveControl(); err != nil {
		t.Fatal(err)
	}
	c := topology.Control{URL: h.topology.Control}
	cut := func() [2]bool {
		var out [2]bool
		for k, links := range h.links {
			out[k] = links[0].BlackHoled() && links[1].BlackHoled()
		}
		return out
	}

	if err := c.Cut(1); err != nil {
		t.Fatal(err)
	}
	if got := cut(); got != [2]bool{false, true} {
		t.Fatalf("after Cut(1), cut = %v", got)
	}
	if err := c.Heal(1); err != nil {
		t.Fatal(err)
	}
	if got := cut(); got != [2]bool{} {
		t.Fatalf("after Heal(1), cut = %v", got)
	}
	if err := c.Pin(1, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(0); err != nil {
		t.Fatal(err)
	}
	if conns, err := c.Conns(); err != nil || len(conns) != 0 {
		t.Fatalf("Conns = %v, %v", conns, err)
	}
	for name, call := range map[string]func() error{
		"Cut(2)":     func() error { return c.Cut(2) },
		"Heal(-1)":   func() error { return c.Heal(-1) },
		"Pin(0, -1)": func() error { return c.Pin(0, -1) },
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "400 Bad Request") {
			t.Errorf("%s: %v, want a 400", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if err := c.Cut(2); !strings.Contains(err.Error(), `API server "2": want an index from 0 to 1`) {
		t.Errorf("Cut(2): %v", err)
	}
}
