package policy

import (
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// TestDecideFingerprintIsFingerprint: Decide fingerprints the input it decoded once
// for the rules; the result is Fingerprint's of the raw input, byte for byte, for
// inputs that are canonical, reordered, not objects, not JSON, or followed by more.
func TestDecideFingerprintIsFingerprint(t *testing.T) {
	inputs := []string{
		`{"command":"ls"}`,
		` { "timeoutMs": 5, "command": "ls <a> & \u00e9" } `,
		`{"command":"git push","timeoutMs":1e3,"n":12345678901234567890,"x":[1,{"b":null,"a":true}]}`,
		`{"path":"/workspace/a/../b"}`,
		`null`, `[1,2]`, `"ls"`, `42`, ``, `{"command":`, `{"command":"ls"} {"command":"rm"}`, `{"command":"ls"} x`,
	}
	for _, tool := range []v1alpha1.ToolName{v1alpha1.ToolBash, v1alpha1.ToolReadFile, v1alpha1.ToolGlob} {
		for _, mode := range []v1alpha1.TaskMode{v1alpha1.ModeReadOnly, v1alpha1.ModeAuto} {
			for _, in := range inputs {
				req := Request{Namespace: "ns", Task: "t", Mode: mode, Tool: tool, Input: json.RawMessage(in)}
				d := Decide(req, nil, nil, nil)
				want := Fingerprint(req.Namespace, req.Task, req.Tool, req.Input, d.PolicyRuleRef, d.Walls)
				if d.Fingerprint != want {
					t.Errorf("%s %s %q: fingerprint %s, Fingerprint gives %s", tool, mode, in, d.Fingerprint, want)
				}
			}
		}
	}
}
