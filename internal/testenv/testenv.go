// Package testenv starts a real kube-apiserver and etcd (envtest) with toolgate's
// CRDs and admission policies installed, for integration tests.
//
// The binaries come from hack/envtest-assets.sh (make envtest-assets), which builds
// them from source into bin/k8s/. KUBEBUILDER_ASSETS wins when set.
//
// It also holds what every test package of the repository shares: Absent, the one
// way a test asserts that something did not happen (by a positive event, never
// after a sleep), and RefuseLookups, which keeps a test run off the machine's DNS
// resolver.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Env is a running envtest control plane.
type Env struct {
	*envtest.Environment
	// Config is the admin's rest config.
	Config *rest.Config
	// Client is an uncached admin client.
	Client client.Client
	// Scheme knows the core and toolgate types.
	Scheme *k8sruntime.Scheme
	// frontProxyDir holds the front proxy's certificates (WithAggregation).
	frontProxyDir string
}

// RepoRoot returns the repository's root folder.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// assetsDir finds the kube-apiserver and etcd binaries.
func assetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	matches, _ := filepath.Glob(filepath.Join(RepoRoot(), "bin", "k8s", "*", "kube-apiserver"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no kube-apiserver found: run 'make envtest-assets' (or 'make test', which does it) to build it into bin/k8s/")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// NewScheme returns a scheme with the core and toolgate types.
func NewScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(s))
	return s
}

// Option changes what Start installs.
type Option func(*options)

type options struct {
	admissionPolicies bool
	aggregation       bool
}

// WithAdmissionPolicies installs the ValidatingAdmissionPolicies and bindings of
// config/admission (see AdmissionObjects) once the control plane is up. The API server
// enforces a new policy only after its policy cache caught up, a moment later: tests
// of refusals should poll until a known-bad request is refused.
func WithAdmissionPolicies() Option {
	return func(o *options) { o.admissionPolicies = true }
}

// Start starts the control plane with the CRDs from config/crd/bases installed, and
// with the admission policies from config/admission when WithAdmissionPolicies is
// given. Call Stop when done.
func Start(opts ...Option) (*Env, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dir, err := assetsDir()
	if err != nil {
		return nil, err
	}
	root := RepoRoot()
	scheme := NewScheme()
	te := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		// envtest's 20 s per component is missed on a busy two-core machine.
		te.ControlPlaneStartTimeout = time.Minute
	}
	env := &Env{Environment: te, Scheme: scheme}
	if o.aggregation {
		if err := env.configureAggregation(); err != nil {
			_ = env.Stop()
			return nil, err
		}
	}
	cfg, err := te.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("starting envtest from %s: %w", dir, err)
	}
	env.Config = cfg
	env.Client, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	if o.admissionPolicies {
		if err := env.installAdmissionPolicies(); err != nil {
			_ = env.Stop()
			return nil, err
		}
	}
	return env, nil
}

// Stop stops the control plane and removes the folders envtest made for it.
// envtest retries a component that did not come up in time, and the retry reuses
// the folder the failed try made but no longer counts it as its own to remove.
func (e *Env) Stop() error {
	var made []string
	if etcd := e.ControlPlane.Etcd; etcd != nil {
		made = append(made, etcd.DataDir)
	}
	if apiServer := e.ControlPlane.APIServer; apiServer != nil {
		made = append(made, apiServer.CertDir)
	}
	err := e.Environment.Stop()
	if e.frontProxyDir != "" {
		_ = os.RemoveAll(e.frontProxyDir)
	}
	// Only a folder envtest named is removed: a DataDir or CertDir a caller set is
	// the caller's.
	for _, dir := range made {
		if strings.HasPrefix(filepath.Base(dir), "k8s_test_framework_") {
			_ = os.RemoveAll(dir)
		}
	}
	return err
}

// AdmissionObjects reads the ValidatingAdmissionPolicies, their bindings and their
// parameter ConfigMap shipped in config/admission, so tests install exactly what
// users install (kustomizeconfig.yaml is kustomize's, not an object).
func AdmissionObjects() ([]client.Object, error) {
	dir := filepath.Join(RepoRoot(), "config", "admission")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []client.Object
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") || e.Name() == "kustomization.yaml" || e.Name() == "kustomizeconfig.yaml" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return nil, fmt.Errorf("%s: %w", e.Name(), err)
			}
			var obj client.Object
			switch meta.Kind {
			case "ValidatingAdmissionPolicy":
				obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			case "ValidatingAdmissionPolicyBinding":
				obj = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			default:
				return nil, fmt.Errorf("%s: unexpected kind %q", e.Name(), meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				return nil, fmt.Errorf("%s: %w", e.Name(), err)
			}
			out = append(out, obj)
		}
	}
	return out, nil
}

// installAdmissionPolicies creates every object AdmissionObjects returns, and the
// namespace of the parameter object first.
func (e *Env) installAdmissionPolicies() error {
	objs, err := AdmissionObjects()
	if err != nil {
		return fmt.Errorf("reading config/admission: %w", err)
	}
	for _, obj := range objs {
		if ns := obj.GetNamespace(); ns != "" {
			err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating namespace %s: %w", ns, err)
			}
		}
	}
	for _, obj := range objs {
		if err := e.Client.Create(context.Background(), obj); err != nil {
			return fmt.Errorf("installing %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// Namespace creates a fresh namespace with a generated name for one test and
// deletes it when the test ends.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tg-"}}
	if err := e.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	// t.Context is already cancelled when cleanups run.
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// Main is a package's TestMain around one shared control plane: it starts it, stores
// it in *env, runs setup (when not nil) and the tests, stops it, and returns the exit
// code for os.Exit.
func Main(m *testing.M, env **Env, setup func() error, opts ...Option) int {
	e, err := Start(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	*env = e
	defer func() {
		if err := e.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	if setup != nil {
		if err := setup(); err != nil {
			fmt.Fprintf(os.Stderr, "setting up: %v\n", err)
			return 1
		}
	}
	return m.Run()
}

// RunManager starts mgr until the test ends, or until stop is called (then stops it
// and reports an error it exited with), and waits for its cache to sync.
func RunManager(t *testing.T, mgr manager.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager exited with an error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("manager cache did not sync")
	}
	return stop
}

// BuildManager builds cmd/manager with the given build tags into dir and returns the
// binary's path, for tests that run the controller as its own process.
func BuildManager(dir string, tags ...string) (string, error) {
	bin := filepath.Join(dir, "manager")
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "-o", bin, "./cmd/manager")...)
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, out)
	}
	return bin, nil
}

// AdminKubeconfig adds a user of system:masters named name to the control plane and
// writes its kubeconfig into dir, for a controller run as its own process.
func (e *Env) AdminKubeconfig(name, dir string) (string, error) {
	admin, err := e.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, e.Config)
	if err != nil {
		return "", fmt.Errorf("adding the admin user %s: %w", name, err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("the kubeconfig of %s: %w", name, err)
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}
