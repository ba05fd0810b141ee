package policy

import (
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// celExpressions read intent in every way an expression can: by field, by has(), by
// index, whole, through macros, and through a comprehension variable named intent.
var celExpressions = []struct {
	expr string
	want celFields
}{
	{`intent.tool == "bash"`, celTool},
	{`has(intent.input.timeoutMs) && intent.input.timeoutMs > 600000`, celInput},
	{`intent.input.missing == "x"`, celInput},
	{`"Delete" in intent.categories && intent.parts.exists(p, p.command.startsWith("rm"))`, celCategories | celParts},
	{`intent.argv.exists(a, a[0] == "make") && intent.task == "t"`, celArgv | celTask},
	{`intent.namespace == "ns" && intent.mode == "Edit"`, celNamespace | celMode},
	{`has(intent.parts)`, celParts},
	{`intent.nosuchfield == 1`, 0},
	{`true`, 0},
	{`intent["parts"].size() > 1`, celAllFields},
	{`size(intent) == 8`, celAllFields},
	{`intent.exists(k, k == "argv")`, celAllFields},
	{`intent.all(k, intent[k] != null)`, celAllFields},
	{`intent == {}`, celAllFields},
	{`intent.tool == "bash" && "argv" in intent`, celAllFields},
	{`[1].exists(intent, intent == 1)`, celAllFields},
}

func TestFieldsRead(t *testing.T) {
	for _, tt := range celExpressions {
		_, got, err := compileCEL(testCELEnvironment(t).toolCall, tt.expr)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		if got != tt.want {
			t.Errorf("%s: fields %08b, want %08b", tt.expr, got, tt.want)
		}
	}
}

// TestActivationOfFieldsReadEvaluatesAsAll: an expression evaluated with only the
// fields it reads, built in any order after other expressions' fields, gives what it
// gives with every field.
func TestActivationOfFieldsReadEvaluatesAsAll(t *testing.T) {
	requests := []Request{
		bashCall(v1alpha1.ModeEdit, "ls; rm -r x && make test"),
		bashCall(v1alpha1.ModeAuto, benchCommands["twenty"]),
		bashCall(v1alpha1.ModeReadOnly, ""),
		{Namespace: "ns", Task: "t", Mode: v1alpha1.ModeEdit, Tool: v1alpha1.ToolReadFile, Input: json.RawMessage(`{"path":"a/b"}`)},
		{Namespace: "ns", Task: "t", Mode: v1alpha1.ModeEdit, Tool: v1alpha1.ToolBash, Input: json.RawMessage(`{"command":"ls","timeoutMs":700000}`)},
	}
	type outcome struct {
		ok     bool
		failed bool
	}
	for _, req := range requests {
		all := analyze(req)
		lazy := analyze(req)
		for _, order := range [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {15, 7, 3, 0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14}} {
			for _, i := range order {
				e := celExpressions[i]
				prg, fields, err := compileCEL(testCELEnvironment(t).toolCall, e.expr)
				if err != nil {
					t.Fatal(err)
				}
				fresh := analyze(req)
				want := func() outcome { ok, err := evalCEL(prg, all.activation(celAllFields)); return outcome{ok, err != nil} }()
				for _, f := range []*facts{lazy, fresh} {
					ok, err := evalCEL(prg, f.activation(fields))
					if got := (outcome{ok, err != nil}); got != want {
						t.Errorf("%s on %s: %+v with the fields it reads, %+v with all", e.expr, req.Input, got, want)
					}
				}
			}
		}
	}
}
