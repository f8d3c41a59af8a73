package telemetry

import (
	"net/http"
	"net/url"
	"testing"
)

func TestRequestKind(t *testing.T) {
	for _, tc := range []struct {
		method, path, query string
		verb, resource      string
	}{
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "", "get", "leases"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "fieldSelector=metadata.name%3Dl", "list", "leases"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "watch=true&fieldSelector=x", "watch", "leases"},
		{"PATCH", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "", "patch", "leases"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "", "update", "leases"},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "", "create", "leases"},
		{"PATCH", "/api/v1/namespaces/ns/pods/p", "", "patch", "pods"},
		{"POST", "/api/v1/namespaces/ns/events", "", "create", "events"},
		{"PATCH", "/api/v1/namespaces/ns/pods/p/status", "", "patch", "pods/status"},
		{"DELETE", "/api/v1/namespaces/ns", "", "delete", "namespaces"},
		{"GET", "/version", "", "list", "other"},
		{"GET", "/apis/a/v1/namespaces/ns/r/n/s/extra", "", "list", "other"},
		{"OPTIONS", "/api/v1/namespaces/ns/pods", "", "other", "pods"},
	} {
		t.Run(tc.method+" "+tc.path+"?"+tc.query, func(t *testing.T) {
			req := &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path, RawQuery: tc.query}}
			verb, resource := requestKind(req)
			if verb != tc.verb || resource != tc.resource {
				t.Fatalf("requestKind = %s %s, want %s %s", verb, resource, tc.verb, tc.resource)
			}
		})
	}
}
