package lease

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
)

func validatePodLabel(ns, pod, key string) error {
	if errs := validation.IsDNS1123Label(ns); ns == "" || len(errs) > 0 {
		return invalid("namespace %s: must be a DNS-1123 label", clip(ns))
	}
	if errs := validation.IsDNS1123Subdomain(pod); pod == "" || len(errs) > 0 {
		return invalid("pod name %s: must be a DNS-1123 subdomain", clip(pod))
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return invalid("label key %s: %s", clip(key), errs[0])
	}
	return nil
}

func validateLabelValue(value string) error {
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return invalid("label value %s: %s", clip(value), errs[0])
	}
	return nil
}

// SetPodLabel sets one label on a Pod with a JSON merge patch.
func (m *Manager) SetPodLabel(ns, pod, key, value string) error {
	if err := validatePodLabel(ns, pod, key); err != nil {
		return err
	}
	if err := validateLabelValue(value); err != nil {
		return err
	}
	return m.patchPodLabel(ns, pod, key, &value)
}

// RemovePodLabel removes one label from a Pod; an absent label is success.
func (m *Manager) RemovePodLabel(ns, pod, key string) error {
	if err := validatePodLabel(ns, pod, key); err != nil {
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
