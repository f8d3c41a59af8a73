package clientsetapi

import (
	"context"
	"encoding/json"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// endpointSlices is kubeapi.EndpointSlices on the typed client. Objects
// cross over as JSON (kubeapi's types carry discovery/v1's JSON names);
// errors are the typed client's, unchanged.
type endpointSlices struct {
	typed typeddiscoveryv1.EndpointSliceInterface
}

func (e endpointSlices) Get(ctx context.Context, name string) (*kubeapi.EndpointSlice, error) {
	out, err := e.typed.Get(ctx, name, metav1.GetOptions{})
	return back[kubeapi.EndpointSlice](out, err)
}

func (e endpointSlices) List(ctx context.Context, opts metav1.ListOptions) (*kubeapi.EndpointSliceList, error) {
	out, err := e.typed.List(ctx, opts)
	return back[kubeapi.EndpointSliceList](out, err)
}

func (e endpointSlices) Create(ctx context.Context, s *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	return write(s, func(in *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
		return e.typed.Create(ctx, in, metav1.CreateOptions{})
	})
}

func (e endpointSlices) Update(ctx context.Context, s *kubeapi.EndpointSlice) (*kubeapi.EndpointSlice, error) {
	return write(s, func(in *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
		return e.typed.Update(ctx, in, metav1.UpdateOptions{})
	})
}

// write is call on s, converted there and back.
func write(s *kubeapi.EndpointSlice, call func(*discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error)) (*kubeapi.EndpointSlice, error) {
	in, err := DiscoveryEndpointSlice(s)
	if err != nil {
		return nil, err
	}
	return back[kubeapi.EndpointSlice](call(in))
}

func (e endpointSlices) JSONPatch(ctx context.Context, name string, patch []byte) (*kubeapi.EndpointSlice, error) {
	out, err := e.typed.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return back[kubeapi.EndpointSlice](out, err)
}

func (e endpointSlices) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return e.typed.Delete(ctx, name, opts)
}

// DiscoveryEndpointSlice is s as the discovery/v1 EndpointSlice it stands
// for.
func DiscoveryEndpointSlice(s *kubeapi.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
	if s == nil {
		return nil, fmt.Errorf("nil endpointslice")
	}
	return convert[discoveryv1.EndpointSlice](s)
}

// back is the typed client's answer as kubeapi's type: nil with an error.
func back[T any](out any, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return convert[T](out)
}

// convert re-decodes in, through its JSON, as a T.
func convert[T any](in any) (*T, error) {
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("convert %T to %T: %w", in, out, err)
	}
	return out, nil
}
