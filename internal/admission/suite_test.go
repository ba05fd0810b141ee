package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/leakcheck"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// env is the control plane shared by every test of the package, started with the
// admission policies of config/admission installed.
var env *testenv.Env

// The users the tests act as. Each has its own client certificate; what they may do
// comes from the RoleBindings setupNamespace creates, exactly as in a cluster.
const (
	// agentUser holds toolgate-agent.
	agentUser = "agent-bot"
	// strangerUser holds no role at all.
	strangerUser = "mallory"
	// alice and bob hold toolgate-approver.
	alice = "alice"
	bob   = "bob"
	// carol holds toolgate-approver through her group sreGroup.
	carol    = "carol"
	sreGroup = "sre"
	// patcherUser may patch approvals, write statuses and create approvals and
	// executions (a broad custom Role), but does not hold the approve verb and is not
	// the controller: only admission stands between this user and those writes.
	patcherUser = "pat"
	// ownerUser holds toolgate-editor: the owner of the tasks the chain attacks aim
	// at, who writes AgentTasks but nothing of the pipeline.
	ownerUser = "olive"
	// viewerUser holds toolgate-viewer: reads every toolgate object, writes nothing.
	viewerUser = "victor"
	// policyAdmin holds toolgate-admin cluster-wide: the author of ClusterToolPolicies.
	policyAdmin = "paula"
)

// controllerUser is the controller's service account user name, computed from the
// deployment config (see TestControllerIdentityMatchesDeployment).
var controllerUser string

// clients of the users, by user name.
var clients = map[string]client.Client{}

// configs are the users' rest configs, by user name (a controller started by a test
// runs as controllerUser).
var configs = map[string]*rest.Config{}

// roleNames maps the bare role names of config/rbac to the names config/default
// gives them (toolgate-agent, ...).
var roleNames = map[string]string{}

func TestMain(m *testing.M) {
	testenv.RefuseLookups()
	// The control plane's processes, and the controllers and servers the tests
	// start, end with the run: leakcheck fails it if one does not.
	os.Exit(leakcheck.Main(func() int {
		return testenv.Main(m, &env, func() error { return setup(context.Background()) }, testenv.WithAdmissionPolicies())
	}))
}

// setup installs the user-facing roles, creates the users and waits until the API
// server enforces every admission policy.
func setup(ctx context.Context) error {
	deploy, err := readDeployment()
	if err != nil {
		return err
	}
	controllerUser = deploy.controllerUser()
	roles, err := userRoles(deploy.namePrefix)
	if err != nil {
		return err
	}
	for bare, role := range roles {
		roleNames[bare] = role.Name
		if err := env.Client.Create(ctx, role); err != nil {
			return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
		}
	}
	users := []envtest.User{
		{Name: agentUser},
		{Name: strangerUser},
		{Name: alice},
		{Name: bob},
		{Name: carol, Groups: []string{sreGroup}},
		{Name: patcherUser},
		{Name: ownerUser},
		{Name: viewerUser},
		{Name: policyAdmin},
		{Name: controllerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deploy.namespace}},
	}
	for _, u := range users {
		authn, err := env.AddUser(u, env.Config)
		if err != nil {
			return fmt.Errorf("adding user %s: %w", u.Name, err)
		}
		c, err := client.New(authn.Config(), client.Options{Scheme: env.Scheme})
		if err != nil {
			return err
		}
		clients[u.Name] = c
		configs[u.Name] = authn.Config()
	}
	// toolgate-admin is bound cluster-wide, as docs/approvals.md says.
	err = env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: roleNames["admin"] + "-" + policyAdmin},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleNames["admin"]},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: policyAdmin}},
	})
	if err != nil {
		return fmt.Errorf("binding %s: %w", roleNames["admin"], err)
	}
	return waitForPolicies(ctx)
}

// waitForPolicies polls one known-bad request per policy until the API server refuses
// it: a new policy is enforced only once the server's policy cache caught up. The
// requests are dry runs by the admin, who is held to these rules too.
func waitForPolicies(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		return err
	}
	defer func() { _ = env.Client.Delete(context.Background(), ns) }()
	existing := fixtures.PendingApproval(ns.Name, "probe", "someone", nil)
	if err := env.Client.Create(ctx, existing); err != nil {
		return fmt.Errorf("creating the probe approval: %w", err)
	}
	probes := []struct {
		policy string
		send   func() error
		want   string
	}{
		{"approval-decision", func() error {
			// Two votes in others' names break several of the policy's rules, so the
			// probe does not rest on any one of them (each is a gate of its own, whose
			// removal its own test must catch).
			return jsonPatch(ctx, env.Client, existing, []map[string]any{
				{"op": "add", "path": "/spec/votes/-", "value": toolgatev1alpha1.ApprovalVote{User: "not-the-admin", Decision: toolgatev1alpha1.DecisionApproved}},
				{"op": "add", "path": "/spec/votes/-", "value": toolgatev1alpha1.ApprovalVote{User: "nor-this-one", Decision: toolgatev1alpha1.DecisionApproved}},
			}, client.DryRunAll)
		}, "ValidatingAdmissionPolicy 'approval-decision.toolgate.dev'"},
		{"controller-owned", func() error {
			a := fixtures.PendingApproval(ns.Name, "probe-approved", "someone", nil)
			a.Spec.Votes = []toolgatev1alpha1.ApprovalVote{{User: "someone-else", Decision: toolgatev1alpha1.DecisionApproved}}
			return env.Client.Create(ctx, a, client.DryRunAll)
		}, "a new Approval must carry no votes"},
		{"approval-grant", func() error {
			g := &toolgatev1alpha1.ApprovalGrant{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "probe"},
				Spec: toolgatev1alpha1.ApprovalGrantSpec{
					ApprovalRef: toolgatev1alpha1.LocalObjectReference{Name: existing.Name}, TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "probe"}, TaskUID: "probe",
					Scope: toolgatev1alpha1.GrantScopeTask, MaxUses: 1, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour)), GrantedBy: "not-the-admin",
				},
			}
			return env.Client.Create(ctx, g, client.DryRunAll)
		}, "spec.grantedBy must be your user name"},
		{"toolintent-requester", func() error {
			// The admin is exempt from this rule (the controller creates intents for
			// model-driven tasks); the agent is not, and needs a binding to get past RBAC.
			if err := grant(ctx, ns.Name, roleNames["agent"], rbacv1.Subject{Kind: rbacv1.UserKind, Name: agentUser}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			return clients[agentUser].Create(ctx, toolIntent(ns.Name, "probe", "someone-else"), client.DryRunAll)
		}, "spec.requestedBy must be your user name"},
	}
	for _, p := range probes {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			last = p.send()
			return contains(last, p.want), nil
		})
		if err != nil {
			return fmt.Errorf("policy %s is not enforced (last answer: %s): %w", p.policy, fmt.Sprint(last), err)
		}
	}
	return nil
}

// deployment is what config/default and config/rbac say about where the controller
// runs, so the tests use the names a deployed cluster has.
type deployment struct {
	namespace      string
	namePrefix     string
	serviceAccount string
}

func (d deployment) controllerUser() string {
	return "system:serviceaccount:" + d.namespace + ":" + d.namePrefix + d.serviceAccount
}

func readDeployment() (deployment, error) {
	var kustomization struct {
		Namespace  string `json:"namespace"`
		NamePrefix string `json:"namePrefix"`
	}
	if err := readYAML(filepath.Join("config", "default", "kustomization.yaml"), &kustomization); err != nil {
		return deployment{}, err
	}
	var sa corev1.ServiceAccount
	if err := readYAML(filepath.Join("config", "rbac", "service_account.yaml"), &sa); err != nil {
		return deployment{}, err
	}
	if kustomization.Namespace == "" || sa.Name == "" {
		return deployment{}, errors.New("config/default/kustomization.yaml has no namespace or config/rbac/service_account.yaml no name")
	}
	return deployment{namespace: kustomization.Namespace, namePrefix: kustomization.NamePrefix, serviceAccount: sa.Name}, nil
}

// userRoleFiles are the roles of config/rbac that people and agents are granted, by
// bare name.
var userRoleFiles = map[string]string{
	"agent":    "agent_role.yaml",
	"approver": "approver_role.yaml",
	"editor":   "editor_role.yaml",
	"viewer":   "viewer_role.yaml",
	"admin":    "admin_role.yaml",
}

// userRoles reads the user-facing ClusterRoles and gives them the deployed names.
func userRoles(namePrefix string) (map[string]*rbacv1.ClusterRole, error) {
	out := map[string]*rbacv1.ClusterRole{}
	for bare, file := range userRoleFiles {
		role := &rbacv1.ClusterRole{}
		if err := readYAML(filepath.Join("config", "rbac", file), role); err != nil {
			return nil, err
		}
		if role.Name != bare {
			return nil, fmt.Errorf("config/rbac/%s names ClusterRole %q, want %q", file, role.Name, bare)
		}
		role.Name = namePrefix + role.Name
		out[bare] = role
	}
	return out, nil
}

// readYAML reads one YAML document from a path relative to the repository root.
func readYAML(rel string, into any) error {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// setupNamespace creates a namespace for one test with the bindings every test
// shares: agentUser is an agent; alice, bob, the group sre and the controller's
// service account are approvers (the service account so that only the rule naming it
// can refuse it); patcherUser and the controller's service account hold the broad
// custom Role described at patcherUser; ownerUser is an editor and viewerUser a
// viewer. The function returns once RBAC grants them.
func setupNamespace(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	ns := env.Namespace(t)
	user := func(name string) rbacv1.Subject { return rbacv1.Subject{Kind: rbacv1.UserKind, Name: name} }
	broad := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "patch-approvals-and-write-status", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{toolgatev1alpha1.GroupVersion.Group}, Resources: []string{"approvals"}, Verbs: []string{"get", "patch", "update", "create"}},
			{APIGroups: []string{toolgatev1alpha1.GroupVersion.Group}, Resources: []string{"executions", "toolintents"}, Verbs: []string{"get", "create"}},
			{APIGroups: []string{toolgatev1alpha1.GroupVersion.Group}, Resources: []string{"toolintents/status", "approvals/status", "executions/status"}, Verbs: []string{"get", "patch", "update"}},
		},
	}
	if err := env.Client.Create(ctx, broad); err != nil {
		t.Fatalf("creating Role: %v", err)
	}
	bindings := []struct {
		kind, role string
		subjects   []rbacv1.Subject
	}{
		{"ClusterRole", roleNames["agent"], []rbacv1.Subject{user(agentUser)}},
		{"ClusterRole", roleNames["approver"], []rbacv1.Subject{user(alice), user(bob), {Kind: rbacv1.GroupKind, Name: sreGroup}, user(controllerUser)}},
		{"Role", broad.Name, []rbacv1.Subject{user(patcherUser), user(controllerUser)}},
		{"ClusterRole", roleNames["editor"], []rbacv1.Subject{user(ownerUser)}},
		{"ClusterRole", roleNames["viewer"], []rbacv1.Subject{user(viewerUser)}},
	}
	for _, b := range bindings {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "test-", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: b.role},
			Subjects:   b.subjects,
		}
		if err := env.Client.Create(ctx, rb); err != nil {
			t.Fatalf("binding %s %s: %v", b.kind, b.role, err)
		}
	}
	// The RBAC authorizer works from a cache; wait until it sees the bindings.
	for _, w := range []struct {
		user   string
		groups []string
		verb   string
		res    string
	}{
		{agentUser, nil, "create", "toolintents"},
		{alice, nil, "approve", "approvals"},
		{bob, nil, "approve", "approvals"},
		{carol, []string{sreGroup}, "approve", "approvals"},
		{controllerUser, nil, "approve", "approvals"},
		{patcherUser, nil, "patch", "approvals"},
		{controllerUser, nil, "create", "executions"},
		{ownerUser, nil, "patch", "agenttasks"},
		{viewerUser, nil, "get", "executions"},
		{policyAdmin, nil, "create", "clustertoolpolicies"},
	} {
		waitAllowed(t, ns, w.user, w.groups, w.verb, w.res)
	}
	return ns
}

// grant binds a ClusterRole in a namespace.
func grant(ctx context.Context, ns, clusterRole string, subjects ...rbacv1.Subject) error {
	return env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   subjects,
	})
}

// allowed asks the API server's authorizer whether the user may do verb on a
// toolgate resource in a namespace (all namespaces when ns is empty).
func allowed(t *testing.T, ns, user string, groups []string, verb, resource string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: toolgatev1alpha1.GroupVersion.Group,
			Resource: res, Subresource: sub,
		},
	}}
	if err := env.Client.Create(t.Context(), sar); err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return sar.Status.Allowed
}

// waitAllowed waits until RBAC allows the user to do verb on resource in ns.
func waitAllowed(t *testing.T, ns, user string, groups []string, verb, resource string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return allowed(t, ns, user, groups, verb, resource), nil
	})
	if err != nil {
		t.Fatalf("RBAC never allowed %s to %s %s in %s", user, verb, resource, ns)
	}
}

// createApproval creates a Pending Approval as the admin (standing in for the
// controller) and returns it.
func createApproval(t *testing.T, ns, requestedBy string, approvers *toolgatev1alpha1.Approvers) *toolgatev1alpha1.Approval {
	t.Helper()
	a := fixtures.PendingApproval(ns, "git-push", requestedBy, approvers)
	if err := env.Client.Create(t.Context(), a); err != nil {
		t.Fatalf("creating Approval: %v", err)
	}
	return a
}

// toolIntent builds a ToolIntent.
func toolIntent(ns, name, requestedBy string) *toolgatev1alpha1.ToolIntent {
	return &toolgatev1alpha1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: toolgatev1alpha1.ToolIntentSpec{
			TaskRef:     toolgatev1alpha1.LocalObjectReference{Name: "task"},
			Tool:        toolgatev1alpha1.ToolBash,
			Input:       runtime.RawExtension{Raw: []byte(`{"command":"ls"}`)},
			RequestedBy: requestedBy,
		},
	}
}

// decide casts a vote with no comment; see vote.
func decide(ctx context.Context, c client.Client, a *toolgatev1alpha1.Approval, decision toolgatev1alpha1.ApprovalDecision, user string, opts ...client.PatchOption) error {
	return vote(ctx, c, a, toolgatev1alpha1.ApprovalVote{User: user, Decision: decision}, opts...)
}

// vote sends the JSON patch docs/approvals.md shows, which appends one vote:
//
//	kubectl patch approval NAME --type json -p '[{"op":"add","path":"/spec/votes/-","value":{"user":"alice","decision":"Approved"}}]'
func vote(ctx context.Context, c client.Client, a *toolgatev1alpha1.Approval, v toolgatev1alpha1.ApprovalVote, opts ...client.PatchOption) error {
	return jsonPatch(ctx, c, a, []map[string]any{{"op": "add", "path": "/spec/votes/-", "value": v}}, opts...)
}

// jsonPatch sends a JSON patch, as kubectl patch --type json does, to a copy of obj.
func jsonPatch(ctx context.Context, c client.Client, obj client.Object, ops []map[string]any, opts ...client.PatchOption) error {
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.JSONPatchType, data), opts...)
}

// mergePatch sends a JSON merge patch, as kubectl patch --type merge does.
func mergePatch(ctx context.Context, c client.Client, obj client.Object, patch map[string]any, opts ...client.PatchOption) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	// Patch fills obj with the server's answer; patch a copy so that a refused or
	// dry-run patch leaves the caller's object as it was.
	return c.Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, data), opts...)
}

// wantRefused fails the test unless err is a 403 whose message holds want.
func wantRefused(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the request was accepted; want it refused with %q", want)
	}
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v (reason %s); want Forbidden with %q", err, apierrors.ReasonForError(err), want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal message is %q; want it to contain %q", err.Error(), want)
	}
}

// getApproval reads the stored Approval as the admin.
func getApproval(t *testing.T, a *toolgatev1alpha1.Approval) *toolgatev1alpha1.Approval {
	t.Helper()
	got := &toolgatev1alpha1.Approval{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), got); err != nil {
		t.Fatalf("reading Approval: %v", err)
	}
	return got
}

// contains reports whether err's message holds want.
func contains(err error, want string) bool {
	return err != nil && strings.Contains(err.Error(), want)
}
