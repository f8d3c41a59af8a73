package kubeapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// request is what the test server saw of one request.
type request struct {
	method, path, query, contentType, body string
}

// sliceServer answers every request with status and body, and reports
// each request it saw.
func sliceServer(t *testing.T, status int, body string) (EndpointSlices, <-chan request) {
	t.Helper()
	seen := make(chan request, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), string(b)}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c.EndpointSlices("ns"), seen
}

const sliceAnswer = `{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1",` +
	`"metadata":{"name":"db-leader","namespace":"ns","resourceVersion":"8"},"addressType":"IPv4",` +
	`"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true}}],"ports":[{"name":"","protocol":"TCP","port":5432}]}`

const slicePath = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices"

// An empty endpoints list goes out as [] (the API server takes a slice
// without endpoints; null would say nothing), with the slice's apiVersion
// and kind, as JSON, to the slice's path.
func TestEndpointSliceWritesAnEmptyListAsJSON(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endpoints []Endpoint
	}{{"nil", nil}, {"empty", []Endpoint{}}} {
		t.Run(tc.name, func(t *testing.T) {
			slices, seen := sliceServer(t, http.StatusOK, sliceAnswer)
			in := &EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-leader", Namespace: "ns", ResourceVersion: "7"},
				AddressType: AddressTypeIPv4, Endpoints: tc.endpoints}
			ctx := context.Background()
			got, err := slices.Update(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if got.ResourceVersion != "8" || len(got.Endpoints) != 1 || got.Endpoints[0].Addresses[0] != "10.0.0.1" ||
				*got.Endpoints[0].Conditions.Ready != true || *got.Ports[0].Port != 5432 || *got.Ports[0].Name != "" {
				t.Fatalf("decoded %+v", got)
			}
			if _, err := slices.Create(ctx, in); err != nil {
				t.Fatal(err)
			}
			if in.Kind != "" || in.APIVersion != "" {
				t.Fatalf("the caller's slice was modified: %+v", in.TypeMeta)
			}
			update, create := <-seen, <-seen
			if update.method != http.MethodPut || update.path != slicePath+"/db-leader" || create.method != http.MethodPost || create.path != slicePath {
				t.Fatalf("update %s %s, create %s %s", update.method, update.path, create.method, create.path)
			}
			for _, r := range []request{update, create} {
				if r.contentType != "application/json" {
					t.Fatalf("%s: Content-Type %q", r.method, r.contentType)
				}
				var body map[string]json.RawMessage
				if err := json.Unmarshal([]byte(r.body), &body); err != nil {
					t.Fatalf("%s body %s: %v", r.method, r.body, err)
				}
				if string(body["endpoints"]) != "[]" || string(body["apiVersion"]) != `"discovery.k8s.io/v1"` ||
					string(body["kind"]) != `"EndpointSlice"` || !strings.Contains(string(body["metadata"]), `"resourceVersion":"7"`) {
					t.Fatalf("%s body %s", r.method, r.body)
				}
			}
		})
	}
}

// Get, List and Delete address the slices as client-go does; Delete sends
// its preconditions.
func TestEndpointSliceRequests(t *testing.T) {
	ctx := context.Background()
	slices, seen := sliceServer(t, http.StatusOK, sliceAnswer)
	if got, err := slices.Get(ctx, "db-leader"); err != nil || got.Name != "db-leader" || got.AddressType != AddressTypeIPv4 {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if r := <-seen; r.method != http.MethodGet || r.path != slicePath+"/db-leader" {
		t.Fatalf("get: %s %s", r.method, r.path)
	}
	rv := "8"
	if err := slices.Delete(ctx, "db-leader", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil {
		t.Fatal(err)
	}
	if r := <-seen; r.method != http.MethodDelete || r.path != slicePath+"/db-leader" || !strings.Contains(r.body, `"preconditions":{"resourceVersion":"8"}`) {
		t.Fatalf("delete: %s %s %s", r.method, r.path, r.body)
	}

	list, seenList := sliceServer(t, http.StatusOK, `{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"9"},"items":[`+sliceAnswer+`]}`)
	got, err := list.List(ctx, metav1.ListOptions{LabelSelector: "endpointslice.kubernetes.io/managed-by=x"})
	if err != nil || got.ResourceVersion != "9" || len(got.Items) != 1 || got.Items[0].Name != "db-leader" {
		t.Fatalf("list: %+v, %v", got, err)
	}
	if r := <-seenList; r.method != http.MethodGet || r.path != slicePath || r.query != "labelSelector=endpointslice.kubernetes.io%2Fmanaged-by%3Dx" {
		t.Fatalf("list: %s %s?%s", r.method, r.path, r.query)
	}
}

// The server's Status comes back as client-go's StatusError, so that
// apierrors' checks hold.
func TestEndpointSliceErrorsAreStatusErrors(t *testing.T) {
	status := func(code int, reason metav1.StatusReason) string {
		b, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: int32(code), Reason: reason, Message: "endpointslices.discovery.k8s.io \"db-leader\": " + string(reason)})
		return string(b)
	}
	ctx := context.Background()
	s := &EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-leader"}, AddressType: AddressTypeIPv4}
	for _, tc := range []struct {
		name   string
		code   int
		reason metav1.StatusReason
		call   func(EndpointSlices) error
		is     func(error) bool
	}{
		{"not found", http.StatusNotFound, metav1.StatusReasonNotFound, func(c EndpointSlices) error { _, err := c.Get(ctx, "db-leader"); return err }, apierrors.IsNotFound},
		{"already exists", http.StatusConflict, metav1.StatusReasonAlreadyExists, func(c EndpointSlices) error { _, err := c.Create(ctx, s); return err }, apierrors.IsAlreadyExists},
		{"conflict", http.StatusConflict, metav1.StatusReasonConflict, func(c EndpointSlices) error { _, err := c.Update(ctx, s); return err }, apierrors.IsConflict},
		{"forbidden", http.StatusForbidden, metav1.StatusReasonForbidden, func(c EndpointSlices) error { _, err := c.List(ctx, metav1.ListOptions{}); return err }, apierrors.IsForbidden},
		{"invalid", http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, func(c EndpointSlices) error { _, err := c.Create(ctx, s); return err }, apierrors.IsInvalid},
		{"precondition", http.StatusConflict, metav1.StatusReasonConflict, func(c EndpointSlices) error { return c.Delete(ctx, "db-leader", metav1.DeleteOptions{}) }, apierrors.IsConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := sliceServer(t, tc.code, status(tc.code, tc.reason))
			err := tc.call(c)
			if _, ok := err.(*apierrors.StatusError); !ok || !tc.is(err) || !strings.Contains(err.Error(), string(tc.reason)) {
				t.Fatalf("error %T %v, want a StatusError of reason %s", err, err, tc.reason)
			}
		})
	}
}
