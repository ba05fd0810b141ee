package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// scanEveryRule is the reference for matchingRules: every rule of every policy, in
// order, without the index.
func scanEveryRule(f *facts, cluster, namespaced []*CompiledPolicy) ([]candidate, []v1alpha1.RuleHit) {
	var enforcing []candidate
	var hits []v1alpha1.RuleHit
	for _, group := range [][]*CompiledPolicy{cluster, namespaced} {
		for _, p := range group {
			for _, r := range p.rules {
				if !r.matches(f) {
					continue
				}
				c := candidate{policy: p, rule: r}
				if !r.acts() {
					hits = append(hits, c.hit())
					continue
				}
				enforcing = append(enforcing, c)
			}
		}
	}
	return enforcing, hits
}

// decideByScan is Decide with the reference scan in place of the index.
func decideByScan(req Request, cluster, namespaced []*CompiledPolicy, broken []string) v1alpha1.Decision {
	f := analyze(req)
	enforcing, hits := scanEveryRule(f, cluster, namespaced)
	return decide(req, f, enforcing, hits, broken, resultRuleInScope(f, cluster, namespaced, broken))
}

// policyGen makes random policies and calls over a small vocabulary, so that rules
// and calls meet often: commands share first words, categories and tools repeat.
type policyGen struct {
	rand *rand.Rand
}

var (
	genCommandWords = []string{"git", "rm", "curl", "ls", "go", "npm", "sudo", "cat", "echo", "find", "xargs", "sh", "kubectl", "make", "tee"}
	genArgWords     = []string{"push", "status", "test", "install", "log", "-rf", "-s", "x", "/", "./...", "origin", "main"}
	genCategories   = []v1alpha1.CommandCategory{
		v1alpha1.CategoryReadOnly, v1alpha1.CategoryTest, v1alpha1.CategoryBuild, v1alpha1.CategoryWrite,
		v1alpha1.CategoryDelete, v1alpha1.CategoryInstall, v1alpha1.CategoryNetwork, v1alpha1.CategoryVCSDestructive,
		v1alpha1.CategoryPrivilege, v1alpha1.CategoryUnknown,
	}
	genTools = []v1alpha1.ToolName{
		v1alpha1.ToolBash, v1alpha1.ToolReadFile, v1alpha1.ToolWriteFile, v1alpha1.ToolEditFile,
		v1alpha1.ToolGlob, v1alpha1.ToolGrep, v1alpha1.ToolListDir,
	}
	genGlobs = []string{"secrets/**", "**/*.env", "src/*.go", "*", "docs/**"}
	genPaths = []string{"secrets/key", "/workspace/secrets/a/b", "config/.env", "src/main.go", "README.md", "./docs/x/../y.md"}
	// genCEL holds true, false and erroring expressions (an error fails closed).
	genCEL = []string{
		`intent.task == "fix-bug"`,
		`intent.namespace == "other"`,
		`"Network" in intent.categories`,
		`intent.argv.exists(a, a[0] == "git")`,
		`intent.parts.exists(p, p.command.startsWith("rm"))`,
		`intent.input.missing == "x"`,
		`intent.mode == "Auto"`,
		`size(intent.parts) > 2`,
	}
	genActions = []v1alpha1.RuleAction{v1alpha1.RuleAllow, v1alpha1.RuleAsk, v1alpha1.RuleDeny, v1alpha1.RuleAudit}
	genModes   = []v1alpha1.TaskMode{v1alpha1.ModeReadOnly, v1alpha1.ModeEdit, v1alpha1.ModeAuto, ""}
)

func pick[T any](g *policyGen, from []T) T { return from[g.rand.IntN(len(from))] }

// some picks one to three distinct elements.
func some[T comparable](g *policyGen, from []T) []T {
	var out []T
	for range 1 + g.rand.IntN(3) {
		if e := pick(g, from); !containsElement(out, e) {
			out = append(out, e)
		}
	}
	return out
}

func containsElement[T comparable](s []T, e T) bool {
	for _, x := range s {
		if x == e {
			return true
		}
	}
	return false
}

func (g *policyGen) commandPattern() v1alpha1.CommandPattern {
	words := []string{pick(g, genCommandWords)}
	for range g.rand.IntN(3) {
		words = append(words, pick(g, genArgWords))
	}
	return pattern(words...)
}

// rule sets each match field with some probability, so rules of every index key
// (and empty matches) occur, often with more than one field set.
func (g *policyGen) rule(name string) v1alpha1.PolicyRule {
	r := v1alpha1.PolicyRule{Name: name, Action: pick(g, genActions)}
	switch g.rand.IntN(6) {
	case 0:
		r.Enforcement = v1alpha1.EnforcementDryRun
	case 1:
		r.Enforcement = v1alpha1.EnforcementEnforce
	}
	if g.rand.IntN(3) == 0 {
		r.Reason = "because " + name
	}
	if g.rand.IntN(4) == 0 {
		r.Match.Tools = some(g, genTools)
	}
	if g.rand.IntN(3) == 0 {
		r.Match.Categories = some(g, genCategories)
	}
	if g.rand.IntN(2) == 0 {
		for range 1 + g.rand.IntN(2) {
			r.Match.Commands = append(r.Match.Commands, g.commandPattern())
		}
	}
	if g.rand.IntN(6) == 0 {
		r.Match.Paths = some(g, genGlobs)
	}
	if g.rand.IntN(4) == 0 {
		r.Match.CEL = pick(g, genCEL)
	}
	return r
}

func (g *policyGen) policies(kind string, prefix string) []*CompiledPolicy {
	var out []*CompiledPolicy
	for i := range g.rand.IntN(4) {
		var rules []v1alpha1.PolicyRule
		for j := range g.rand.IntN(25) {
			rules = append(rules, g.rule(fmt.Sprintf("rule-%d", j)))
		}
		p, err := Compile(kind, fmt.Sprintf("%s-%d", prefix, i), int64(i+1), v1alpha1.ToolPolicySpec{Rules: rules})
		if err != nil {
			panic(err) // the generator makes only valid rules
		}
		out = append(out, p)
	}
	return out
}

// segment is one simple command, sometimes behind a wrapper or run by a shell.
func (g *policyGen) segment() string {
	words := []string{pick(g, genCommandWords)}
	for range g.rand.IntN(4) {
		words = append(words, pick(g, genArgWords))
	}
	s := strings.Join(words, " ")
	switch g.rand.IntN(8) {
	case 0:
		s = "sudo " + s
	case 1:
		s = "timeout 5 " + s
	case 2:
		s = `bash -c '` + s + `'`
	case 3:
		s += " > out.log"
	case 4:
		s = "echo $(" + s + ")"
	}
	return s
}

func (g *policyGen) request() Request {
	req := Request{Namespace: "team", Task: "fix-bug", Mode: pick(g, genModes), Tool: pick(g, genTools)}
	input := map[string]any{}
	switch req.Tool {
	case v1alpha1.ToolBash:
		command := g.segment()
		for range g.rand.IntN(5) {
			command += pick(g, []string{" && ", " || ", "; ", " | "}) + g.segment()
		}
		input["command"] = command
		if g.rand.IntN(4) == 0 {
			input["timeoutMs"] = 120000
		}
	default:
		if g.rand.IntN(5) != 0 {
			input["path"] = pick(g, genPaths)
		}
	}
	req.Input, _ = json.Marshal(input)
	return req
}

// TestIndexedDecisionEqualsScanOfEveryRule decides random calls against random
// policies with the index and with a scan of every rule: the decisions must be the
// same in every field (action, deciding rule, reason, hits in order, parts, walls,
// fingerprint).
func TestIndexedDecisionEqualsScanOfEveryRule(t *testing.T) {
	matchedKinds := map[ruleKeyKind]int{}
	decisions := 0
	for seed := range uint64(200) {
		g := &policyGen{rand: rand.New(rand.NewPCG(seed, 16))}
		cluster := g.policies(KindClusterToolPolicy, "cluster")
		namespaced := g.policies(KindToolPolicy, "ns")
		var broken []string
		if g.rand.IntN(8) == 0 {
			broken = []string{"ToolPolicy/typo"}
		}
		for range 20 {
			req := g.request()
			want := decideByScan(req, cluster, namespaced, broken)
			got := Decide(req, cluster, namespaced, broken)
			decisions++
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("seed %d, %s %s: indexed decision differs from the scan of every rule (-scan +indexed):\n%s", seed, req.Tool, req.Input, diff)
			}
			enforcing, _ := scanEveryRule(analyze(req), cluster, namespaced)
			for _, c := range enforcing {
				matchedKinds[ruleKeyOf(c.rule).kind]++
			}
		}
	}
	// The comparison proves something only if rules of every key matched some call.
	for _, kind := range []ruleKeyKind{keyAlways, keyCommand, keyPath, keyCategory, keyTool} {
		if matchedKinds[kind] == 0 {
			t.Errorf("no rule filed under key kind %d matched any of the %d calls; the generator does not cover it", kind, decisions)
		}
	}
}

// TestIndexKeepsPrecedence holds the precedence of Decide where the index files the
// competing rules under different keys: the winner, the reason and the hits' order
// must be those of rule order, not of the index's buckets.
func TestIndexKeepsPrecedence(t *testing.T) {
	deny, ask, allow, audit := v1alpha1.RuleDeny, v1alpha1.RuleAsk, v1alpha1.RuleAllow, v1alpha1.RuleAudit
	anyCall := func(name string, action v1alpha1.RuleAction) v1alpha1.PolicyRule {
		return v1alpha1.PolicyRule{Name: name, Action: action}
	}
	onCategory := func(name string, action v1alpha1.RuleAction, c v1alpha1.CommandCategory) v1alpha1.PolicyRule {
		return v1alpha1.PolicyRule{Name: name, Action: action, Match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{c}}}
	}
	onCEL := func(name string, action v1alpha1.RuleAction, expr string) v1alpha1.PolicyRule {
		return v1alpha1.PolicyRule{Name: name, Action: action, Match: v1alpha1.RuleMatch{CEL: expr}}
	}
	onTool := func(name string, action v1alpha1.RuleAction, tool v1alpha1.ToolName) v1alpha1.PolicyRule {
		return v1alpha1.PolicyRule{Name: name, Action: action, Match: v1alpha1.RuleMatch{Tools: []v1alpha1.ToolName{tool}}}
	}
	ns := func(name string, rules ...v1alpha1.PolicyRule) *CompiledPolicy {
		return mustCompile(t, KindToolPolicy, name, rules...)
	}
	cl := func(name string, rules ...v1alpha1.PolicyRule) *CompiledPolicy {
		return mustCompile(t, KindClusterToolPolicy, name, rules...)
	}
	hit := func(policy, rule string, action v1alpha1.RuleAction) v1alpha1.RuleHit {
		return v1alpha1.RuleHit{PolicyRuleRef: compiledRuleRef(policy, rule), Action: action, Enforcement: v1alpha1.EnforcementEnforce}
	}
	gitCommit := bashCall(v1alpha1.ModeEdit, "git commit -m x")
	tests := []struct {
		name       string
		req        Request
		cluster    []*CompiledPolicy
		namespaced []*CompiledPolicy
		want       decided
	}{
		{
			name:       "a deny on every call beats an earlier allow on the command",
			req:        gitCommit,
			namespaced: []*CompiledPolicy{ns("p", onCommand("allow-git", allow, "git"), anyCall("deny-all", deny))},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/p/deny-all",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/p", "allow-git", allow)}},
		},
		{
			name:       "a deny on a category beats a later allow on the command",
			req:        gitCommit,
			namespaced: []*CompiledPolicy{ns("p", onCategory("deny-write", deny, v1alpha1.CategoryWrite), onCommand("allow-git", allow, "git"))},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/p/deny-write",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/p", "allow-git", allow)}},
		},
		{
			name:       "a deny in CEL beats an allow on the command",
			req:        gitCommit,
			namespaced: []*CompiledPolicy{ns("p", onCommand("allow-git", allow, "git"), onCEL("deny-task", deny, `intent.task == "fix-bug"`))},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/p/deny-task",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/p", "allow-git", allow)}},
		},
		{
			name:       "equal actions: the earlier rule decides, a catch-all first",
			req:        gitCommit,
			namespaced: []*CompiledPolicy{ns("p", onTool("ask-bash", ask, v1alpha1.ToolBash), onCommand("ask-git", ask, "git"))},
			want: decided{Action: v1alpha1.DecisionAsk, By: "ToolPolicy/p/ask-bash",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/p", "ask-git", ask)}},
		},
		{
			name:       "equal actions: the earlier rule decides, the command first",
			req:        gitCommit,
			namespaced: []*CompiledPolicy{ns("p", onCommand("ask-git", ask, "git"), onTool("ask-bash", ask, v1alpha1.ToolBash))},
			want: decided{Action: v1alpha1.DecisionAsk, By: "ToolPolicy/p/ask-git",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/p", "ask-bash", ask)}},
		},
		{
			name: "equal actions in two policies: the earlier policy decides",
			req:  gitCommit,
			namespaced: []*CompiledPolicy{
				ns("a", anyCall("ask-all", ask)),
				ns("b", onCommand("ask-git", ask, "git")),
			},
			want: decided{Action: v1alpha1.DecisionAsk, By: "ToolPolicy/a/ask-all",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/b", "ask-git", ask)}},
		},
		{
			name:       "a cluster deny on every call beats a namespaced deny on the command",
			req:        gitCommit,
			cluster:    []*CompiledPolicy{cl("c", anyCall("deny-all", deny))},
			namespaced: []*CompiledPolicy{ns("p", onCommand("deny-git", deny, "git"))},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ClusterToolPolicy/c/deny-all",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/p", "deny-git", deny)}},
		},
		{
			name:    "two cluster denies under different keys: the earlier decides",
			req:     gitCommit,
			cluster: []*CompiledPolicy{cl("c", onCEL("deny-task", deny, `intent.task == "fix-bug"`), onCommand("deny-git", deny, "git"))},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ClusterToolPolicy/c/deny-task",
				Hits: []v1alpha1.RuleHit{hit("ClusterToolPolicy/c", "deny-git", deny)}},
		},
		{
			name:       "a later cluster deny on the command beats an earlier cluster ask on every call",
			req:        gitCommit,
			cluster:    []*CompiledPolicy{cl("c", anyCall("ask-all", ask), onCommand("deny-git", deny, "git"))},
			namespaced: []*CompiledPolicy{ns("p", anyCall("deny-all", deny))},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ClusterToolPolicy/c/deny-git",
				Hits: []v1alpha1.RuleHit{hit("ClusterToolPolicy/c", "ask-all", ask), hit("ToolPolicy/p", "deny-all", deny)}},
		},
		{
			name:       "a namespaced deny on every call beats a cluster allow on the command",
			req:        gitCommit,
			cluster:    []*CompiledPolicy{cl("c", onCommand("allow-git", allow, "git"))},
			namespaced: []*CompiledPolicy{ns("p", anyCall("deny-all", deny))},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/p/deny-all",
				Hits: []v1alpha1.RuleHit{hit("ClusterToolPolicy/c", "allow-git", allow)}},
		},
		{
			name: "recorded hits keep rule order across keys",
			req:  gitCommit,
			namespaced: []*CompiledPolicy{ns("p",
				onCEL("audit-cel", audit, "true"),
				onCommand("audit-git", audit, "git"),
				onCategory("audit-write", audit, v1alpha1.CategoryWrite),
				onTool("audit-bash", audit, v1alpha1.ToolBash),
				anyCall("audit-all", audit),
			)},
			want: decided{Action: v1alpha1.DecisionAsk, By: "ModeDefault/Edit", Hits: []v1alpha1.RuleHit{
				hit("ToolPolicy/p", "audit-cel", audit), hit("ToolPolicy/p", "audit-git", audit),
				hit("ToolPolicy/p", "audit-write", audit), hit("ToolPolicy/p", "audit-bash", audit),
				hit("ToolPolicy/p", "audit-all", audit),
			}},
		},
		{
			name: "a rule reached by two parts and two patterns is evaluated once",
			req:  bashCall(v1alpha1.ModeEdit, "git add x && git commit -m x"),
			namespaced: []*CompiledPolicy{ns("p", v1alpha1.PolicyRule{Name: "audit-git", Action: audit, Match: v1alpha1.RuleMatch{
				Commands: []v1alpha1.CommandPattern{pattern("git", "add"), pattern("git", "commit")},
			}})},
			want: decided{Action: v1alpha1.DecisionAsk, By: "ModeDefault/Edit", Hits: []v1alpha1.RuleHit{hit("ToolPolicy/p", "audit-git", audit)}},
		},
		{
			name:       "an allow on the command must still cover every part",
			req:        bashCall(v1alpha1.ModeAuto, "git commit -m x && curl x"),
			namespaced: []*CompiledPolicy{ns("p", onCommand("allow-git", allow, "git"))},
			want:       decided{Action: v1alpha1.DecisionAsk, By: "ModeDefault/Auto"},
		},
		{
			name: "a path rule decides a file call, not a bash call naming the path",
			req:  Request{Namespace: "team", Task: "fix-bug", Mode: v1alpha1.ModeAuto, Tool: v1alpha1.ToolWriteFile, Input: json.RawMessage(`{"path":"secrets/key","content":"x"}`)},
			namespaced: []*CompiledPolicy{ns("p",
				v1alpha1.PolicyRule{Name: "deny-secrets", Action: deny, Match: v1alpha1.RuleMatch{Paths: []string{"secrets/**"}}},
				onCommand("deny-cat", deny, "cat"),
			)},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/p/deny-secrets"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.req, tt.cluster, tt.namespaced, nil)
			got := decided{Action: d.Action, By: d.PolicyRuleRef.String(), Hits: d.NonActingHits}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("decision (-want +got):\n%s\nreason: %s", diff, d.Reason)
			}
			if scan := decideByScan(tt.req, tt.cluster, tt.namespaced, nil); !cmp.Equal(scan, d, cmpopts.EquateEmpty()) {
				t.Errorf("indexed decision differs from the scan of every rule:\n%s", cmp.Diff(scan, d, cmpopts.EquateEmpty()))
			}
		})
	}
}

// TestRuleKeyOf pins the key each shape of rule is filed under.
func TestRuleKeyOf(t *testing.T) {
	tests := []struct {
		name  string
		match v1alpha1.RuleMatch
		want  ruleKey
	}{
		{name: "empty match", want: ruleKey{kind: keyAlways}},
		{name: "CEL only", match: v1alpha1.RuleMatch{CEL: "true"}, want: ruleKey{kind: keyAlways}},
		{name: "tools", match: v1alpha1.RuleMatch{Tools: []v1alpha1.ToolName{"bash", "glob"}}, want: ruleKey{kind: keyTool, tools: []v1alpha1.ToolName{"bash", "glob"}}},
		{name: "categories over tools", match: v1alpha1.RuleMatch{Tools: []v1alpha1.ToolName{"bash"}, Categories: []v1alpha1.CommandCategory{"Network"}},
			want: ruleKey{kind: keyCategory, categories: []v1alpha1.CommandCategory{"Network"}}},
		{name: "paths over categories", match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"Write"}, Paths: []string{"a/**"}}, want: ruleKey{kind: keyPath}},
		{name: "commands over everything: the first word of every pattern",
			match: v1alpha1.RuleMatch{Paths: []string{"a/**"}, CEL: "true", Commands: []v1alpha1.CommandPattern{pattern("git", "push"), pattern("hub", "push"), pattern("rm")}},
			want:  ruleKey{kind: keyCommand, commands: []string{"git", "hub", "rm"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := compileRule(testCELEnvironment(t), v1alpha1.PolicyRule{Name: "r", Action: v1alpha1.RuleDeny, Match: tt.match})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, ruleKeyOf(r), cmp.AllowUnexported(ruleKey{})); diff != "" {
				t.Errorf("key (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideWithAPolicyNotFromCompile decides against a CompiledPolicy built as a
// literal: it has no rules, so the mode decides.
func TestDecideWithAPolicyNotFromCompile(t *testing.T) {
	d := Decide(bashCall(v1alpha1.ModeEdit, "ls"), []*CompiledPolicy{{Kind: KindClusterToolPolicy, Name: "empty"}}, nil, nil)
	if want := v1alpha1.ModeDefaultReference(v1alpha1.ModeEdit); d.Action != v1alpha1.DecisionAllow || d.PolicyRuleRef != want {
		t.Errorf("decision = %s by %s, want Allow by %s", d.Action, d.PolicyRuleRef, want)
	}
}
