package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/tools"
)

// fingerprintFields is what a fingerprint covers. Its fields are declared in
// alphabetical order of their JSON names, so encoding/json writes canonical JSON.
type fingerprintFields struct {
	Generation int64             `json:"generation"`
	Input      json.RawMessage   `json:"input"`
	Namespace  string            `json:"namespace"`
	Policy     string            `json:"policy"`
	Rule       string            `json:"rule"`
	Sandbox    json.RawMessage   `json:"sandbox,omitempty"`
	Task       string            `json:"task"`
	Tool       string            `json:"tool"`
	Walls      *fingerprintWalls `json:"walls,omitempty"`
}

// fingerprintWalls are the walls as fingerprinted, also in alphabetical order. The
// walls' reason is words for people and is left out: rewording it must not refuse an
// approval given for the same walls.
type fingerprintWalls struct {
	NoNetwork         bool `json:"noNetwork"`
	ReadOnlyWorkspace bool `json:"readOnlyWorkspace"`
}

// Fingerprint is the hex SHA-256 of the canonical JSON object
//
//	{"generation":G,"input":INPUT,"namespace":NS,"policy":P,"rule":R,"sandbox":SANDBOX,
//	 "task":T,"tool":TOOL,"walls":{"noNetwork":N,"readOnlyWorkspace":RO}}
//
// with keys sorted, no whitespace, no HTML escaping, and INPUT re-encoded as
// canonical JSON (so whitespace and key order of the input do not matter; input that
// is not JSON is included as a JSON string). The "walls" key is there only when a
// wall is up: a call without walls has the fingerprint it had before walls existed.
// The "sandbox" key is there only when a sandbox is given (FingerprintWithSandbox):
// policy.Decide is pure and knows no task's sandbox, so the pipeline fingerprints the
// decision again with the sandbox it records.
//
// An Approval is bound to it: a changed input, rule, policy generation, walls or
// sandbox is a different fingerprint, so an approval given for a call that runs
// behind walls, in one image with one egress on one workspace of one task (by UID),
// never runs the call anywhere else.
//
// P, R and G come from the decision's policyRuleRef: P is the policy as Kind/name, R
// the rule and G the generation; for a ModeDefault reference, P is "" and R is
// "mode-default", the fields a mode default was fingerprinted with before the
// reference was typed, so that its fingerprint covers what it did (not the mode).
func Fingerprint(namespace, task string, tool v1alpha1.ToolName, normalizedInput []byte, ref v1alpha1.PolicyRuleReference, walls *v1alpha1.SandboxWalls) string {
	return FingerprintWithSandbox(namespace, task, tool, normalizedInput, ref, walls, nil)
}

// FingerprintWithSandbox is Fingerprint covering also the sandbox the call was
// decided to run in. SANDBOX is the DecidedSandbox's JSON re-encoded canonically
// (keys sorted at every level, resource quantities in their canonical string form),
// so the same sandbox always hashes the same whatever order it was built in.
func FingerprintWithSandbox(namespace, task string, tool v1alpha1.ToolName, normalizedInput []byte, ref v1alpha1.PolicyRuleReference, walls *v1alpha1.SandboxWalls, sandbox *v1alpha1.DecidedSandbox) string {
	return fingerprint(namespace, task, tool, canonicalInput(normalizedInput), ref, walls, sandbox)
}

// modeDefaultRule is the rule a ModeDefault reference is fingerprinted as.
const modeDefaultRule = "mode-default"

// fingerprint is FingerprintWithSandbox of an input already made canonical by
// canonicalInput or canonicalDecoded.
func fingerprint(namespace, task string, tool v1alpha1.ToolName, input json.RawMessage, ref v1alpha1.PolicyRuleReference, walls *v1alpha1.SandboxWalls, sandbox *v1alpha1.DecidedSandbox) string {
	fields := fingerprintFields{
		Generation: ref.Generation,
		Input:      input,
		Namespace:  namespace,
		Policy:     ref.Policy(),
		Rule:       ref.Rule,
		Task:       task,
		Tool:       string(tool),
	}
	if ref.IsModeDefault() {
		fields.Generation, fields.Rule = 0, modeDefaultRule
	}
	if walls != nil && (walls.NoNetwork || walls.ReadOnlyWorkspace) {
		fields.Walls = &fingerprintWalls{NoNetwork: walls.NoNetwork, ReadOnlyWorkspace: walls.ReadOnlyWorkspace}
	}
	if sandbox != nil {
		raw, err := json.Marshal(sandbox)
		if err != nil {
			// Strings, integers, bools and quantities: this cannot fail.
			panic(err)
		}
		fields.Sandbox = canonicalInput(raw)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		// Only strings, an int, bools and canonical JSON are encoded: this cannot fail.
		panic(err)
	}
	sum := sha256.Sum256(bytes.TrimRight(buf.Bytes(), "\n"))
	return hex.EncodeToString(sum[:])
}

func canonicalInput(raw []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return canonicalDecoded(raw, v, err == nil && !dec.More())
}

// canonicalDecoded is canonicalInput of raw given what it decodes to: v, when ok
// says raw decoded (with UseNumber) as exactly one JSON value.
func canonicalDecoded(raw []byte, v any, ok bool) json.RawMessage {
	if ok {
		if out, err := tools.Canonical(v); err == nil {
			return out
		}
	}
	quoted, _ := json.Marshal(string(raw))
	return quoted
}
