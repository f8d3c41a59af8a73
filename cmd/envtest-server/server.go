package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/k8s-lease/k8s-lease/internal/proctree"
	"github.com/k8s-lease/k8s-lease/internal/topology"
)

const assetsHint = "run `make envtest-assets` and export KUBEBUILDER_ASSETS=<the directory it prints last>"

type server struct {
	plane          plane
	kubeconfigPath string
	ownsKubeconfig bool
	topologyPath   string // "" unless HA
}

// plane is a running control plane: envtest's, or an HA bed.
type plane interface {
	host() string         // the address clients are given
	config() *rest.Config // the admin's
	kubeconfig() ([]byte, error)
	stop() error
}

// single is envtest's control plane: one etcd, one kube-apiserver.
type single struct{ env *envtest.Environment }

func (s single) host() string                { return s.env.Config.Host }
func (s single) config() *rest.Config        { return s.env.Config }
func (s single) kubeconfig() ([]byte, error) { return s.env.KubeConfig, nil }
func (s single) stop() error                 { return s.env.Stop() } // envtest removes its own temp dirs

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
	var p plane
	if opts.ha() {
		p, err = startHA(dir, opts, logf)
	} else {
		p, err = startSingle(dir, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("control plane did not start (port trouble or broken binaries in %s?): %w; %s", dir, err, assetsHint)
	}
	srv := &server{plane: p}
	err = srv.writeKubeconfig(opts.kubeconfigPath)
	if ha, ok := p.(*haPlane); ok && err == nil {
		srv.topologyPath = topology.Path(srv.kubeconfigPath)
		err = ha.topology.Write(srv.topologyPath)
	}
	if err == nil {
		var client kubernetes.Interface
		if client, err = kubernetes.NewForConfig(p.config()); err == nil {
			err = createNamespaces(client, opts.namespaces, logf)
		}
	}
	if err != nil {
		_ = srv.stop()
		return nil, err
	}
	return srv, nil
}

func startSingle(dir string, opts options) (single, error) {
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	configureAPIServer(env.ControlPlane.GetAPIServer().Configure(), opts)
	env.ControlPlane.Etcd = &envtest.Etcd{} // what envtest makes when none is given
	setArgs(env.ControlPlane.Etcd.Configure(), opts.etcdArgs)
	if _, err := env.Start(); err != nil {
		_ = env.Stop() // removes whatever half-started
		return single{}, err
	}
	return single{env}, nil
}

// configureAPIServer sets the flags every kube-apiserver gets: ours, then
// -apiserver-arg's (which override ours).
func configureAPIServer(args *envtest.Arguments, opts options) {
	// On SIGTERM, kube-apiserver waits for open watches until its 60 s
	// shutdown timeout unless told to end them: standbys (ours, and
	// client-go's reflectors) keep watches open for minutes, and the fault
	// suite stops and restarts the control plane.
	args.Set("shutdown-watch-termination-grace-period", "2s")
	setArgs(args, opts.apiserverArgs)
}

// setArgs sets each KEY=VALUE of kvs (checked by parseFlags) as --KEY=VALUE.
func setArgs(args *envtest.Arguments, kvs []string) {
	for _, a := range kvs {
		k, v, _ := strings.Cut(a, "=")
		args.Set(k, v)
	}
}

func (s *server) host() string { return s.plane.host() }

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
	data, err := s.plane.kubeconfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
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

// stop ends the control plane and removes the files this process wrote.
// Its processes are thawed first: one a test froze (SIGSTOP) would not act
// on SIGTERM until killed after the stop timeout.
func (s *server) stop() error {
	for _, p := range proctree.Children(os.Getpid()) {
		_ = syscall.Kill(p.PID, syscall.SIGCONT)
	}
	err := s.plane.stop()
	var files []string
	if s.ownsKubeconfig && s.kubeconfigPath != "" {
		files = append(files, s.kubeconfigPath)
	}
	if s.topologyPath != "" {
		files = append(files, s.topologyPath)
	}
	for _, f := range files {
		if rmErr := os.Remove(f); rmErr != nil && !os.IsNotExist(rmErr) {
			err = errors.Join(err, rmErr)
		}
	}
	return err
}
