package tcpproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// backend listens and, on each connection, says its name and then echoes
// lines back.
func backend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.WriteString(c, name+"\n"); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func listen(t *testing.T, backends ...string) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return client{c, bufio.NewReader(c)}
}

// line reads one line within d; "" and the error on timeout or close.
func (c client) line(d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func (c client) roundTrip(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.line(5 * time.Second); err != nil || got != msg {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

func TestRoundRobinAndPin(t *testing.T) {
	p := listen(t, backend(t, "a"), backend(t, "b"), backend(t, "c"))
	var got []string
	landed := map[string]int{} // local address: backend
	connect := func(n int) {
		for range n {
			c := dial(t, p)
			name, err := c.line(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, name)
			landed[c.LocalAddr().String()] = int(name[0] - 'a')
		}
	}
	connect(4)
	if err := p.Pin(2, 2); err != nil {
		t.Fatal(err)
	}
	connect(3)
	if s := strings.Join(got, ""); s != "abcaccb" {
		t.Fatalf("connections went to %s, want abca, then pinned cc, then b", s)
	}
	conns := p.Conns()
	if len(conns) != 7 {
		t.Fatalf("%d connections held, want 7", len(conns))
	}
	for _, c := range conns {
		if want, ok := landed[c.Client]; !ok || c.Backend != want {
			t.Fatalf("connection %+v: want backend %d (known: %v)", c, want, ok)
		}
	}
	if err := p.Pin(3, 1); err == nil {
		t.Fatal("pinned to backend 3 of 3")
	}
}

func TestBlackHoleHoldsAndHealForwards(t *testing.T) {
	p := listen(t, backend(t, "a"))
	open := dial(t, p)
	if name, err := open.line(5 * time.Second); err != nil || name != "a" {
		t.Fatalf("greeting %q, %v", name, err)
	}
	open.roundTrip(t, "before")

	p.BlackHole()
	if !p.BlackHoled() {
		t.Fatal("not black-holed")
	}
	if _, err := io.WriteString(open, "held\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := open.line(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an open connection got %q, %v through the black hole", got, err)
	}
	fresh := dial(t, p) // accepted, but not connected on
	if got, err := fresh.line(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a new connection got %q, %v through the black hole", got, err)
	}

	p.Heal()
	if got, err := open.line(5 * time.Second); err != nil || got != "held" {
		t.Fatalf("after the heal, the held line: %q, %v", got, err)
	}
	open.roundTrip(t, "after")
	if got, err := fresh.line(5 * time.Second); err != nil || got != "a" {
		t.Fatalf("after the heal, the held connection's greeting: %q, %v", got, err)
	}
}

func TestResetAndDeadBackend(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there now
	p := listen(t, backend(t, "a"), deadAddr)

	onA := dial(t, p)
	if _, err := onA.line(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	onDead := dial(t, p)
	if got, err := onDead.line(5 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection to a dead backend: %q, %v; want it closed", got, err)
	}

	p.Reset(0)
	if _, err := onA.line(5 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Reset: %v, want the connection closed", err)
	}
	if n := len(p.Conns()); n != 0 {
		t.Fatalf("%d connections held after the reset", n)
	}
}

func TestCloseEndsHeldConnections(t *testing.T) {
	p, err := Listen("127.0.0.1:0", backend(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	c := dial(t, p)
	time.Sleep(50 * time.Millisecond) // accepted and held
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a held connection")
	}
	if _, err := c.line(5 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Close: %v, want the connection closed", err)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("still listening after Close")
	}
}

func TestListenWithoutBackends(t *testing.T) {
	if _, err := Listen("127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "no backends") {
		t.Fatalf("err = %v", err)
	}
}
