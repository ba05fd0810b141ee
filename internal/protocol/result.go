package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

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

// TimeoutExitCode is the exit code of a tool killed at its timeout, as timeout(1) uses.
const TimeoutExitCode = 124

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

// Truncated reports whether output of totalBytes is cut when shown: the controller
// shows at most maxOutputBytes of the combined output (its head and tail, see
// OutputBudgets), so output is truncated exactly when it is longer than that. The
// log and the artifact are never cut.
func Truncated(totalBytes int64, maxOutputBytes int32) bool {
	return totalBytes > int64(maxOutputBytes)
}

// trimmedSuffix ends a message that was cut to fit the termination message.
const trimmedSuffix = " …[message trimmed]"

// EncodeResult returns r as compact JSON of at most MaxTerminationMessageBytes. When r
// does not fit, its Message is cut (at a UTF-8 boundary, with a notice) to the longest
// prefix that fits; if even an empty message does not fit, the optional texts are
// dropped. The result is always valid JSON.
func EncodeResult(r Result) []byte {
	if b := marshalResult(r); len(b) <= MaxTerminationMessageBytes {
		return b
	}
	msg := r.Message
	fits := func(n int) bool {
		r.Message = msg[:n] + trimmedSuffix
		return len(marshalResult(r)) <= MaxTerminationMessageBytes
	}
	if fits(0) {
		// Binary search for the longest prefix that fits: lo fits, hi does not.
		lo, hi := 0, len(msg)
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if fits(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		for lo > 0 && !utf8.RuneStart(msg[lo]) {
			lo--
		}
		r.Message = msg[:lo] + trimmedSuffix
		return marshalResult(r)
	}
	r.Message = trimmedSuffix
	r.ArtifactPath, r.ArtifactSkipped = "", ""
	if b := marshalResult(r); len(b) <= MaxTerminationMessageBytes {
		return b
	}
	// Unreachable with the fields Result has today; kept so the promise holds.
	return marshalResult(Result{ExitCode: r.ExitCode, ErrorKind: KindException, Message: "result too large for the termination message"})
}

func marshalResult(r Result) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// "<" and ">" are common in tool messages; escaping them would cost 6 bytes each.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		// Result has only strings, numbers and bools: Encode cannot fail.
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// DecodeResult parses a termination message written by the runner.
func DecodeResult(msg []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(msg, &r); err != nil {
		return Result{}, fmt.Errorf("runner result is not valid JSON: %w", err)
	}
	return r, nil
}
