package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/version"
)

// TestTheManagerPublishesItsVersion: with only the ClusterRole controller-gen makes
// from the markers (config/rbac/role.yaml), the publisher creates the ConfigMap
// kubectl toolgate version reads, and a manager of another version (an upgrade)
// rewrites it.
func TestTheManagerPublishesItsVersion(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c := managerRoleClient(t, env)
	ns := env.Namespace(t)

	read := func() *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: version.ConfigMapName}, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	// Start retries until it succeeds or ctx ends: a publisher that cannot write
	// returns at the deadline, and the ConfigMap's check below says so.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, v := range []string{"v0.2.1", "v0.3.0"} {
		if err := (versionPublisher{reader: c, writer: c, namespace: ns, version: v}).Start(ctx); err != nil {
			t.Fatal(err)
		}
		if got := read().Data[version.ConfigMapKey]; got != v {
			t.Fatalf("after publishing %s the ConfigMap says %q", v, got)
		}
	}
	// The same version again writes nothing.
	before := read().ResourceVersion
	if err := (versionPublisher{reader: c, writer: c, namespace: ns, version: "v0.3.0"}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	if after := read().ResourceVersion; after != before {
		t.Fatalf("publishing the same version rewrote the ConfigMap (resourceVersion %s, then %s)", before, after)
	}
}

func TestOwnNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "toolgate")
	if ns, err := ownNamespace(); err != nil || ns != "toolgate" {
		t.Fatalf("ownNamespace() = %q, %v; want POD_NAMESPACE's, toolgate", ns, err)
	}
}

// managerRoleClient is a client of a user bound to config/rbac/role.yaml alone, once
// RBAC lets it write ConfigMaps.
func managerRoleClient(t *testing.T, env *testenv.Env) client.Client {
	t.Helper()
	const user = "toolgate-manager"
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps"}}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("RBAC never let the manager's role update ConfigMaps: %v", err)
	}
	authn, err := env.AddUser(envtest.User{Name: user}, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(authn.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
