package policy

import (
	"fmt"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// completionCostLimit bounds one Completion rule's expression on one answer. It is
// evaluated once per final answer, not per call, and "a test passed after the last
// edit" is a comprehension inside a comprehension over the history: it gets more room
// than a tool-call rule.
const completionCostLimit = 10_000_000

// compileCompletionRule finishes a rule with when: Completion: it matches with CEL over
// the history alone, and its examples (bash commands) would mean nothing.
// Its expression sees the history, as the policy's celEnvironment.completion declares.
func compileCompletionRule(env *cel.Env, r *rule) (*rule, error) {
	m := r.spec.Match
	switch {
	case len(m.Tools) > 0 || len(m.Categories) > 0 || len(m.Commands) > 0 || len(m.Paths) > 0:
		return nil, fmt.Errorf("a Completion rule matches with match.cel over the task's history only: tools, categories, commands and paths describe a tool call")
	case len(r.spec.Examples.Match) > 0 || len(r.spec.Examples.NotMatch) > 0:
		return nil, fmt.Errorf("examples are bash commands and a Completion rule checks answers: remove them")
	}
	switch r.spec.Action {
	case v1alpha1.RuleRedirect, v1alpha1.RuleDeny, v1alpha1.RuleAudit:
	default:
		return nil, fmt.Errorf("a Completion rule's action is Redirect, Deny or Audit, not %s", r.spec.Action)
	}
	if m.CEL == "" {
		return r, nil
	}
	ast, iss := env.Compile(m.CEL)
	if iss.Err() != nil {
		return nil, fmt.Errorf("match.cel: %v", iss.Err())
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("match.cel: expression must evaluate to a bool, not %s", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(completionCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("match.cel: %v", err)
	}
	r.program = prg
	return r, nil
}

// CompletedCall is one call of a task's history as Completion rules see it.
type CompletedCall struct {
	Tool     v1alpha1.ToolName
	Input    map[string]any
	Category v1alpha1.CommandCategory
	Action   v1alpha1.DecisionAction
	Outcome  v1alpha1.Outcome
	Executed bool
	// ExitCode is the tool's exit code, or -1 when it did not exit.
	ExitCode    int64
	Turn, Index int32
}

// CompletionRequest is a model task's final answer to check.
type CompletionRequest struct {
	Namespace, Task string
	Answer          string
	// History is the task's calls in order (pipeline.IntentBefore).
	History []CompletedCall
	// Fires and Now as in Request.
	Fires FireCounts
	Now   time.Time
}

// DecideCompletion checks a final answer against the Completion rules of the Ready
// policies in scope, cluster policies first, each in rule order. The strictest
// matching rule that acts decides: Deny (the task fails with the rule's reason) >
// Redirect (the answer is not accepted; the model gets the rule's instruction and the
// loop goes on). With none, the answer is accepted (Allow). Audit and DryRun rules,
// and Redirect rules past their maxFires (1 by default) or in their cooldown, are
// recorded as hits and never decide. An expression that fails to evaluate counts as
// matching: a check that cannot be made does not accept the answer.
func DecideCompletion(req CompletionRequest, cluster, namespaced []*CompiledPolicy) v1alpha1.CompletionCheck {
	check := v1alpha1.CompletionCheck{Action: v1alpha1.DecisionAllow, Reason: "no Completion rule matched: the answer is accepted"}
	var activation map[string]any
	var winner *candidate
	var winnerAction v1alpha1.RuleAction
	for _, group := range [][]*CompiledPolicy{cluster, namespaced} {
		for _, p := range group {
			for _, r := range p.completion {
				matched, evalErr := true, error(nil)
				if r.program != nil {
					if activation == nil {
						activation = completionActivation(req)
					}
					matched, evalErr = evalCEL(r.program, activation)
					if evalErr != nil {
						matched = true
					}
				}
				if !matched {
					continue
				}
				c := candidate{policy: p, rule: r}
				h := c.hit()
				if !r.acts() {
					check.NonActingHits = append(check.NonActingHits, h)
					continue
				}
				action := r.spec.Action
				if why := r.limited(req.Fires.of(p, r), req.Now); why != "" {
					if evalErr == nil {
						h.Limited = why
						check.NonActingHits = append(check.NonActingHits, h)
						continue
					}
					// A check that cannot be made never accepts the answer, not even
					// once the rule's fires are used: it refuses it.
					action = v1alpha1.RuleDeny
				}
				if winner == nil || actionRank(action) > actionRank(winnerAction) {
					if winner != nil {
						check.NonActingHits = append(check.NonActingHits, winner.hit())
					}
					winner, winnerAction = &c, action
					check.Reason = r.spec.Reason
					if check.Reason == "" {
						check.Reason = fmt.Sprintf("Completion rule %q of %s matched the final answer", r.spec.Name, p.ID())
					}
					switch {
					case evalErr != nil && action != r.spec.Action:
						check.Reason += fmt.Sprintf(" (its expression failed and its fires are used, so the answer is refused: %v)", evalErr)
					case evalErr != nil:
						check.Reason += fmt.Sprintf(" (its expression failed, which counts as a match: %v)", evalErr)
					}
				} else {
					check.NonActingHits = append(check.NonActingHits, h)
				}
			}
		}
	}
	if winner != nil {
		check.Action = v1alpha1.DecisionAction(winnerAction)
		ref := winner.ref()
		check.PolicyRuleRef = &ref
		if winnerAction == v1alpha1.RuleRedirect {
			check.Instruction = winner.rule.spec.Instruction
		}
	}
	check.Reason = truncate(check.Reason, maxReason)
	if len(check.NonActingHits) > maxHits {
		check.NonActingHits = check.NonActingHits[:maxHits]
	}
	return check
}

func completionActivation(req CompletionRequest) map[string]any {
	history := make([]map[string]any, len(req.History))
	for i, c := range req.History {
		input := c.Input
		if input == nil {
			input = map[string]any{}
		}
		history[i] = map[string]any{
			"tool": string(c.Tool), "input": input, "category": string(c.Category), "action": string(c.Action),
			"outcome": string(c.Outcome), "executed": c.Executed, "exitCode": c.ExitCode,
			"turn": int64(c.Turn), "index": int64(c.Index), "position": int64(i),
		}
	}
	return map[string]any{"history": history, "answer": req.Answer, "task": req.Task, "namespace": req.Namespace}
}
