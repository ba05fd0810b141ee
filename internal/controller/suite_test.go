package controller

import (
	"os"
	"testing"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/toolgate/toolgate/internal/leakcheck"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// env is the control plane shared by every test of the package. Each test works in
// its own namespace (env.Namespace(t)).
var env *testenv.Env

// Images used by managers started in tests. Nothing pulls them: envtest runs no kubelet.
const (
	testRunnerImage  = "example.test/toolgate/runner:test"
	testSandboxImage = fixtures.SandboxImage
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	testenv.RefuseLookups()
	os.Exit(leakcheck.Main(func() int {
		defer removeTestRunner()
		defer func() {
			if archiveServer != nil {
				_ = archiveServer.Close()
			}
		}()
		return testenv.Main(m, &env, nil)
	}))
}

// testOptions are the Options managers started by startManager get.
func testOptions() Options {
	return Options{RunnerImage: testRunnerImage, DefaultSandboxImage: testSandboxImage}
}

// startManager starts a manager against the shared control plane with only the given
// setup functions (for example setupExecution) and stops it when the test ends, or
// when the returned stop is called.
// It runs with the production cache (CacheOptions). Metrics and probes are off so
// that managers of parallel tests do not fight over ports; controller name
// validation is off because every test registers the same controllers again in one
// process.
func startManager(t *testing.T, setups ...func(ctrl.Manager, Options) error) (ctrl.Manager, func()) {
	t.Helper()
	return startManagerIn(t, "", setups...)
}

// startManagerIn is startManager watching one namespace (all when namespace is ""),
// so that a test's controller never works on what earlier tests left in theirs.
func startManagerIn(t *testing.T, namespace string, setups ...func(ctrl.Manager, Options) error) (ctrl.Manager, func()) {
	t.Helper()
	mgr := newTestManager(t, namespace)
	for _, setup := range setups {
		if err := setup(mgr, testOptions()); err != nil {
			t.Fatalf("setting up controller: %v", err)
		}
	}
	stop := testenv.RunManager(t, mgr)
	return mgr, stop
}

// newTestManager is a manager against the shared control plane with the cache
// cmd/manager runs with (its selectors and trimmed objects are what the reconcilers
// read in production), its namespaced objects limited to namespaces unless they are
// none or "". Its reconciles are recorded (observed_test.go).
func newTestManager(t *testing.T, namespaces ...string) ctrl.Manager {
	t.Helper()
	cacheOptions := CacheOptions()
	for _, ns := range namespaces {
		if ns == "" {
			continue
		}
		if cacheOptions.DefaultNamespaces == nil {
			cacheOptions.DefaultNamespaces = map[string]cache.Config{}
		}
		cacheOptions.DefaultNamespaces[ns] = cache.Config{}
	}
	reconciles := newReconcileLog()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Logger:                 reconciles.logger(ctrl.Log),
		Scheme:                 env.Scheme,
		Cache:                  cacheOptions,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	reconciles.attach(mgr)
	t.Cleanup(func() {
		reconcileLogsMu.Lock()
		delete(reconcileLogs, mgr)
		reconcileLogsMu.Unlock()
	})
	return mgr
}
