package kubeconfig

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// tokenServer answers 404 to requests bearing the good token and 401 to
// others, and remembers the last Authorization header.
func tokenServer(t *testing.T, good string) (*httptest.Server, *atomic.Pointer[string], *atomic.Int64) {
	var auth atomic.Pointer[string]
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		a := r.Header.Get("Authorization")
		auth.Store(&a)
		w.Header().Set("Content-Type", "application/json")
		if a != "Bearer "+good {
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
			return
		}
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &auth, &hits
}

func writeTokenFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A 401 makes the next request read the token file again (client-go alone
// re-reads it once a minute), and the transport does not retry by itself.
func TestTokenFileRereadAfter401(t *testing.T) {
	srv, _, hits := tokenServer(t, "new")
	file := filepath.Join(t.TempDir(), "token")
	writeTokenFile(t, file, "old")
	c, err := NewClient(&rest.Config{Host: srv.URL, BearerTokenFile: file}, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func() error {
		_, err := c.Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
		return err
	}
	for _, step := range []struct {
		name     string
		rotateTo string
		want     func(error) bool
		hits     int64
	}{
		{"old token refused", "", apierrors.IsUnauthorized, 1},
		{"file unchanged: refused again", "", apierrors.IsUnauthorized, 2},
		{"file rotated: the next request sends the new token", "new", apierrors.IsNotFound, 3},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.rotateTo != "" {
				writeTokenFile(t, file, step.rotateTo)
			}
			if err := get(); !step.want(err) || hits.Load() != step.hits {
				t.Fatalf("err = %v after %d requests, want %d requests", err, hits.Load(), step.hits)
			}
		})
	}
}

// The file re-reading keeps client-go's precedence and fallbacks: with a
// token and an unreadable token file (a kubeconfig may have both), the
// token is sent, as client-go does.
func TestTokenFileFallsBackToStaticToken(t *testing.T) {
	srv, auth, _ := tokenServer(t, "static")
	cfg := &rest.Config{Host: srv.URL, BearerToken: "static", BearerTokenFile: filepath.Join(t.TempDir(), "missing-token")}
	c, err := NewClient(cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
	got := "<no request reached the server>"
	if p := auth.Load(); p != nil {
		got = *p
	}
	if !apierrors.IsNotFound(err) {
		t.Fatalf("err = %v (Authorization %q), want the static token sent and a 404", err, got)
	}
}
