package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/tools"
)

// Request is one validated tool call to decide.
type Request struct {
	// Namespace and Task name the AgentTask the call belongs to.
	Namespace string
	Task      string
	// Mode is the task's mode; an empty or unexpected mode counts as ReadOnly.
	Mode v1alpha1.TaskMode
	// Tool is the tool called.
	Tool v1alpha1.ToolName
	// Input is the normalized input from tools.Validate.
	Input json.RawMessage
	// Fires are the task's recorded fires of rules with maxFires or cooldownSeconds
	// (FiresKey), and Now is the time their cooldowns are measured at.
	Fires FireCounts
	Now   time.Time
}

// Limits of the Decision's fields (see the API's validation markers).
const (
	maxParts       = 256
	maxHits        = 256
	maxPartCommand = 1024
	maxPartReason  = 512
	maxReason      = 4096
)

type candidate struct {
	policy *CompiledPolicy
	rule   *rule
}

func (c candidate) hit() v1alpha1.RuleHit {
	enforcement := c.rule.spec.Enforcement
	if enforcement == "" {
		enforcement = v1alpha1.EnforcementEnforce
	}
	return v1alpha1.RuleHit{PolicyRuleRef: c.ref(), Action: c.rule.spec.Action, Enforcement: enforcement}
}

// ref names the candidate's rule.
func (c candidate) ref() v1alpha1.PolicyRuleReference {
	return c.policy.RuleRef(c.rule.spec.Name)
}

// actionRank orders decisions: Stop > Deny > Ask > Redirect > Allow. A Redirect is
// below Ask: a call a human must see is asked, whatever a rule would tell the model.
func actionRank(a v1alpha1.RuleAction) int {
	switch a {
	case v1alpha1.RuleStop:
		return 5
	case v1alpha1.RuleDeny:
		return 4
	case v1alpha1.RuleAsk:
		return 3
	case v1alpha1.RuleRedirect:
		return 2
	case v1alpha1.RuleAllow:
		return 1
	}
	return 0
}

// Decide decides a validated call against the Ready policies in scope: cluster
// policies (ClusterToolPolicies) and namespaced ones (the ToolPolicies of the task's
// namespace), each in a stable order (for example by name). broken names the
// policies in scope that are not Ready ("ToolPolicy/x"); while any is broken,
// nothing is allowed without a human.
//
// Precedence:
//  1. The strictest enforcing rule decides: Stop > Deny > Ask > Redirect > Allow;
//     among equals the first (cluster policies first, then policy order, then rule
//     order), so a ClusterToolPolicy's Deny wins over every namespaced rule but a
//     Stop. A rule never loosens a stricter result. The other matching enforcing
//     rules are recorded in NonActingHits as overridden.
//  2. Audit rules and DryRun rules never decide; they are recorded in NonActingHits
//     with the action they would have taken. So is a Redirect rule whose maxFires
//     are used or that is cooling down (req.Fires): the hit says which (Limited).
//  3. A Redirect decision carries its rule's registered instruction.
//  4. With no enforcing rule matching, the task's mode decides (a reference of kind
//     ModeDefault):
//     ReadOnly allows read-only calls and denies everything else; Edit allows
//     read-only calls and asks for everything else; Auto allows read-only, test,
//     build and write calls and asks for everything else.
//  5. ReadOnly mode is a ceiling: a call that is not read-only is denied there even
//     when a rule allows or asks ("ReadOnly mode never runs writes").
//  6. A broken policy in scope raises Allow to Ask.
//
// Each policy's index (ruleIndex) gives the rules that could match the call; only
// those are evaluated, in rule order, so a decision costs what the call's commands
// and the policies' catch-all rules cost, not what the number of rules does.
//
// The Decision carries the walls the call runs behind (see Walls) and the
// fingerprint that an Approval is bound to, which covers them.
func Decide(req Request, cluster, namespaced []*CompiledPolicy, broken []string) v1alpha1.Decision {
	f := analyze(req)
	enforcing, hits := matchingRules(f, cluster, namespaced, req.Fires, req.Now)
	return decide(req, f, enforcing, hits, broken, resultRuleInScope(f, cluster, namespaced, broken))
}

// matchingRules evaluates the rules the policies' indexes reach for the call, cluster
// policies first, then namespaced ones, each in rule order. It returns the matching
// rules that act and the hits of the ones that only record (Audit, DryRun).
func matchingRules(f *facts, cluster, namespaced []*CompiledPolicy, fires FireCounts, now time.Time) ([]candidate, []v1alpha1.RuleHit) {
	var enforcing []candidate
	var hits []v1alpha1.RuleHit
	var reached candidateSet
	for _, group := range [][]*CompiledPolicy{cluster, namespaced} {
		for _, p := range group {
			reached = p.index.candidates(f, reached)
			for i := range reached.ascending() {
				r := p.rules[i]
				if !r.matches(f) {
					continue
				}
				c := candidate{policy: p, rule: r}
				if !r.acts() {
					hits = append(hits, c.hit())
					continue
				}
				if why := r.limited(fires.of(p, r), now); why != "" {
					h := c.hit()
					h.Limited = why
					hits = append(hits, h)
					continue
				}
				enforcing = append(enforcing, c)
			}
		}
	}
	return enforcing, hits
}

// decide applies the precedence of Decide to the matching rules, in the order
// matchingRules gives them.
func decide(req Request, f *facts, enforcing []candidate, hits []v1alpha1.RuleHit, broken []string, resultRule string) v1alpha1.Decision {
	d := v1alpha1.Decision{Category: f.category, Parts: decisionParts(f.parts)}
	winner := -1
	for i, c := range enforcing {
		if winner < 0 || actionRank(c.rule.spec.Action) > actionRank(enforcing[winner].rule.spec.Action) {
			winner = i
		}
	}
	if winner >= 0 {
		w := enforcing[winner]
		d.Action = v1alpha1.DecisionAction(w.rule.spec.Action)
		d.PolicyRuleRef = w.ref()
		d.Reason = w.rule.spec.Reason
		if d.Reason == "" {
			d.Reason = fmt.Sprintf("rule %q of %s matched this %s call", w.rule.spec.Name, w.policy.ID(), f.category)
		}
		d.Risk = w.rule.spec.Risk
		if d.Action == v1alpha1.DecisionAsk {
			d.Approvers = w.rule.spec.Approvers
			d.Grants = w.rule.spec.Grants.DeepCopy()
		}
		d.Instruction = w.rule.spec.Instruction
		for i, c := range enforcing {
			if i != winner {
				hits = append(hits, c.hit())
			}
		}
	} else {
		d.Action, d.Reason = modeDefault(req.Mode, f.category)
		d.PolicyRuleRef = v1alpha1.ModeDefaultReference(req.Mode)
		if why := strictestPartReason(f); why != "" {
			d.Reason += " (" + why + ")"
		}
	}
	if d.Risk == "" {
		d.Risk = RiskOf(f.category)
	}

	if readOnlyMode(req.Mode) && f.category != v1alpha1.CategoryReadOnly && d.Action != v1alpha1.DecisionDeny && d.Action != v1alpha1.DecisionStop {
		if !d.PolicyRuleRef.IsModeDefault() {
			hits = append(hits, enforcing[winner].hit())
		}
		d.Action = v1alpha1.DecisionDeny
		d.PolicyRuleRef = v1alpha1.ModeDefaultReference(req.Mode)
		d.Approvers = v1alpha1.Approvers{}
		d.Grants = nil
		d.Instruction = ""
		d.Reason = fmt.Sprintf("ReadOnly mode never runs writes: this call is %s", f.category)
	}
	if len(broken) > 0 && d.Action == v1alpha1.DecisionAllow {
		d.Action = v1alpha1.DecisionAsk
		d.Reason = fmt.Sprintf("%s; asking instead of allowing because %s in scope %s not Ready",
			d.Reason, strings.Join(broken, ", "), pluralIs(len(broken)))
	}
	if resultRule != "" && d.Action != v1alpha1.DecisionDeny && d.Action != v1alpha1.DecisionStop && tools.IsBackground(req.Tool, req.Input) {
		// A background job's output reaches the model later, through job_output,
		// a call of its own that no rule keyed on this command sees.
		d.Reason = fmt.Sprintf("%s may act on this command's output, and a background job's output reaches the model through job_output, where the rule does not see it as this command's: run the command without runInBackground (was %s: %s)", resultRule, d.Action, d.Reason)
		d.Action = v1alpha1.DecisionDeny
		d.Approvers, d.Grants, d.Instruction = v1alpha1.Approvers{}, nil, ""
	}
	d.Reason = truncate(d.Reason, maxReason)
	if len(hits) > maxHits {
		hits = hits[:maxHits]
	}
	d.NonActingHits = hits
	d.Walls = Walls(req.Mode, req.Tool, f.category, resultRule)
	// Fingerprint, from the input analyze decoded rather than decoding it again.
	d.Fingerprint = fingerprint(req.Namespace, req.Task, req.Tool, canonicalDecoded(req.Input, f.decoded, f.decodedOK),
		d.PolicyRuleRef, d.Walls, nil)
	return d
}

// Walls are the sandbox restrictions a call gets beyond its task's sandbox, or nil
// when there are none. This is the one place they are decided; the Execution is built
// from them.
//
//   - A read-only call (every part of a bash command read-only, or a read-only tool)
//     runs with the workspace read-only and no network, whatever the task's mode and
//     egress: the call was allowed for what it is, and the sandbox holds it to that.
//     A command the classifier misjudged then fails instead of writing.
//   - A ReadOnly task mounts the workspace read-only for every call: the mode already
//     denies writes, the mount is a second wall.
//   - A call a Result rule could act on (resultRule names it, resultRuleInScope) gets
//     no copy of its full output in the workspace: the rule acts on what the model
//     is shown, and the copy would let a later call read around it.
//
// They are set whatever the action, since they depend only on the call and the mode;
// a denied call never runs, so on it they are moot.
func Walls(mode v1alpha1.TaskMode, tool v1alpha1.ToolName, category v1alpha1.CommandCategory, resultRule string) *v1alpha1.SandboxWalls {
	var reasons []string
	w := &v1alpha1.SandboxWalls{}
	if category == v1alpha1.CategoryReadOnly {
		w.ReadOnlyWorkspace, w.NoNetwork = true, true
		if tool == v1alpha1.ToolBash {
			reasons = append(reasons, "every part of the call is read-only")
		} else {
			reasons = append(reasons, fmt.Sprintf("%s is a read-only tool", tool))
		}
	}
	if readOnlyMode(mode) {
		w.ReadOnlyWorkspace = true
		reasons = append(reasons, "the task's mode is ReadOnly")
	}
	if resultRule != "" {
		w.NoOutputCopy = true
		reasons = append(reasons, "the full output is not copied into the workspace: "+resultRule+" may act on it")
	}
	if len(reasons) == 0 {
		return nil
	}
	w.Reason = strings.Join(reasons, "; ")
	return w
}

// strictestPartReason says why the first part of the call's category has it, when
// the classifier gave a reason: what the person deciding needs to see.
func strictestPartReason(f *facts) string {
	for _, p := range f.parts {
		if p.Category == f.category && p.Reason != "" {
			return p.Command + ": " + p.Reason
		}
	}
	return ""
}

// modeDefault is the decision when no rule matched.
func modeDefault(mode v1alpha1.TaskMode, category v1alpha1.CommandCategory) (v1alpha1.DecisionAction, string) {
	if category == v1alpha1.CategoryReadOnly {
		return v1alpha1.DecisionAllow, fmt.Sprintf("no rule matched; %s mode allows read-only calls", modeName(mode))
	}
	switch mode {
	case v1alpha1.ModeEdit:
		return v1alpha1.DecisionAsk, fmt.Sprintf("no rule matched; Edit mode asks a human for %s calls", category)
	case v1alpha1.ModeAuto:
		switch category {
		case v1alpha1.CategoryTest, v1alpha1.CategoryBuild, v1alpha1.CategoryWrite:
			return v1alpha1.DecisionAllow, fmt.Sprintf("no rule matched; Auto mode allows %s calls", category)
		}
		return v1alpha1.DecisionAsk, fmt.Sprintf("no rule matched; Auto mode asks a human for %s calls", category)
	}
	return v1alpha1.DecisionDeny, fmt.Sprintf("ReadOnly mode never runs writes: this call is %s", category)
}

func readOnlyMode(mode v1alpha1.TaskMode) bool {
	return mode != v1alpha1.ModeEdit && mode != v1alpha1.ModeAuto
}

func modeName(mode v1alpha1.TaskMode) string {
	if readOnlyMode(mode) {
		return string(v1alpha1.ModeReadOnly)
	}
	return string(mode)
}

func pluralIs(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func decisionParts(parts []Part) []v1alpha1.CommandPart {
	if len(parts) > maxParts {
		parts = parts[:maxParts]
	}
	out := make([]v1alpha1.CommandPart, len(parts))
	for i, p := range parts {
		out[i] = v1alpha1.CommandPart{Command: truncate(p.Command, maxPartCommand), Category: p.Category, Reason: truncate(p.Reason, maxPartReason)}
	}
	return out
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
