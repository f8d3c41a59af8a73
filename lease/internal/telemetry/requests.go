package telemetry

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// processAPIRequests counts the library's HTTP requests to the API server
// by verb, resource and status code. It is process-wide because the
// counting transport is installed where a client is built, which knows no
// Manager, and one client may serve several Managers: so every client
// counts here and every Manager reports the same totals, as client-go's
// own rest_client metrics do.
var processAPIRequests struct {
	mu     sync.Mutex
	counts map[apiRequestKey]*atomic.Int64
}

type apiRequestKey struct{ verb, resource, code string }

func countAPIRequest(verb, resource, code string) {
	k := apiRequestKey{verb, resource, code}
	processAPIRequests.mu.Lock()
	c := processAPIRequests.counts[k]
	if c == nil {
		if processAPIRequests.counts == nil {
			processAPIRequests.counts = map[apiRequestKey]*atomic.Int64{}
		}
		c = &atomic.Int64{}
		processAPIRequests.counts[k] = c
	}
	processAPIRequests.mu.Unlock()
	c.Add(1)
}

// CountingTransport wraps next so that every request is counted in
// k8s_lease_api_requests_total (a rest.Config's Wrap takes it as it is).
func CountingTransport(next http.RoundTripper) http.RoundTripper { return countingTransport{next} }

// countingTransport counts every request by what it asked and what came
// back (code "error" when no response came).
type countingTransport struct{ next http.RoundTripper }

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb, resource := requestKind(req)
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil && resp != nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	countAPIRequest(verb, resource, code)
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport beneath.
func (t countingTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// requestKind names a request as Kubernetes does: the verb (get, list,
// watch, create, update, patch, delete) and the resource, from the method
// and the path (/api/v1/namespaces/NS/RESOURCE[/NAME] or
// /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME]). Anything else is
// "other", so a label never holds a name.
func requestKind(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	rest := []string(nil)
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	resource, named := "other", false
	if len(rest) >= 1 && len(rest) <= 3 {
		resource, named = rest[0], len(rest) >= 2
		if len(rest) == 3 {
			resource += "/" + rest[2] // a subresource
		}
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	default:
		verb = "other"
	}
	return verb, resource
}

// apiRequestCounts is a sorted copy of the process's request counts.
func apiRequestCounts() ([]apiRequestKey, map[apiRequestKey]int64) {
	processAPIRequests.mu.Lock()
	keys := make([]apiRequestKey, 0, len(processAPIRequests.counts))
	for k := range processAPIRequests.counts {
		keys = append(keys, k)
	}
	counts := make(map[apiRequestKey]int64, len(keys))
	for _, k := range keys {
		counts[k] = processAPIRequests.counts[k].Load()
	}
	processAPIRequests.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.verb+"\x00"+a.resource+"\x00"+a.code < b.verb+"\x00"+b.resource+"\x00"+b.code
	})
	return keys, counts
}
