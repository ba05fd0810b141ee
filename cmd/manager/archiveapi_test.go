package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/archiveapi"
	"github.com/toolgate/toolgate/internal/archiveapi/apitest"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

// controllerUser stands for the controller's ServiceAccount: it holds exactly the
// rights config/archive-api grants it.
const controllerUser = "toolgate-controller"

// TestTheControllerServesTheArchiveAPI: the controller's runnable, with only the
// RBAC of config/archive-api, reads the front proxy's configuration, makes its
// certificate, writes its CA into the APIService (which the manifest leaves
// without one) and serves: the aggregator calls the APIService available and
// proxies a read to it.
func TestTheControllerServesTheArchiveAPI(t *testing.T) {
	env, err := testenv.Start(testenv.WithAggregation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the test's database is dropped before the server stops.
	t.Cleanup(func() { _ = pg.Close() })
	a, err := archive.Open(t.Context(), pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	controller := grantArchiveAPIRBAC(t, env)
	c, err := client.New(controller.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- archiveAPIRunnable{config: archiveAPIConfig{addr: addr, service: apitest.ServiceName + "." + apitest.Namespace},
			rest: controller.Config(), client: c, archive: a}.Start(ctx)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the archive API exited with %v", err)
		}
	}()
	if err := apitest.Register(t.Context(), env.Client, addr, nil); err != nil {
		t.Fatal(err)
	}
	rc, err := archiveapi.NewRESTClient(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	err = rc.Get().AbsPath("/apis", archiveapi.Group, archiveapi.Version, "namespaces", "default", "calls", "nothing").Do(t.Context()).Error()
	if err == nil || !strings.Contains(err.Error(), `calls.archive.toolgate.dev "nothing" not found`) {
		t.Fatalf("a read through the aggregator: %v, want the API's 404", err)
	}
}

// grantArchiveAPIRBAC adds the controller's user and binds it as
// config/archive-api/rbac.yaml binds the controller's ServiceAccount.
func grantArchiveAPIRBAC(t *testing.T, env *testenv.Env) *envtest.AuthenticatedUser {
	t.Helper()
	user, err := env.AddUser(envtest.User{Name: controllerUser}, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "archive-api", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var obj client.Object = &rbacv1.ClusterRole{}
		if strings.Contains(doc, "kind: ClusterRoleBinding") {
			obj = &rbacv1.ClusterRoleBinding{}
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatal(err)
		}
		if b, ok := obj.(*rbacv1.ClusterRoleBinding); ok {
			b.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: controllerUser}}
		}
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	// The delegated authorizer asks about every request as this user: wait until
	// RBAC lets it.
	kube, err := kubernetes.NewForConfig(user.Config())
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("RBAC never let the controller read the front proxy's configuration: %v", err)
	}
	return user
}

// freeAddr is an address of the machine's with a port free now, for a server
// whose address the EndpointSlice must name before it starts.
func freeAddr(t *testing.T) string {
	t.Helper()
	ip, err := apitest.HostIP()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
