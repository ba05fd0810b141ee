package pipeline

import (
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// grantCase is a grant check that holds: alice approved agent's `npm test` asked by
// rule team/tests, which allows both scopes, and granted both to later calls.
func grantCase(scope v1.GrantScope) GrantCheck {
	rule := v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "team", 3, "tests")
	sandbox := &v1.DecidedSandbox{TaskUID: "uid-1", TimeoutSeconds: 60, MaxOutputBytes: 1000,
		Profile: v1.SandboxProfile{Image: "img", WorkspaceClaimName: "ws", Network: v1.NetworkSpec{Mode: v1.NetworkNone}}}
	grants := &v1.RuleGrants{AllowedScopes: []v1.GrantScope{v1.GrantScopeOnce, v1.GrantScopeTask, v1.GrantScopeCommandPrefix}}
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: testTask, Namespace: testNS, UID: types.UID("uid-1")}}
	approval := &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: "t-t0-0", Namespace: testNS},
		Spec: v1.ApprovalSpec{
			TaskRef: v1.LocalObjectReference{Name: testTask}, Fingerprint: "fp-npm-test",
			Request:     v1.ApprovalRequest{Tool: v1.ToolBash, Input: `{"command":"npm test"}`, PolicyRuleRef: rule, Sandbox: sandbox.DeepCopy()},
			RequestedBy: "agent", ExpiresAt: metav1.NewTime(epoch.Add(time.Hour)),
			Votes: []v1.ApprovalVote{{User: "alice", Decision: v1.DecisionApproved}},
		},
		Status: v1.ApprovalStatus{State: v1.ApprovalStateConsumed, DecidedAt: &metav1.Time{Time: epoch}},
	}
	g := &v1.ApprovalGrant{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: testNS, CreationTimestamp: metav1.NewTime(epoch)},
		Spec: v1.ApprovalGrantSpec{
			ApprovalRef: v1.LocalObjectReference{Name: approval.Name}, TaskRef: v1.LocalObjectReference{Name: testTask}, TaskUID: "uid-1",
			Scope: scope, MaxUses: 3, ExpiresAt: metav1.NewTime(epoch.Add(30 * time.Minute)), GrantedBy: "alice",
		},
	}
	if scope == v1.GrantScopeCommandPrefix {
		g.Spec.CommandPrefix = []string{"npm", "test"}
	}
	intent := makeIntent("t-t1-0").tool(v1.ToolBash).input(`{"command":"npm test"}`).obj()
	return GrantCheck{
		Grant: g, Approval: approval, Task: task, Intent: intent,
		Decision: &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: rule, Grants: grants, Fingerprint: "fp-npm-test", Sandbox: sandbox.DeepCopy()},
		Input:    []byte(`{"command":"npm test"}`),
		Now:      epoch.Add(time.Minute),
	}
}

func TestGrantCovers(t *testing.T) {
	tests := []struct {
		name  string
		scope v1.GrantScope
		edit  func(*GrantCheck)
		// want is "" when the grant covers the call, else what the refusal says.
		want string
	}{
		{name: "task: the same call again", scope: v1.GrantScopeTask},
		{name: "prefix: the prefix with more arguments", scope: v1.GrantScopeCommandPrefix, edit: command("npm test -- --watch=false")},
		{name: "prefix: every part starts with it", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && npm test -- b")},
		{name: "another task of the same name", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Task.UID = "uid-2" }, want: "not this call's t (uid uid-2)"},
		{name: "a grant of another task", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Grant.Spec.TaskRef.Name = "other" }, want: "it is for AgentTask other"},
		{name: "an approval of another task", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Approval.Spec.TaskRef.Name = "other" }, want: "was asked for another task"},
		{name: "no approval", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Approval = nil }, want: "does not exist"},
		{name: "an approval denied", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Approval.Spec.Votes[0].Decision = v1.DecisionDenied }, want: "is not approved by its votes"},
		{name: "an approval retired unused", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Approval.Status.State = v1.ApprovalStateSuperseded }, want: `state "Superseded"`},
		{name: "an approval decided after it expired", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Approval.Status.DecidedAt = &metav1.Time{Time: epoch.Add(2 * time.Hour)} }, want: "not decided before it expired"},
		{name: "granted by someone who did not approve", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Grant.Spec.GrantedBy = "bob" }, want: "bob did not approve Approval t-t0-0"},
		{name: "an approval that needed two approvers", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) {
			c.Approval.Spec.Approvers = &v1.Approvers{Users: []string{"alice", "bob"}, Required: 2}
			c.Approval.Spec.Votes = append(c.Approval.Spec.Votes, v1.ApprovalVote{User: "bob", Decision: v1.DecisionApproved})
			c.Decision.Approvers = *c.Approval.Spec.Approvers
		}, want: "needed 2 approvers, and a grant is one person's"},
		{name: "the rule names other approvers now", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) { c.Decision.Approvers = v1.Approvers{Users: []string{"carol"}} }, want: "now names other approvers"},
		{name: "the rule asks for a quorum now", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.Approvers = v1.Approvers{Required: 2} }, want: "now names other approvers"},
		{name: "granted by the requester of the new call", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Intent.Spec.RequestedBy = "alice" }, want: "nobody approves their own calls"},
		{name: "the call is denied now", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.Action = v1.DecisionDeny }, want: "decided Deny"},
		{name: "the call is allowed now", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.Action = v1.DecisionAllow }, want: "decided Allow"},
		{name: "another rule asks", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.PolicyRuleRef.Rule = "other" }, want: "asked by ToolPolicy/team/other now"},
		{name: "the rule allows Once only", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.Grants = nil }, want: "does not allow scope Task"},
		{name: "more uses than the rule allows", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.Grants.MaxUses = ptr[int32](2) }, want: "allows 3 uses and rule ToolPolicy/team/tests at most 2"},
		{name: "longer than the rule allows", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.Grants.MaxDurationSeconds = ptr[int32](60) }, want: "longer than rule"},
		{name: "expired", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Now = epoch.Add(30 * time.Minute) }, want: "it expired at"},
		{name: "every use taken", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Grant.Status.Uses = 3 }, want: "all 3 of its uses are taken"},
		{name: "task: another input", scope: v1.GrantScopeTask, edit: func(c *GrantCheck) { c.Decision.Fingerprint = "fp-other" }, want: "the call is not the approved one"},
		{name: "prefix: a second command", scope: v1.GrantScopeCommandPrefix, edit: command("npm test; rm -rf ."), want: `part "rm -rf ." does not start`},
		{name: "prefix: a second command after &&", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && curl https://example.com"), want: `part "curl https://example.com"`},
		{name: "prefix: a redirect", scope: v1.GrantScopeCommandPrefix, edit: command("npm test > package.json"), want: `part "redirect > package.json"`},
		{name: "prefix: a substitution", scope: v1.GrantScopeCommandPrefix, edit: command("npm test $(rm -rf .)"), want: `part "rm -rf ."`},
		{name: "prefix: a pipe", scope: v1.GrantScopeCommandPrefix, edit: command("npm test | tee log"), want: `part "tee log"`},
		{name: "prefix: an assignment before it", scope: v1.GrantScopeCommandPrefix, edit: command("NODE_OPTIONS=--require=./x.js npm test"), want: "does not begin with"},
		{name: "prefix: a wrapper before it", scope: v1.GrantScopeCommandPrefix, edit: command("env NODE_OPTIONS=--require=./x.js npm test"), want: "does not begin with"},
		{name: "prefix: a later command wrapped (1)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && env -C /etc npm test"), want: "does not begin with it as written"},
		{name: "prefix: a later command wrapped (2)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && env --chdir=/ npm test"), want: "does not begin with it as written"},
		{name: "prefix: a later command wrapped (3)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && timeout -s KILL 99999 npm test"), want: "does not begin with it as written"},
		{name: "prefix: a later command wrapped (4)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && exec npm test"), want: "does not begin with it as written"},
		{name: "prefix: a later command wrapped (5)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && nice npm test"), want: "does not begin with it as written"},
		{name: "prefix: a later command wrapped (6)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && watch npm test"), want: "does not begin with it as written"},
		{name: "prefix: a later command wrapped (7)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test; NODE_OPTIONS=--require=./x.js npm test"), want: "does not begin with it as written"},
		{name: "prefix: a later command wrapped (8)", scope: v1.GrantScopeCommandPrefix, edit: command("npm test && \"npm\" test"), want: "does not begin with it as written"},
		{name: "prefix: a shorter command", scope: v1.GrantScopeCommandPrefix, edit: command("npm"), want: `part "npm"`},
		{name: "prefix: one that does not cover the approved call", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) {
			c.Grant.Spec.CommandPrefix = []string{"rm"}
			command("rm -rf node_modules")(c)
		}, want: "does not cover the approved call itself"},
		{name: "prefix: longer than the approved call", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) {
			c.Grant.Spec.CommandPrefix = []string{"npm", "test", "--", "--all"}
			command("npm test -- --all")(c)
		}, want: "does not cover the approved call itself"},
		{name: "prefix: an approval whose input was cut", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) {
			c.Approval.Spec.Request.Input = `{"command":"npm test …[9000 more bytes not shown]`
		}, want: "does not cover the approved call itself"},
		{name: "prefix: not bash", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) { c.Intent.Spec.Tool = v1.ToolReadFile }, want: "covers bash calls"},
		{name: "prefix: a writable workspace where it was read-only", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) {
			c.Approval.Spec.Request.Sandbox.Profile.ReadOnlyWorkspace = true
		}, want: "writable workspace"},
		{name: "prefix: a network where it had none", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) {
			c.Decision.Sandbox.Profile.Network = v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8"}}}
		}, want: "a network the approved call did not have"},
		{name: "prefix: another image", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) { c.Decision.Sandbox.Profile.Image = "other" }, want: "in image other"},
		{name: "prefix: a longer timeout", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) { c.Decision.Sandbox.TimeoutSeconds = 600 }, want: "for up to 600s"},
		{name: "prefix: read-only where it was writable is narrower", scope: v1.GrantScopeCommandPrefix, edit: func(c *GrantCheck) { c.Decision.Sandbox.Profile.ReadOnlyWorkspace = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := grantCase(tt.scope)
			if tt.edit != nil {
				tt.edit(&c)
			}
			ok, why := GrantCovers(c)
			switch {
			case tt.want == "" && !ok:
				t.Fatalf("the grant does not cover the call: %s", why)
			case tt.want != "" && ok:
				t.Fatalf("the grant covers the call; want it refused with %q", tt.want)
			case tt.want != "" && !strings.Contains(why, tt.want):
				t.Fatalf("refused with %q; want it to say %q", why, tt.want)
			}
		})
	}
}

// command sets the new call's bash command.
func command(cmd string) func(*GrantCheck) {
	return func(c *GrantCheck) {
		raw := []byte(`{"command":` + strconv.Quote(cmd) + `}`)
		c.Input = raw
		c.Intent.Spec.Input.Raw = raw
	}
}
