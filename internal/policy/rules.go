package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/google/cel-go/cel"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/tools"
)

// Policy kinds, as they appear in Decision.Policy ("ToolPolicy/name").
const (
	KindToolPolicy        = "ToolPolicy"
	KindClusterToolPolicy = "ClusterToolPolicy"
)

// CompiledPolicy is a ToolPolicy or ClusterToolPolicy whose rules are compiled and
// whose examples passed. It is immutable and safe for concurrent use.
type CompiledPolicy struct {
	// Kind is KindToolPolicy or KindClusterToolPolicy.
	Kind string
	// Name of the policy.
	Name string
	// Generation of the policy that was compiled.
	Generation int64
	rules      []*rule
	index      *ruleIndex
	// completion are the rules with when: Completion, in policy order.
	completion []*rule
	// result are the rules with when: Result, in policy order.
	result []*rule
}

// ID names the policy as decisions record it: "Kind/name".
func (p *CompiledPolicy) ID() string { return p.Kind + "/" + p.Name }

// RuleRef names the policy's rule by its name, at the generation compiled: how a
// decision, a hit and a completion check record it.
func (p *CompiledPolicy) RuleRef(rule string) v1alpha1.PolicyRuleReference {
	return v1alpha1.NewPolicyRuleReference(v1alpha1.PolicyRuleKind(p.Kind), p.Name, p.Generation, rule)
}

// Rules is the number of compiled rules.
func (p *CompiledPolicy) Rules() int { return len(p.rules) + len(p.completion) + len(p.result) }

// Cluster says whether the policy is a ClusterToolPolicy.
func (p *CompiledPolicy) Cluster() bool { return p.Kind == KindClusterToolPolicy }

// rule is one compiled rule.
type rule struct {
	spec       v1alpha1.PolicyRule
	tools      []v1alpha1.ToolName
	categories []v1alpha1.CommandCategory
	// commands are the argv prefixes of match.commands.
	commands [][]string
	paths    []string
	program  cel.Program
	// celFields are the fields of intent the program reads.
	celFields celFields
	// redact are a Redact rule's compiled patterns (result rules).
	redact []*regexp.Regexp
	// beforeRun is a Result rule's expression planned for partial evaluation, with
	// the result unknown: whether the rule could act on a call's result is asked
	// before the call runs (resultRuleInScope).
	beforeRun cel.Program
}

// Compile compiles a policy written for toolgate.dev/v1alpha1, the version spec's Go
// type holds; see CompileFor.
func Compile(kind, name string, generation int64, spec v1alpha1.ToolPolicySpec) (*CompiledPolicy, error) {
	return CompileFor(v1alpha1.GroupVersion.String(), kind, name, generation, spec)
}

// CompileFor checks and compiles a policy's rules: known tools and categories, argv
// patterns, path globs (relative to the workspace, with **), CEL expressions (which
// must be boolean, compiled against the CEL environment of the policy's apiVersion)
// and, last, every example. The first problem is returned as an error that names the
// rule and says what is wrong, for example
// `rule "deny-push": example "git push origin" should match but does not`.
func CompileFor(apiVersion, kind, name string, generation int64, spec v1alpha1.ToolPolicySpec) (*CompiledPolicy, error) {
	if kind != KindToolPolicy && kind != KindClusterToolPolicy {
		return nil, fmt.Errorf("unknown policy kind %q", kind)
	}
	env, err := celEnvironmentFor(apiVersion)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", kind, name, err)
	}
	p := &CompiledPolicy{Kind: kind, Name: name, Generation: generation}
	seen := map[string]bool{}
	for i, spec := range spec.Rules {
		if spec.Name == "" {
			return nil, fmt.Errorf("rule %d: name is required", i)
		}
		if seen[spec.Name] {
			return nil, fmt.Errorf("rule %q: the name is used twice; rule names must be unique in a policy", spec.Name)
		}
		seen[spec.Name] = true
		r, err := compileRule(env, spec)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", spec.Name, err)
		}
		if r.completion() {
			p.completion = append(p.completion, r)
			continue
		}
		if r.result() {
			p.result = append(p.result, r)
			continue
		}
		p.rules = append(p.rules, r)
	}
	for _, r := range p.rules {
		if err := r.checkExamples(); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.spec.Name, err)
		}
	}
	p.index = indexRules(p.rules)
	return p, nil
}

func compileRule(env celEnvironment, spec v1alpha1.PolicyRule) (*rule, error) {
	r := &rule{spec: spec, tools: spec.Match.Tools, categories: spec.Match.Categories}
	switch spec.Action {
	case v1alpha1.RuleAllow, v1alpha1.RuleAsk, v1alpha1.RuleDeny, v1alpha1.RuleAudit, v1alpha1.RuleRedirect, v1alpha1.RuleStop, v1alpha1.RuleRedact, v1alpha1.RuleReplace:
	default:
		return nil, fmt.Errorf("action %q is not one of Allow, Ask, Deny, Redirect, Stop, Audit, Redact, Replace", spec.Action)
	}
	// The API server checks these too (the CRD's rules); a policy is compiled from
	// whatever reached the cache, and the rules of what acts are kept in one place.
	registered := spec.Action == v1alpha1.RuleRedirect || spec.Action == v1alpha1.RuleReplace
	if registered != (spec.Instruction != "") {
		return nil, fmt.Errorf("instruction is required for a Redirect or Replace rule and allowed only there")
	}
	if (spec.MaxFires != nil || spec.CooldownSeconds != nil) && !registered {
		return nil, fmt.Errorf("maxFires and cooldownSeconds are for Redirect rules only (and Replace, among Result rules): a Deny, Ask, Stop or Redact rule that stopped acting after some fires would let the next call or secret through")
	}
	if (spec.Action == v1alpha1.RuleRedact) != (spec.Redact != nil) {
		return nil, fmt.Errorf("redact is required for a Redact rule and allowed only there")
	}
	if spec.Match.Judge != nil && (spec.Enforcement != v1alpha1.EnforcementDryRun || (spec.When != "" && spec.When != v1alpha1.WhenToolCall)) {
		return nil, fmt.Errorf("a rule with match.judge runs in shadow for now: set enforcement: DryRun, on a tool-call rule")
	}
	switch spec.When {
	case "", v1alpha1.WhenToolCall:
		if spec.Action == v1alpha1.RuleRedact || spec.Action == v1alpha1.RuleReplace {
			return nil, fmt.Errorf("%s acts on what a call returned: set when: Result", spec.Action)
		}
	case v1alpha1.WhenCompletion:
		return compileCompletionRule(env.completion, r)
	case v1alpha1.WhenResult:
		return compileResultRule(env.result, r)
	default:
		return nil, fmt.Errorf("when %q is not one of ToolCall, Completion, Result", spec.When)
	}
	switch spec.Enforcement {
	case "", v1alpha1.EnforcementEnforce, v1alpha1.EnforcementDryRun:
	default:
		return nil, fmt.Errorf("enforcement %q is not one of Enforce, DryRun", spec.Enforcement)
	}
	for _, t := range spec.Match.Tools {
		if _, ok := tools.Lookup(t); !ok {
			return nil, fmt.Errorf("match.tools: unknown tool %q", t)
		}
	}
	for _, c := range spec.Match.Categories {
		if _, ok := strictness[c]; !ok {
			return nil, fmt.Errorf("match.categories: unknown category %q; the categories are %s", c, categoryList())
		}
	}
	for i, pattern := range spec.Match.Commands {
		if err := checkCommandPattern(pattern); err != nil {
			return nil, fmt.Errorf("match.commands[%d]: %w", i, err)
		}
		r.commands = append(r.commands, pattern.Prefix)
	}
	for i, glob := range spec.Match.Paths {
		if strings.HasPrefix(glob, "/") || slices.Contains(strings.Split(glob, "/"), "..") {
			return nil, fmt.Errorf("match.paths[%d]: glob %q must be relative to the workspace and must not contain '..'", i, glob)
		}
		if !doublestar.ValidatePattern(glob) {
			return nil, fmt.Errorf("match.paths[%d]: %q is not a valid glob", i, glob)
		}
		r.paths = append(r.paths, glob)
	}
	if spec.Match.CEL != "" {
		prg, fields, err := compileCEL(env.toolCall, spec.Match.CEL)
		if err != nil {
			if strings.Contains(err.Error(), "undeclared reference to 'history'") || strings.Contains(err.Error(), "undeclared reference to 'answer'") {
				return nil, fmt.Errorf("match.cel: %v (history and answer are what a rule with when: Completion sees; this is a tool-call rule)", err)
			}
			if strings.Contains(err.Error(), "undeclared reference to 'result'") {
				return nil, fmt.Errorf("match.cel: %v (result is what a rule with when: Result sees; this is a tool-call rule)", err)
			}
			return nil, fmt.Errorf("match.cel: %v", err)
		}
		r.program, r.celFields = prg, fields
	}
	return r, nil
}

// checkExamples runs the rule's examples as bash calls.
func (r *rule) checkExamples() error {
	check := func(command string) bool {
		in := Request{Namespace: "example", Task: "example", Mode: v1alpha1.ModeEdit, Tool: v1alpha1.ToolBash}
		f := analyzeCommand(in, command)
		return r.matches(f)
	}
	for _, ex := range r.spec.Examples.Match {
		if !check(ex) {
			return fmt.Errorf("example %q should match but does not", ex)
		}
	}
	for _, ex := range r.spec.Examples.NotMatch {
		if check(ex) {
			return fmt.Errorf("example %q should not match but does", ex)
		}
	}
	return nil
}

// acts says whether a matching rule can decide: Audit rules and DryRun rules only
// record.
func (r *rule) acts() bool {
	return r.spec.Action != v1alpha1.RuleAudit && r.spec.Enforcement != v1alpha1.EnforcementDryRun
}

// completion says whether the rule checks final answers rather than tool calls.
func (r *rule) completion() bool { return r.spec.When == v1alpha1.WhenCompletion }

// result says whether the rule checks what executed calls returned.
func (r *rule) result() bool { return r.spec.When == v1alpha1.WhenResult }

// matches says whether the rule applies to the call. Every set field must match.
//
// For the per-part conditions (categories, commands) a rule that restricts (Deny,
// Ask, Audit) matches when any part matches, so `ls && git push` is caught by a rule
// on git push. An Allow rule must cover every part that is not read-only, so an
// allowance for tests does not carry `go test ./... && rm -rf /` with it.
func (r *rule) matches(f *facts) bool {
	if len(r.tools) > 0 && !slices.Contains(r.tools, f.tool) {
		return false
	}
	if len(r.categories) > 0 || len(r.commands) > 0 {
		if r.spec.Action == v1alpha1.RuleAllow {
			if !r.coversEveryPart(f) {
				return false
			}
		} else if !r.matchesAnyPart(f) {
			return false
		}
	}
	if len(r.paths) > 0 && !r.matchesPath(f) {
		return false
	}
	if r.program != nil {
		ok, err := evalCEL(r.program, f.activation(r.celFields))
		if err != nil {
			// Fail closed: an expression that errors (a missing key, the cost limit)
			// makes a restricting rule apply and an allowing rule not.
			return r.spec.Action != v1alpha1.RuleAllow
		}
		return ok
	}
	return true
}

func (r *rule) matchesAnyPart(f *facts) bool {
	for i := range f.parts {
		if r.partMatches(&f.parts[i]) {
			return true
		}
	}
	return false
}

func (r *rule) coversEveryPart(f *facts) bool {
	covered := false
	for i := range f.parts {
		p := &f.parts[i]
		if r.partMatches(p) {
			covered = true
			continue
		}
		if p.Category != v1alpha1.CategoryReadOnly {
			return false
		}
	}
	return covered
}

// partMatches applies the categories and commands conditions to one part.
func (r *rule) partMatches(p *Part) bool {
	if len(r.categories) > 0 && !slices.Contains(r.categories, p.Category) {
		return false
	}
	if len(r.commands) > 0 {
		for _, pattern := range r.commands {
			if argvHasPrefix(p.Argv, pattern) {
				return true
			}
		}
		return false
	}
	return true
}

func argvHasPrefix(argv, prefix []string) bool {
	return len(argv) >= len(prefix) && slices.Equal(argv[:len(prefix)], prefix)
}

// checkCommandPattern checks what the CRD's schema checks too (a policy is compiled
// from whatever reached the cache): at least one word, and words that are single
// argv words. A word with whitespace could never equal a word of an unquoted
// command, so a Deny rule on ["git push"] would silently never match. The
// whitespace is the CRD pattern's: RE2's \s.
func checkCommandPattern(p v1alpha1.CommandPattern) error {
	if len(p.Prefix) == 0 {
		return fmt.Errorf("prefix needs at least one word, for example {prefix: [git, push]}")
	}
	for j, w := range p.Prefix {
		if w == "" || strings.ContainsAny(w, "\t\n\f\r ") {
			return fmt.Errorf("prefix[%d] is %q; each item is one argv word without whitespace: write [git, push], not [\"git push\"]", j, w)
		}
	}
	return nil
}

// matchesPath applies the path globs to the file tools' path. Calls without a path
// (bash) never match a rule with paths.
func (r *rule) matchesPath(f *facts) bool {
	if !f.hasPath {
		return false
	}
	for _, glob := range r.paths {
		if ok, _ := doublestar.Match(glob, f.path); ok {
			return true
		}
	}
	return false
}
