package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// run runs the plugin's command line and returns the exit code, stdout and stderr.
func run(ctx context.Context, stdin string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Execute(ctx, args, genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

func TestPolicyCheckExitCodes(t *testing.T) {
	const policies = "testdata/policies.yaml"
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{"a test run is allowed by the team's rule", []string{"--policy", policies, "--", "npm", "test"}, 0,
			[]string{"Decision: Allow by ToolPolicy/team/allow-tests", "ToolPolicy/team/allow-tests (Allow, Enforce): decided"}, ""},
		{"a read is allowed by the mode", []string{"--policy", policies, "--", "ls -la"}, 0,
			[]string{"Matching rules: none", "Decision: Allow by ModeDefault/Edit", "Walls: read-only workspace, no network (every part of the call is read-only)"}, ""},
		{"network asks", []string{"--policy", policies, "--", "curl https://example.com"}, 1,
			[]string{"Network          curl https://example.com", "Decision: Ask by ToolPolicy/team/ask-network"}, ""},
		{"a build asks in Edit mode", []string{"--policy", policies, "--", "make"}, 1, []string{"Decision: Ask by ModeDefault/Edit"}, ""},
		{"the same build is allowed in Auto mode", []string{"--policy", policies, "--mode", "Auto", "--", "make"}, 0, []string{"Decision: Allow by ModeDefault/Auto", "Walls: none (the task's sandbox applies as it is)"}, ""},
		{"a push hidden in a compound command is denied by the cluster policy", []string{"--policy", policies, "--", "npm test && git push origin main"}, 2,
			[]string{"Decision: Deny by ClusterToolPolicy/baseline/deny-push", "ToolPolicy/team/allow-tests"}, ""},
		{"ReadOnly mode denies a test run whatever the rule says", []string{"--policy", policies, "--mode", "ReadOnly", "--", "npm", "test"}, 2,
			[]string{"ReadOnly mode never runs writes"}, ""},
		{"a DryRun rule matches without deciding", []string{"--policy", policies, "--", "rm", "-rf", "build"}, 1,
			[]string{"ToolPolicy/team/watch-deletes (Deny, DryRun): did not decide", "Decision: Ask by ModeDefault/Edit"}, ""},
		{"an intent file is decided", []string{"--policy", policies, "--intent", "testdata/intent-push.yaml"}, 2,
			[]string{"Decision: Deny by ClusterToolPolicy/baseline/deny-push"}, ""},
		{"without a call only the policies are checked", []string{"--policy", policies}, 0,
			[]string{"Examples: 6 checked, 0 failed"}, ""},
		{"failing examples are all listed and the policy is exit 3", []string{"--policy", "testdata/policies-broken.yaml", "--", "ls"}, 3,
			[]string{`FAIL ToolPolicy/wrong-examples/deny-curl: match "wget https://example.com"`, `ok   ToolPolicy/wrong-examples/deny-curl: match "curl https://example.com"`, `FAIL ToolPolicy/wrong-examples/deny-curl: notMatch "curl -s https://example.com"`},
			`error: ToolPolicy/wrong-examples does not compile: rule "deny-curl": example "wget https://example.com" should match but does not`},
		{"a missing policy file is exit 3", []string{"--policy", "testdata/nope.yaml", "--", "ls"}, 3, nil, "no such file"},
		{"a misspelt field is exit 3", []string{"--policy", "testdata/intent-push.yaml", "--", "ls"}, 3, nil, `document 1 is a "ToolIntent"`},
		{"an unknown mode is exit 4", []string{"--policy", policies, "--mode", "Yolo", "--", "ls"}, 4, nil, `--mode "Yolo" is not one of ReadOnly, Edit, Auto`},
		{"an unknown flag is exit 4", []string{"--policy", policies, "--frobnicate"}, 4, nil, "unknown flag: --frobnicate"},
		{"an invalid intent is exit 4", []string{"--policy", policies, "--intent", "testdata/policies.yaml"}, 4, nil, "is not a ToolIntent"},
		{"a Redirect is exit 5 and shows its instruction", []string{"--policy", "testdata/policies-gate.yaml", "--", "rm -rf build"}, 5,
			[]string{"Decision: Redirect by ToolPolicy/gate/plan-rm: a delete needs a plan", "Instruction to the model: List what would be deleted"}, ""},
		{"a Stop is exit 6", []string{"--policy", "testdata/policies-gate.yaml", "--", "ls && nc attacker.example 80"}, 6,
			[]string{"Decision: Stop by ToolPolicy/gate/stop-nc: raw sockets end the task"}, ""},
		{"a result's ConfigMap values are redacted (a Secret's are masked before any rule reads them)", []string{"--policy", "testdata/policies-results.yaml", "--result", "testdata/output-secret.txt", "--", "kubectl get secret db -o yaml"}, 0,
			[]string{"Decision: Allow by ToolPolicy/results/allow-kubectl-get", "Result rules: Redact", "2 matches redacted by rule ToolPolicy/results/secret-data", "  | [exit code: 0]", "  |   host: [REDACTED]", "  |   username: [REDACTED]"}, ""},
		{"a result with an injection is replaced: exit 5", []string{"--policy", "testdata/policies-results.yaml", "--result", "testdata/output-injection.txt", "--exit-code", "3", "--", "cat README"}, 5,
			[]string{"Result rules: Replace by ToolPolicy/results/injection", "output replaced by rule ToolPolicy/results/injection", "also matched: ToolPolicy/results/shadow-stop (Stop, DryRun)",
				"instruction to the model: The output of your last call was withheld.", "  | [exit code: 3]", "  | [output withheld]"}, ""},
		{"--result needs a call", []string{"--policy", "testdata/policies-results.yaml", "--result", "testdata/output-injection.txt"}, 4, nil, "--result FILE is the output of a call"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t.Context(), "", append([]string{"policy", "check"}, tt.args...)...)
			if code != tt.wantCode {
				t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, out, errOut)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			// A result's exit code is that of a call that ran.
			if tt.wantCode > checkDeny && tt.wantCode != checkBrokenPolicy && tt.wantCode != checkError && !slices.Contains(tt.args, "--result") && strings.Contains(out, "Walls:") {
				t.Errorf("a call that never runs shows walls:\n%s", out)
			}
			if !strings.Contains(errOut, tt.wantErr) || (tt.wantErr == "" && errOut != "") {
				t.Errorf("stderr is %q; want it to hold %q", errOut, tt.wantErr)
			}
		})
	}
}

func TestPolicyCheckOutput(t *testing.T) {
	code, out, _ := run(t.Context(), "", "policy", "check", "--policy", "testdata/policies.yaml", "--", "npm test && git push origin main | tee log")
	if code != checkDeny {
		t.Fatalf("exit code %d; want %d", code, checkDeny)
	}
	golden(t, "policy-check.txt", []byte(out))

	code, out, _ = run(t.Context(), "", "policy", "check", "-o", "json", "--policy", "testdata/policies.yaml", "--", "curl", "-H", "Authorization: Bearer abcdef123456", "https://example.com")
	if code != checkAsk {
		t.Fatalf("exit code %d; want %d", code, checkAsk)
	}
	golden(t, "policy-check.json", []byte(out))
	if strings.Contains(out, "abcdef123456") {
		t.Errorf("the check shows the bearer token:\n%s", out)
	}
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		words []string
		want  string
	}{
		{[]string{"make && git push"}, "make && git push"},
		{[]string{"echo", "a b", "$HOME"}, `echo 'a b' '$HOME'`},
		{[]string{"git", "push"}, "git push"},
	}
	for _, tt := range tests {
		got, err := commandLine(tt.words)
		if err != nil || got != tt.want {
			t.Errorf("commandLine(%q) = %q, %v; want %q", tt.words, got, err, tt.want)
		}
	}
}
