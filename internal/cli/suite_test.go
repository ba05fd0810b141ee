package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/leakcheck"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// The envtest tests run the real command code against a real kube-apiserver with
// toolgate's CRDs and admission policies installed. The controller is not running:
// each test records a task's history by hand (objects and their statuses, as the
// controller would have written them) or plays the controller's part itself.

// Users the tests act as, each with its own client certificate and kubeconfig file.
const (
	// adminUser is in system:masters, like a cluster admin (and the controller in tests).
	adminUser = "admin"
	// alice and bob hold config/rbac's approver role in each test namespace.
	alice = "alice"
	bob   = "bob"
	// agentUser holds config/rbac's agent role.
	agentUser = "agent-bot"
	// carol holds the agent role too and is in the group proposerGroup.
	carol         = "carol"
	proposerGroup = "team-a"
)

var (
	envOnce     sync.Once
	env         *testenv.Env
	envErr      error
	kubeconfigs = map[string]string{}
	userClients = map[string]client.Client{}
	// roleOf maps config/rbac's bare role names to the ClusterRoles installed.
	roleOf = map[string]string{}
	tmpDir string
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(func() int {
		code := m.Run()
		if stopArchive != nil {
			stopArchive()
		}
		if env != nil {
			if err := env.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
				code = 1
			}
		}
		if tmpDir != "" {
			_ = os.RemoveAll(tmpDir)
		}
		return code
	}))
}

// startEnv starts the control plane once, for the tests that need it; the unit
// tests of the package run without it.
func startEnv(t *testing.T) *testenv.Env {
	t.Helper()
	envOnce.Do(func() { envErr = setupEnv(context.Background()) })
	if envErr != nil {
		t.Fatalf("starting envtest: %v", envErr)
	}
	return env
}

func setupEnv(ctx context.Context) error {
	var err error
	// The aggregation layer is configured for the archive's API (archive_test.go).
	if env, err = testenv.Start(testenv.WithAdmissionPolicies(), testenv.WithAggregation()); err != nil {
		return err
	}
	if tmpDir, err = os.MkdirTemp("", "kubectl-toolgate-test-"); err != nil {
		return err
	}
	for bare, file := range map[string]string{"approver": "approver_role.yaml", "agent": "agent_role.yaml"} {
		role := &rbacv1.ClusterRole{}
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", file))
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(data, role); err != nil {
			return fmt.Errorf("config/rbac/%s: %w", file, err)
		}
		role.Name = "toolgate-" + role.Name
		if err := env.Client.Create(ctx, role); err != nil {
			return err
		}
		roleOf[bare] = role.Name
	}
	for _, u := range []envtest.User{{Name: adminUser, Groups: []string{"system:masters"}}, {Name: alice}, {Name: bob}, {Name: agentUser}, {Name: carol, Groups: []string{proposerGroup}}} {
		authn, err := env.AddUser(u, env.Config)
		if err != nil {
			return fmt.Errorf("adding user %s: %w", u.Name, err)
		}
		kc, err := authn.KubeConfig()
		if err != nil {
			return err
		}
		path := filepath.Join(tmpDir, u.Name+".kubeconfig")
		if err := os.WriteFile(path, kc, 0o600); err != nil {
			return err
		}
		kubeconfigs[u.Name] = path
		if userClients[u.Name], err = client.New(authn.Config(), client.Options{Scheme: env.Scheme}); err != nil {
			return err
		}
	}
	return waitForApprovalPolicy(ctx)
}

// waitForApprovalPolicy polls until the API server enforces the approval-decision
// admission policy: a new policy is enforced only once the server's policy cache
// caught up. The probe is a dry run the admin is refused (decidedBy not the caller).
func waitForApprovalPolicy(ctx context.Context) error {
	a := fixtures.PendingApproval("default", "probe", "someone", nil)
	if err := env.Client.Create(ctx, a); err != nil {
		return err
	}
	defer func() { _ = env.Client.Delete(context.Background(), a) }()
	patch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/votes/-","value":{"user":"not-the-admin","decision":"Approved"}}]`))
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		last = env.Client.Patch(ctx, a.DeepCopy(), patch, client.DryRunAll)
		return last != nil && strings.Contains(last.Error(), "a vote must carry your own user name"), nil
	})
	if err != nil {
		return fmt.Errorf("the approval-decision policy is not enforced (last answer: %v): %w", last, err)
	}
	return nil
}

// testNamespace creates a namespace where alice and bob are approvers and agent-bot
// and carol are agents, and waits until RBAC grants it.
func testNamespace(t *testing.T) string {
	t.Helper()
	e := startEnv(t)
	ns := e.Namespace(t)
	for _, b := range []struct {
		role  string
		users []string
	}{{roleOf["approver"], []string{alice, bob}}, {roleOf["agent"], []string{agentUser, carol}}} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "test-", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
		}
		for _, u := range b.users {
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, Name: u})
		}
		if err := e.Client.Create(t.Context(), rb); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []struct{ user, verb, resource string }{{alice, "approve", "approvals"}, {bob, "approve", "approvals"}, {agentUser, "create", "toolintents"}, {carol, "create", "toolintents"}} {
		err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: w.user, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: w.verb, Group: v1.GroupVersion.Group, Resource: w.resource,
			}}}
			if err := e.Client.Create(ctx, sar); err != nil {
				return false, err
			}
			return sar.Status.Allowed, nil
		})
		if err != nil {
			t.Fatalf("RBAC never allowed %s to %s %s: %v", w.user, w.verb, w.resource, err)
		}
	}
	return ns
}

// kubectl runs `kubectl toolgate ARGS` as user in ns, through a kubeconfig file and
// -n, as a person would.
func kubectl(t *testing.T, user, ns, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return run(t.Context(), stdin, append([]string{"--kubeconfig", kubeconfigs[user], "-n", ns}, args...)...)
}

// record creates the objects of a task's history as the controller would have left
// them: each object, then its status.
func record(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		status := obj.DeepCopyObject().(client.Object)
		obj.SetResourceVersion("")
		obj.SetCreationTimestamp(metav1.Time{})
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
		status.SetResourceVersion(obj.GetResourceVersion())
		status.SetCreationTimestamp(obj.GetCreationTimestamp())
		status.SetUID(obj.GetUID())
		if err := env.Client.Status().Update(t.Context(), status); err != nil {
			t.Fatalf("writing the status of %T %s: %v", obj, obj.GetName(), err)
		}
	}
}
