package kubeapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

func TestPingsDeadConnections(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        rest.Config
		disableH2  string
		wantsPings bool
	}{
		{"https", rest.Config{Host: "https://10.0.0.1:6443"}, "", true},
		{"host without a scheme, TLS", rest.Config{Host: "10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "", true},
		{"http", rest.Config{Host: "http://127.0.0.1:8080"}, "", false},
		{"DISABLE_HTTP2", rest.Config{Host: "https://10.0.0.1:6443"}, "1", false},
		{"TLS without h2", rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{NextProtos: []string{"http/1.1"}}}, "", false},
		{"TLS with h2", rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{NextProtos: []string{"h2", "http/1.1"}}}, "", true},
		{"a transport of the caller's", rest.Config{Host: "https://10.0.0.1:6443", Transport: http.DefaultTransport}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DISABLE_HTTP2", tc.disableH2)
			if got := pingsDeadConnections(&tc.cfg); got != tc.wantsPings {
				t.Fatalf("pingsDeadConnections = %v, want %v", got, tc.wantsPings)
			}
			c, err := New(&tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.FindsDeadConnections(); got != tc.wantsPings {
				t.Fatalf("FindsDeadConnections = %v, want %v", got, tc.wantsPings)
			}
		})
	}
}

// A renewal's patch addresses the Lease as a Get does, under the server's
// base path, with its options as query parameters.
func TestPatchAddressesTheLease(t *testing.T) {
	for _, tc := range []struct{ name, base string }{
		{"no base path", ""},
		{"a base path (a proxy in front of the API server)", "/k8s/clusters/c-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan *http.Request, 2)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l","namespace":"ns","resourceVersion":"7"}}`)
			}))
			defer srv.Close()
			c, err := New(&rest.Config{Host: srv.URL + tc.base})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.Leases("ns").Get(ctx, "l", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			got, err := c.Leases("ns").Patch(ctx, "l", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{FieldManager: "m"})
			if err != nil {
				t.Fatal(err)
			}
			if got.ResourceVersion != "7" {
				t.Fatalf("decoded resourceVersion %q, want 7", got.ResourceVersion)
			}
			get, patch := <-seen, <-seen
			want := tc.base + "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
			if get.URL.Path != want || patch.URL.Path != want {
				t.Fatalf("paths: get %q, patch %q, want %q", get.URL.Path, patch.URL.Path, want)
			}
			if patch.Method != http.MethodPatch || patch.URL.Query().Get("fieldManager") != "m" ||
				patch.Header.Get("Content-Type") != string(types.JSONPatchType) {
				t.Fatalf("patch: %s ?%s, Content-Type %q", patch.Method, patch.URL.RawQuery, patch.Header.Get("Content-Type"))
			}
		})
	}
}

// Patch refuses, before sending anything, a name or namespace that is not
// one path segment, as client-go's Name and Namespace do.
func TestPatchRefusesWhatIsNotAPathSegment(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		http.Error(w, "unexpected", http.StatusTeapot)
	}))
	defer srv.Close()
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, namespace, lease string }{
		{"empty name", "ns", ""},
		{"name with a slash", "ns", "a/b"},
		{"name ..", "ns", ".."},
		{"name with a percent sign", "ns", "a%2F"},
		{"empty namespace", "", "l"},
		{"namespace with a slash", "a/b", "l"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sent.Load()
			_, err := c.Leases(tc.namespace).Patch(context.Background(), tc.lease, types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{})
			if err == nil {
				t.Fatal("accepted")
			}
			if n := sent.Load() - before; n != 0 {
				t.Fatalf("%d request(s) sent", n)
			}
		})
	}
}
