package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// pattern is the CommandPattern of an argv prefix.
func pattern(words ...string) v1alpha1.CommandPattern {
	return v1alpha1.CommandPattern{Prefix: words}
}

func TestCompileErrorsNameTheRule(t *testing.T) {
	tests := []struct {
		name string
		rule v1alpha1.PolicyRule
		want string
	}{
		{
			name: "bad CEL",
			rule: v1alpha1.PolicyRule{Name: "bad-cel", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{CEL: "intent.tool =="}},
			want: `rule "bad-cel": match.cel: `,
		},
		{
			name: "CEL not boolean",
			rule: v1alpha1.PolicyRule{Name: "not-bool", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{CEL: "1 + 2"}},
			want: `rule "not-bool": match.cel: expression must evaluate to a bool, not int`,
		},
		{
			name: "bad glob",
			rule: v1alpha1.PolicyRule{Name: "bad-glob", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{Paths: []string{"src/[a"}}},
			want: `rule "bad-glob": match.paths[0]: "src/[a" is not a valid glob`,
		},
		{
			name: "absolute glob",
			rule: v1alpha1.PolicyRule{Name: "abs", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{Paths: []string{"/etc/**"}}},
			want: `rule "abs": match.paths[0]: glob "/etc/**" must be relative to the workspace and must not contain '..'`,
		},
		{
			name: "empty command pattern",
			rule: v1alpha1.PolicyRule{Name: "bad-pattern", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git"), pattern()}}},
			want: `rule "bad-pattern": match.commands[1]: prefix needs at least one word, for example {prefix: [git, push]}`,
		},
		{
			name: "empty word in a command pattern",
			rule: v1alpha1.PolicyRule{Name: "bad-pattern", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git", "")}}},
			want: `rule "bad-pattern": match.commands[0]: prefix[1] is ""; each item is one argv word without whitespace`,
		},
		{
			// A Deny rule on "git push" as one word would never match `git push`.
			name: "two words in one",
			rule: v1alpha1.PolicyRule{Name: "bad-pattern", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git push")}}},
			want: `rule "bad-pattern": match.commands[0]: prefix[0] is "git push"; each item is one argv word without whitespace: write [git, push], not ["git push"]`,
		},
		{
			name: "unknown tool",
			rule: v1alpha1.PolicyRule{Name: "typo", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{Tools: []v1alpha1.ToolName{"bsh"}}},
			want: `rule "typo": match.tools: unknown tool "bsh"`,
		},
		{
			name: "unknown category",
			rule: v1alpha1.PolicyRule{Name: "cat", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"dangerous"}}},
			want: `rule "cat": match.categories: unknown category "dangerous"`,
		},
		{
			// A policy that still names a category as it was spelled before the
			// values became CamelCase is told the names.
			name: "a category spelled the old way",
			rule: v1alpha1.PolicyRule{Name: "cat", Action: v1alpha1.RuleAllow, Match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"read-only"}}},
			want: `rule "cat": match.categories: unknown category "read-only"; the categories are ReadOnly, Test, Build, Write, Delete, Install, Network, VCSDestructive, Privilege, Unknown`,
		},
		{
			name: "bad action",
			rule: v1alpha1.PolicyRule{Name: "act", Action: "Maybe"},
			want: `rule "act": action "Maybe" is not one of Allow, Ask, Deny, Redirect, Stop, Audit`,
		},
		{
			name: "failing match example",
			rule: v1alpha1.PolicyRule{
				Name: "deny-push", Action: v1alpha1.RuleDeny,
				Match:    v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git", "push", "--force")}},
				Examples: v1alpha1.RuleExamples{Match: []string{"git push origin"}},
			},
			want: `rule "deny-push": example "git push origin" should match but does not`,
		},
		{
			name: "failing notMatch example",
			rule: v1alpha1.PolicyRule{
				Name: "deny-git", Action: v1alpha1.RuleDeny,
				Match:    v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git")}},
				Examples: v1alpha1.RuleExamples{NotMatch: []string{"ls && git status"}},
			},
			want: `rule "deny-git": example "ls && git status" should not match but does`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(KindToolPolicy, "p", 1, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{tt.rule}})
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Compile error = %v, want prefix %q", err, tt.want)
			}
		})
	}
	_, err := Compile(KindToolPolicy, "p", 1, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{
		{Name: "a", Action: v1alpha1.RuleAllow}, {Name: "a", Action: v1alpha1.RuleDeny},
	}})
	if err == nil || !strings.Contains(err.Error(), `rule "a": the name is used twice`) {
		t.Errorf("duplicate names: err = %v", err)
	}
}

func TestCompileGoodPolicyWithExamples(t *testing.T) {
	p, err := Compile(KindClusterToolPolicy, "baseline", 3, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{
		{
			Name: "deny-push", Action: v1alpha1.RuleDeny,
			Match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git", "push"), pattern("git", "reset")}},
			Examples: v1alpha1.RuleExamples{
				Match:    []string{"git push origin", "ls && git reset --hard", "sudo git push", "bash -c 'git push'"},
				NotMatch: []string{"git status", "echo git push"},
			},
		},
		{
			Name: "ask-network", Action: v1alpha1.RuleAsk,
			Match:    v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{v1alpha1.CategoryNetwork}},
			Examples: v1alpha1.RuleExamples{Match: []string{"curl x", "ls | nc host 1"}, NotMatch: []string{"ls"}},
		},
		{
			Name: "cel-long-timeouts", Action: v1alpha1.RuleAsk,
			Match:    v1alpha1.RuleMatch{CEL: `intent.tool == "bash" && intent.argv.exists(a, a[0] == "make")`},
			Examples: v1alpha1.RuleExamples{Match: []string{"make all"}, NotMatch: []string{"go build"}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID() != "ClusterToolPolicy/baseline" || p.Rules() != 3 || p.Generation != 3 {
		t.Errorf("compiled policy = %s with %d rules, generation %d", p.ID(), p.Rules(), p.Generation)
	}
}

func TestRuleMatching(t *testing.T) {
	bash := func(cmd string) Request {
		raw, _ := json.Marshal(map[string]string{"command": cmd})
		return Request{Namespace: "ns", Task: "t", Mode: v1alpha1.ModeEdit, Tool: v1alpha1.ToolBash, Input: raw}
	}
	file := func(tool v1alpha1.ToolName, p string) Request {
		raw, _ := json.Marshal(map[string]string{"path": p, "content": "x"})
		return Request{Namespace: "ns", Task: "t", Mode: v1alpha1.ModeEdit, Tool: tool, Input: raw}
	}
	tests := []struct {
		name  string
		match v1alpha1.RuleMatch
		// action defaults to Deny.
		action v1alpha1.RuleAction
		req    Request
		want   bool
	}{
		{name: "empty match matches all", req: bash("ls"), want: true},
		{name: "tool", match: v1alpha1.RuleMatch{Tools: []v1alpha1.ToolName{"write_file"}}, req: file("write_file", "a"), want: true},
		{name: "other tool", match: v1alpha1.RuleMatch{Tools: []v1alpha1.ToolName{"write_file"}}, req: bash("ls"), want: false},
		{name: "category of any part", match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"Delete"}}, req: bash("ls && rm x"), want: true},
		{name: "category of file tool", match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"Write"}}, req: file("edit_file", "a"), want: true},
		{name: "argv prefix, one of several patterns", match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git", "push"), pattern("git", "reset")}}, req: bash("cd x; git reset --hard"), want: true},
		{name: "argv prefix longer than argv", match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git", "push")}}, req: bash("git"), want: false},
		{name: "argv after unwrapping", match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("rm")}}, req: bash(`timeout 5 \rm x`), want: true},
		{name: "commands never match file tools", match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("rm")}}, req: file("write_file", "rm"), want: false},
		{name: "path glob with **", match: v1alpha1.RuleMatch{Paths: []string{"**/*.env"}}, req: file("write_file", "config/prod/.env"), want: true},
		{name: "path glob under workspace root", match: v1alpha1.RuleMatch{Paths: []string{"secrets/**"}}, req: file("read_file", "/workspace/secrets/key"), want: true},
		{name: "path glob cleaned", match: v1alpha1.RuleMatch{Paths: []string{"secrets/**"}}, req: file("read_file", "./a/../secrets/key"), want: true},
		{name: "path glob miss", match: v1alpha1.RuleMatch{Paths: []string{"secrets/**"}}, req: file("read_file", "src/main.go"), want: false},
		{name: "paths never match bash", match: v1alpha1.RuleMatch{Paths: []string{"**"}}, req: bash("cat secrets/key"), want: false},
		{name: "CEL over input", match: v1alpha1.RuleMatch{CEL: `has(intent.input.timeoutMs) && intent.input.timeoutMs > 60000`}, req: Request{Mode: "Edit", Tool: "bash", Input: json.RawMessage(`{"command":"ls","timeoutMs":120000}`)}, want: true},
		{name: "CEL over categories and parts", match: v1alpha1.RuleMatch{CEL: `"Delete" in intent.categories && intent.parts.exists(p, p.command.startsWith("rm"))`}, req: bash("ls; rm -r x"), want: true},
		{name: "CEL over namespace, task and mode", match: v1alpha1.RuleMatch{CEL: `intent.namespace == "ns" && intent.task == "t" && intent.mode == "Edit"`}, req: bash("ls"), want: true},
		{name: "CEL argv as lists of strings", match: v1alpha1.RuleMatch{CEL: `intent.argv == [["git", "push", "origin"], ["ls", "-la"]] && type(intent.argv[0][0]) == string`}, req: bash("git push origin && ls -la"), want: true},
		{name: "CEL parts as maps of strings", match: v1alpha1.RuleMatch{CEL: `intent.parts[1] == {"command": "ls -la", "category": "ReadOnly"} && type(intent.parts[1]) == map && !has(intent.parts[1].argv)`}, req: bash("git push origin && ls -la"), want: true},
		{name: "CEL categories as a list of strings, each once", match: v1alpha1.RuleMatch{CEL: `intent.categories == ["ReadOnly"] && intent.categories.all(c, type(c) == string)`}, req: bash("ls && cat x | wc -l"), want: true},
		{name: "CEL categories of an empty command", match: v1alpha1.RuleMatch{CEL: `intent.categories == [] && intent.parts == [] && intent.argv == []`}, req: bash(""), want: true},
		{name: "CEL false", match: v1alpha1.RuleMatch{CEL: `intent.tool == "read_file"`}, req: bash("ls"), want: false},
		{name: "CEL error fails closed for Deny", match: v1alpha1.RuleMatch{CEL: `intent.input.missing == "x"`}, req: bash("ls"), want: true},
		{name: "CEL error fails closed for Allow", action: v1alpha1.RuleAllow, match: v1alpha1.RuleMatch{CEL: `intent.input.missing == "x"`}, req: bash("ls"), want: false},
		{name: "CEL cost limit fails closed", action: v1alpha1.RuleAllow, match: v1alpha1.RuleMatch{CEL: `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, true)))))`}, req: bash("ls"), want: false},
		{name: "all fields must match", match: v1alpha1.RuleMatch{Tools: []v1alpha1.ToolName{"bash"}, Categories: []v1alpha1.CommandCategory{"Network"}}, req: bash("rm x"), want: false},
		// Allow rules must cover every part that is not read-only.
		{name: "allow covers all parts", action: v1alpha1.RuleAllow, match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"Test"}}, req: bash("cd x && go test ./... | tee /dev/null"), want: true},
		{name: "allow does not carry an extra part", action: v1alpha1.RuleAllow, match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"Test"}}, req: bash("go test ./... && rm -rf /"), want: false},
		{name: "allow by argv does not carry an extra part", action: v1alpha1.RuleAllow, match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("npm", "install")}}, req: bash("npm install; curl x"), want: false},
		{name: "allow needs one covered part", action: v1alpha1.RuleAllow, match: v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{"Test"}}, req: bash("ls"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			action := tt.action
			if action == "" {
				action = v1alpha1.RuleDeny
			}
			r, err := compileRule(testCELEnvironment(t), v1alpha1.PolicyRule{Name: "r", Action: action, Match: tt.match})
			if err != nil {
				t.Fatal(err)
			}
			if got := r.matches(analyze(tt.req)); got != tt.want {
				t.Errorf("matches = %v, want %v", got, tt.want)
			}
		})
	}
}
