package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// scheme knows the types the library decodes: coordination.k8s.io v1 and
// v1beta1, and metav1's options and Status (as client-go's own scheme
// registers them, under the core group's "v1" and each group's version).
var (
	scheme         = runtime.NewScheme()
	codecs         = serializer.NewCodecFactory(scheme)
	parameterCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	// The options and Status under discovery.k8s.io/v1, for the
	// EndpointSlices' query parameters and DeleteOptions (the slices
	// themselves are plain JSON: endpointSlices).
	metav1.AddToGroupVersion(scheme, discoveryV1)
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := coordinationv1beta1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

// restClient is a Client on client-go's REST client: one HTTP client (one
// connection pool) shared by the four API paths it uses.
type restClient struct {
	pings            bool              // see FindsDeadConnections
	conns            *conns            // the connections it dialled; nil: a custom transport dials them
	urgent           *restClient       // see Urgent; nil: none (a custom transport, or this is it)
	transport        http.RoundTripper // the pool's, for CloseIdleConnections
	coordination     rest.Interface    // /apis/coordination.k8s.io/v1
	coordinationBeta rest.Interface    // /apis/coordination.k8s.io/v1beta1
	discovery        rest.Interface    // /apis/discovery.k8s.io/v1 (EndpointSlices, JSON)
	core             rest.Interface    // /api/v1 (Events, Pods)
}

// discoveryV1 is discovery.k8s.io/v1 (k8s.io/api/discovery/v1 is not
// linked: see the package doc).
var discoveryV1 = schema.GroupVersion{Group: "discovery.k8s.io", Version: "v1"}

// New returns a Client for cfg, which it does not modify. Timeouts and rate
// limiting are cfg's (a QPS above 0 gives each of the four API paths a
// limiter of its own; the library's NewClient turns client-side limiting
// off). The coordination types speak protobuf whatever cfg.ContentType says,
// EndpointSlices JSON.
func New(cfg *rest.Config) (Client, error) {
	if cfg == nil {
		return nil, errors.New("nil rest config")
	}
	rc, err := newRESTClient(cfg, false)
	if err != nil {
		return nil, err
	}
	if rc.conns != nil {
		if rc.urgent, err = newRESTClient(cfg, true); err != nil {
			return nil, err
		}
	}
	return rc, nil
}

// newRESTClient is New's client on a connection pool of its own (an urgent
// one: see Client.Urgent).
func newRESTClient(cfg *rest.Config, urgent bool) (*restClient, error) {
	var cs *conns
	if cfg.Transport == nil {
		// client-go's transport, on a dialer that keeps the connections
		// (conns.go). A Dial of its own also gives the client a connection
		// pool of its own: client-go shares one transport between configs
		// with the same TLS settings, and a dialer.
		cs = newConns(cfg.Dial)
		cs.urgent = urgent
		cfg = rest.CopyConfig(cfg)
		cfg.Dial = cs.Dial
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	forGroup := func(gv schema.GroupVersion, apiPath, contentType string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		switch contentType {
		case runtime.ContentTypeProtobuf:
			// Built-in types speak protobuf: a renewal's answer (the whole
			// Lease) decodes at a fraction of JSON's cost, which was the
			// largest part of the library's CPU at 1000 elections. A
			// patch's body stays JSON (its Content-Type is the patch type).
			c.ContentType = runtime.ContentTypeProtobuf
			c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		case runtime.ContentTypeJSON:
			// Types of this package's own, which have no protobuf form.
			c.ContentType = runtime.ContentTypeJSON
			c.AcceptContentTypes = runtime.ContentTypeJSON
		}
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	rc := restClient{pings: pingsDeadConnections(cfg), conns: cs, transport: httpClient.Transport}
	if rc.coordination, err = forGroup(coordinationv1.SchemeGroupVersion, "/apis", runtime.ContentTypeProtobuf); err != nil {
		return nil, err
	}
	if rc.coordinationBeta, err = forGroup(coordinationv1beta1.SchemeGroupVersion, "/apis", runtime.ContentTypeProtobuf); err != nil {
		return nil, err
	}
	if rc.discovery, err = forGroup(discoveryV1, "/apis", runtime.ContentTypeJSON); err != nil {
		return nil, err
	}
	if rc.core, err = forGroup(schema.GroupVersion{Version: "v1"}, "/api", ""); err != nil {
		return nil, err
	}
	return &rc, nil
}

// Urgent is nil where the client does not dial its own connections: the
// pool is then the caller's transport's, and dialling anew is not ours to
// ask.
func (c *restClient) Urgent() Client {
	if c.urgent == nil {
		return nil
	}
	return c.urgent
}

func (c *restClient) CloseIdleConnections() {
	utilnet.CloseIdleConnectionsFor(c.transport)
}

func (c *restClient) CloseConnections() {
	if c.conns != nil {
		c.conns.closeIf(func(*conn) bool { return true })
	}
}

func (c *restClient) FindsDeadConnections() bool { return c.pings }

func (c *restClient) CloseSilentConnections(since time.Time) int {
	if c.conns == nil {
		return 0
	}
	return c.conns.closeSilent(since)
}

func (c *restClient) Connections() int {
	if c.conns == nil {
		return -1
	}
	return c.conns.count()
}

// pingsDeadConnections: client-go's own transport (cfg.Transport unset)
// speaks HTTP/2 to an https server unless DISABLE_HTTP2 is set or the TLS
// configuration leaves h2 out, and then pings a connection after 30 s
// without a frame (k8s.io/apimachinery/pkg/util/net).
func pingsDeadConnections(cfg *rest.Config) bool {
	if cfg.Transport != nil || os.Getenv("DISABLE_HTTP2") != "" {
		return false
	}
	if protos := cfg.TLSClientConfig.NextProtos; len(protos) > 0 && !slices.Contains(protos, "h2") {
		return false
	}
	u, _, err := rest.DefaultServerUrlFor(cfg)
	return err == nil && u.Scheme == "https"
}

func (c *restClient) Leases(namespace string) Leases {
	return leases{&resource[*coordinationv1.Lease, *coordinationv1.LeaseList]{c.coordination, namespace, "leases",
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} }}}
}

func (c *restClient) LeaseCandidates(namespace string) LeaseCandidates {
	return &resource[*coordinationv1beta1.LeaseCandidate, *coordinationv1beta1.LeaseCandidateList]{c.coordinationBeta, namespace, "leasecandidates",
		func() *coordinationv1beta1.LeaseCandidate { return &coordinationv1beta1.LeaseCandidate{} },
		func() *coordinationv1beta1.LeaseCandidateList { return &coordinationv1beta1.LeaseCandidateList{} }}
}

func (c *restClient) CreateEvent(ctx context.Context, ev *Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.core.Post().Namespace(ev.Namespace).Resource("events").
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).Do(ctx).Error()
}

func (c *restClient) PatchPod(ctx context.Context, namespace, name string, mergePatch []byte) error {
	return c.core.Patch(types.MergePatchType).Namespace(namespace).Resource("pods").Name(name).
		Body(mergePatch).Do(ctx).Error()
}

func (c *restClient) ServedResources(ctx context.Context, groupVersion string) ([]string, error) {
	group, version, ok := strings.Cut(groupVersion, "/")
	if !ok || group == "" || version == "" {
		return nil, fmt.Errorf("group version %q: want group/version", groupVersion)
	}
	// JSON: the client's protobuf would bring discovery's answer as
	// protobuf, which this decodes with encoding/json.
	raw, err := c.coordination.Get().AbsPath("/apis", group, version).SetHeader("Accept", runtime.ContentTypeJSON).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("discovery of %s: %w", groupVersion, err)
	}
	names := make([]string, 0, len(list.APIResources))
	for _, r := range list.APIResources {
		names = append(names, r.Name)
	}
	return names, nil
}

// resource is one namespaced resource of a group version whose objects
// are T and lists L (pointers to the API types, as client-go's typed
// clients return them).
type resource[T object, L runtime.Object] struct {
	client    rest.Interface
	namespace string
	name      string
	newObject func() T
	newList   func() L
}

type object interface {
	runtime.Object
	GetName() string
}

func (r *resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObject()
	return out, r.client.Get().Namespace(r.namespace).Resource(r.name).Name(name).
		VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
}

func (r *resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	return out, r.listRequest(opts).Do(ctx).Into(out)
}

func (r *resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.listRequest(opts).Watch(ctx)
}

// listRequest is the request of a List or a Watch, the client's timeout
// that of the server (TimeoutSeconds) when one is asked for.
func (r *resource[T, L]) listRequest(opts metav1.ListOptions) *rest.Request {
	req := r.client.Get().Namespace(r.namespace).Resource(r.name).VersionedParams(&opts, parameterCodec)
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return req
}

func (r *resource[T, L]) Create(ctx context.Context, in T, opts metav1.CreateOptions) (T, error) {
	out := r.newObject()
	return out, r.client.Post().Namespace(r.namespace).Resource(r.name).
		VersionedParams(&opts, parameterCodec).Body(in).Do(ctx).Into(out)
}

func (r *resource[T, L]) Update(ctx context.Context, in T, opts metav1.UpdateOptions) (T, error) {
	out := r.newObject()
	return out, r.client.Put().Namespace(r.namespace).Resource(r.name).Name(in.GetName()).
		VersionedParams(&opts, parameterCodec).Body(in).Do(ctx).Into(out)
}

func (r *resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.client.Delete().Namespace(r.namespace).Resource(r.name).Name(name).Body(&opts).Do(ctx).Error()
}

// leases adds the patch that renewals are.
type leases struct {
	*resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
}

// leasesPath is the path of the Leases API under the server's base path.
var leasesPath = "/apis/" + coordinationv1.SchemeGroupVersion.String()

// Patch, a renewal, addresses the Lease by its whole path (AbsPath), not
// by namespace, resource and name: client-go rebuilds a request's URL from
// those, with three path.Join calls, each time the request reads its URL
// (to send it, and for each of its metrics); that was 15 % of the bytes the
// library allocated at 1000 elections renewing every 2 s. In one 20 s
// window each, in a Go program: 8.5 MB/s and 99,000 objects/s before, 7.5
// MB/s and 84,000 after (client-go's own leader election: 7.9 MB/s).
// The same URL (TestPatchAddressesTheLease), and the same checks of the
// namespace, name and subresources as one path segment each, which AbsPath
// does not make. What it costs: an answer that is not a Kubernetes Status
// (a proxy's error page) is reported without the resource and name, which
// the caller's message has.
func (l leases) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	if err := pathSegment("namespace", l.namespace); err != nil {
		return out, err
	}
	if err := pathSegment("name", name); err != nil {
		return out, err
	}
	for _, v := range subresources {
		if err := pathSegment("subresource", v); err != nil {
			return out, err
		}
	}
	segments := append([]string{leasesPath, "namespaces", l.namespace, l.name, name}, subresources...)
	return out, l.client.Patch(pt).AbsPath(segments...).
		VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(out)
}

// pathSegment checks v as client-go's Namespace and Name do.
func pathSegment(what, v string) error {
	if v == "" {
		return fmt.Errorf("lease %s: must not be empty", what)
	}
	if msgs := rest.IsValidPathSegmentName(v); len(msgs) > 0 {
		return fmt.Errorf("lease %s %q: %s", what, v, strings.Join(msgs, "; "))
	}
	return nil
}
