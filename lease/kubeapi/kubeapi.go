// Package kubeapi is the part of the Kubernetes API that k8s-lease uses:
// Leases, LeaseCandidates, Events, the EndpointSlice of a leader's endpoint,
// a merge patch on a Pod and one discovery question, and nothing else.
//
// Why not client-go's typed clientset: importing any of its typed clients
// links k8s.io/client-go/kubernetes/scheme, which registers every built-in
// API group (and client-go's tools/record drags in strategic merge patch,
// OpenAPI and protobuf reflection). That is most of a 31 MB library and
// several MB of heap at start in every process that loads it. The REST
// client here knows only the coordination.k8s.io types it decodes; Events
// and the Pod patch are written as JSON without core/v1 linked, and
// EndpointSlices are this package's own types, read and written as JSON
// (k8s.io/api/discovery/v1 imports core/v1, so it is not linked either).
//
// client-go's typed LeaseInterface and LeaseCandidateInterface satisfy
// Leases and LeaseCandidates as they are, so a clientset (a fake one in
// unit tests) can stand behind a Client: see internal/clientsetapi.
package kubeapi

import (
	"context"
	"encoding/json"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// Client is what the library asks of the API server.
type Client interface {
	// Leases are coordination.k8s.io/v1 Leases in namespace.
	Leases(namespace string) Leases
	// LeaseCandidates are coordination.k8s.io/v1beta1 LeaseCandidates in
	// namespace (served only with the CoordinatedLeaderElection gate).
	LeaseCandidates(namespace string) LeaseCandidates
	// EndpointSlices are discovery.k8s.io/v1 EndpointSlices in namespace.
	EndpointSlices(namespace string) EndpointSlices
	// CreateEvent writes ev (a core/v1 Event) in its namespace.
	CreateEvent(ctx context.Context, ev *Event) error
	// PatchPod applies a JSON merge patch to a Pod.
	PatchPod(ctx context.Context, namespace, name string, mergePatch []byte) error
	// ServedResources names the resources that groupVersion ("group/version")
	// serves; an error for which apierrors.IsNotFound holds when it serves
	// none.
	ServedResources(ctx context.Context, groupVersion string) ([]string, error)
	// FindsDeadConnections reports whether the transport finds a connection
	// that died silently by itself (HTTP/2 pings), so that watches need not
	// end early to find it.
	FindsDeadConnections() bool
	// CloseSilentConnections closes the client's connections to the API
	// server that have received nothing since since (a frozen server's;
	// one dialled later that never received a byte counts),
	// so that the next request dials anew, and reports how many it closed:
	// 0 where the client does not dial its own connections.
	CloseSilentConnections(since time.Time) int
	// Connections is how many connections the client holds open (-1: not
	// known, where it does not dial its own); an Urgent client's are not
	// counted.
	Connections() int
	// Urgent is a client on a connection pool of its own, dialled only
	// when a request is sent on it, for requests that must not wait on a
	// connection of this one that may hang (a leader's renewals when its
	// term is about to lapse): behind a load balancer, its connection can
	// reach another API server. Its CloseSilentConnections also counts
	// silent a connection dialled after since that received nothing past
	// its handshake (handshakeGrace): a server that froze just after
	// answering it. That closes a connection to a merely slow server too,
	// which only an urgent pool's requests, sent beside others, can
	// afford. nil where the client does not dial its own connections.
	Urgent() Client
	// CloseIdleConnections closes the connections with no request in
	// flight; CloseConnections closes them all, failing what is in
	// flight on them.
	CloseIdleConnections()
	CloseConnections()
}

// Leases is the subset of client-go's LeaseInterface that the library
// calls, with the same signatures.
type Leases interface {
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// LeaseCandidates is the subset of client-go's LeaseCandidateInterface
// (coordination.k8s.io/v1beta1) that the library calls.
type LeaseCandidates interface {
	Create(ctx context.Context, c *coordinationv1beta1.LeaseCandidate, opts metav1.CreateOptions) (*coordinationv1beta1.LeaseCandidate, error)
	Update(ctx context.Context, c *coordinationv1beta1.LeaseCandidate, opts metav1.UpdateOptions) (*coordinationv1beta1.LeaseCandidate, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1beta1.LeaseCandidate, error)
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1beta1.LeaseCandidateList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// EndpointSlices is what the library does with discovery.k8s.io/v1
// EndpointSlices. Errors from the API server are *apierrors.StatusError, as
// client-go's (apierrors.IsNotFound, IsConflict, IsAlreadyExists hold); the
// object returned with an error is nil.
type EndpointSlices interface {
	Get(ctx context.Context, name string) (*EndpointSlice, error)
	Create(ctx context.Context, s *EndpointSlice) (*EndpointSlice, error)
	// Update replaces the slice s.Name; s.ResourceVersion, when set, makes
	// it a compare-and-swap (a conflict when the slice changed since).
	Update(ctx context.Context, s *EndpointSlice) (*EndpointSlice, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	List(ctx context.Context, opts metav1.ListOptions) (*EndpointSliceList, error)
	// JSONPatch applies an RFC 6902 patch to the slice name: its "test"
	// operations make it a compare-and-swap on the fields they test (a
	// failed test is a 422, Invalid).
	JSONPatch(ctx context.Context, name string, patch []byte) (*EndpointSlice, error)
}

// Event is a core/v1 Event with the fields the library sets, under the same
// JSON names (k8s.io/api/core/v1 is not linked; see the package doc).
type Event struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`

	InvolvedObject ObjectReference `json:"involvedObject"`
	Reason         string          `json:"reason,omitempty"`
	Message        string          `json:"message,omitempty"`
	Source         EventSource     `json:"source,omitempty"`
	FirstTimestamp metav1.Time     `json:"firstTimestamp,omitempty"`
	LastTimestamp  metav1.Time     `json:"lastTimestamp,omitempty"`
	Count          int32           `json:"count,omitempty"`
	Type           string          `json:"type,omitempty"`
	// ReportingController and ReportingInstance are what client-go's
	// recorder fills from the source (the API server's events.k8s.io view
	// shows them).
	ReportingController string `json:"reportingComponent"`
	ReportingInstance   string `json:"reportingInstance"`
}

// ObjectReference is core/v1's, as far as an Event's involvedObject uses it.
type ObjectReference struct {
	Kind       string    `json:"kind,omitempty"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name,omitempty"`
	UID        types.UID `json:"uid,omitempty"`
	APIVersion string    `json:"apiVersion,omitempty"`
}

// EventSource is core/v1's.
type EventSource struct {
	Component string `json:"component,omitempty"`
	Host      string `json:"host,omitempty"`
}

// The Event types of core/v1.
const (
	EventTypeNormal  = "Normal"
	EventTypeWarning = "Warning"
)

// EndpointSlice is a discovery.k8s.io/v1 EndpointSlice with the fields the
// library reads and writes, under the same JSON names. Fields it does not
// know (an endpoint's hostname, zone, hints...) are dropped by a
// read-modify-Update: the library only ever updates slices of its own.
type EndpointSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`

	// AddressType is AddressTypeIPv4 or AddressTypeIPv6 (or "FQDN"); the
	// API server refuses to change it.
	AddressType string `json:"addressType"`
	// Endpoints is never omitted: an empty list is sent as [] (MarshalJSON).
	Endpoints []Endpoint     `json:"endpoints"`
	Ports     []EndpointPort `json:"ports"`
}

// MarshalJSON writes a nil Endpoints as [], as an empty one.
func (s EndpointSlice) MarshalJSON() ([]byte, error) {
	type plain EndpointSlice // without this method
	p := plain(s)
	if p.Endpoints == nil {
		p.Endpoints = []Endpoint{}
	}
	return json.Marshal(p)
}

// Endpoint is one endpoint of an EndpointSlice.
type Endpoint struct {
	Addresses  []string           `json:"addresses"`
	Conditions EndpointConditions `json:"conditions,omitempty"`
}

// EndpointConditions are an endpoint's conditions; nil is unknown (kube-proxy
// takes an unknown ready as ready).
type EndpointConditions struct {
	Ready       *bool `json:"ready,omitempty"`
	Serving     *bool `json:"serving,omitempty"`
	Terminating *bool `json:"terminating,omitempty"`
}

// EndpointPort is a port of an EndpointSlice. Name must be the name of the
// Service's port ("" for a Service's one unnamed port); Protocol is a
// core/v1 Protocol ("TCP", "UDP", "SCTP").
type EndpointPort struct {
	Name     *string `json:"name,omitempty"`
	Protocol *string `json:"protocol,omitempty"`
	Port     *int32  `json:"port,omitempty"`
}

// EndpointSliceList is a list of EndpointSlices.
type EndpointSliceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []EndpointSlice `json:"items"`
}

// The address types of discovery.k8s.io/v1 that the library writes.
const (
	AddressTypeIPv4 = "IPv4"
	AddressTypeIPv6 = "IPv6"
)
