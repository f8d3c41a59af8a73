package faultproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// upstream answers /ok with "ok" and streams a numbered line every 10 ms on
// /stream, as a watch does.
func startProxy(t *testing.T) (*Proxy, *http.Client, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/stream" {
			fmt.Fprint(w, "ok")
			return
		}
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "%d\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	p, err := New(target, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.CAPEM()) {
		t.Fatal("CA PEM does not parse")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	return p, client, &hits
}

func get(ctx context.Context, c *http.Client, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFaults(t *testing.T) {
	cases := []struct {
		name   string
		inject func(p *Proxy)
		// check gets the response (or error) of one GET /ok with a 500 ms
		// client timeout.
		check func(t *testing.T, resp *http.Response, err error, elapsed time.Duration, hits int64)
	}{
		{
			name:   "no fault forwards",
			inject: func(p *Proxy) {},
			check: func(t *testing.T, resp *http.Response, err error, _ time.Duration, hits int64) {
				if err != nil || resp.StatusCode != 200 || body(t, resp) != "ok" || hits != 1 {
					t.Fatalf("resp %v err %v hits %d", resp, err, hits)
				}
			},
		},
		{
			name:   "latency delays the request",
			inject: func(p *Proxy) { p.SetLatency(150 * time.Millisecond) },
			check: func(t *testing.T, resp *http.Response, err error, elapsed time.Duration, _ int64) {
				if err != nil || body(t, resp) != "ok" || elapsed < 150*time.Millisecond {
					t.Fatalf("err %v elapsed %v (want >= 150ms)", err, elapsed)
				}
			},
		},
		{
			name:   "black hole never answers",
			inject: func(p *Proxy) { p.BlackHole() },
			check: func(t *testing.T, resp *http.Response, err error, _ time.Duration, hits int64) {
				if err == nil || !strings.Contains(err.Error(), "deadline exceeded") || hits != 0 {
					t.Fatalf("resp %v err %v hits %d: want a client timeout and no upstream hit", resp, err, hits)
				}
			},
		},
		{
			name:   "429 with Retry-After and a Status body",
			inject: func(p *Proxy) { p.Throttle(http.StatusTooManyRequests, 1500*time.Millisecond, 1) },
			check: func(t *testing.T, resp *http.Response, err error, _ time.Duration, hits int64) {
				if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || hits != 0 {
					t.Fatalf("resp %v err %v hits %d", resp, err, hits)
				}
				if b := body(t, resp); !strings.Contains(b, `"reason":"TooManyRequests"`) {
					t.Fatalf("body %s", b)
				}
			},
		},
		{
			name:   "503",
			inject: func(p *Proxy) { p.Throttle(http.StatusServiceUnavailable, time.Second, -1) },
			check: func(t *testing.T, resp *http.Response, err error, _ time.Duration, _ int64) {
				if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
					t.Fatalf("resp %v err %v", resp, err)
				}
				resp.Body.Close()
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, client, hits := startProxy(t)
			tc.inject(p)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			resp, err := get(ctx, client, p.URL+"/ok")
			tc.check(t, resp, err, time.Since(start), hits.Load())
		})
	}
}

func TestThrottleCountsDownThenForwards(t *testing.T) {
	p, client, _ := startProxy(t)
	p.Throttle(http.StatusTooManyRequests, time.Second, 2)
	var codes []int
	for i := 0; i < 3; i++ {
		resp, err := get(context.Background(), client, p.URL+"/ok")
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
		resp.Body.Close()
	}
	if fmt.Sprint(codes) != "[429 429 200]" || p.Faulted() != 2 || p.Requests() != 3 {
		t.Fatalf("codes %v faulted %d requests %d", codes, p.Faulted(), p.Requests())
	}
}

func TestHealAfterBlackHole(t *testing.T) {
	p, client, _ := startProxy(t)
	p.BlackHole()
	done := make(chan error, 1)
	go func() {
		resp, err := get(context.Background(), client, p.URL+"/ok")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("black-holed request returned: %v", err)
	default:
	}
	p.Heal()
	if err := <-done; err == nil {
		t.Fatal("a request swallowed by the hole must fail when it heals, not succeed late")
	}
	// A connection the client pooled may be one the heal reset (seen once
	// in CI: "write: connection reset by peer"); what must work after the
	// heal is a new connection.
	client.CloseIdleConnections()
	resp, err := get(context.Background(), client, p.URL+"/ok")
	if err != nil || body(t, resp) != "ok" {
		t.Fatalf("after heal: %v", err)
	}
}

// A stream that was flowing stalls in the hole and breaks when it heals; a
// reset breaks it at once.
func TestStreamsStallAndReset(t *testing.T) {
	for _, name := range []string{"black hole", "reset"} {
		t.Run(name, func(t *testing.T) {
			p, client, _ := startProxy(t)
			resp, err := get(context.Background(), client, p.URL+"/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			lines := make(chan string, 1000)
			go func() {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			<-lines
			if name == "reset" {
				p.ResetConnections()
			} else {
				p.BlackHole()
				time.Sleep(50 * time.Millisecond)
				for len(lines) > 0 { // what was in flight
					<-lines
				}
				time.Sleep(100 * time.Millisecond)
				if n := len(lines); n > 1 {
					t.Fatalf("%d lines passed the black hole", n)
				}
				p.Heal()
			}
			deadline := time.After(5 * time.Second)
			for {
				select {
				case _, ok := <-lines:
					if !ok {
						return // the stream broke, as it must
					}
				case <-deadline:
					t.Fatal("the stream survived")
				}
			}
		})
	}
}

func TestKubeconfigReachesTheProxy(t *testing.T) {
	p, _, _ := startProxy(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := p.Kubeconfig(path); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != p.URL || string(cfg.CAData) != string(p.CAPEM()) || cfg.BearerToken != "" || len(cfg.CertData) != 0 {
		t.Fatalf("kubeconfig: host %s, CA %d bytes, token %q", cfg.Host, len(cfg.CAData), cfg.BearerToken)
	}
}
