package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const assetsHint = "run `make envtest-assets` and export KUBEBUILDER_ASSETS=<the directory it prints last>"

type server struct {
	env            *envtest.Environment
	kubeconfigPath string
	ownsKubeconfig bool
}

// checkAssets fails early, with the command to run, when the binaries envtest
// needs are not where KUBEBUILDER_ASSETS says.
func checkAssets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is not set: " + assetsHint)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		p := filepath.Join(dir, bin)
		info, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s is missing (%v): %s", p, err, assetsHint)
		}
		if info.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable: %s", p, assetsHint)
		}
	}
	return dir, nil
}

func startServer(opts options, logf func(string, ...any)) (*server, error) {
	dir, err := checkAssets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	// On SIGTERM, kube-apiserver waits for open watches until its 60 s
	// shutdown timeout unless told to end them: standbys (ours, and
	// client-go's reflectors) keep watches open for minutes, and the fault
	// suite stops and restarts the control plane. An -apiserver-arg of the
	// same name overrides this.
	env.ControlPlane.GetAPIServer().Configure().Set("shutdown-watch-termination-grace-period", "2s")
	for _, a := range opts.apiserverArgs {
		k, v, _ := strings.Cut(a, "=")
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop() // removes whatever half-started
		return nil, fmt.Errorf("control plane did not start (port trouble or broken binaries in %s?): %w; %s", dir, err, assetsHint)
	}
	srv := &server{env: env}
	if err := srv.writeKubeconfig(opts.kubeconfigPath); err != nil {
		_ = srv.stop()
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err == nil {
		err = createNamespaces(client, opts.namespaces, logf)
	}
	if err != nil {
		_ = srv.stop()
		return nil, err
	}
	return srv, nil
}

func (s *server) host() string { return s.env.Config.Host }

func (s *server) writeKubeconfig(path string) error {
	if path == "" {
		f, err := os.CreateTemp("", "envtest-kubeconfig-*.yaml")
		if err != nil {
			return fmt.Errorf("create kubeconfig: %w", err)
		}
		path = f.Name()
		_ = f.Close()
	}
	s.kubeconfigPath = path
	s.ownsKubeconfig = true
	if err := os.WriteFile(path, s.env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func createNamespaces(client kubernetes.Interface, names []string, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		_, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %q: %w", name, err)
		}
		logf("namespace %s ready", name)
	}
	return nil
}

// stop ends the control plane (envtest removes its own temp dirs) and the
// kubeconfig this process wrote.
func (s *server) stop() error {
	err := s.env.Stop()
	if s.ownsKubeconfig && s.kubeconfigPath != "" {
		if rmErr := os.Remove(s.kubeconfigPath); rmErr != nil && !os.IsNotExist(rmErr) {
			err = errors.Join(err, rmErr)
		}
	}
	return err
}
