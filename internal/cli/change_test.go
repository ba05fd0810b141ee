package cli

import (
	"strings"
	"testing"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestFileChange(t *testing.T) {
	tests := []struct {
		name        string
		tool        v1.ToolName
		input       string
		wantSummary string
		wantDiff    []string
		wantErr     string
	}{
		{name: "an edit is the text it replaces", tool: v1.ToolEditFile, input: `{"path":"src/sum.js","oldText":"return a - b;\n","newText":"return a + b;\n"}`,
			wantSummary: "edit_file replaces the one occurrence of this text in src/sum.js", wantDiff: []string{"--- a/src/sum.js", "-return a - b;", "+return a + b;"}},
		{name: "a write is the whole file", tool: v1.ToolWriteFile, input: `{"path":"NOTES.md","content":"one\ntwo\n"}`,
			wantSummary: "write_file writes the whole of NOTES.md", wantDiff: []string{"+one", "+two"}},
		{name: "secrets are masked", tool: v1.ToolWriteFile, input: `{"path":".env","content":"API_TOKEN=hunter2hunter2\n"}`,
			wantDiff: []string{"+API_TOKEN="}},
		{name: "control characters are escaped", tool: v1.ToolWriteFile, input: `{"path":"a\u001b[2Jb","content":"x\u001b[31my\n"}`,
			wantSummary: `a\x1b[2Jb`, wantDiff: []string{`+x\x1b[31my`}},
		{name: "a broken input says so", tool: v1.ToolEditFile, input: `{"path":`, wantErr: "the input is not an edit_file input"},
		{name: "another tool changes no file it names", tool: v1.ToolBash, input: `{"command":"make"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			summary, diff, err := fileChange(tt.tool, []byte(tt.input))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v; want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(summary, tt.wantSummary) {
				t.Errorf("summary %q lacks %q", summary, tt.wantSummary)
			}
			for _, want := range tt.wantDiff {
				if !strings.Contains(diff, want) {
					t.Errorf("diff lacks %q:\n%s", want, diff)
				}
			}
			if strings.Contains(diff, "hunter2") || strings.ContainsRune(diff, 0x1b) || strings.ContainsRune(summary, 0x1b) {
				t.Errorf("a secret or a control character got through:\n%s%s", summary, diff)
			}
			if tt.tool == v1.ToolBash && summary+diff != "" {
				t.Errorf("bash shows a change: %q", summary+diff)
			}
		})
	}
}

// TestApproveShowsTheEditAsADiff: approve prints an edit_file's change as a diff,
// read from the intent's whole input, before it asks.
func TestApproveShowsTheEditAsADiff(t *testing.T) {
	ns := testNamespace(t)
	recordEditToApprove(t, ns, agentUser)
	code, out, errOut := kubectl(t, bob, ns, "n\n", "approve", "fix-tests-edit")
	if code != 1 || !strings.Contains(errOut, "not confirmed") {
		t.Fatalf("approve answered n: exit %d: %s", code, errOut)
	}
	diff := "edit_file replaces the one occurrence of this text in src/sum.js (line numbers count from the text replaced, not from the top of the file):\n--- a/src/sum.js\n+++ b/src/sum.js\n@@ -1,3 +1,3 @@\n export function sum(a, b) {\n-  return a - b;\n+  return a + b;\n }\n"
	if !strings.Contains(out, diff) || strings.Index(out, diff) > strings.Index(out, "Approve this call as bob?") {
		t.Fatalf("approve does not show the edit as a diff before it asks:\n%s", out)
	}
}
