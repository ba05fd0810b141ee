package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/testenv"

	"github.com/toolgate/toolgate/internal/version"
)

// stampPlugin gives the plugin the version the Makefile would stamp, for one test.
func stampPlugin(t *testing.T, v string) {
	t.Helper()
	old := version.Version
	version.Version = v
	t.Cleanup(func() { version.Version = old })
}

// publishControllerVersion writes the ConfigMap as the manager does
// (cmd/manager's versionPublisher, tested there) in a fresh namespace, and returns
// the namespace.
func publishControllerVersion(t *testing.T, v string) string {
	t.Helper()
	ns := startEnv(t).Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: version.ConfigMapName}, Data: map[string]string{version.ConfigMapKey: v}}
	if err := env.Client.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	return ns
}

func TestVersionSameAsTheController(t *testing.T) {
	stampPlugin(t, "v0.3.0")
	ns := publishControllerVersion(t, "v0.3.0")
	code, out, errOut := run(t.Context(), "", "--kubeconfig", kubeconfigs[adminUser], "version", "--controller-namespace", ns)
	if code != 0 || errOut != "" {
		t.Fatalf("exit code %d, stderr %q", code, errOut)
	}
	if want := "plugin:     v0.3.0\ncontroller: v0.3.0\n"; out != want {
		t.Fatalf("stdout %q, want %q", out, want)
	}
}

func TestVersionWarnsWhenTheControllerDiffers(t *testing.T) {
	stampPlugin(t, "v0.3.0")
	ns := publishControllerVersion(t, "v0.2.1")
	code, out, errOut := run(t.Context(), "", "--kubeconfig", kubeconfigs[adminUser], "version", "--controller-namespace", ns)
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errOut)
	}
	if want := "plugin:     v0.3.0\ncontroller: v0.2.1\n"; out != want {
		t.Fatalf("stdout %q, want %q", out, want)
	}
	if want := "warning: the plugin (v0.3.0) and the controller (v0.2.1) are different versions"; !strings.HasPrefix(errOut, want) {
		t.Fatalf("stderr %q, want it to start with %q", errOut, want)
	}
}

func TestVersionWithoutAController(t *testing.T) {
	stampPlugin(t, "v0.3.0")
	ns := startEnv(t).Namespace(t)
	code, out, errOut := run(t.Context(), "", "--kubeconfig", kubeconfigs[adminUser], "version", "--controller-namespace", ns)
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr %q", code, errOut)
	}
	if want := "plugin:     v0.3.0\n"; out != want {
		t.Fatalf("stdout %q, want the plugin's version alone, %q", out, want)
	}
	want := "error: the controller's version is unknown: there is no ConfigMap " + ns + "/toolgate-controller-version. Is toolgate's controller running in namespace " + ns + "?"
	if !strings.HasPrefix(errOut, want) {
		t.Fatalf("stderr %q, want it to start with %q", errOut, want)
	}
}

// TestVersionNamesTheRBACItNeeds: alice may read nothing in the controller's
// namespace; the error says what she lacks instead of "not found".
func TestVersionNamesTheRBACItNeeds(t *testing.T) {
	stampPlugin(t, "v0.3.0")
	ns := publishControllerVersion(t, "v0.3.0")
	code, _, errOut := run(t.Context(), "", "--kubeconfig", kubeconfigs[alice], "version", "--controller-namespace", ns)
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr %q", code, errOut)
	}
	for _, want := range []string{
		"you may not read ConfigMap " + ns + "/toolgate-controller-version; reading it needs get on configmaps (resourceName toolgate-controller-version) in namespace " + ns,
		`User "alice" cannot get resource "configmaps"`,
	} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("stderr %q, want %q in it", errOut, want)
		}
	}
}

// TestVersionClientOnly: --client never connects; the kubeconfig named does not exist.
func TestVersionClientOnly(t *testing.T) {
	stampPlugin(t, "v0.3.0")
	code, out, errOut := run(t.Context(), "", "--kubeconfig", "/nonexistent/kubeconfig", "version", "--client")
	if code != 0 || errOut != "" || out != "plugin:     v0.3.0\n" {
		t.Fatalf("exit code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestVersionOfAnEmptyConfigMap: a ConfigMap without the key is reported as such,
// not printed as an empty version.
func TestVersionOfAnEmptyConfigMap(t *testing.T) {
	stampPlugin(t, "v0.3.0")
	ns := publishControllerVersion(t, "")
	code, _, errOut := run(t.Context(), "", "--kubeconfig", kubeconfigs[adminUser], "version", "--controller-namespace", ns)
	if want := "error: the controller's version is unknown: ConfigMap " + ns + "/toolgate-controller-version has no data.version\n"; code != 1 || errOut != want {
		t.Fatalf("exit code %d, stderr %q; want 1, %q", code, errOut, want)
	}
}

// TestVersionReadableByEveryUser: with config/rbac's version-reader Role and binding
// in the controller's namespace, a user granted nothing else (alice) reads the
// controller's version, and only that ConfigMap.
func TestVersionReadableByEveryUser(t *testing.T) {
	stampPlugin(t, "v0.3.0")
	ns := publishControllerVersion(t, "v0.3.0")
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "version_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("version_reader_role.yaml holds %d objects, want the Role and its binding", len(docs))
	}
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	if err := yaml.Unmarshal([]byte(docs[0]), &role); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	role.Namespace, binding.Namespace = ns, ns
	for _, o := range []client.Object{&role, &binding} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}
	if err := env.Client.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	// The authorizer sees a new binding once its cache has it.
	var last string
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code, out, errOut := run(ctx, "", "--kubeconfig", kubeconfigs[alice], "version", "--controller-namespace", ns)
		last = fmt.Sprintf("exit code %d, stdout %q, stderr %q", code, out, errOut)
		return code == 0 && out == "plugin:     v0.3.0\ncontroller: v0.3.0\n", nil
	}); err != nil {
		t.Fatalf("alice does not read the version: %s", last)
	}
	if err := userClients[alice].Get(t.Context(), client.ObjectKeyFromObject(other), &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice reads another ConfigMap of the namespace: %v", err)
	}
}
