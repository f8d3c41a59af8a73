// Package podlabel sets and removes one label of a Pod with a JSON merge
// patch (the leader label a host puts on its own Pod). It must not import
// package lease: it takes plain strings and anything that can patch a Pod.
package podlabel

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

// Patcher applies a JSON merge patch to a Pod (kubeapi.Client does).
type Patcher interface {
	PatchPod(ctx context.Context, namespace, name string, mergePatch []byte) error
}

// Check refuses, with an ErrInvalidArgument and before anything is sent, a
// namespace, Pod name, label key or value (nil: removal) Kubernetes would
// refuse.
func Check(ns, pod, key string, value *string) error {
	if err := validate.PodLabel(ns, pod, key); err != nil {
		return err
	}
	if value != nil {
		return validate.LabelValue(*value)
	}
	return nil
}

// Patch sends {"metadata":{"labels":{key: value}}}; a nil value removes the
// label, and an absent label is not an error.
func Patch(ctx context.Context, client Patcher, ns, pod, key string, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	if err != nil {
		return err
	}
	if err := client.PatchPod(ctx, ns, pod, patch); err != nil {
		return fmt.Errorf("patch label %q on pod %s/%s: %w", key, ns, pod, err)
	}
	return nil
}
