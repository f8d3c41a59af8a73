package kubeapi

import (
	"net/http"
	"testing"

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
