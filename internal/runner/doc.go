// Package runner runs one tool invocation inside an Execution's container and reports
// the result. What it shares with the controller (the Invocation, the Result, the
// exit codes, the pod's paths and variables) is package protocol, whose doc is the
// contract between them; this package is the runner's side of it, which the
// controller never links:
//
//   - The tool's combined output goes to the runner's stdout and, when the workspace
//     is writable and the walls do not say NoOutputCopy, to
//     ArtifactDir/<executionName>/output.log (output.go).
//   - Before it writes the Result, the runner kills every other process of the
//     container (Sweep).
//   - Every tool path is confined to the workspace (see Workspace).
//   - Before the tool starts, the runner proves the call's walls (walls.go).
//   - In a session pod it is the pod's PID 1 and each call's `runner exec`
//     (sessionloop.go).
package runner
