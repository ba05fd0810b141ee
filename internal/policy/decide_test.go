package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

func mustCompile(t testing.TB, kind, name string, rules ...v1alpha1.PolicyRule) *CompiledPolicy {
	t.Helper()
	p, err := Compile(kind, name, 7, v1alpha1.ToolPolicySpec{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func bashCall(mode v1alpha1.TaskMode, command string) Request {
	raw, _ := json.Marshal(map[string]string{"command": command})
	return Request{Namespace: "team", Task: "fix-bug", Mode: mode, Tool: v1alpha1.ToolBash, Input: raw}
}

func onCommand(name string, action v1alpha1.RuleAction, words ...string) v1alpha1.PolicyRule {
	return v1alpha1.PolicyRule{Name: name, Action: action, Match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern(words...)}}}
}

// decided is the part of a Decision the precedence tables check: By is what
// decided, as its PolicyRuleReference shows (Kind/policy/rule, or ModeDefault/mode).
type decided struct {
	Action v1alpha1.DecisionAction
	By     string
	Hits   []v1alpha1.RuleHit
}

// compiledRuleRef is the reference of rule of policy ("Kind/name") as mustCompile
// compiles it, at generation 7.
func ref(kind v1alpha1.PolicyRuleKind, name string, generation int64, rule string) v1alpha1.PolicyRuleReference {
	return v1alpha1.NewPolicyRuleReference(kind, name, generation, rule)
}

func compiledRuleRef(policy, rule string) v1alpha1.PolicyRuleReference {
	kind, name, _ := strings.Cut(policy, "/")
	return v1alpha1.NewPolicyRuleReference(v1alpha1.PolicyRuleKind(kind), name, 7, rule)
}

func TestDecidePrecedence(t *testing.T) {
	clusterDenyPush := mustCompile(t, KindClusterToolPolicy, "baseline", onCommand("no-push", v1alpha1.RuleDeny, "git", "push"))
	nsAllowGit := mustCompile(t, KindToolPolicy, "team", onCommand("allow-git", v1alpha1.RuleAllow, "git"))
	nsAskGit := mustCompile(t, KindToolPolicy, "careful", onCommand("ask-git", v1alpha1.RuleAsk, "git"))
	nsDenyGit := mustCompile(t, KindToolPolicy, "strict", onCommand("deny-git", v1alpha1.RuleDeny, "git"))
	clusterAskGit := mustCompile(t, KindClusterToolPolicy, "ask", onCommand("ask-git", v1alpha1.RuleAsk, "git"))
	dryRunDeny := mustCompile(t, KindToolPolicy, "shadow", v1alpha1.PolicyRule{
		Name: "would-deny", Action: v1alpha1.RuleDeny, Enforcement: v1alpha1.EnforcementDryRun,
		Match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git")}},
	})
	audit := mustCompile(t, KindClusterToolPolicy, "audit", v1alpha1.PolicyRule{
		Name: "record-git", Action: v1alpha1.RuleAudit, Match: v1alpha1.RuleMatch{Commands: []v1alpha1.CommandPattern{pattern("git")}},
	})
	hit := func(policy, rule string, action v1alpha1.RuleAction, enforcement v1alpha1.Enforcement) v1alpha1.RuleHit {
		return v1alpha1.RuleHit{PolicyRuleRef: compiledRuleRef(policy, rule), Action: action, Enforcement: enforcement}
	}
	enforce := v1alpha1.EnforcementEnforce

	tests := []struct {
		name       string
		req        Request
		cluster    []*CompiledPolicy
		namespaced []*CompiledPolicy
		broken     []string
		want       decided
	}{
		{
			name:       "cluster deny beats namespace allow",
			req:        bashCall(v1alpha1.ModeAuto, "git push origin main"),
			cluster:    []*CompiledPolicy{clusterDenyPush},
			namespaced: []*CompiledPolicy{nsAllowGit},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ClusterToolPolicy/baseline/no-push",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/team", "allow-git", v1alpha1.RuleAllow, enforce)}},
		},
		{
			name:       "cluster deny beats namespace deny for the record",
			req:        bashCall(v1alpha1.ModeAuto, "git push"),
			cluster:    []*CompiledPolicy{clusterDenyPush},
			namespaced: []*CompiledPolicy{nsDenyGit},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ClusterToolPolicy/baseline/no-push",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/strict", "deny-git", v1alpha1.RuleDeny, enforce)}},
		},
		{
			name:       "namespace allow when the cluster rule does not match",
			req:        bashCall(v1alpha1.ModeEdit, "git status && git commit -m x"),
			cluster:    []*CompiledPolicy{clusterDenyPush},
			namespaced: []*CompiledPolicy{nsAllowGit},
			want:       decided{Action: v1alpha1.DecisionAllow, By: "ToolPolicy/team/allow-git"},
		},
		{
			name:       "deny beats ask beats allow",
			req:        bashCall(v1alpha1.ModeEdit, "git commit -m x"),
			namespaced: []*CompiledPolicy{nsAllowGit, nsAskGit, nsDenyGit},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/strict/deny-git", Hits: []v1alpha1.RuleHit{
				hit("ToolPolicy/team", "allow-git", v1alpha1.RuleAllow, enforce),
				hit("ToolPolicy/careful", "ask-git", v1alpha1.RuleAsk, enforce),
			}},
		},
		{
			name:       "ask beats allow",
			req:        bashCall(v1alpha1.ModeEdit, "git commit -m x"),
			namespaced: []*CompiledPolicy{nsAllowGit, nsAskGit},
			want: decided{Action: v1alpha1.DecisionAsk, By: "ToolPolicy/careful/ask-git",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/team", "allow-git", v1alpha1.RuleAllow, enforce)}},
		},
		{
			name:       "namespace deny beats cluster ask",
			req:        bashCall(v1alpha1.ModeEdit, "git commit -m x"),
			cluster:    []*CompiledPolicy{clusterAskGit},
			namespaced: []*CompiledPolicy{nsDenyGit},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/strict/deny-git",
				Hits: []v1alpha1.RuleHit{hit("ClusterToolPolicy/ask", "ask-git", v1alpha1.RuleAsk, enforce)}},
		},
		{
			name:       "an allow rule never loosens a cluster ask",
			req:        bashCall(v1alpha1.ModeAuto, "git commit -m x"),
			cluster:    []*CompiledPolicy{clusterAskGit},
			namespaced: []*CompiledPolicy{nsAllowGit},
			want: decided{Action: v1alpha1.DecisionAsk, By: "ClusterToolPolicy/ask/ask-git",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/team", "allow-git", v1alpha1.RuleAllow, enforce)}},
		},
		{
			name:       "dry-run and audit rules are recorded and do not act",
			req:        bashCall(v1alpha1.ModeEdit, "git commit -m x"),
			cluster:    []*CompiledPolicy{audit},
			namespaced: []*CompiledPolicy{dryRunDeny, nsAllowGit},
			want: decided{Action: v1alpha1.DecisionAllow, By: "ToolPolicy/team/allow-git", Hits: []v1alpha1.RuleHit{
				hit("ClusterToolPolicy/audit", "record-git", v1alpha1.RuleAudit, enforce),
				hit("ToolPolicy/shadow", "would-deny", v1alpha1.RuleDeny, v1alpha1.EnforcementDryRun),
			}},
		},
		{
			name:       "dry-run deny alone leaves the mode default",
			req:        bashCall(v1alpha1.ModeAuto, "git commit -m x"),
			namespaced: []*CompiledPolicy{dryRunDeny},
			want: decided{Action: v1alpha1.DecisionAllow, By: "ModeDefault/Auto",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/shadow", "would-deny", v1alpha1.RuleDeny, v1alpha1.EnforcementDryRun)}},
		},
		{
			name:       "broken policy in scope turns allow into ask",
			req:        bashCall(v1alpha1.ModeEdit, "git commit -m x"),
			namespaced: []*CompiledPolicy{nsAllowGit},
			broken:     []string{"ToolPolicy/typo"},
			want:       decided{Action: v1alpha1.DecisionAsk, By: "ToolPolicy/team/allow-git"},
		},
		{
			name:   "broken policy in scope turns a mode default allow into ask",
			req:    bashCall(v1alpha1.ModeEdit, "ls"),
			broken: []string{"ClusterToolPolicy/x"},
			want:   decided{Action: v1alpha1.DecisionAsk, By: "ModeDefault/Edit"},
		},
		{
			name:   "broken policy does not loosen a deny",
			req:    bashCall(v1alpha1.ModeReadOnly, "rm x"),
			broken: []string{"ToolPolicy/typo"},
			want:   decided{Action: v1alpha1.DecisionDeny, By: "ModeDefault/ReadOnly"},
		},
		{
			name:       "ReadOnly mode is a ceiling over an allow rule",
			req:        bashCall(v1alpha1.ModeReadOnly, "git commit -m x"),
			namespaced: []*CompiledPolicy{nsAllowGit},
			want: decided{Action: v1alpha1.DecisionDeny, By: "ModeDefault/ReadOnly",
				Hits: []v1alpha1.RuleHit{hit("ToolPolicy/team", "allow-git", v1alpha1.RuleAllow, enforce)}},
		},
		{
			name:       "ReadOnly mode lets an allow rule decide a read-only call",
			req:        bashCall(v1alpha1.ModeReadOnly, "git log"),
			namespaced: []*CompiledPolicy{nsAllowGit},
			want:       decided{Action: v1alpha1.DecisionAllow, By: "ToolPolicy/team/allow-git"},
		},
		{
			name:       "ReadOnly mode still lets a rule deny a read-only call",
			req:        bashCall(v1alpha1.ModeReadOnly, "git log"),
			namespaced: []*CompiledPolicy{nsDenyGit},
			want:       decided{Action: v1alpha1.DecisionDeny, By: "ToolPolicy/strict/deny-git"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.req, tt.cluster, tt.namespaced, tt.broken)
			got := decided{Action: d.Action, By: d.PolicyRuleRef.String(), Hits: d.NonActingHits}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("decision (-want +got):\n%s\nreason: %s", diff, d.Reason)
			}
		})
	}
}

func TestDecideModeDefaults(t *testing.T) {
	type row struct {
		command string
		want    map[v1alpha1.TaskMode]v1alpha1.DecisionAction
	}
	allow, ask, deny := v1alpha1.DecisionAllow, v1alpha1.DecisionAsk, v1alpha1.DecisionDeny
	rows := []row{
		{"ls -la", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": allow, "Edit": allow, "Auto": allow, "": allow}},
		{"go test ./...", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": allow, "": deny}},
		{"go build ./...", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": allow}},
		{"echo x > a.txt", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": allow}},
		{"rm a.txt", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": ask}},
		{"npm install", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": ask}},
		{"curl http://x", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": ask}},
		{"git push --force", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": ask}},
		{"sudo ls", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": ask}},
		{"echo 'unterminated", map[v1alpha1.TaskMode]v1alpha1.DecisionAction{"ReadOnly": deny, "Edit": ask, "Auto": ask}},
	}
	for _, r := range rows {
		for mode, want := range r.want {
			d := Decide(bashCall(mode, r.command), nil, nil, nil)
			if d.Action != want || d.PolicyRuleRef != v1alpha1.ModeDefaultReference(mode) {
				t.Errorf("mode %q, %q: got %s by %s (%s), want %s by %s", mode, r.command, d.Action, d.PolicyRuleRef, d.Reason, want, v1alpha1.ModeDefaultReference(mode))
			}
		}
	}
	// File tools take their registered category.
	write := Request{Namespace: "n", Task: "t", Mode: v1alpha1.ModeReadOnly, Tool: v1alpha1.ToolWriteFile, Input: json.RawMessage(`{"content":"x","path":"a"}`)}
	if d := Decide(write, nil, nil, nil); d.Action != deny || d.Reason != "ReadOnly mode never runs writes: this call is Write" {
		t.Errorf("write_file in ReadOnly: %s (%s)", d.Action, d.Reason)
	}
	write.Mode = v1alpha1.ModeAuto
	if d := Decide(write, nil, nil, nil); d.Action != allow || d.Category != v1alpha1.CategoryWrite {
		t.Errorf("write_file in Auto: %s, category %s", d.Action, d.Category)
	}
}

func TestDecideFillsTheDecision(t *testing.T) {
	p := mustCompile(t, KindToolPolicy, "team", v1alpha1.PolicyRule{
		Name: "ask-install", Action: v1alpha1.RuleAsk, Reason: "installs need a reviewer", Risk: v1alpha1.RiskMedium,
		Approvers: v1alpha1.Approvers{Users: []string{"alice"}, Groups: []string{"sre"}},
		Match:     v1alpha1.RuleMatch{Categories: []v1alpha1.CommandCategory{v1alpha1.CategoryInstall}},
	})
	req := bashCall(v1alpha1.ModeAuto, "npm ci && npm test")
	d := Decide(req, nil, []*CompiledPolicy{p}, nil)
	want := v1alpha1.Decision{
		Action:        v1alpha1.DecisionAsk,
		PolicyRuleRef: compiledRuleRef("ToolPolicy/team", "ask-install"),
		Reason:        "installs need a reviewer",
		Risk:          v1alpha1.RiskMedium,
		Category:      v1alpha1.CategoryInstall,
		Parts: []v1alpha1.CommandPart{
			{Command: "npm ci", Category: v1alpha1.CategoryInstall},
			{Command: "npm test", Category: v1alpha1.CategoryTest},
		},
		Approvers:   v1alpha1.Approvers{Users: []string{"alice"}, Groups: []string{"sre"}},
		Fingerprint: Fingerprint("team", "fix-bug", v1alpha1.ToolBash, req.Input, compiledRuleRef("ToolPolicy/team", "ask-install"), nil),
	}
	if diff := cmp.Diff(want, d, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}

	// Without a rule risk, the category gives it; a mode default has no approvers.
	d = Decide(bashCall(v1alpha1.ModeEdit, "sudo ls"), nil, nil, nil)
	if d.Risk != v1alpha1.RiskCritical || d.Category != v1alpha1.CategoryPrivilege || len(d.Approvers.Users) != 0 {
		t.Errorf("sudo ls: risk %s, category %s, approvers %v", d.Risk, d.Category, d.Approvers)
	}
	d = Decide(bashCall(v1alpha1.ModeEdit, "ls"), nil, nil, []string{"ToolPolicy/a", "ToolPolicy/b"})
	if want := "no rule matched; Edit mode allows read-only calls; asking instead of allowing because ToolPolicy/a, ToolPolicy/b in scope are not Ready"; d.Reason != want {
		t.Errorf("broken reason = %q, want %q", d.Reason, want)
	}
}

func TestFingerprint(t *testing.T) {
	base := Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), nil)
	// The documented construction, computed independently.
	if got := sha256Hex(`{"generation":1,"input":{"command":"ls","timeoutMs":5},"namespace":"ns","policy":"ToolPolicy/p","rule":"r","task":"task","tool":"bash"}`); got != base {
		t.Errorf("fingerprint %s does not match the documented construction %s", base, got)
	}
	if len(base) != 64 {
		t.Errorf("fingerprint %q is not hex SHA-256", base)
	}
	same := Fingerprint("ns", "task", "bash", []byte(` { "timeoutMs": 5, "command": "ls" } `), ref("ToolPolicy", "p", 1, "r"), nil)
	if same != base {
		t.Error("key order and whitespace of the input must not change the fingerprint")
	}
	for name, other := range map[string]string{
		"namespace":  Fingerprint("ns2", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), nil),
		"task":       Fingerprint("ns", "task2", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), nil),
		"tool":       Fingerprint("ns", "task", "read_file", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), nil),
		"input":      Fingerprint("ns", "task", "bash", []byte(`{"command":"ls -a","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), nil),
		"policy":     Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ClusterToolPolicy", "p", 1, "r"), nil),
		"rule":       Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r2"), nil),
		"generation": Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 2, "r"), nil),
	} {
		if other == base {
			t.Errorf("changing the %s must change the fingerprint", name)
		}
	}
	// A call behind walls is a different call: an approval given for it must not run
	// it without them, nor with only one of them.
	ro := &v1alpha1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "every part of the call is read-only"}
	walled := Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), ro)
	if got := sha256Hex(`{"generation":1,"input":{"command":"ls","timeoutMs":5},"namespace":"ns","policy":"ToolPolicy/p","rule":"r","task":"task","tool":"bash","walls":{"noNetwork":true,"readOnlyWorkspace":true}}`); got != walled {
		t.Errorf("walled fingerprint %s does not match the documented construction %s", walled, got)
	}
	mountOnly := Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), &v1alpha1.SandboxWalls{ReadOnlyWorkspace: true})
	for name, fp := range map[string]string{"no walls": base, "only the read-only mount": mountOnly} {
		if fp == walled {
			t.Errorf("%s must have another fingerprint than both walls", name)
		}
	}
	if mountOnly == base {
		t.Error("a read-only mount alone must change the fingerprint")
	}
	// The reason is words for people: rewording it keeps the fingerprint.
	reworded := *ro
	reworded.Reason = "read-only"
	if Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), &reworded) != walled {
		t.Error("the walls' reason must not change the fingerprint")
	}
	// Walls that are all down are no walls.
	if Fingerprint("ns", "task", "bash", []byte(`{"command":"ls","timeoutMs":5}`), ref("ToolPolicy", "p", 1, "r"), &v1alpha1.SandboxWalls{Reason: "x"}) != base {
		t.Error("walls with neither wall up must fingerprint as no walls")
	}
	// Input that is not JSON is still covered, as a string.
	if Fingerprint("ns", "task", "bash", []byte(`not json`), v1alpha1.ModeDefaultReference(v1alpha1.ModeEdit), nil) == Fingerprint("ns", "task", "bash", []byte(`not json!`), v1alpha1.ModeDefaultReference(v1alpha1.ModeEdit), nil) {
		t.Error("non-JSON inputs must still be distinguished")
	}
}

// The sandbox enforces the verdict: a call decided for being read-only gets a
// read-only workspace and no network whatever the task's mode, egress or deciding
// rule; any other call keeps the task's sandbox, except that a ReadOnly task mounts
// the workspace read-only for every call.
func TestDecideWalls(t *testing.T) {
	both := func(reason string) *v1alpha1.SandboxWalls {
		return &v1alpha1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: reason}
	}
	allowCat := mustCompile(t, KindToolPolicy, "team", onCommand("allow-cat", v1alpha1.RuleAllow, "cat"))
	askCat := mustCompile(t, KindToolPolicy, "careful", onCommand("ask-cat", v1alpha1.RuleAsk, "cat"))
	allowSh := mustCompile(t, KindToolPolicy, "scripts", onCommand("allow-sh", v1alpha1.RuleAllow, "sh"))
	readFile := Request{Namespace: "team", Task: "fix-bug", Mode: v1alpha1.ModeAuto, Tool: v1alpha1.ToolReadFile, Input: json.RawMessage(`{"path":"a.go"}`)}
	writeFile := Request{Namespace: "team", Task: "fix-bug", Mode: v1alpha1.ModeAuto, Tool: v1alpha1.ToolWriteFile, Input: json.RawMessage(`{"content":"x","path":"a.go"}`)}
	readOnlyTask := readFile
	readOnlyTask.Mode = v1alpha1.ModeReadOnly

	tests := []struct {
		name       string
		req        Request
		namespaced []*CompiledPolicy
		broken     []string
		action     v1alpha1.DecisionAction
		want       *v1alpha1.SandboxWalls
	}{
		{name: "read-only bash in Edit", req: bashCall(v1alpha1.ModeEdit, "cat notes.txt | grep todo"), action: v1alpha1.DecisionAllow, want: both("every part of the call is read-only")},
		{name: "read-only bash in Auto", req: bashCall(v1alpha1.ModeAuto, "ls -la"), action: v1alpha1.DecisionAllow, want: both("every part of the call is read-only")},
		{name: "read-only bash allowed by a rule", req: bashCall(v1alpha1.ModeEdit, "cat notes.txt"), namespaced: []*CompiledPolicy{allowCat}, action: v1alpha1.DecisionAllow, want: both("every part of the call is read-only")},
		// The approver approves the call behind its walls: the Approval shows them.
		{name: "read-only bash asked by a rule", req: bashCall(v1alpha1.ModeEdit, "cat notes.txt"), namespaced: []*CompiledPolicy{askCat}, action: v1alpha1.DecisionAsk, want: both("every part of the call is read-only")},
		// A broken policy's Result rules cannot be read: one of them could act on the
		// output, which is then kept out of the workspace too.
		{name: "read-only bash asked because a policy is broken", req: bashCall(v1alpha1.ModeEdit, "ls"), broken: []string{"ToolPolicy/x"}, action: v1alpha1.DecisionAsk,
			want: &v1alpha1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, NoOutputCopy: true,
				Reason: "every part of the call is read-only; the full output is not copied into the workspace: ToolPolicy/x (not Ready, so its Result rules cannot be read) may act on it"}},
		{name: "read-only tool", req: readFile, action: v1alpha1.DecisionAllow, want: both("read_file is a read-only tool")},
		{name: "read-only tool in a ReadOnly task", req: readOnlyTask, action: v1alpha1.DecisionAllow, want: both("read_file is a read-only tool; the task's mode is ReadOnly")},
		{name: "read-only bash in a task with no mode (ReadOnly)", req: bashCall("", "ls"), action: v1alpha1.DecisionAllow, want: both("every part of the call is read-only; the task's mode is ReadOnly")},
		// A write call has no walls, whoever allowed it.
		{name: "write bash in Auto", req: bashCall(v1alpha1.ModeAuto, "echo x > a.txt"), action: v1alpha1.DecisionAllow},
		{name: "write tool in Auto", req: writeFile, action: v1alpha1.DecisionAllow},
		{name: "test in Auto", req: bashCall(v1alpha1.ModeAuto, "go test ./..."), action: v1alpha1.DecisionAllow},
		{name: "one write part among read-only ones", req: bashCall(v1alpha1.ModeAuto, "cat a.txt > b.txt"), action: v1alpha1.DecisionAllow},
		{name: "an unknown command a rule allows", req: bashCall(v1alpha1.ModeEdit, "sh build.sh"), namespaced: []*CompiledPolicy{allowSh}, action: v1alpha1.DecisionAllow},
		{name: "network call asked in Edit", req: bashCall(v1alpha1.ModeEdit, "curl https://example.com"), action: v1alpha1.DecisionAsk},
		// A ReadOnly task denies writes; the mode's wall is recorded all the same.
		{name: "write in a ReadOnly task", req: bashCall(v1alpha1.ModeReadOnly, "rm a.txt"), action: v1alpha1.DecisionDeny,
			want: &v1alpha1.SandboxWalls{ReadOnlyWorkspace: true, Reason: "the task's mode is ReadOnly"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.req, nil, tc.namespaced, tc.broken)
			if d.Action != tc.action {
				t.Fatalf("action %s (%s), want %s", d.Action, d.Reason, tc.action)
			}
			if diff := cmp.Diff(tc.want, d.Walls); diff != "" {
				t.Errorf("walls (-want +got):\n%s", diff)
			}
			if want := Fingerprint(tc.req.Namespace, tc.req.Task, tc.req.Tool, tc.req.Input, d.PolicyRuleRef, tc.want); d.Fingerprint != want {
				t.Errorf("the fingerprint does not cover the walls %+v", tc.want)
			}
		})
	}
}

func TestCacheCompilesOncePerGeneration(t *testing.T) {
	c := NewCache()
	spec := v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{{Name: "a", Action: v1alpha1.RuleAllow}}}
	p1, err := c.Get(KindToolPolicy, "ns", "p", "uid-1", 1, spec)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := c.Get(KindToolPolicy, "ns", "p", "uid-1", 1, spec)
	if p1 != p2 {
		t.Error("the same generation must return the same compiled policy")
	}
	p3, _ := c.Get(KindToolPolicy, "ns", "p", "uid-1", 2, spec)
	if p3 == p1 || p3.Generation != 2 {
		t.Error("a new generation must be compiled again")
	}
	p4, _ := c.Get(KindToolPolicy, "ns", "p", "uid-2", 2, spec)
	if p4 == p3 {
		t.Error("a recreated policy (new UID) must be compiled again")
	}
	bad := v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{{Name: "x", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{CEL: "("}}}}
	if _, err := c.Get(KindClusterToolPolicy, "", "bad", "uid-3", 1, bad); err == nil {
		t.Error("a broken policy must return its error")
	}
	if c.Len() != 2 {
		t.Errorf("cache holds %d entries, want 2", c.Len())
	}
	c.Forget(KindToolPolicy, "ns", "p")
	if c.Len() != 1 {
		t.Errorf("after Forget the cache holds %d entries, want 1", c.Len())
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestFingerprintWithSandbox: the sandbox a call was decided to run in is part of the
// call. Every field of it changes the fingerprint, the task's UID included (a task
// deleted and created again under its name is another task), and the encoding is
// canonical whatever order the sandbox was built in.
func TestFingerprintWithSandbox(t *testing.T) {
	input := []byte(`{"command":"make"}`)
	sandbox := func() *v1alpha1.DecidedSandbox {
		return &v1alpha1.DecidedSandbox{
			TaskUID: "uid-1",
			Profile: v1alpha1.SandboxProfile{
				Image: "golang:1.26", WorkspaceClaimName: "fix-workspace",
				Resources: v1alpha1.SandboxResources{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("512Mi"), corev1.ResourceCPU: resource.MustParse("1000m"),
				}},
			},
			TimeoutSeconds: 60, MaxOutputBytes: 4096,
		}
	}
	fp := func(s *v1alpha1.DecidedSandbox) string {
		return FingerprintWithSandbox("ns", "fix", v1alpha1.ToolBash, input, ref("ToolPolicy", "p", 1, "r"), nil, s)
	}
	base := fp(sandbox())
	// The documented construction: the sandbox's JSON with keys sorted at every level,
	// quantities in canonical form (1000m is 1).
	doc := `{"generation":1,"input":{"command":"make"},"namespace":"ns","policy":"ToolPolicy/p","rule":"r",` +
		`"sandbox":{"maxOutputBytes":4096,"profile":{"image":"golang:1.26","network":{},"resources":{"limits":{"cpu":"1","memory":"512Mi"}},"workspaceClaimName":"fix-workspace"},"taskUID":"uid-1","timeoutSeconds":60},` +
		`"task":"fix","tool":"bash"}`
	if got := sha256Hex(doc); got != base {
		t.Errorf("fingerprint %s does not match the documented construction %s", base, got)
	}
	if Fingerprint("ns", "fix", v1alpha1.ToolBash, input, ref("ToolPolicy", "p", 1, "r"), nil) != fp(nil) {
		t.Error("FingerprintWithSandbox without a sandbox must be Fingerprint")
	}
	if fp(nil) == base {
		t.Error("a sandbox must change the fingerprint")
	}
	cases := map[string]func(*v1alpha1.DecidedSandbox){
		"task UID (task re-created)": func(s *v1alpha1.DecidedSandbox) { s.TaskUID = "uid-2" },
		"image":                      func(s *v1alpha1.DecidedSandbox) { s.Profile.Image = "evil:latest" },
		"runtimeClass":               func(s *v1alpha1.DecidedSandbox) { gv := "gvisor"; s.Profile.RuntimeClassName = &gv },
		"egress": func(s *v1alpha1.DecidedSandbox) {
			s.Profile.Network = v1alpha1.NetworkSpec{Mode: v1alpha1.NetworkAllowList, Egress: []v1alpha1.EgressRule{{CIDR: "0.0.0.0/0"}}}
		},
		// The same destinations, and DNS out on top: an approved call's fingerprint
		// does not carry over to one that may also send names to the cluster DNS.
		"cluster DNS":     func(s *v1alpha1.DecidedSandbox) { s.Profile.Network.ClusterDNS = true },
		"workspace claim": func(s *v1alpha1.DecidedSandbox) { s.Profile.WorkspaceClaimName = "someone-elses" },
		"read-only mount": func(s *v1alpha1.DecidedSandbox) { s.Profile.ReadOnlyWorkspace = true },
		"resources": func(s *v1alpha1.DecidedSandbox) {
			s.Profile.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("8")
		},
		"timeout":    func(s *v1alpha1.DecidedSandbox) { s.TimeoutSeconds = 3600 },
		"output cap": func(s *v1alpha1.DecidedSandbox) { s.MaxOutputBytes = 1 << 20 },
		"workdir":    func(s *v1alpha1.DecidedSandbox) { s.Workdir = "sub" },
		"env":        func(s *v1alpha1.DecidedSandbox) { s.Env = []v1alpha1.EnvVar{{Name: "LD_PRELOAD", Value: "x.so"}} },
	}
	for name, change := range cases {
		s := sandbox()
		change(s)
		if fp(s) == base {
			t.Errorf("changing the sandbox's %s must change the fingerprint", name)
		}
	}
	// The same quantity written another way is the same sandbox.
	s := sandbox()
	s.Profile.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	if fp(s) != base {
		t.Error("1000m and 1 CPU must fingerprint the same")
	}
}
