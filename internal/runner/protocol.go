// Package runner runs one tool invocation inside an Execution's container and reports
// the result. This file is the contract between the controller and the runner:
//
//   - The Invocation arrives as JSON in the InvocationEnv environment variable.
//   - The tool's combined output (stdout and stderr interleaved as produced, like a
//     terminal with 2>&1) is written unmodified to the runner's stdout, which is the
//     container log, and to ArtifactDir/<executionName>/output.log in the workspace when
//     the workspace is writable. OutputSHA256 is the SHA-256 of that whole stream, so
//     the controller can tell whether the log it read is complete. The runner prints
//     nothing else on stdout.
//   - The Result is written as compact JSON to TerminationMessagePath, always valid
//     and at most MaxTerminationMessageBytes, even on timeout or panic.
//   - Before it writes the Result, the runner kills every other process of the
//     container (Sweep), so nothing the tool started can write the termination
//     message after it; a process that cannot be killed makes the Result an
//     Exception. The Result is the last thing the runner writes.
//   - The runner's exit code says which Result it wrote (ProcessExitCode):
//     ExitSucceeded when the Result says the tool succeeded, ExitFailed when it says
//     the tool failed (the tool's own exit code is Result.ExitCode), ExitNoResult when
//     it could not write one. Any other exit code means the runner did not finish
//     (it was killed, or crashed), so whatever the termination message holds is not
//     its Result. The controller refuses a Result its exit code disagrees with.
//   - Truncated means StdoutBytes+StderrBytes > MaxOutputBytes: the controller shows
//     at most MaxOutputBytes of the log (HeadTail); the log and artifact are complete.
//   - The Result names the invocation the runner read (InvocationSHA256); the
//     controller refuses one that names another, or none.
//   - Every tool path is confined to the workspace (see Workspace); relative paths are
//     relative to the workspace root, absolute ones must lie inside it.
//   - Before the tool starts, the runner proves the call's walls (Invocation.Walls,
//     walls.go); a call whose walls do not hold is an Exception and runs nothing.

package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Fixed locations inside the Execution's pod.
const (
	// ArtifactDir is the folder (relative to the workspace) that keeps each
	// execution's full output; it holds a .gitignore that ignores everything.
	ArtifactDir = ".toolgate/executions"
	// TerminationMessagePath is where the compact JSON result is written.
	TerminationMessagePath = "/dev/termination-log"
	// MaxTerminationMessageBytes is the kubelet's limit for the termination message.
	MaxTerminationMessageBytes = 4096
	// BaselineAbsent as Invocation.BaselineSHA256 makes write_file create the file
	// only: an existing file is Stale, because the task never read it.
	BaselineAbsent = "absent"
	// InvocationEnv names the environment variable that carries the Invocation JSON.
	InvocationEnv = "TOOLGATE_INVOCATION"
)

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
	// MaxOutputBytes caps the combined output the controller shows (see HeadTail);
	// longer output is flagged Truncated but still logged and kept in full.
	MaxOutputBytes int32 `json:"maxOutputBytes"`
	// BaselineSHA256 is the content hash an edit is checked against.
	BaselineSHA256 string `json:"baselineSHA256,omitempty"`
	// Env is set for bash, on top of a minimal PATH/HOME.
	Env map[string]string `json:"env,omitempty"`
	// Background makes a session call a background job (see session.go): `runner
	// exec` reports it started at once and streams its output as it comes.
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
}

// Process identifies one process of a session: its pid and its start time (field
// 22 of /proc/PID/stat, clock ticks since boot), so that a pid reused by another
// process is not taken for it.
type Process struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Exit codes of the runner process. They are fixed, not the tool's exit code, so that
// a runner killed by a signal (128+n) or crashed (the Go runtime exits 2) can never be
// taken for a runner that wrote its Result.
const (
	// ExitSucceeded: the Result was written and says the tool succeeded.
	ExitSucceeded = 0
	// ExitNoResult: the runner could not write its Result.
	ExitNoResult = 1
	// ExitFailed: the Result was written and says the tool failed.
	ExitFailed = 3
)

// Succeeded reports whether r says the tool succeeded.
func (r Result) Succeeded() bool { return r.ErrorKind == "" && r.ExitCode == 0 }

// ProcessExitCode is the runner's exit code once it has written r.
func ProcessExitCode(r Result) int {
	if r.Succeeded() {
		return ExitSucceeded
	}
	return ExitFailed
}

// Error kinds reported by the runner.
const (
	KindExitCode  = "ExitCode"
	KindTimeout   = "Timeout"
	KindStale     = "Stale"
	KindException = "Exception"
)

// Result is the compact JSON written to the termination message. It always fits in
// MaxTerminationMessageBytes and is always valid JSON.
type Result struct {
	ExitCode   int    `json:"exitCode"`
	ErrorKind  string `json:"errorKind,omitempty"`
	Message    string `json:"message,omitempty"`
	DurationMs int64  `json:"durationMs"`
	// WallCheckMs is how long proving the call's walls took (part of DurationMs).
	WallCheckMs   int64  `json:"wallCheckMs,omitempty"`
	StdoutBytes   int64  `json:"stdoutBytes"`
	StderrBytes   int64  `json:"stderrBytes"`
	Truncated     bool   `json:"truncated,omitempty"`
	OutputSHA256  string `json:"outputSHA256,omitempty"`
	ArtifactPath  string `json:"artifactPath,omitempty"`
	ContentSHA256 string `json:"contentSHA256,omitempty"`
	LinesAdded    int    `json:"linesAdded,omitempty"`
	LinesRemoved  int    `json:"linesRemoved,omitempty"`
	Binary        bool   `json:"binary,omitempty"`
	Matches       int    `json:"matches,omitempty"`
	UID           int    `json:"uid"`
	ReadOnlyRoot  bool   `json:"readOnlyRoot"`
	// Unclean is true when the runner could not make sure the call's processes are
	// gone (its sweep failed, or it could not shield itself): what the call left may
	// still run. A session that ran such a call is replaced.
	Unclean bool `json:"unclean,omitempty"`
	// ResultsCapped is true when glob, grep or list_dir stopped at its result cap;
	// the output says so too.
	ResultsCapped bool `json:"resultsCapped,omitempty"`
	// ArtifactSkipped says why the full output was not copied into the workspace
	// (for example a read-only workspace); the container log still has all of it.
	ArtifactSkipped string `json:"artifactSkipped,omitempty"`
	// InvocationSHA256 is HashInvocation of the invocation exactly as the runner read
	// it: the value of InvocationEnv in a Job, the first line of stdin (without its
	// newline) for `runner exec`; empty when it read none. The controller refuses a
	// Result whose hash is not that of the invocation it sent: the call's input was
	// changed on its way to the runner, or the runner is older than the controller.
	InvocationSHA256 string `json:"invocationSHA256,omitempty"`
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
