package lease

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Version is the library version, reported in the user agent.
const Version = "0.1.0"

// requestTimeout bounds every single API request (watches excepted, which
// have their own bound), so one hung request cannot eat a renew deadline.
// Renewals are further bounded by what remains of the renew deadline.
const requestTimeout = 10 * time.Second

// LoadConfig finds the cluster: in-cluster service account first, then the
// standard kubeconfig loading rules ($KUBECONFIG, then ~/.kube/config). The
// error names every source it tried.
func LoadConfig() (*rest.Config, string, error) {
	cfg, inClusterErr := rest.InClusterConfig()
	if inClusterErr == nil {
		return cfg, "in-cluster service account", nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err == nil {
		return cfg, "kubeconfig " + describeKubeconfig(rules), nil
	}
	return nil, "", fmt.Errorf("%w: in-cluster: %v; kubeconfig %s: %v",
		ErrNoConfig, inClusterErr, describeKubeconfig(rules), err)
}

func describeKubeconfig(rules *clientcmd.ClientConfigLoadingRules) string {
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		return fmt.Sprintf("($KUBECONFIG=%s)", env)
	}
	return fmt.Sprintf("(%s)", rules.GetDefaultFilename())
}

// NewClient builds the clientset the library uses. Client-side rate limiting
// is off: renewals must never wait behind a token bucket, and the API
// server's own priority and fairness protects it.
func NewClient(cfg *rest.Config) (kubernetes.Interface, error) {
	if cfg == nil {
		return nil, errors.New("nil rest config")
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = fmt.Sprintf("k8s-lease/%s %s", Version, rest.DefaultKubernetesUserAgent())
	cfg.QPS = -1 // negative QPS disables client-go's rate limiter
	cfg.RateLimiter = nil
	return kubernetes.NewForConfig(cfg)
}
