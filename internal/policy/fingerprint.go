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
	Generation int64           `json:"generation"`
	Input      json.RawMessage `json:"input"`
	Namespace  string          `json:"namespace"`
	Policy     string          `json:"policy"`
	Rule       string          `json:"rule"`
	Task       string          `json:"task"`
	Tool       string          `json:"tool"`
}

// Fingerprint is the hex SHA-256 of the canonical JSON object
//
//	{"generation":G,"input":INPUT,"namespace":NS,"policy":P,"rule":R,"task":T,"tool":TOOL}
//
// with keys sorted, no whitespace, no HTML escaping, and INPUT re-encoded as
// canonical JSON (so whitespace and key order of the input do not matter; input that
// is not JSON is included as a JSON string). An Approval is bound to it: a changed
// input, rule or policy generation is a different fingerprint.
func Fingerprint(namespace, task string, tool v1alpha1.ToolName, normalizedInput []byte, policy, rule string, generation int64) string {
	fields := fingerprintFields{
		Generation: generation,
		Input:      canonicalInput(normalizedInput),
		Namespace:  namespace,
		Policy:     policy,
		Rule:       rule,
		Task:       task,
		Tool:       string(tool),
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		// Only strings, an int and canonical JSON are encoded: this cannot fail.
		panic(err)
	}
	sum := sha256.Sum256(bytes.TrimRight(buf.Bytes(), "\n"))
	return hex.EncodeToString(sum[:])
}

func canonicalInput(raw []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err == nil && !dec.More() {
		if out, err := tools.Canonical(v); err == nil {
			return out
		}
	}
	quoted, _ := json.Marshal(string(raw))
	return quoted
}
