// Package clientsetapi puts a client-go clientset (a fake one in unit
// tests, or a real one in tools) behind the library's kubeapi.Client. It
// links the whole typed clientset, so it is for tests and tools only: the
// shipped library never imports it (make check-deps).
package clientsetapi

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// Wrap returns a kubeapi.Client that calls c.
func Wrap(c kubernetes.Interface) kubeapi.Client { return clientset{c} }

type clientset struct{ kubernetes.Interface }

func (c clientset) Leases(namespace string) kubeapi.Leases {
	return c.CoordinationV1().Leases(namespace)
}

func (c clientset) LeaseCandidates(namespace string) kubeapi.LeaseCandidates {
	return c.CoordinationV1beta1().LeaseCandidates(namespace)
}

func (c clientset) EndpointSlices(namespace string) kubeapi.EndpointSlices {
	return endpointSlices{c.DiscoveryV1().EndpointSlices(namespace)}
}

func (c clientset) CreateEvent(ctx context.Context, ev *kubeapi.Event) error {
	_, err := c.CoreV1().Events(ev.Namespace).Create(ctx, CoreEvent(ev), metav1.CreateOptions{})
	return err
}

func (c clientset) PatchPod(ctx context.Context, namespace, name string, mergePatch []byte) error {
	_, err := c.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, mergePatch, metav1.PatchOptions{})
	return err
}

func (c clientset) ServedResources(_ context.Context, groupVersion string) ([]string, error) {
	list, err := c.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.APIResources))
	for _, r := range list.APIResources {
		names = append(names, r.Name)
	}
	return names, nil
}

// FindsDeadConnections is false: a clientset may stand on any transport
// (the fake one on none), so watches keep their short life.
func (c clientset) FindsDeadConnections() bool { return false }

// CloseSilentConnections closes nothing: a clientset dials on a transport
// of its own (the fake one on none).
func (c clientset) CloseSilentConnections(time.Time) int { return 0 }

// Connections is not known.
func (c clientset) Connections() int { return -1 }

// Urgent is nil: a clientset's connections are not dialled here.
func (c clientset) Urgent() kubeapi.Client { return nil }

// CloseIdleConnections and CloseConnections leave the clientset's
// transport as it is.
func (c clientset) CloseIdleConnections() {}

func (c clientset) CloseConnections() {}

// CoreEvent is ev as the core/v1 Event it stands for.
func CoreEvent(ev *kubeapi.Event) *corev1.Event {
	return &corev1.Event{
		TypeMeta:   ev.TypeMeta,
		ObjectMeta: ev.ObjectMeta,
		InvolvedObject: corev1.ObjectReference{Kind: ev.InvolvedObject.Kind, Namespace: ev.InvolvedObject.Namespace,
			Name: ev.InvolvedObject.Name, UID: ev.InvolvedObject.UID, APIVersion: ev.InvolvedObject.APIVersion},
		Reason:              ev.Reason,
		Message:             ev.Message,
		Source:              corev1.EventSource{Component: ev.Source.Component, Host: ev.Source.Host},
		FirstTimestamp:      ev.FirstTimestamp,
		LastTimestamp:       ev.LastTimestamp,
		Count:               ev.Count,
		Type:                ev.Type,
		ReportingController: ev.ReportingController,
		ReportingInstance:   ev.ReportingInstance,
	}
}
