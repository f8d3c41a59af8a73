package lease

import (
	"encoding/json"
	"fmt"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

// SetPodLabel sets one label on a Pod with a JSON merge patch.
func (m *Manager) SetPodLabel(ns, pod, key, value string) error {
	if err := validate.PodLabel(ns, pod, key); err != nil {
		return err
	}
	if err := validate.LabelValue(value); err != nil {
		return err
	}
	return m.patchPodLabel(ns, pod, key, &value)
}

// RemovePodLabel removes one label from a Pod; an absent label is success.
func (m *Manager) RemovePodLabel(ns, pod, key string) error {
	if err := validate.PodLabel(ns, pod, key); err != nil {
		return err
	}
	return m.patchPodLabel(ns, pod, key, nil)
}

// patchPodLabel sends {"metadata":{"labels":{key: value}}}; a null value
// removes the label.
func (m *Manager) patchPodLabel(ns, pod, key string, value *string) error {
	client, err := m.client()
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	if err != nil {
		return err
	}
	ctx, cancel := requestContext()
	defer cancel()
	err = client.PatchPod(ctx, ns, pod, patch)
	if err != nil {
		return fmt.Errorf("patch label %q on pod %s/%s: %w", key, ns, pod, err)
	}
	return nil
}
