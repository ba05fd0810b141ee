// Package protocol is what the controller and the runner inside a sandbox pod
// share: the Invocation the controller sends, the Result the runner reports, the
// runner's exit codes, and the pod's fixed paths, commands and environment
// variables that both sides name. Both sides import it; it imports no client,
// nothing of the controller and nothing of the runner's tools, so that the
// controller never links the code that runs inside the pod, and the runner never
// links the controller's. What only one side needs stays on that side.
//
// The contract of a call run as a Job:
//
//   - The Invocation arrives as JSON in the InvocationEnv environment variable.
//   - The tool's combined output (stdout and stderr interleaved as produced, like a
//     terminal with 2>&1) is written unmodified to the runner's stdout, which is the
//     container log, and to the runner's ArtifactDir/<executionName>/output.log in
//     the workspace when the workspace is writable and Walls.NoOutputCopy is not set. OutputSHA256 is the SHA-256 of
//     that whole stream, so the controller can tell whether the log it read is
//     complete. The runner prints nothing else on stdout.
//   - The Result is written as compact JSON to TerminationMessagePath, always valid
//     and at most MaxTerminationMessageBytes, even on timeout or panic.
//   - Before it writes the Result, the runner kills every other process of the
//     container (its Sweep), so nothing the tool started can write the termination
//     message after it; a process that cannot be killed makes the Result an
//     Exception. The Result is the last thing the runner writes.
//   - The runner's exit code says which Result it wrote (ProcessExitCode):
//     ExitSucceeded when the Result says the tool succeeded, ExitFailed when it says
//     the tool failed (the tool's own exit code is Result.ExitCode), ExitNoResult when
//     it could not write one. Any other exit code means the runner did not finish
//     (it was killed, or crashed), so whatever the termination message holds is not
//     its Result. The controller refuses a Result its exit code disagrees with.
//   - Truncated means StdoutBytes+StderrBytes > MaxOutputBytes: the controller shows
//     at most MaxOutputBytes of the log; the log and artifact are complete.
//   - The Result names the invocation the runner read (InvocationSHA256); the
//     controller refuses one that names another, or none.
//   - Every tool path is confined to the workspace; relative paths are relative to
//     the workspace root, absolute ones must lie inside it.
//   - Before the tool starts, the runner proves the call's walls (Invocation.Walls);
//     a call whose walls do not hold is an Exception and runs nothing.
//
// A call delivered to a session pod follows the contract of sessioncall.go.
package protocol
