package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// BaselineAbsent as Invocation.BaselineSHA256 makes write_file create the file
// only: an existing file is Stale, because the task never read it.
const BaselineAbsent = "absent"

// Invocation is what the runner is asked to do.
type Invocation struct {
	// ExecutionName names the Execution; the artifact folder is named after it.
	ExecutionName string `json:"executionName"`
	// Tool to run.
	Tool string `json:"tool"`
	// Input is the validated, normalized input of the tool.
	Input json.RawMessage `json:"input"`
	// Workdir is relative to the workspace root.
	Workdir string `json:"workdir,omitempty"`
	// TimeoutSeconds after which the tool's process group is killed.
	TimeoutSeconds int32 `json:"timeoutSeconds"`
	// MaxOutputBytes caps the combined output the controller shows (its head and
	// tail, see OutputBudgets); longer output is flagged Truncated but still logged
	// and kept in full.
	MaxOutputBytes int32 `json:"maxOutputBytes"`
	// BaselineSHA256 is the content hash an edit is checked against.
	BaselineSHA256 string `json:"baselineSHA256,omitempty"`
	// Env is set for bash, on top of a minimal PATH/HOME.
	Env map[string]string `json:"env,omitempty"`
	// Background makes a session call a background job (see sessioncall.go):
	// `runner exec` reports it started at once and streams its output as it comes.
	Background bool `json:"background,omitempty"`
	// Walls are what the call's sandbox holds it to; the runner proves them before
	// the tool starts. Absent, they are the strictest network wall (no network, the
	// API's default) and a writable workspace.
	Walls Walls `json:"walls"`
}

// Walls are what must hold around a call, from the same sandbox spec that its pod's
// NetworkPolicy and workspace mount are built from.
type Walls struct {
	// Network is the egress the call's NetworkPolicy allows (mode None when empty).
	Network v1alpha1.NetworkSpec `json:"network"`
	// ReadOnlyWorkspace says the workspace is mounted read-only.
	ReadOnlyWorkspace bool `json:"readOnlyWorkspace,omitempty"`
	// NoOutputCopy says the full output must not be copied into the workspace (a
	// Result rule may act on it; see v1alpha1.SandboxWalls).
	NoOutputCopy bool `json:"noOutputCopy,omitempty"`
}

// HashInvocation is the hex SHA-256 of an invocation's bytes, as a Result carries
// it (Result.InvocationSHA256); "" for none.
func HashInvocation(invocation []byte) string {
	if len(invocation) == 0 {
		return ""
	}
	sum := sha256.Sum256(invocation)
	return hex.EncodeToString(sum[:])
}
