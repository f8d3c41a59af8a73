package kubeapi

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// frozenServer is an HTTPS API server speaking HTTP/2 that answers Lease
// GETs, except those that arrive while frozen: they get no answer, as from
// a SIGSTOPped kube-apiserver whose connection stays open. It records the
// client address of every request.
type frozenServer struct {
	*httptest.Server
	mu      sync.Mutex
	frozen  bool
	held    chan struct{} // a frozen request arrived
	remotes []string
}

func newFrozenServer(t *testing.T) *frozenServer {
	t.Helper()
	s := &frozenServer{held: make(chan struct{}, 16)}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		frozen := s.frozen
		s.remotes = append(s.remotes, r.RemoteAddr)
		s.mu.Unlock()
		if frozen {
			s.held <- struct{}{}
			<-r.Context().Done() // until the client gives the connection up
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l","namespace":"ns","resourceVersion":"7"}}`)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *frozenServer) freeze(frozen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = frozen
}

func (s *frozenServer) remote(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.remotes[i]
}

// clientOf is a Client of the library's own for s, trusting its
// certificate, on client-go's transport (HTTP/2).
func clientOf(t *testing.T, s *frozenServer) Client {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	c, err := New(&rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A request on a connection to a frozen server is cut short once the
// connections that received nothing since it was sent are closed: client-go
// then sends it again (a GET), and it and every later request go out on a
// connection dialled anew, which reaches the server once it answers.
func TestClosingASilentConnectionRedialsTheNextRequest(t *testing.T) {
	s := newFrozenServer(t)
	c := clientOf(t, s)
	leases := c.Leases("ns")
	if _, err := leases.Get(t.Context(), "l", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := c.Connections(); n != 1 {
		t.Fatalf("%d connections after one request; want 1", n)
	}
	s.freeze(true)
	sent := time.Now()
	hung := make(chan error, 1)
	go func() {
		_, err := leases.Get(context.Background(), "l", metav1.GetOptions{}) // no deadline: only the close ends its wait
		hung <- err
	}()
	<-s.held
	if n := c.CloseSilentConnections(sent); n != 1 {
		t.Fatalf("closed %d connections silent since the frozen request; want 1", n)
	}
	<-s.held // client-go sent it again, on a new connection: the server is still frozen
	s.freeze(false)
	c.CloseSilentConnections(time.Now()) // the second one's wait ends too; the third attempt is answered
	select {
	case err := <-hung:
		if err != nil {
			t.Fatalf("the request sent again after the close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request on the closed connection still waits 10 s after the close")
	}
	if first, again := s.remote(0), s.remote(2); first == again {
		t.Fatalf("the request was sent again from %s, the closed connection's address; want a new connection", again)
	}
	if _, err := leases.Get(t.Context(), "l", metav1.GetOptions{}); err != nil {
		t.Fatalf("the request after the close: %v", err)
	}
	if n := c.Connections(); n != 1 {
		t.Fatalf("%d connections after the redials; want 1 (the closed ones forgotten)", n)
	}
}

// A connection that received something since is not silent: it stays.
func TestAConnectionThatAnsweredIsNotClosed(t *testing.T) {
	s := newFrozenServer(t)
	c := clientOf(t, s)
	since := time.Now()
	if _, err := c.Leases("ns").Get(t.Context(), "l", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := c.CloseSilentConnections(since); n != 0 {
		t.Fatalf("closed %d connections that answered since; want 0", n)
	}
	if _, err := c.Leases("ns").Get(t.Context(), "l", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if first, second := s.remote(0), s.remote(1); first != second {
		t.Fatalf("the second request came from %s, the first from %s; want the same connection", second, first)
	}
}

// A transport of the caller's dials its own connections: nothing to close.
func TestACallersTransportHasNoConnectionsToClose(t *testing.T) {
	c, err := New(&rest.Config{Host: "https://10.0.0.1:6443", Transport: http.DefaultTransport})
	if err != nil {
		t.Fatal(err)
	}
	if n, live := c.CloseSilentConnections(time.Now()), c.Connections(); n != 0 || live != -1 {
		t.Fatalf("CloseSilentConnections = %d, Connections = %d; want 0, -1", n, live)
	}
	if u := c.Urgent(); u != nil {
		t.Fatal("a client on the caller's transport has an urgent pool; want none (dialling anew is not ours to ask)")
	}
}

// A connection dialled to a server that accepts and then answers nothing
// (a frozen kube-apiserver: its kernel completes the TCP handshake, the
// process never the TLS one) has left its handshake unanswered: it is
// silent, even to a request sent before it was dialled (the request that
// dialled it): it is closed once its handshake had handshakeGrace, and the
// request on it goes out again at once on a connection dialled anew
// (client-go sends a GET again) instead of waiting for the TLS handshake
// timeout.
func TestAConnectionThatNeverAnsweredIsSilent(t *testing.T) {
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var accepted []net.Conn
	t.Cleanup(func() {
		mute.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			c.Close()
		}
	})
	go func() {
		for {
			conn, err := mute.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, conn)
			mu.Unlock()
		}
	}()
	dialled := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted)
	}
	c, err := New(&rest.Config{Host: "https://" + mute.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	done := make(chan struct{})
	sent := time.Now()
	go func() {
		defer close(done)
		_, _ = c.Leases("ns").Get(ctx, "l", metav1.GetOptions{})
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for dialled() == 0 || c.Connections() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no connection dialled within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := c.CloseSilentConnections(sent); n != 0 {
		t.Fatalf("closed %d connections within the handshake's grace; want 0", n)
	}
	time.Sleep(handshakeGrace)
	if n := c.CloseSilentConnections(sent); n != 1 {
		t.Fatalf("closed %d connections whose handshake is unanswered; want 1", n)
	}
	for dialled() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the request was not sent again on a new connection within 5 s of the close")
		}
		time.Sleep(5 * time.Millisecond)
	}

}

// A server that answered a connection's TLS handshake and then froze
// (traced: a load balancer put a redialled connection on the frozen API
// server again) leaves that connection bytes younger than the request
// that dialled it. The client's own pool keeps it (a slow server looks the
// same, and its answers must be waited for); the urgent pool, whose
// requests go beside others, closes it once it received nothing past
// handshakeGrace after its dial. The urgent pool is a pool of its own,
// dialled only when used, and its idle connection is closed on request.
func TestTheUrgentPoolClosesAConnectionThatAnsweredOnlyItsHandshake(t *testing.T) {
	s := newFrozenServer(t)
	c := clientOf(t, s)
	u := c.Urgent()
	if u == nil {
		t.Fatal("no urgent pool on client-go's transport")
	}
	if n := u.Connections(); n != 0 {
		t.Fatalf("the urgent pool holds %d connections before any request; want 0", n)
	}
	s.freeze(true)
	for _, pool := range []struct {
		name    string
		client  Client
		closing int
	}{{"the client's own pool", c, 0}, {"the urgent pool", u, 1}} {
		ctx, cancel := context.WithCancel(t.Context())
		sent := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = pool.client.Leases("ns").Get(ctx, "l", metav1.GetOptions{})
		}()
		<-s.held // the connection answered its handshake: the request reached the handler
		time.Sleep(handshakeGrace + 50*time.Millisecond)
		if n := pool.client.CloseSilentConnections(sent); n != pool.closing {
			t.Errorf("%s closed %d connections that answered only their handshake; want %d", pool.name, n, pool.closing)
		}
		cancel()
		<-done
	}
	s.freeze(false)
	if _, err := u.Leases("ns").Get(t.Context(), "l", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if nu, nc := u.Connections(), c.Connections(); nu != 1 || nc != 1 {
		t.Fatalf("%d connections in the urgent pool, %d in the client's; want 1 and 1", nu, nc)
	}
	u.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for u.Connections() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the urgent pool still holds %d connections 5 s after CloseIdleConnections", u.Connections())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := c.Connections(); n != 1 {
		t.Fatalf("the client's pool holds %d connections after the urgent pool's were closed; want 1", n)
	}
}
