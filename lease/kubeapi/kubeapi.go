// Package kubeapi is the part of the Kubernetes API that k8s-lease uses:
// Leases, LeaseCandidates, Events, a merge patch on a Pod and one discovery
// question, and nothing else.
//
// Why not client-go's typed clientset: importing any of its typed clients
// links k8s.io/client-go/kubernetes/scheme, which registers every built-in
// API group (and client-go's tools/record drags in strategic merge patch,
// OpenAPI and protobuf reflection). That is most of a 31 MB library and
// several MB of heap at start in every process that loads it. The REST
// client here knows only the coordination.k8s.io types it decodes; Events
// and the Pod patch are written as JSON without core/v1 linked.
//
// client-go's typed LeaseInterface and LeaseCandidateInterface satisfy
// Leases and LeaseCandidates as they are, so a clientset (a fake one in
// unit tests) can stand behind a Client: see internal/clientsetapi.
package kubeapi

import (
	"context"

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
