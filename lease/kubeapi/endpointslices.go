package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

func (c *restClient) EndpointSlices(namespace string) EndpointSlices {
	return endpointSlices{c.discovery, namespace}
}

// endpointSlices reads and writes EndpointSlices as JSON, with
// encoding/json: they are not in the scheme (their types here have no
// protobuf form and no DeepCopyObject). Requests go through client-go's
// Request all the same, so that an error is the server's Status as a
// *apierrors.StatusError (Result.Error), as for the typed resources.
type endpointSlices struct {
	client    rest.Interface // discovery.k8s.io/v1, JSON
	namespace string
}

const endpointSlicesResource = "endpointslices"

// endpointSliceType is what a written slice says it is.
var endpointSliceType = metav1.TypeMeta{APIVersion: discoveryV1.String(), Kind: "EndpointSlice"}

func (e endpointSlices) Get(ctx context.Context, name string) (*EndpointSlice, error) {
	return decode[EndpointSlice](e.client.Get().Namespace(e.namespace).Resource(endpointSlicesResource).Name(name).Do(ctx))
}

func (e endpointSlices) List(ctx context.Context, opts metav1.ListOptions) (*EndpointSliceList, error) {
	return decode[EndpointSliceList](e.client.Get().Namespace(e.namespace).Resource(endpointSlicesResource).
		VersionedParams(&opts, parameterCodec).Do(ctx))
}

func (e endpointSlices) Create(ctx context.Context, s *EndpointSlice) (*EndpointSlice, error) {
	body, err := e.body(s)
	if err != nil {
		return nil, err
	}
	return decode[EndpointSlice](e.client.Post().Namespace(e.namespace).Resource(endpointSlicesResource).
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).Do(ctx))
}

func (e endpointSlices) Update(ctx context.Context, s *EndpointSlice) (*EndpointSlice, error) {
	body, err := e.body(s)
	if err != nil {
		return nil, err
	}
	return decode[EndpointSlice](e.client.Put().Namespace(e.namespace).Resource(endpointSlicesResource).Name(s.Name).
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).Do(ctx))
}

func (e endpointSlices) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return e.client.Delete().Namespace(e.namespace).Resource(endpointSlicesResource).Name(name).Body(&opts).Do(ctx).Error()
}

func (e endpointSlices) JSONPatch(ctx context.Context, name string, patch []byte) (*EndpointSlice, error) {
	return decode[EndpointSlice](e.client.Patch(types.JSONPatchType).Namespace(e.namespace).Resource(endpointSlicesResource).
		Name(name).Body(patch).Do(ctx))
}

// body is s as JSON, with its apiVersion and kind (s is not modified). A
// []byte body has no Content-Type of its own: the requests set it.
func (e endpointSlices) body(s *EndpointSlice) ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("endpointslice in namespace %q: nil", e.namespace)
	}
	out := *s
	out.TypeMeta = endpointSliceType
	return json.Marshal(out)
}

// decode is the error of res (the server's Status, when it sent one), or
// its body decoded as a T.
func decode[T any](res rest.Result) (*T, error) {
	if err := res.Error(); err != nil {
		return nil, err
	}
	raw, err := res.Raw()
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("decode %T: %w", out, err)
	}
	return out, nil
}
