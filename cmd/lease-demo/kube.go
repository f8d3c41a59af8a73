package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/watch"

	coordinationv1 "k8s.io/api/coordination/v1"
)

const leaderLabel = "k8s-lease.io/leader"

// createPods makes one Pod per replica (never scheduled: envtest has no
// nodes) so that replicas can label themselves.
func createPods(ctx context.Context, client kubernetes.Interface) error {
	for i := 0; i < replicas; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("replica-%d", i), Namespace: namespace},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "example.invalid/ha-server"}}}}
		if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// renewalLog remembers when this process last saw the Lease renewed.
type renewalLog struct {
	mu     sync.Mutex
	holder string
	seenAt time.Time
}

func (r *renewalLog) last() (string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holder, r.seenAt
}

func watchRenewals(ctx context.Context, client kubernetes.Interface) *renewalLog {
	log := &renewalLog{}
	lw := cache.NewListWatchFromClient(client.CoordinationV1().RESTClient(), "leases", namespace,
		fields.OneTermEqualSelector("metadata.name", leaseName))
	go func() {
		var lastRenew time.Time
		_, _ = watch.UntilWithSync(ctx, lw, &coordinationv1.Lease{}, nil, func(ev apiwatch.Event) (bool, error) {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil {
				return false, nil
			}
			if !l.Spec.RenewTime.Time.Equal(lastRenew) {
				lastRenew = l.Spec.RenewTime.Time
				log.mu.Lock()
				log.holder, log.seenAt = *l.Spec.HolderIdentity, time.Now()
				log.mu.Unlock()
			}
			return false, nil
		})
	}()
	return log
}

func leaderPods(ctx context.Context, client kubernetes.Interface) (string, error) {
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: leaderLabel + "=true"})
	if err != nil {
		return "", err
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return "(none)", nil
	}
	return strings.Join(names, ", "), nil
}

func leaseHolder(ctx context.Context, client kubernetes.Interface) string {
	l, err := client.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return "error: " + err.Error()
	}
	holder := "<none>"
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		holder = *l.Spec.HolderIdentity
	}
	return fmt.Sprintf("holder %s, leaseTransitions (fencing token) %d", holder, *l.Spec.LeaseTransitions)
}
