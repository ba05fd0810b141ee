package argocd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// argocdIdentity is the user name the shipped approve and deny scripts vote as:
// Argo CD's API server service account in the default install.
const argocdIdentity = "system:serviceaccount:argocd:argocd-server"

func enabled(actions []Action) map[string]bool {
	out := map[string]bool{}
	for _, a := range actions {
		out[a.Name] = !a.Disabled
	}
	return out
}

func TestApprovalActionDiscovery(t *testing.T) {
	set := loadCustomizations(t).Actions["Approval"]
	for _, tc := range []struct {
		name string
		obj  *v1.Approval
		open bool
	}{
		{"no status yet", approval(1, 0, "", "", "", "", nil), true},
		{"pending", approval(1, 1, "", "", "", v1.ApprovalStatePending, nil), true},
		{"one approval of two", approval(2, 2, v1.DecisionApproved, "alice", "", v1.ApprovalStatePending, &v1.Approvers{Required: 2}), true},
		{"denied, not yet counted", approval(2, 1, v1.DecisionDenied, "alice", "", v1.ApprovalStatePending, nil), false},
		{"consumed", approval(2, 2, v1.DecisionApproved, "alice", "", v1.ApprovalStateConsumed, nil), false},
		{"denied", approval(2, 2, v1.DecisionDenied, "bob", "no", v1.ApprovalStateDenied, nil), false},
		{"expired", approval(1, 1, "", "", "", v1.ApprovalStateExpired, nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			actions, err := DiscoverActions(set.Discovery, unstructuredOf(t, tc.obj))
			if err != nil {
				t.Fatal(err)
			}
			got := enabled(actions)
			if len(got) != 2 || got["approve"] != tc.open || got["deny"] != tc.open {
				t.Errorf("actions %+v, want approve and deny enabled=%v", actions, tc.open)
			}
		})
	}
}

func TestApprovalActionsAppendOnlyArgoCDsVote(t *testing.T) {
	set := loadCustomizations(t).Actions["Approval"]
	for action, decision := range map[string]v1.ApprovalDecision{"approve": v1.DecisionApproved, "deny": v1.DecisionDenied} {
		t.Run(action, func(t *testing.T) {
			before := approval(1, 1, v1.DecisionApproved, "alice", "fine", v1.ApprovalStatePending, &v1.Approvers{Users: []string{"alice", argocdIdentity}, Required: 2})
			before.Labels = map[string]string{"toolgate.dev/task": "fix-tests"}
			orig := unstructuredOf(t, before)
			out, err := RunAction(set.Definitions[action], unstructuredOf(t, before))
			if err != nil {
				t.Fatal(err)
			}
			after := &v1.Approval{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out, after); err != nil {
				t.Fatalf("the action returned something that is not an Approval: %v", err)
			}
			if v := after.Spec.Votes; len(v) != 2 || v[0] != before.Spec.Votes[0] || v[1].User != argocdIdentity || v[1].Decision != decision || v[1].Comment == "" {
				t.Errorf("votes = %+v; want alice's as cast, then %s by %q with a comment", v, decision, argocdIdentity)
			}
			// Nothing else changes: the patch Argo CD computes touches the votes only.
			patch, err := client.MergeFrom(&unstructured.Unstructured{Object: orig}).Data(&unstructured.Unstructured{Object: out})
			if err != nil {
				t.Fatal(err)
			}
			var p map[string]any
			if err := yaml.Unmarshal(patch, &p); err != nil {
				t.Fatal(err)
			}
			spec, _ := p["spec"].(map[string]any)
			if len(p) != 1 || len(spec) != 1 || spec["votes"] == nil {
				t.Errorf("the action's patch is %s; want spec.votes only", patch)
			}
		})
	}
}

func TestApprovalActionsRefuseADecidedApproval(t *testing.T) {
	set := loadCustomizations(t).Actions["Approval"]
	for _, action := range []string{"approve", "deny"} {
		decided := approval(2, 2, v1.DecisionDenied, "bob", "", v1.ApprovalStateDenied, nil)
		_, err := RunAction(set.Definitions[action], unstructuredOf(t, decided))
		if err == nil || !strings.Contains(err.Error(), "is Denied and can no longer be decided") {
			t.Errorf("%s on a denied approval: err = %v", action, err)
		}
		voted := approval(2, 2, v1.DecisionApproved, argocdIdentity, "", v1.ApprovalStatePending, &v1.Approvers{Required: 2})
		_, err = RunAction(set.Definitions[action], unstructuredOf(t, voted))
		if err == nil || !strings.Contains(err.Error(), "Argo CD ("+argocdIdentity+") already voted Approved on Approval fix-tests-t0-0; each voter votes once and a vote is final") {
			t.Errorf("%s on an approval Argo CD voted on: err = %v", action, err)
		}
		expired := approval(1, 1, "", "", "", v1.ApprovalStateExpired, nil)
		_, err = RunAction(set.Definitions[action], unstructuredOf(t, expired))
		if err == nil || !strings.Contains(err.Error(), "is Expired and can no longer be decided") {
			t.Errorf("%s on an expired approval: err = %v", action, err)
		}
	}
}

func TestAgentTaskCancelAction(t *testing.T) {
	set := loadCustomizations(t).Actions["AgentTask"]
	running := agentTask(1, v1.AgentTaskStatus{ObservedGeneration: 1, Phase: v1.TaskRunning})
	for _, tc := range []struct {
		name string
		task *v1.AgentTask
		open bool
	}{
		{"no status", agentTask(1, v1.AgentTaskStatus{}), true},
		{"running", running, true},
		{"awaiting approval", agentTask(1, v1.AgentTaskStatus{Phase: v1.TaskAwaitingApproval}), true},
		{"already cancelled", func() *v1.AgentTask { t := running.DeepCopy(); t.Spec.Lifecycle = v1.LifecycleCancelled; return t }(), false},
		{"succeeded", agentTask(1, v1.AgentTaskStatus{Phase: v1.TaskSucceeded}), false},
		{"failed", agentTask(1, v1.AgentTaskStatus{Phase: v1.TaskFailed}), false},
	} {
		actions, err := DiscoverActions(set.Discovery, unstructuredOf(t, tc.task))
		if err != nil {
			t.Fatal(err)
		}
		if got := enabled(actions); len(got) != 1 || got["cancel"] != tc.open {
			t.Errorf("%s: actions %+v, want cancel enabled=%v", tc.name, actions, tc.open)
		}
	}
	out, err := RunAction(set.Definitions["cancel"], unstructuredOf(t, running))
	if err != nil {
		t.Fatal(err)
	}
	if lifecycle, _, _ := unstructured.NestedString(out, "spec", "lifecycle"); lifecycle != string(v1.LifecycleCancelled) {
		t.Errorf("cancel did not set spec.lifecycle Cancelled: %v", out["spec"])
	}
	cancelled := running.DeepCopy()
	cancelled.Spec.Lifecycle = v1.LifecycleCancelled
	if _, err := RunAction(set.Definitions["cancel"], unstructuredOf(t, cancelled)); err == nil || !strings.Contains(err.Error(), "already cancelled") {
		t.Errorf("cancel of a cancelled task: err = %v", err)
	}
}

// argoClient is a client acting as Argo CD's API server service account, with the
// permissions of Argo CD's default install (get, patch and delete on everything), which
// is what an action runs with.
func argoClient(t *testing.T, ctx context.Context) client.Client {
	t.Helper()
	user, err := env.AddUser(envtest.User{Name: argocdIdentity, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:argocd"}}, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-server-test"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "patch", "delete"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-server-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "argocd-server", Namespace: "argocd"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	c, err := client.New(user.Config(), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createPending creates an Approval as the controller would, pending: the object,
// then the status the controller writes for it.
func createPending(t *testing.T, ctx context.Context, ns, name string, approvers *v1.Approvers) {
	t.Helper()
	a := fixtures.PendingApproval(ns, name, "system:serviceaccount:"+ns+":coding-agent", approvers)
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.Status.State = v1.ApprovalStatePending
	a.Status.ObservedGeneration = a.Generation
	if err := env.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
}

// runAction does what Argo CD does for an action: read the live object, run the
// script, and send the difference as a JSON merge patch, as argo.
func runAction(ctx context.Context, argo client.Client, script, ns, kind, name string, opts ...client.PatchOption) error {
	live := &unstructured.Unstructured{}
	live.SetAPIVersion(v1.GroupVersion.String())
	live.SetKind(kind)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, live); err != nil {
		return err
	}
	out, err := RunAction(script, live.DeepCopy().Object)
	if err != nil {
		return err
	}
	return argo.Patch(ctx, &unstructured.Unstructured{Object: out}, client.MergeFrom(live), opts...)
}

// The approve action runs with Argo CD's identity, so the admission policy refuses it
// until Argo CD is made an approver on purpose (the approve verb, and membership in the
// approval's approvers when the rule names any); then the vote is Argo CD's service
// account's, never the person who clicked. A script that names another identity is
// refused too: a vote's user must be the caller.
func TestApproveActionUnderAdmission(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	argo := argoClient(t, ctx)
	set := loadCustomizations(t).Actions["Approval"]
	approve := set.Definitions["approve"]

	createPending(t, ctx, ns, "probe", nil)
	createPending(t, ctx, ns, "open", nil)
	createPending(t, ctx, ns, "for-alice", &v1.Approvers{Users: []string{"alice"}})
	createPending(t, ctx, ns, "for-argocd", &v1.Approvers{Groups: []string{"system:serviceaccounts:argocd"}})
	createPending(t, ctx, ns, "to-deny", nil)

	// Argo CD's RBAC lets it patch anything; only admission stands in the way. The
	// policy is enforced a moment after it is installed, so probe with dry runs
	// (which run admission but store nothing) until it refuses.
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		last = runAction(ctx, argo, approve, ns, "Approval", "probe", client.DryRunAll)
		return last != nil, nil
	})
	if err != nil {
		t.Fatalf("the approve action by Argo CD was never refused: %v", last)
	}
	if !apierrors.IsForbidden(last) || !strings.Contains(last.Error(), argocdIdentity+" may not vote on approvals in namespace "+ns) {
		t.Fatalf("refusal without the approve verb = %v", last)
	}

	// A script configured with another identity than the one Argo CD patches as.
	wrong := strings.ReplaceAll(approve, argocdIdentity, "system:serviceaccount:gitops:argocd-server")
	if wrong == approve {
		t.Fatal("approve.lua does not name " + argocdIdentity)
	}
	err = runAction(ctx, argo, wrong, ns, "Approval", "open")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "a vote must carry your own user name, which is "+argocdIdentity) {
		t.Fatalf("approve naming another identity: err = %v", err)
	}

	// Made an approver on purpose: the toolgate-approver role bound to Argo CD's
	// service account in this namespace.
	grantApproverRole(t, ctx, ns)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = runAction(ctx, argo, approve, ns, "Approval", "open")
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("the approve action was refused after granting the approver role: %v", last)
	}
	got := &v1.Approval{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "open"}, got); err != nil {
		t.Fatal(err)
	}
	if v := got.Spec.Votes; len(v) != 1 || v[0].Decision != v1.DecisionApproved || v[0].User != argocdIdentity {
		t.Errorf("approved approval has votes %+v; want Approved by %q (the person is not recorded)", v, argocdIdentity)
	}

	// An approval whose rule names its approvers needs Argo CD among them.
	err = runAction(ctx, argo, approve, ns, "Approval", "for-alice")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is not one of this approval's approvers") {
		t.Errorf("approve of an approval for alice: err = %v", err)
	}
	if err := runAction(ctx, argo, approve, ns, "Approval", "for-argocd"); err != nil {
		t.Errorf("approve of an approval naming Argo CD's group: %v", err)
	}
	if err := runAction(ctx, argo, set.Definitions["deny"], ns, "Approval", "to-deny"); err != nil {
		t.Errorf("deny: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "to-deny"}, got); err != nil {
		t.Fatal(err)
	}
	if v := got.Spec.Votes; len(v) != 1 || v[0].Decision != v1.DecisionDenied || v[0].User != argocdIdentity {
		t.Errorf("denied approval has votes %+v; want Denied by %q", v, argocdIdentity)
	}

	// A vote is final: the script refuses before anything is sent.
	if err := runAction(ctx, argo, approve, ns, "Approval", "to-deny"); err == nil || !strings.Contains(err.Error(), "a vote is final") {
		t.Errorf("approve of a denied approval: err = %v", err)
	}
}

// grantApproverRole binds the approver ClusterRole of config/rbac to Argo CD's service
// account in ns, as docs/gitops.md tells operators to do.
func grantApproverRole(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "approver_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(b, role); err != nil {
		t.Fatal(err)
	}
	role.Name = "toolgate-" + role.Name
	if err := env.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd-approves"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "argocd-server", Namespace: "argocd"}},
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// The cancel action is an ordinary spec patch; Argo CD's identity may send it.
func TestCancelActionPatchesTheTask(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	argo := argoClient(t, ctx)
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "upgrade-deps"},
		Spec: v1.AgentTaskSpec{
			Goal:      "upgrade",
			Workspace: v1.WorkspaceSpec{ExistingClaim: "checkout"},
			Agent:     v1.AgentSpec{External: &v1.ExternalAgent{Proposers: v1.Proposers{ServiceAccounts: []v1.ServiceAccountReference{{Namespace: ns, Name: "coding-agent"}}}}},
		},
	}
	if err := env.Client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	if err := runAction(ctx, argo, loadCustomizations(t).Actions["AgentTask"].Definitions["cancel"], ns, "AgentTask", task.Name); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(task), task); err != nil {
		t.Fatal(err)
	}
	if !task.IsCancelled() || task.Spec.Goal != "upgrade" {
		t.Errorf("after cancel: spec = %+v", task.Spec)
	}
}
