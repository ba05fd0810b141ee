package admission

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// Tests of approval scopes (docs/approvals.md "Scopes"): an approver extends an
// approval to later calls of the task with an ApprovalGrant, within the bounds of
// the rule that asked. Each attack is played with the users' own certificates
// against the controller running as its service account: alice approved the first
// `npm test` of the task; bob is an approver who did not; the agent proposes.

// grantTask is the task the grants are for.
const grantTask = "grants"

// testsRule is the rule of the team's policy that asks for `npm test` and `sort`,
// and lets an approver extend an approval to both scopes, up to 5 uses and an hour.
var testsRule = v1.PolicyRule{
	Name: "tests-ask", Action: v1.RuleAsk, Reason: "tests run the repository's code",
	Match:  v1.RuleMatch{Tools: []v1.ToolName{v1.ToolBash}, Commands: []v1.CommandPattern{{Prefix: []string{"npm", "test"}}, {Prefix: []string{"sort"}}}},
	Grants: &v1.RuleGrants{AllowedScopes: []v1.GrantScope{v1.GrantScopeOnce, v1.GrantScopeTask, v1.GrantScopeCommandPrefix}, MaxUses: ptr.To[int32](5), MaxDurationSeconds: ptr.To[int32](3600)},
}

// approvedFirstCall sets up a namespace with the controller, the team's policy
// (created by the task owner olive, compiled), the task, and its first call,
// command, asked by testsRule and approved by alice. It returns the namespace, the
// task and alice's Approval once the controller recorded it Approved.
func approvedFirstCall(t *testing.T, command string, with ...func(*controller.Options)) (string, *v1.AgentTask, *v1.Approval) {
	t.Helper()
	ns := attackNamespace(t, with...)
	policy := &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"}, Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{testsRule}}}
	if err := clients[ownerUser].Create(t.Context(), policy); err != nil {
		t.Fatalf("%s creating the team's policy: %v", ownerUser, err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &v1.ToolPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("the controller never compiled the team's policy: %v", err)
	}
	task := ownerTask(t, ns, grantTask, v1.ModeEdit)
	first := proposeBash(t, ns, "first", grantTask, 0, command)
	a := approvalOf(t, first)
	approveAs(t, alice, a)
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
			return false, err
		}
		return a.Status.State == v1.ApprovalStateApproved || a.Status.State == v1.ApprovalStateConsumed, nil
	})
	if err != nil {
		t.Fatalf("alice's approval was never recorded: %+v", a.Status)
	}
	return ns, task, a
}

// grantOf builds the grant that user gives on Approval a for task, owned by the
// task, as `kubectl toolgate approve --scope` would.
func grantOf(user string, task *v1.AgentTask, a *v1.Approval, scope v1.GrantScope, uses int32, prefix ...string) *v1.ApprovalGrant {
	return &v1.ApprovalGrant{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: task.Namespace, GenerateName: a.Name + "-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "AgentTask", Name: task.Name, UID: task.UID}},
		},
		Spec: v1.ApprovalGrantSpec{
			ApprovalRef: v1.LocalObjectReference{Name: a.Name}, TaskRef: v1.LocalObjectReference{Name: task.Name}, TaskUID: string(task.UID),
			Scope: scope, CommandPrefix: prefix, MaxUses: uses, ExpiresAt: metav1.NewTime(time.Now().Add(30 * time.Minute)), GrantedBy: user,
		},
	}
}

// createGrant creates g as user.
func createGrant(t *testing.T, user string, g *v1.ApprovalGrant) *v1.ApprovalGrant {
	t.Helper()
	if err := clients[user].Create(t.Context(), g); err != nil {
		t.Fatalf("%s creating the grant: %v", user, err)
	}
	return g
}

// runsOnGrant waits until the intent ran on grant g, taking use of its uses, with
// no Approval of its own, and the grant records the use.
func runsOnGrant(t *testing.T, intent *v1.ToolIntent, g *v1.ApprovalGrant, use int32) {
	t.Helper()
	got := waitFor(t, intent, "a decision to run or ask", func(i *v1.ToolIntent) bool {
		return i.Status.ExecutionName != "" || i.Status.ApprovalName != "" || i.Status.Observation != nil
	})
	ref := got.Status.Decision.GrantRef
	if ref == nil || got.Status.ApprovalName != "" || got.Status.ExecutionName == "" {
		t.Fatalf("intent %s did not run on grant %s: approval %q, execution %q, grant use %+v, conditions %+v", got.Name, g.Name, got.Status.ApprovalName, got.Status.ExecutionName, ref, got.Status.Conditions)
	}
	if ref.Name != g.Name || ref.Use != use || ref.Of != g.Spec.MaxUses || ref.GrantedBy != g.Spec.GrantedBy {
		t.Fatalf("intent %s records %s; want use %d of %d of grant %s by %s", got.Name, ref, use, g.Spec.MaxUses, g.Name, g.Spec.GrantedBy)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionApproved); c == nil || c.Reason != v1.ReasonGrantUsed {
		t.Fatalf("intent %s: Approved condition %+v; want reason %s", got.Name, c, v1.ReasonGrantUsed)
	}
	// The Execution's own check of the chain (intent, decision, grant use) lets it
	// have its Job.
	waitJob(t, got.Namespace, got.Status.ExecutionName)
	stored := &v1.ApprovalGrant{}
	if err := clients[alice].Get(t.Context(), client.ObjectKeyFromObject(g), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.Uses < use {
		t.Fatalf("grant %s records %d uses after use %d", g.Name, stored.Status.Uses, use)
	}
}

// asksAgain waits until the intent asks a human (an Approval of its own), and checks
// that it took no grant's use and runs nothing.
func asksAgain(t *testing.T, intent *v1.ToolIntent) {
	t.Helper()
	approvalOf(t, intent)
	got := waitFor(t, intent, "its status", func(*v1.ToolIntent) bool { return true })
	if got.Status.Decision.GrantRef != nil || got.Status.ExecutionName != "" {
		t.Fatalf("intent %s asks and yet runs on %s (execution %q)", got.Name, got.Status.Decision.GrantRef, got.Status.ExecutionName)
	}
	wantNothingRan(t, intent)
}

// usesOf reads the grant's recorded uses.
func usesOf(t *testing.T, g *v1.ApprovalGrant) int32 {
	t.Helper()
	stored := &v1.ApprovalGrant{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(g), stored); err != nil {
		t.Fatal(err)
	}
	return stored.Status.Uses
}

// The happy path of scope Task, its count, and revocation: the same call runs
// again on the grant until its uses are taken; the next asks. Guards the use count
// (without it the third call runs) and the grant's deletion (without the
// compare-and-swap on the stored grant, a deleted grant would go on allowing calls).
func TestATaskGrantRunsTheSameCallUpToItsCount(t *testing.T) {
	ns, task, a := approvedFirstCall(t, "npm test")
	g := createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeTask, 2))

	runsOnGrant(t, proposeBash(t, ns, "second", grantTask, 1, "npm test"), g, 1)
	runsOnGrant(t, proposeBash(t, ns, "third", grantTask, 2, "npm test"), g, 2)
	// Beyond its count.
	asksAgain(t, proposeBash(t, ns, "fourth", grantTask, 3, "npm test"))
	if got := usesOf(t, g); got != 2 {
		t.Fatalf("grant %s records %d uses; want 2", g.Name, got)
	}

	// Another input is another call.
	other := createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeTask, 5))
	asksAgain(t, proposeBash(t, ns, "other-input", grantTask, 4, "npm test -- --coverage"))

	// Revoked: deleted, it allows nothing.
	if err := clients[alice].Delete(t.Context(), other); err != nil {
		t.Fatalf("alice revoking grant %s: %v", other.Name, err)
	}
	asksAgain(t, proposeBash(t, ns, "after-revoke", grantTask, 5, "npm test"))
}

// A grant never crosses tasks: the first task's grants, and grants made for the
// other task out of the first task's approval, let nothing of the other task run.
// Guarded in layers: the controller looks a grant's Approval up among the call's
// own task's Approvals; GrantCovers checks the grant's and its Approval's task, by
// name and UID; and besides them the fingerprint (Task: it covers the task) and the
// sandbox (CommandPrefix: it names the task's UID). The other task's call runs only
// without all of them.
func TestAGrantDoesNotCrossTasks(t *testing.T) {
	ns, task, a := approvedFirstCall(t, "npm test")
	createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeTask, 5))
	createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeCommandPrefix, 5, "npm", "test"))
	other := ownerTask(t, ns, "other", v1.ModeEdit)
	createGrant(t, alice, grantOf(alice, other, a, v1.GrantScopeTask, 5))
	createGrant(t, alice, grantOf(alice, other, a, v1.GrantScopeCommandPrefix, 5, "npm", "test"))
	asksAgain(t, proposeBash(t, ns, "elsewhere", other.Name, 0, "npm test"))
}

// A grant after its expiresAt (by the controller's clock) allows nothing. Guards
// the expiry check.
func TestAnExpiredGrantAllowsNothing(t *testing.T) {
	clock := &fixtures.Clock{}
	ns, task, a := approvedFirstCall(t, "npm test", func(o *controller.Options) { o.Now = clock.Now })
	g := createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeTask, 5))
	clock.Advance(time.Until(g.Spec.ExpiresAt.Time) + time.Minute)
	asksAgain(t, proposeBash(t, ns, "late", grantTask, 1, "npm test"))
}

// The happy path of scope CommandPrefix and its stretches: more arguments run on
// the grant; a second command, a chained network call, a redirect and a
// substitution ask. Guards policy.CoveredByPrefix (every part must start with the
// prefix).
func TestAPrefixGrantCoversThePrefixOnly(t *testing.T) {
	ns, task, a := approvedFirstCall(t, "npm test")
	g := createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeCommandPrefix, 5, "npm", "test"))

	runsOnGrant(t, proposeBash(t, ns, "more-args", grantTask, 1, "npm test -- --watch=false"), g, 1)
	for i, stretch := range []string{"npm test; rm -rf .", "npm test && curl https://example.com/x", "npm test > package.json", "npm test $(rm -rf .)"} {
		asksAgain(t, proposeBash(t, ns, "stretch-"+string(rune('a'+i)), grantTask, int32(2+i), stretch))
	}
	if got := usesOf(t, g); got != 1 {
		t.Fatalf("grant %s records %d uses; want 1", g.Name, got)
	}
}

// An argument that widens the walls: alice approved a read-only `sort`, which runs
// with the workspace read-only and no network; `sort -o` writes, and would run with
// a writable workspace. Guards SandboxNoWider.
func TestAPrefixGrantDoesNotWidenTheWalls(t *testing.T) {
	ns, task, a := approvedFirstCall(t, "sort notes.txt")
	if w := a.Spec.Request.Walls; w == nil || !w.ReadOnlyWorkspace {
		t.Fatalf("the approved sort has walls %+v; want a read-only workspace", w)
	}
	g := createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeCommandPrefix, 5, "sort"))
	runsOnGrant(t, proposeBash(t, ns, "sort-again", grantTask, 1, "sort -r notes.txt"), g, 1)
	asksAgain(t, proposeBash(t, ns, "sort-writes", grantTask, 2, "sort -o notes.txt notes.txt"))
}

// Who may create a grant: admission refuses a grant signed with another's name, one
// by the controller, and one not owned by its task; RBAC refuses the agent and a
// stranger. bob, an approver who did not approve this Approval, may create a grant
// naming himself, and the controller does not honour it. Guards the approval-grant
// policy and GrantCovers' approver check.
func TestOnlyTheApproverGrants(t *testing.T) {
	ns, task, a := approvedFirstCall(t, "npm test")

	wantRefused(t, clients[alice].Create(t.Context(), grantOf(bob, task, a, v1.GrantScopeTask, 5)), "spec.grantedBy must be your user name, which is alice (it was bob).")
	wantRefused(t, clients[controllerUser].Create(t.Context(), grantOf(controllerUser, task, a, v1.GrantScopeTask, 5)), "the toolgate controller's service account never creates an ApprovalGrant")
	wantRefused(t, clients[agentUser].Create(t.Context(), grantOf(agentUser, task, a, v1.GrantScopeTask, 5)), `cannot create resource "approvalgrants"`)
	wantRefused(t, clients[strangerUser].Create(t.Context(), grantOf(strangerUser, task, a, v1.GrantScopeTask, 5)), `cannot create resource "approvalgrants"`)
	unowned := grantOf(alice, task, a, v1.GrantScopeTask, 5)
	unowned.OwnerReferences = nil
	wantRefused(t, clients[alice].Create(t.Context(), unowned), "an ApprovalGrant must be owned by its task")

	createGrant(t, bob, grantOf(bob, task, a, v1.GrantScopeTask, 5))
	asksAgain(t, proposeBash(t, ns, "bobs", grantTask, 1, "npm test"))
}

// A policy change that makes the call stricter wins over a grant: the call the
// grant covers waits for the rest of its turn; meanwhile paula adds an emergency
// Deny; when the turn is complete the call is decided again before the grant is
// used, and denied. Guards the last-moment recheck before a grant is used (without
// it the grant's check sees a Deny and a human is asked instead; with the recheck
// removed altogether the call runs on the grant).
func TestAnEmergencyDenyBeatsAGrant(t *testing.T) {
	ns, task, a := approvedFirstCall(t, "npm test")
	g := createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeTask, 5))
	twoCalls := func(i *v1.ToolIntent) { i.Spec.TurnCalls = 2 }
	intent := proposeBash(t, ns, "frozen", grantTask, 1, "npm test", twoCalls)
	waitFor(t, intent, "held for the rest of its turn", func(i *v1.ToolIntent) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, v1.ConditionExecuted)
		return c != nil && c.Reason == v1.ReasonWaitingForSiblings
	})

	freeze := &v1.ClusterToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-freeze"},
		Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
			Name: "change-freeze", Action: v1.RuleDeny, Reason: "change freeze: no tests run",
			Match: v1.RuleMatch{Commands: []v1.CommandPattern{words(t, "npm", "test")}},
		}}},
	}
	if err := clients[policyAdmin].Create(t.Context(), freeze); err != nil {
		t.Fatalf("%s adding the emergency policy: %v", policyAdmin, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), freeze) })
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &v1.ClusterToolPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(freeze), got); err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("the controller never compiled the emergency policy: %v", err)
	}
	proposeBash(t, ns, "sibling", grantTask, 1, "ls", twoCalls, func(i *v1.ToolIntent) { i.Spec.Index = 1 })

	got := observed(t, intent, v1.OutcomeDenied, false, "change freeze")
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionDecided); c == nil || c.Reason != v1.ReasonRedecided {
		t.Errorf("the call's Decided condition: %+v; want reason %s", c, v1.ReasonRedecided)
	}
	wantNothingRan(t, intent)
	if got := usesOf(t, g); got != 0 {
		t.Fatalf("grant %s records %d uses; want none", g.Name, got)
	}
}

// Two calls proposed together race for a grant's last use: one runs on it, the other
// asks. Each use is a compare-and-swap on the grant, so the loser conflicts, reads
// the grant again and finds no use left. (The race itself depends on the
// controller's workers taking both calls at once; what must hold either way is that
// the grant allows one call.)
func TestTwoCallsCannotTakeTheLastUse(t *testing.T) {
	ns, task, a := approvedFirstCall(t, "npm test")
	g := createGrant(t, alice, grantOf(alice, task, a, v1.GrantScopeTask, 1))
	calls := []*v1.ToolIntent{
		proposeBash(t, ns, "racer-a", grantTask, 1, "npm test"),
		proposeBash(t, ns, "racer-b", grantTask, 2, "npm test"),
	}
	var ran, asked int
	for _, c := range calls {
		got := waitFor(t, c, "a decision to run or ask", func(i *v1.ToolIntent) bool {
			return i.Status.ExecutionName != "" || i.Status.ApprovalName != "" || i.Status.Observation != nil
		})
		switch {
		case got.Status.Decision.GrantRef != nil && got.Status.ExecutionName != "":
			ran++
		case got.Status.ApprovalName != "" && got.Status.ExecutionName == "":
			asked++
		}
	}
	if ran != 1 || asked != 1 {
		t.Fatalf("%d calls ran on the grant and %d asked; want one each", ran, asked)
	}
	if got := usesOf(t, g); got != 1 {
		t.Fatalf("grant %s records %d uses; want 1", g.Name, got)
	}
}
