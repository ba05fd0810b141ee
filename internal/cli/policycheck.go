package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"mvdan.cc/sh/v3/syntax"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/policyset"
	"github.com/toolgate/toolgate/internal/tools"
)

// Exit codes of policy check, so that it gates CI on a policy repository.
const (
	checkAllow = 0
	checkAsk   = 1
	checkDeny  = 2
	// checkBrokenPolicy: the policy file does not parse or a policy does not compile
	// (including a failing example).
	checkBrokenPolicy = 3
	// checkError: anything else went wrong (the intent file, the flags).
	checkError = 4
	// checkRedirect and checkStop come after the codes that existed before them, so
	// that scripts reading those keep working.
	checkRedirect = 5
	checkStop     = 6
)

// PolicyCheck is what `policy check -o json` prints.
type PolicyCheck struct {
	// Policies checked, as Kind/name.
	Policies []string `json:"policies"`
	// Examples are the results of every rule's examples.
	Examples []ExampleResult `json:"examples"`
	// Call is the decided call; absent when only the policies were checked.
	Call *CheckedCall `json:"call,omitempty"`
	// Result is what the result rules do with the call's output (--result FILE).
	Result *CheckedResult `json:"result,omitempty"`
}

// ExampleResult is one example of one rule.
type ExampleResult struct {
	// PolicyRuleRef names the rule whose example it is.
	PolicyRuleRef v1.PolicyRuleReference `json:"policyRuleRef"`
	// Command is the example bash command.
	Command string `json:"command"`
	// Want is "match" or "notMatch".
	Want   string `json:"want"`
	Passed bool   `json:"passed"`
}

// CheckedCall is one call decided against the policies.
type CheckedCall struct {
	Mode v1.TaskMode `json:"mode"`
	Tool v1.ToolName `json:"tool"`
	// Input is the normalized input, secrets masked.
	Input string `json:"input"`
	// Matched lists every rule that matched, the deciding one first.
	Matched []MatchedRule `json:"matched"`
	// Decision is the full decision, as the controller would record it.
	Decision v1.Decision `json:"decision"`
}

// MatchedRule is a rule that matched the call.
type MatchedRule struct {
	PolicyRuleRef v1.PolicyRuleReference `json:"policyRuleRef"`
	Action        v1.RuleAction          `json:"action"`
	Enforcement   v1.Enforcement         `json:"enforcement,omitempty"`
	// Decided is true for the rule that decided.
	Decided bool `json:"decided"`
	// Limited says why a Redirect rule that matched did not act (its maxFires or
	// cooldown).
	Limited string `json:"limited,omitempty"`
}

// CheckExamples runs every example of every rule and reports each one, passing or
// not. Compile stops at the first failing example; this lists them all, so a policy
// author sees every broken example at once. An example matches exactly when the
// decision engine, deciding that bash command in Edit mode against the rule alone,
// records the rule (as the decider or as a non-acting hit). A rule that does not
// compile on its own has no example results; its compile error is reported anyway.
func CheckExamples(docs []policyDoc) []ExampleResult {
	out := []ExampleResult{}
	for _, d := range docs {
		for _, r := range d.spec.Rules {
			if len(r.Examples.Match)+len(r.Examples.NotMatch) == 0 {
				continue
			}
			bare := r
			bare.Examples = v1.RuleExamples{}
			p, err := policy.Compile(d.kind, d.name, d.generation, v1.ToolPolicySpec{Rules: []v1.PolicyRule{bare}})
			if err != nil {
				continue
			}
			check := func(command, want string, shouldMatch bool) {
				matched := ruleMatches(p, r.Name, command)
				out = append(out, ExampleResult{PolicyRuleRef: p.RuleRef(r.Name), Command: command, Want: want, Passed: matched == shouldMatch})
			}
			for _, ex := range r.Examples.Match {
				check(ex, "match", true)
			}
			for _, ex := range r.Examples.NotMatch {
				check(ex, "notMatch", false)
			}
		}
	}
	return out
}

// ruleMatches decides a bash command against one compiled policy and says whether
// the named rule matched.
func ruleMatches(p *policy.CompiledPolicy, rule, command string) bool {
	input, _ := json.Marshal(map[string]string{"command": command})
	req := policy.Request{Mode: v1.ModeEdit, Tool: v1.ToolBash, Input: input}
	var d v1.Decision
	if p.Cluster() {
		d = policy.Decide(req, []*policy.CompiledPolicy{p}, nil, nil)
	} else {
		d = policy.Decide(req, nil, []*policy.CompiledPolicy{p}, nil)
	}
	ref := p.RuleRef(rule)
	if d.PolicyRuleRef.SameRule(ref) {
		return true
	}
	for _, h := range d.NonActingHits {
		if h.PolicyRuleRef.SameRule(ref) {
			return true
		}
	}
	return false
}

// CheckCall decides one validated call against compiled policies.
func CheckCall(loaded policyset.Set, req policy.Request) CheckedCall {
	d := *maskedDecision(policy.Decide(req, loaded.Cluster, loaded.Namespaced, loaded.Broken))
	c := CheckedCall{Mode: req.Mode, Tool: req.Tool, Input: mask.Secrets(string(req.Input)), Decision: d, Matched: []MatchedRule{}}
	if !d.PolicyRuleRef.IsModeDefault() {
		c.Matched = append(c.Matched, MatchedRule{PolicyRuleRef: d.PolicyRuleRef, Action: v1.RuleAction(d.Action), Enforcement: v1.EnforcementEnforce, Decided: true})
	}
	for _, h := range d.NonActingHits {
		c.Matched = append(c.Matched, MatchedRule{PolicyRuleRef: h.PolicyRuleRef, Action: h.Action, Enforcement: h.Enforcement, Limited: h.Limited})
	}
	return c
}

// checkExitCode is the exit code for a decision.
func checkExitCode(a v1.DecisionAction) int {
	switch a {
	case v1.DecisionAllow:
		return checkAllow
	case v1.DecisionAsk:
		return checkAsk
	case v1.DecisionRedirect:
		return checkRedirect
	case v1.DecisionStop:
		return checkStop
	}
	return checkDeny
}

// RenderPolicyCheck writes the check as text.
func RenderPolicyCheck(w io.Writer, pc PolicyCheck) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Policies: %s\n", strings.Join(pc.Policies, ", "))
	failed := 0
	for _, e := range pc.Examples {
		if !e.Passed {
			failed++
		}
	}
	fmt.Fprintf(&b, "Examples: %d checked, %d failed\n", len(pc.Examples), failed)
	for _, e := range pc.Examples {
		result := "ok  "
		if !e.Passed {
			result = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s: %s %q\n", result, e.PolicyRuleRef, e.Want, e.Command)
	}
	if c := pc.Call; c != nil {
		d := c.Decision
		fmt.Fprintf(&b, "\nCall: %s %s (mode %s)\n", c.Tool, c.Input, c.Mode)
		b.WriteString("Parts:\n")
		for _, p := range d.Parts {
			if p.Reason != "" {
				fmt.Fprintf(&b, "  %-16s %s (%s)\n", p.Category, p.Command, p.Reason)
				continue
			}
			fmt.Fprintf(&b, "  %-16s %s\n", p.Category, p.Command)
		}
		fmt.Fprintf(&b, "Strictest category: %s (risk %s)\n", d.Category, d.Risk)
		if len(c.Matched) == 0 {
			b.WriteString("Matching rules: none\n")
		} else {
			b.WriteString("Matching rules:\n")
			for _, m := range c.Matched {
				role := "did not decide"
				if m.Decided {
					role = "decided"
				}
				if m.Limited != "" {
					role += " (limited: " + m.Limited + ")"
				}
				fmt.Fprintf(&b, "  %s (%s, %s): %s\n", m.PolicyRuleRef, m.Action, orDash(string(m.Enforcement)), role)
			}
		}
		fmt.Fprintf(&b, "Decision: %s by %s: %s\n", d.Action, d.PolicyRuleRef, d.Reason)
		if d.Instruction != "" {
			fmt.Fprintf(&b, "Instruction to the model: %s\n", d.Instruction)
		}
		// Where an allowed or asked call would run; any other never runs.
		if d.Action == v1.DecisionAllow || d.Action == v1.DecisionAsk {
			fmt.Fprintf(&b, "Walls: %s\n", wallsLine(d.Walls))
		}
	}
	if r := pc.Result; r != nil {
		b.WriteString("\n")
		renderCheckedResult(&b, *r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// commandLine turns the words after -- into one bash command: a single word is a
// whole command line (so `-- 'make && git push'` keeps its operators); several
// words are argv, each quoted for the shell.
func commandLine(words []string) (string, error) {
	if len(words) == 1 {
		return words[0], nil
	}
	quoted := make([]string, len(words))
	for i, w := range words {
		q, err := syntax.Quote(w, syntax.LangBash)
		if err != nil {
			return "", fmt.Errorf("argument %d (%q) cannot be quoted for bash: %w", i+1, w, err)
		}
		quoted[i] = q
	}
	return strings.Join(quoted, " "), nil
}

// readIntentFile reads a ToolIntent from YAML or JSON.
func readIntentFile(path string) (*v1.ToolIntent, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	in := &v1.ToolIntent{}
	if err := yaml.UnmarshalStrict(data, in); err != nil {
		return nil, fmt.Errorf("%s is not a ToolIntent: %w", path, err)
	}
	if in.Kind != "ToolIntent" {
		return nil, fmt.Errorf("%s holds a %q; want a ToolIntent", path, in.Kind)
	}
	return in, nil
}

func newPolicyCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with ToolPolicies offline",
	}
	cmd.AddCommand(newPolicyCheckCommand(o))
	return cmd
}

func newPolicyCheckCommand(o *Options) *cobra.Command {
	var (
		policyFile, intentFile, mode, output, resultFile string
		exitCode                                         int32
	)
	cmd := &cobra.Command{
		Use:   "check --policy FILE [--intent FILE | -- COMMAND...]",
		Short: "Decide a command or an intent against a policy file, offline",
		Long: `Compile the ToolPolicies and ClusterToolPolicies in FILE, run every rule's
examples, and decide a call against them as the controller would: each part of a
bash command with its category, the rules that match, and the decision.

The call is a bash command after -- (one argument is a whole command line; several
are argv words, quoted for the shell), or a ToolIntent in --intent FILE. Without a
call only the policies and their examples are checked. No cluster is contacted.

With --result FILE the call's output is FILE's text (with --exit-code, default
0), for example a recorded one (kubectl get execution NAME -o
jsonpath='{.status.output}'): the result rules (when: Result) are run on it as the controller runs them
before the model sees it, and the check shows what they do and what the model
would see.

Exit code: 0 Allow, 1 Ask, 2 Deny (0 when no call was given and the policies
compile); 3 when the file does not parse or a policy does not compile (a failing
example included); 4 for any other error (the intent file, the flags); 5 Redirect,
6 Stop. For a call allowed, the result's: 1 Ask, 5 Replace, 6 Stop (Redact and no
result rule 0).`,
		Example: `  kubectl toolgate policy check --policy policies.yaml -- git push origin main
  kubectl toolgate policy check --policy policies.yaml --mode Auto -- 'go test ./... && rm -rf /'
  kubectl toolgate policy check --policy policies.yaml --intent intent.yaml
  kubectl toolgate policy check --policy policies.yaml --result out.txt -- kubectl get secret db -o yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if policyFile == "" {
				return errors.New("--policy FILE is required")
			}
			if intentFile != "" && len(args) > 0 {
				return errors.New("give either --intent FILE or a command after --, not both")
			}
			taskMode := v1.TaskMode(mode)
			switch taskMode {
			case v1.ModeReadOnly, v1.ModeEdit, v1.ModeAuto:
			default:
				return fmt.Errorf("--mode %q is not one of ReadOnly, Edit, Auto", mode)
			}
			req, hasCall, err := checkRequest(taskMode, intentFile, args)
			if err != nil {
				return err
			}
			if resultFile != "" && !hasCall {
				return errors.New("--result FILE is the output of a call: give the call too (--intent FILE or a command after --)")
			}

			docs, err := readPolicyFile(policyFile)
			if err != nil {
				return &ExitError{Code: checkBrokenPolicy, Err: err}
			}
			pc := PolicyCheck{Examples: CheckExamples(docs)}
			for _, d := range docs {
				pc.Policies = append(pc.Policies, d.id())
			}
			loaded, compileErr := compilePolicies(docs)
			if compileErr == nil && hasCall {
				call := CheckCall(loaded, req)
				pc.Call = &call
				if resultFile != "" {
					output, err := os.ReadFile(resultFile)
					if err != nil {
						return err
					}
					r := checkResult(loaded, req, outputExecution(string(output), exitCode), time.Now())
					pc.Result = &r
				}
			}
			if output != outputText {
				err = printData(o.Streams.Out, output, pc)
			} else {
				err = RenderPolicyCheck(o.Streams.Out, pc)
			}
			if err != nil {
				return err
			}
			if compileErr != nil {
				return &ExitError{Code: checkBrokenPolicy, Err: compileErr}
			}
			if pc.Call == nil {
				return nil
			}
			if code := checkExitCode(pc.Call.Decision.Action); code != 0 {
				return &ExitError{Code: code}
			}
			if pc.Result != nil {
				if code := resultExitCode(pc.Result.Check); code != 0 {
					return &ExitError{Code: code}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policyFile, "policy", "", "YAML file with ToolPolicies and ClusterToolPolicies (several documents allowed)")
	cmd.Flags().StringVar(&intentFile, "intent", "", "Decide the ToolIntent in this YAML file instead of a command")
	cmd.Flags().StringVar(&mode, "mode", string(v1.ModeEdit), "Task mode the call is decided in: ReadOnly, Edit or Auto")
	cmd.Flags().StringVar(&resultFile, "result", "", "Check the result rules (when: Result) on this file's text as the call's output")
	cmd.Flags().Int32Var(&exitCode, "exit-code", 0, "With --result: the exit code the call's output came with")
	addOutputFlag(cmd, &output)
	return errorExitCode(cmd, checkError)
}

// checkRequest builds the call to decide from --intent or the command words; hasCall
// is false when neither was given.
func checkRequest(mode v1.TaskMode, intentFile string, words []string) (policy.Request, bool, error) {
	req := policy.Request{Mode: mode}
	var raw []byte
	switch {
	case intentFile != "":
		in, err := readIntentFile(intentFile)
		if err != nil {
			return req, false, err
		}
		req.Namespace, req.Task, req.Tool, raw = in.Namespace, in.Spec.TaskRef.Name, in.Spec.Tool, in.Spec.Input.Raw
	case len(words) > 0:
		command, err := commandLine(words)
		if err != nil {
			return req, false, err
		}
		req.Tool = v1.ToolBash
		raw, _ = json.Marshal(map[string]string{"command": command})
	default:
		return req, false, nil
	}
	normalized, errs := tools.Validate(req.Tool, raw)
	if len(errs) > 0 {
		return req, false, fmt.Errorf("the call is invalid, so it would never reach a decision:\n- %s", strings.Join(errs, "\n- "))
	}
	req.Input = normalized
	return req, true, nil
}
