package lease

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"

	"github.com/k8s-lease/k8s-lease/lease/internal/telemetry"
	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
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

// NewClient builds the client the library uses (package kubeapi). Client-side rate limiting
// is off: renewals must never wait behind a token bucket, and the API
// server's own priority and fairness protects it.
func NewClient(cfg *rest.Config) (kubeapi.Client, error) {
	if cfg == nil {
		return nil, errors.New("nil rest config")
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = fmt.Sprintf("k8s-lease/%s %s", Version, rest.DefaultKubernetesUserAgent())
	cfg.QPS = -1 // negative QPS disables client-go's rate limiter
	cfg.RateLimiter = nil
	rereadTokenOn401(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return telemetry.CountingTransport(rt) })
	return kubeapi.New(cfg)
}

// rereadTokenOn401 makes a token file (the in-cluster ServiceAccount token,
// or a kubeconfig's tokenFile) be read again as soon as the API server
// answers 401, instead of at most once a minute as client-go does for
// BearerTokenFile: after kubelet rotates the token and the old one is
// revoked, the next renewal (within the renew deadline) sends the new one
// and the leader keeps its lease. client-go's own resettable token source
// does the re-reading; cfg is a copy owned by the caller.
//
// Only where client-go would send the file's token: not beside an exec or
// auth provider or basic auth (client-go's precedence and its refusal of
// a token with basic auth are left to it). As client-go does, a file that
// cannot be read falls back to the config's own token.
func rereadTokenOn401(cfg *rest.Config) {
	if cfg.BearerTokenFile == "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil ||
		cfg.Username != "" || cfg.Password != "" {
		return
	}
	src := tokenFileSource{file: transport.NewCachedFileTokenSource(cfg.BearerTokenFile), fallback: cfg.BearerToken}
	cfg.Wrap(transport.ResettableTokenSourceWrapTransport(src))
	cfg.BearerToken, cfg.BearerTokenFile = "", ""
}

// tokenFileSource is the token file's cached, resettable token, or the
// fallback token when the file cannot be read.
type tokenFileSource struct {
	file     transport.ResettableTokenSource
	fallback string
}

func (s tokenFileSource) Token() (*oauth2.Token, error) {
	tok, err := s.file.Token()
	if err != nil && s.fallback != "" {
		return &oauth2.Token{AccessToken: s.fallback}, nil
	}
	return tok, err
}

func (s tokenFileSource) ResetTokenOlderThan(t time.Time) { s.file.ResetTokenOlderThan(t) }
