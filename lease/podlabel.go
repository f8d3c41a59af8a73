package lease

import "github.com/k8s-lease/k8s-lease/lease/internal/podlabel"

// PatchPodLabel sets one label on a Pod with a JSON merge patch.
func (m *Manager) PatchPodLabel(ns, pod, key, value string) error {
	return m.patchPodLabel(ns, pod, key, &value)
}

// SetPodLabel sets one label on a Pod.
//
// Deprecated: use PatchPodLabel.
func (m *Manager) SetPodLabel(ns, pod, key, value string) error {
	return m.PatchPodLabel(ns, pod, key, value)
}

// RemovePodLabel removes one label from a Pod; an absent label is success.
func (m *Manager) RemovePodLabel(ns, pod, key string) error {
	return m.patchPodLabel(ns, pod, key, nil)
}

// patchPodLabel checks the arguments before it loads the configuration, so
// that a bad argument is refused as such even with no cluster.
func (m *Manager) patchPodLabel(ns, pod, key string, value *string) error {
	if err := podlabel.Check(ns, pod, key, value); err != nil {
		return err
	}
	client, err := m.client()
	if err != nil {
		return err
	}
	ctx, cancel := requestContext()
	defer cancel()
	return podlabel.Patch(ctx, client, ns, pod, key, value)
}
