package lease

import (
	"fmt"
	"time"

	"k8s.io/client-go/rest"

	"github.com/k8s-lease/k8s-lease/lease/internal/kubeconfig"
	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// requestTimeout bounds every single API request (watches excepted, which
// have their own bound), so one hung request cannot eat a renew deadline.
// Renewals are further bounded by what remains of the renew deadline.
const requestTimeout = 10 * time.Second

// LoadConfig finds the cluster: in-cluster service account first, then the
// standard kubeconfig loading rules ($KUBECONFIG, then ~/.kube/config). The
// error is ErrNoConfig and names every source it tried.
func LoadConfig() (*rest.Config, string, error) {
	cfg, source, err := kubeconfig.Load()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrNoConfig, err)
	}
	return cfg, source, nil
}

// NewClient builds the client the library uses (package kubeapi), its
// requests counted in the metrics. Client-side rate limiting is off:
// renewals must never wait behind a token bucket, and the API server's own
// priority and fairness protects it.
func NewClient(cfg *rest.Config) (kubeapi.Client, error) {
	return kubeconfig.NewClient(cfg, Version, telemetry.CountingTransport)
}
