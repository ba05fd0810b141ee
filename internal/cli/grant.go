package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// grantOptions are approve's --scope, --uses, --for and --prefix.
type grantOptions struct {
	scope  string
	uses   int32
	within time.Duration
	prefix string
}

// approvedCommand is the bash command of intent ("" when none).
func approvedCommand(intent *v1.ToolIntent) string {
	var input struct {
		Command string `json:"command"`
	}
	if json.Unmarshal(intent.Spec.Input.Raw, &input) != nil {
		return ""
	}
	return input.Command
}

// scopeOf maps --scope to the API's scope.
var scopeOf = map[string]v1.GrantScope{"once": v1.GrantScopeOnce, "task": v1.GrantScopeTask, "prefix": v1.GrantScopeCommandPrefix}

// buildGrant is the ApprovalGrant user gives with Approval a, asked for intent of
// task, or nil for --scope once; an error says which flag the rule or the call does
// not allow, and what would. It is checked before the approval is decided, so that
// a refused scope leaves the approval pending. The controller checks all of it
// again at each use (pipeline.GrantCovers); this is for a clear answer now.
func buildGrant(a *v1.Approval, intent *v1.ToolIntent, task *v1.AgentTask, user string, o grantOptions, now time.Time) (*v1.ApprovalGrant, error) {
	scope, ok := scopeOf[strings.ToLower(o.scope)]
	if !ok {
		return nil, fmt.Errorf("--scope %q is not one of once, task, prefix", o.scope)
	}
	if scope != v1.GrantScopeCommandPrefix && o.prefix != "" {
		return nil, fmt.Errorf("--prefix is for --scope prefix only")
	}
	if scope == v1.GrantScopeOnce {
		return nil, nil
	}
	if q := a.Spec.Approvers.Quorum(); q > 1 {
		return nil, fmt.Errorf("Approval %s needs %d approvers, and a grant is one person's: what %d people approve together cannot be extended by one; approve with --scope once", a.Name, q, q)
	}
	d := intent.Status.Decision
	if d == nil || d.Action != v1.DecisionAsk || !d.PolicyRuleRef.SameRule(a.Spec.Request.PolicyRuleRef) {
		return nil, fmt.Errorf("ToolIntent %s's decision in force is not the Ask of Approval %s; approve it with --scope once", intent.Name, a.Name)
	}
	if !d.Grants.Allows(scope) {
		allowed := []v1.GrantScope{v1.GrantScopeOnce}
		if d.Grants != nil && len(d.Grants.AllowedScopes) > 0 {
			allowed = d.Grants.AllowedScopes
		}
		return nil, fmt.Errorf("rule %s does not allow scope %s (it allows %v: spec.rules[].grants.allowedScopes of the policy); approve with --scope once, or ask the policy's owner", d.PolicyRuleRef, scope, allowed)
	}
	uses := o.uses
	if uses == 0 {
		uses = min(v1.DefaultGrantMaxUses, d.Grants.UsesBound())
	}
	if bound := d.Grants.UsesBound(); uses < 1 || uses > bound {
		return nil, fmt.Errorf("--uses %d is outside 1..%d, the bound of rule %s", uses, bound, d.PolicyRuleRef)
	}
	within := o.within
	bound := time.Duration(d.Grants.DurationBoundSeconds()) * time.Second
	if within == 0 {
		within = bound
	}
	if within <= 0 || within > bound {
		return nil, fmt.Errorf("--for %s is longer than rule %s allows (%s)", o.within, d.PolicyRuleRef, bound)
	}
	g := &v1.ApprovalGrant{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: a.Namespace, GenerateName: a.Name + "-",
			// Deleted with its task; the API server refuses a grant without it.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "AgentTask", Name: task.Name, UID: task.UID}},
		},
		Spec: v1.ApprovalGrantSpec{
			ApprovalRef: v1.LocalObjectReference{Name: a.Name}, TaskRef: v1.LocalObjectReference{Name: task.Name}, TaskUID: string(task.UID),
			Scope: scope, MaxUses: uses, GrantedBy: user,
			// A moment short of the bound: the controller measures it from the
			// grant's creation, a little after now.
			ExpiresAt: metav1.NewTime(now.Add(within).Truncate(time.Second)),
		},
	}
	if scope == v1.GrantScopeCommandPrefix {
		if a.Spec.Request.Tool != v1.ToolBash {
			return nil, fmt.Errorf("--scope prefix is for bash calls, and Approval %s asks for %s", a.Name, a.Spec.Request.Tool)
		}
		g.Spec.CommandPrefix = strings.Fields(o.prefix)
		if len(g.Spec.CommandPrefix) == 0 {
			return nil, fmt.Errorf(`--scope prefix needs --prefix, the argv words later calls must start with, for example --prefix "npm test"`)
		}
		if ok, why := policy.CoveredByPrefix(approvedCommand(intent), g.Spec.CommandPrefix); !ok {
			return nil, fmt.Errorf("--prefix %q does not cover the call you approve (%s); a grant extends what you approved, so give a prefix of its command", o.prefix, why)
		}
	}
	return g, nil
}

// scopedGrant reads the Approval's intent and task and builds the grant (buildGrant).
func scopedGrant(ctx context.Context, c *cluster, a *v1.Approval, user string, o grantOptions, now time.Time) (*v1.ApprovalGrant, error) {
	intent := &v1.ToolIntent{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.IntentRef.Name}, intent); err != nil {
		return nil, fmt.Errorf("reading ToolIntent %s, whose rule says which scopes it allows: %w", a.Spec.IntentRef.Name, apiError(err))
	}
	task := &v1.AgentTask{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.TaskRef.Name}, task); err != nil {
		return nil, fmt.Errorf("reading AgentTask %s, which owns the grant: %w", a.Spec.TaskRef.Name, apiError(err))
	}
	return buildGrant(a, intent, task, user, o, now)
}

// prefixText shows a prefix grant's words.
func prefixText(g *v1.ApprovalGrant) string {
	if len(g.Spec.CommandPrefix) == 0 {
		return ""
	}
	return fmt.Sprintf(" %q", strings.Join(g.Spec.CommandPrefix, " "))
}
