package policy

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/tools"
)

// resultCostLimit bounds one Result rule's expression on one output. The output may
// be up to the status's 1 MiB, and a contains or matches over it costs in
// proportion to its length: the limit leaves room for a few of those, and an
// expression that exceeds it fails, which counts as a match (CheckResult).
const resultCostLimit = 10_000_000

// Redacted is what a Redact rule puts where its patterns matched. It is one fixed
// word: it never says how long the redacted text was or how it began.
const Redacted = "[REDACTED]"

// compileResultRule finishes a rule with when: Result: it matches with match.tools
// and match.cel over the call (as a tool-call rule sees it) and its result; the
// per-part conditions and examples describe commands before they run.
func compileResultRule(env *cel.Env, r *rule) (*rule, error) {
	m := r.spec.Match
	switch {
	case len(m.Categories) > 0 || len(m.Commands) > 0 || len(m.Paths) > 0:
		return nil, fmt.Errorf("a Result rule matches with match.tools and match.cel (over intent and result): categories, commands and paths are for tool-call rules (intent.categories, intent.argv and intent.input.path are in match.cel)")
	case len(r.spec.Examples.Match) > 0 || len(r.spec.Examples.NotMatch) > 0:
		return nil, fmt.Errorf("examples are bash commands and a Result rule checks outputs: remove them")
	case r.spec.Grants != nil:
		return nil, fmt.Errorf("grants are for tool-call Ask rules: a result is released once")
	}
	switch r.spec.Action {
	case v1alpha1.RuleRedact, v1alpha1.RuleReplace, v1alpha1.RuleAsk, v1alpha1.RuleStop, v1alpha1.RuleAudit:
	default:
		return nil, fmt.Errorf("a Result rule's action is Redact, Replace, Ask, Stop or Audit, not %s: the call has run already", r.spec.Action)
	}
	switch r.spec.Enforcement {
	case "", v1alpha1.EnforcementEnforce, v1alpha1.EnforcementDryRun:
	default:
		return nil, fmt.Errorf("enforcement %q is not one of Enforce, DryRun", r.spec.Enforcement)
	}
	for _, t := range m.Tools {
		if _, ok := tools.Lookup(t); !ok {
			return nil, fmt.Errorf("match.tools: unknown tool %q", t)
		}
	}
	if red := r.spec.Redact; red != nil {
		if len(red.Patterns) == 0 && !red.Secrets {
			return nil, fmt.Errorf("redact needs something to redact: patterns, secrets: true, or both")
		}
		for i, p := range red.Patterns {
			re, err := regexp.Compile(p)
			if err != nil {
				return nil, fmt.Errorf("redact.patterns[%d]: %q is not an RE2 regular expression: %v", i, p, err)
			}
			if re.MatchString("") {
				return nil, fmt.Errorf("redact.patterns[%d]: %q matches the empty string, so it would redact nothing or everywhere; make it match at least one character", i, p)
			}
			r.redact = append(r.redact, re)
		}
	}
	if m.CEL == "" {
		return r, nil
	}
	ast, iss := env.Compile(m.CEL)
	if iss.Err() != nil {
		if strings.Contains(iss.Err().Error(), "undeclared reference to 'history'") || strings.Contains(iss.Err().Error(), "undeclared reference to 'answer'") {
			return nil, fmt.Errorf("match.cel: %v (history and answer are what a rule with when: Completion sees; this is a Result rule)", iss.Err())
		}
		return nil, fmt.Errorf("match.cel: %v", iss.Err())
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("match.cel: expression must evaluate to a bool, not %s", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(resultCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("match.cel: %v", err)
	}
	r.program, r.celFields = prg, fieldsRead(ast.NativeRep().Expr())
	if r.beforeRun, err = env.Program(ast, cel.CostLimit(resultCostLimit), cel.EvalOptions(cel.OptPartialEval)); err != nil {
		return nil, fmt.Errorf("match.cel: %v", err)
	}
	return r, nil
}

// resultRuleInScope names the first enforcing Result rule that could act on the
// call's result, judged before the call runs, or "" when none could. A rule could
// act unless its match.tools leave the call out or its expression is false whatever
// the result is (evaluated with result unknown: `intent.tool == "bash" && ...` is
// false for a read_file call). An expression that needs the result, or fails, could
// act. Audit and DryRun rules never act; fire limits are not counted, since they
// may have lapsed by the time the result comes. While a policy in scope is broken
// its Result rules cannot be read, so one could act.
//
// It decides whether the call's full output may be copied into the workspace
// (Walls): a later call could read that copy, and a rule that keys on the call (its
// tool, its path) would then be read around.
func resultRuleInScope(f *facts, cluster, namespaced []*CompiledPolicy, broken []string) string {
	if len(broken) > 0 {
		return broken[0] + " (not Ready, so its Result rules cannot be read)"
	}
	for _, group := range [][]*CompiledPolicy{cluster, namespaced} {
		for _, p := range group {
			for _, r := range p.result {
				if !r.acts() || (len(r.tools) > 0 && !slices.Contains(r.tools, f.tool)) {
					continue
				}
				if r.beforeRun != nil && !mayMatchAnyResult(r.beforeRun, f.activation(r.celFields)) {
					continue
				}
				return "Result rule " + p.RuleRef(r.spec.Name).String()
			}
		}
	}
	return ""
}

// mayMatchAnyResult evaluates a Result rule's expression with the call known and its
// result unknown. Only a plain false leaves the rule out.
func mayMatchAnyResult(prg cel.Program, intent map[string]any) bool {
	vars := make(map[string]any, len(intent))
	maps.Copy(vars, intent)
	act, err := cel.PartialVars(vars, cel.AttributePattern("result"))
	if err != nil {
		return true
	}
	out, _, err := prg.Eval(act)
	if err != nil {
		return true
	}
	b, ok := out.(types.Bool)
	return !ok || bool(b)
}

// Result is what an executed call returned, as Result rules see it.
type Result struct {
	Outcome v1alpha1.Outcome
	// ExitCode is the tool's exit code, or -1 when it did not exit.
	ExitCode int64
	// Output is the text the model would see: the observation's summary.
	Output string
	// FullOutput is the output the Execution kept, up to the task's cap.
	FullOutput string
	Truncated  bool
	// Files are the workspace paths a write_file or edit_file changed.
	Files []string
}

// ResultRequest is one executed call and its result to check.
type ResultRequest struct {
	// Call is the call as Decide sees it (Fires and Now included).
	Call   Request
	Result Result
}

// ResultVerdict is what the result rules do with one output.
type ResultVerdict struct {
	// Check records what the rules did; nil when no result rule matched and every
	// policy in scope is Ready: the output goes to the model as it is.
	Check *v1alpha1.ResultCheck
	// Summary is the output the model sees after every acting Redact rule.
	Summary string
	// Instruction is the deciding Replace rule's registered instruction.
	Instruction string
	// Approvers and Risk are the deciding Ask rule's: who may release the output.
	Approvers v1alpha1.Approvers
	Risk      v1alpha1.Risk
}

// resultRank orders the actions of Result rules: Stop > Ask > Replace > Redact, the
// order of tool-call rules with Replace in Redirect's place (a result a human must
// see is asked, whatever a rule would tell the model). Redact rules do not exclude
// one another: every acting one redacts, whatever decides.
func resultRank(a v1alpha1.RuleAction) int {
	switch a {
	case v1alpha1.RuleStop:
		return 4
	case v1alpha1.RuleAsk:
		return 3
	case v1alpha1.RuleReplace:
		return 2
	case v1alpha1.RuleRedact:
		return 1
	}
	return 0
}

// CheckResult checks an executed call's result against the Result rules of the
// Ready policies in scope, cluster policies first, each in rule order, before the
// model sees it. Every acting Redact rule replaces its matches in the summary; of
// the other acting rules the strictest decides (Stop > Ask > Replace), and the rest
// are recorded as hits. Audit and DryRun rules, and Replace rules past their
// maxFires or in their cooldown, are recorded as hits and never act.
//
// It fails closed. An expression that fails to evaluate (the cost limit on a huge
// output, a missing key) counts as a match, and then fire limits do not apply: the
// output is untrusted, and whoever writes it could otherwise make the check fail on
// purpose to get past it. While a policy in scope is not Ready (broken), its result
// rules cannot be read, so the output is withheld from the model (Replace, without
// an instruction), as a call is asked while one is broken.
//
// The output is only ever data here: it is matched, never run or parsed as a rule.
func CheckResult(req ResultRequest, cluster, namespaced []*CompiledPolicy, broken []string) ResultVerdict {
	v := ResultVerdict{Summary: req.Result.Output}
	check := &v1alpha1.ResultCheck{Action: v1alpha1.RuleAllow}
	if len(broken) > 0 {
		check.Action = v1alpha1.RuleReplace
		check.Reason = truncate(fmt.Sprintf("not Ready: %s; the result rules in scope cannot be checked, so the output is withheld from the model (the Execution keeps it)", strings.Join(broken, ", ")), maxReason)
		check.Effects = []string{"output withheld: a policy in scope is not Ready"}
		v.Check = check
		return v
	}
	f := analyze(req.Call)
	var resultVar map[string]any
	var winner *candidate
	var winnerErr error
	matchedAny := false
	for _, group := range [][]*CompiledPolicy{cluster, namespaced} {
		for _, p := range group {
			for _, r := range p.result {
				if len(r.tools) > 0 && !slices.Contains(r.tools, f.tool) {
					continue
				}
				matched, evalErr := true, error(nil)
				if r.program != nil {
					act := f.activation(r.celFields)
					if resultVar == nil {
						resultVar = resultActivation(req.Result)
						act["result"] = resultVar
					}
					matched, evalErr = evalCEL(r.program, act)
					if evalErr != nil {
						matched = true
					}
				}
				if !matched {
					continue
				}
				matchedAny = true
				c := candidate{policy: p, rule: r}
				h := c.hit()
				if !r.acts() {
					check.NonActingHits = append(check.NonActingHits, h)
					continue
				}
				if why := r.limited(req.Call.Fires.of(p, r), req.Call.Now); why != "" && evalErr == nil {
					h.Limited = why
					check.NonActingHits = append(check.NonActingHits, h)
					continue
				}
				if r.spec.Action == v1alpha1.RuleRedact {
					summary, effect := c.redactIn(v.Summary)
					v.Summary = summary
					if effect.count > 0 {
						check.Redactions += int32(effect.count)
					}
					check.Effects = append(check.Effects, effect.line)
					if winner == nil {
						check.Action = v1alpha1.RuleRedact
						check.Reason = ruleReason(r, p, evalErr)
					}
					continue
				}
				if winner == nil || resultRank(r.spec.Action) > resultRank(winner.rule.spec.Action) {
					if winner != nil {
						check.NonActingHits = append(check.NonActingHits, winner.hit())
					}
					winner, winnerErr = &c, evalErr
					continue
				}
				check.NonActingHits = append(check.NonActingHits, h)
			}
		}
	}
	if !matchedAny {
		return v
	}
	if winner != nil {
		ref := winner.ref()
		check.Action = winner.rule.spec.Action
		check.PolicyRuleRef = &ref
		check.Reason = ruleReason(winner.rule, winner.policy, winnerErr)
		switch check.Action {
		case v1alpha1.RuleReplace:
			v.Instruction = winner.rule.spec.Instruction
			check.Effects = append(check.Effects, "output replaced by rule "+ref.String())
		case v1alpha1.RuleStop:
			check.Effects = append(check.Effects, "task stopped by rule "+ref.String())
		case v1alpha1.RuleAsk:
			v.Approvers, v.Risk = winner.rule.spec.Approvers, winner.rule.spec.Risk
			check.Effects = append(check.Effects, "output held for a human by rule "+ref.String())
		}
	}
	check.Reason = truncate(check.Reason, maxReason)
	if len(check.Effects) > MaxResultEffects {
		check.Effects = check.Effects[:MaxResultEffects]
	}
	if len(check.NonActingHits) > maxResultHits {
		check.NonActingHits = check.NonActingHits[:maxResultHits]
	}
	v.Check = check
	return v
}

// Limits of ResultCheck's lists (see the API's validation markers).
const (
	// MaxResultEffects is also what a check's effects are kept to when others
	// are added after it (a release, an output copied before the rule applied).
	MaxResultEffects = 32
	maxResultHits    = 64
)

func ruleReason(r *rule, p *CompiledPolicy, evalErr error) string {
	reason := r.spec.Reason
	if reason == "" {
		reason = fmt.Sprintf("Result rule %q of %s matched the output", r.spec.Name, p.ID())
	}
	if evalErr != nil {
		reason += fmt.Sprintf(" (its expression failed, which counts as a match: %s)", evalFailure(evalErr))
	}
	return reason
}

// evalFailure says why a Result rule's expression failed without quoting the
// error: CEL's messages quote the values they failed on (no such key: ..., invalid
// RFC 3339 timestamp "..."), which here are the output, and the reason goes where
// the output may not (the intent's status, which the agent reads; the Approval; the
// task's condition; events).
func evalFailure(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "cost limit"):
		return "it went over its cost limit"
	case strings.HasPrefix(msg, "no such key"):
		return "no such key (the key is not recorded: it may be output)"
	case strings.HasPrefix(msg, "type conversion error"), strings.HasPrefix(msg, "no such overload"), strings.HasPrefix(msg, "index out of range"):
		// Fixed texts with types and numbers only.
		if len(msg) <= 120 && !strings.ContainsAny(msg, "\"\n") {
			return msg
		}
	}
	return "an evaluation error whose text is not recorded, for it may quote the output"
}

type redaction struct {
	count int
	line  string
}

// redactIn replaces what the candidate's Redact rule finds in s: each pattern's
// matches (or, for a pattern with groups, what its groups matched) by Redacted,
// and, with secrets: true, what the secret detector finds (mask.Secrets, whose
// marker is mask.Masked).
func (c candidate) redactIn(s string) (string, redaction) {
	n := 0
	for _, re := range c.rule.redact {
		var k int
		s, k = redactPattern(re, s)
		n += k
	}
	detected := 0
	if c.rule.spec.Redact.Secrets {
		before := strings.Count(s, mask.Masked)
		s = mask.Secrets(s)
		// A secret the detector finds only once the invisible parts are gone
		// (AKIA\x1b[0mIOSF...): the model gets the view, masked.
		if view := viewOf(s).text; view != s {
			if masked := mask.Secrets(view); masked != view {
				s = masked
			}
		}
		detected = max(strings.Count(s, mask.Masked)-before, 0)
		// Secrets masked before the rule saw the output (every summary is masked
		// as it is made) are counted as the detector's too: they are why the rule
		// asked for it.
		detected += before
	}
	ref := c.ref().String()
	var line string
	switch {
	case n > 0 && detected > 0:
		line = fmt.Sprintf("%d matches redacted and %d secrets masked by rule %s", n, detected, ref)
	case detected > 0:
		line = fmt.Sprintf("%d secrets masked by rule %s", detected, ref)
	case n == 1:
		line = fmt.Sprintf("1 match redacted by rule %s", ref)
	default:
		line = fmt.Sprintf("%d matches redacted by rule %s", n, ref)
	}
	return s, redaction{count: n + detected, line: line}
}

// redactPattern replaces re's matches in s by Redacted: the whole match for a
// pattern without groups, else the text of each group that took part (groups
// nested in an earlier one are covered by it), or the whole match when none took
// part (an alternative without the group). It returns how many it replaced.
//
// The patterns match a view of s without what a reader does not see (viewOf): the
// agent chooses what its commands print, and a colour code, a carriage return or a
// zero-width character inside a secret must not split it from the pattern. A match
// in the view redacts everything it spans in s, the invisible parts included.
func redactPattern(re *regexp.Regexp, s string) (string, int) {
	view := viewOf(s)
	matches := re.FindAllStringSubmatchIndex(view.text, -1)
	if matches == nil {
		return s, 0
	}
	var b strings.Builder
	last, n := 0, 0
	for _, m := range matches {
		var spans [][2]int
		for g := 2; g+1 < len(m); g += 2 {
			if m[g] >= 0 && m[g+1] > m[g] {
				spans = append(spans, [2]int{m[g], m[g+1]})
			}
		}
		if len(spans) == 0 {
			spans = [][2]int{{m[0], m[1]}}
		}
		for _, sp := range spans {
			if sp[1] <= sp[0] {
				continue
			}
			start, end := view.orig(sp[0]), view.orig(sp[1]-1)+1
			if start < last {
				continue
			}
			b.WriteString(s[last:start])
			b.WriteString(Redacted)
			last = end
			n++
		}
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// invisible are what a summary holds of the characters a reader does not see, as
// mask.Escape spells them (\x1b[31m, \x0d, \u200b): terminal escape sequences
// whole, then any other escaped character.
var invisible = regexp.MustCompile(`\\x1b\[[0-?]*[ -/]*[@-~]|\\x1b\][^\n]*?(?:\\x07|\\x1b\\)|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}`)

// matchView is a text as Redact rules match it: at[i] is the offset in the
// original of the view's byte i; at is nil when the view is the original.
type matchView struct {
	text string
	at   []int
}

// orig is the offset in the original of the view's byte i.
func (v matchView) orig(i int) int {
	if v.at == nil {
		return i
	}
	return v.at[i]
}

// plain says whether s has nothing viewOf leaves out, without allocating: most
// outputs.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' || c == 0x7f || (c < 0x20 && c != '\n' && c != '\t') {
			return false
		}
		if c >= 0x80 {
			for _, r := range s[i:] {
				if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\\' {
					return false
				}
			}
			return true
		}
	}
	return true
}

// viewOf is s without its invisible parts: escaped control and format characters,
// terminal escape sequences, control characters (a summary has them escaped, and
// a carriage return among them), and format characters (soft hyphens, zero-width
// joiners) that mask.Escape leaves as they are.
func viewOf(s string) matchView {
	if plain(s) {
		return matchView{text: s}
	}
	skips := invisible.FindAllStringIndex(s, -1)
	var b strings.Builder
	at := make([]int, 0, len(s))
	for i := 0; i < len(s); {
		for len(skips) > 0 && skips[0][0] < i {
			skips = skips[1:]
		}
		if len(skips) > 0 && skips[0][0] == i {
			i = skips[0][1]
			skips = skips[1:]
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (unicode.IsControl(r) && r != '\n' && r != '\t') || unicode.Is(unicode.Cf, r) {
			i += size
			continue
		}
		for k := range size {
			at = append(at, i+k)
		}
		b.WriteString(s[i : i+size])
		i += size
	}
	return matchView{text: b.String(), at: at}
}

func resultActivation(res Result) map[string]any {
	files := res.Files
	if files == nil {
		files = []string{}
	}
	return map[string]any{
		"outcome": string(res.Outcome), "exitCode": res.ExitCode, "output": res.Output,
		"fullOutput": res.FullOutput, "truncated": res.Truncated, "files": files,
	}
}
