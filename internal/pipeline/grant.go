package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// GrantCheck is what GrantCovers judges: an ApprovalGrant, the Approval it names
// (nil when none of that name is the task's), the call's task and intent, the
// decision the policies in force give the call now (after the last-moment
// recheck), and the clock.
type GrantCheck struct {
	Grant    *v1.ApprovalGrant
	Approval *v1.Approval
	Task     *v1.AgentTask
	Intent   *v1.ToolIntent
	Decision *v1.Decision
	// Input is the call's normalized input (the bash command is read from it).
	Input json.RawMessage
	Now   time.Time
}

// ApprovedBy is who approved a: the one place that reads it, so that a change of
// how an Approval records its decision changes one line.
func ApprovedBy(a *v1.Approval) []string {
	if t := CountVotes(a); t.Decision == v1.DecisionApproved {
		return t.ApprovedBy
	}
	return nil
}

// GrantCovers says whether a grant lets the call run without a new Approval, and
// when not, why. Every condition must hold:
//
//   - the grant is for this task (name and UID), and so is its Approval;
//   - the Approval was approved in time (the controller recorded the decision
//     before expiresAt) and not retired unused (Superseded), and grantedBy is one
//     who approved it, alone (an Approval that needed several approvers is never
//     extended); grantedBy requested neither that call nor this one;
//   - the rule names the same approvers as when it asked the Approval;
//   - the call is asked now (the fresh decision is Ask: a rule that now says Deny,
//     Stop or Redirect is never overridden) by the same rule that asked the
//     Approval, and that rule allows the grant's scope, uses and lifetime;
//   - the grant has not expired and has uses left;
//   - Task: the call's fingerprint (tool, input, rule at its generation, walls,
//     sandbox) is the Approval's;
//   - CommandPrefix: the call is bash, the prefix covers the approved call (a grant
//     extends what was approved, never to other commands), every part of the call
//     starts with the prefix (policy.CoveredByPrefix), and it runs in a sandbox no
//     wider than the approved one (SandboxNoWider).
func GrantCovers(in GrantCheck) (bool, string) {
	g, a, d := in.Grant, in.Approval, in.Decision
	task := in.Task
	switch {
	case g.Spec.TaskRef.Name != task.Name || g.Spec.TaskUID != string(task.UID):
		return false, fmt.Sprintf("it is for AgentTask %s (uid %s), not this call's %s (uid %s)", g.Spec.TaskRef.Name, g.Spec.TaskUID, task.Name, task.UID)
	case a == nil:
		return false, fmt.Sprintf("its Approval %s does not exist", g.Spec.ApprovalRef.Name)
	case a.Spec.TaskRef.Name != task.Name || a.Spec.Request.Sandbox == nil || a.Spec.Request.Sandbox.TaskUID != string(task.UID):
		return false, fmt.Sprintf("its Approval %s was asked for another task", a.Name)
	}
	if ok, why := approvedInTime(a); !ok {
		return false, fmt.Sprintf("its Approval %s %s", a.Name, why)
	}
	if q := a.Spec.Approvers.Quorum(); q > 1 {
		return false, fmt.Sprintf("its Approval %s needed %d approvers, and a grant is one person's: what %d people approve together, one cannot extend alone", a.Name, q, q)
	}
	if !slices.Contains(ApprovedBy(a), g.Spec.GrantedBy) {
		return false, fmt.Sprintf("%s did not approve Approval %s (approved by %v): only its approver may extend it", g.Spec.GrantedBy, a.Name, ApprovedBy(a))
	}
	if g.Spec.GrantedBy == a.Spec.RequestedBy || g.Spec.GrantedBy == in.Intent.Spec.RequestedBy {
		return false, fmt.Sprintf("%s requested this call or the approved one; nobody approves their own calls", g.Spec.GrantedBy)
	}
	if d.Action != v1.DecisionAsk {
		return false, fmt.Sprintf("the call is decided %s by %s now; a grant only answers a question a rule asks", d.Action, d.PolicyRuleRef)
	}
	if !d.PolicyRuleRef.SameRule(a.Spec.Request.PolicyRuleRef) {
		return false, fmt.Sprintf("the call is asked by %s now, and Approval %s was asked by %s", d.PolicyRuleRef, a.Name, a.Spec.Request.PolicyRuleRef)
	}
	if !sameApprovers(d.Approvers, a.Spec.Approvers) {
		return false, fmt.Sprintf("rule %s now names other approvers than Approval %s was asked of: a grant extends an approval only while the same people would be asked", d.PolicyRuleRef, a.Name)
	}
	if !d.Grants.Allows(g.Spec.Scope) {
		return false, fmt.Sprintf("rule %s does not allow scope %s (spec.rules[].grants.allowedScopes)", d.PolicyRuleRef, g.Spec.Scope)
	}
	if bound := d.Grants.UsesBound(); g.Spec.MaxUses > bound {
		return false, fmt.Sprintf("it allows %d uses and rule %s at most %d", g.Spec.MaxUses, d.PolicyRuleRef, bound)
	}
	if bound := time.Duration(d.Grants.DurationBoundSeconds()) * time.Second; g.Spec.ExpiresAt.Sub(g.CreationTimestamp.Time) > bound {
		return false, fmt.Sprintf("it lives until %s, longer than rule %s allows (%s from its creation)", g.Spec.ExpiresAt.UTC().Format(time.RFC3339), d.PolicyRuleRef, bound)
	}
	if !in.Now.Before(g.Spec.ExpiresAt.Time) {
		return false, fmt.Sprintf("it expired at %s", g.Spec.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if g.Status.Uses >= g.Spec.MaxUses {
		return false, fmt.Sprintf("all %d of its uses are taken", g.Spec.MaxUses)
	}
	switch g.Spec.Scope {
	case v1.GrantScopeTask:
		if d.Fingerprint == "" || d.Fingerprint != a.Spec.Fingerprint {
			return false, fmt.Sprintf("the call is not the approved one (fingerprint %s, approved %s): scope Task covers the same call again", short(d.Fingerprint), short(a.Spec.Fingerprint))
		}
	case v1.GrantScopeCommandPrefix:
		if in.Intent.Spec.Tool != v1.ToolBash {
			return false, fmt.Sprintf("scope CommandPrefix covers bash calls, and this is %s", in.Intent.Spec.Tool)
		}
		var input struct {
			Command string `json:"command"`
		}
		if err := json.Unmarshal(in.Input, &input); err != nil {
			return false, "the call's input has no command"
		}
		if ok, why := policy.CoveredByPrefix(approvedCommand(a), g.Spec.CommandPrefix); !ok {
			return false, fmt.Sprintf("its prefix does not cover the approved call itself (%s): a grant extends what was approved, never to other commands", why)
		}
		if ok, why := policy.CoveredByPrefix(input.Command, g.Spec.CommandPrefix); !ok {
			return false, why
		}
		if ok, why := SandboxNoWider(d.Sandbox, a.Spec.Request.Sandbox); !ok {
			return false, "it would run " + why
		}
	default:
		return false, fmt.Sprintf("scope %s is not one a grant can have", g.Spec.Scope)
	}
	return true, ""
}

// approvedCommand is the bash command Approval a was asked for, read from what the
// approver was shown ("" when it is not a whole command: cut, or not bash).
func approvedCommand(a *v1.Approval) string {
	var input struct {
		Command string `json:"command"`
	}
	if a.Spec.Request.Tool != v1.ToolBash || json.Unmarshal([]byte(a.Spec.Request.Input), &input) != nil {
		return ""
	}
	return input.Command
}

// approvedInTime says whether an Approval stands approved: decided Approved, the
// decision seen by the controller before expiresAt, and used or about to be (not
// retired unused).
func approvedInTime(a *v1.Approval) (bool, string) {
	switch t := CountVotes(a); {
	case t.Decision != v1.DecisionApproved:
		return false, fmt.Sprintf("is not approved by its votes (%s approvals, denied by %q)", t, t.DeniedBy)
	case a.Status.State != v1.ApprovalStateApproved && a.Status.State != v1.ApprovalStateConsumed:
		return false, fmt.Sprintf("is in state %q: only an approval that stands (Approved or Consumed) can be extended", a.Status.State)
	case a.Status.DecidedAt == nil || !a.Status.DecidedAt.Before(&a.Spec.ExpiresAt):
		return false, "was not decided before it expired"
	}
	return true, ""
}

// SandboxNoWider says whether a call may run in sandbox now on an approval given
// for approved: the same task, image, runtimeClass, workspace claim and path,
// isolation, resources, working directory and environment; a read-only workspace
// where the approved one was read-only; no network, or the approved network; a
// timeout and output cap no larger. It returns where it would be wider.
func SandboxNoWider(now, approved *v1.DecidedSandbox) (bool, string) {
	if now == nil || approved == nil {
		return false, "in a sandbox nobody recorded"
	}
	p, q := now.Profile, approved.Profile
	switch {
	case now.TaskUID != approved.TaskUID:
		return false, "in another task"
	case p.Image != q.Image || !equality.Semantic.DeepEqual(p.RuntimeClassName, q.RuntimeClassName) || p.Isolation != q.Isolation:
		return false, fmt.Sprintf("in image %s (runtimeClass %v), and the approved call in %s (%v)", p.Image, deref(p.RuntimeClassName), q.Image, deref(q.RuntimeClassName))
	case p.WorkspaceClaimName != q.WorkspaceClaimName || p.WorkspaceSubPath != q.WorkspaceSubPath:
		return false, "on another workspace"
	case q.ReadOnlyWorkspace && !p.ReadOnlyWorkspace:
		return false, "with a writable workspace, and the approved call had it read-only"
	case p.Network.Mode != v1.NetworkNone && !equality.Semantic.DeepEqual(p.Network, q.Network):
		return false, "with a network the approved call did not have"
	case !equality.Semantic.DeepEqual(p.Resources, q.Resources):
		return false, "with other resources"
	case now.TimeoutSeconds > approved.TimeoutSeconds || now.MaxOutputBytes > approved.MaxOutputBytes:
		return false, fmt.Sprintf("for up to %ds (the approved call %ds)", now.TimeoutSeconds, approved.TimeoutSeconds)
	case now.Workdir != approved.Workdir || !equality.Semantic.DeepEqual(now.Env, approved.Env):
		return false, "in another working directory or environment"
	}
	return true, ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// short is the first 12 characters of a fingerprint.
func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// sameApprovers says whether a rule's approvers now are those an Approval was asked
// of (an Approval without approvers was asked of anyone with the approve verb):
// SameRule ignores the policy's generation, and a grant must not outlive a change of
// who decides.
func sameApprovers(now v1.Approvers, asked *v1.Approvers) bool {
	var then v1.Approvers
	if asked != nil {
		then = *asked
	}
	return slices.Equal(now.Users, then.Users) && slices.Equal(now.Groups, then.Groups) && now.Quorum() == then.Quorum()
}
