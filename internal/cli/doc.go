// Package cli is the kubectl plugin `kubectl toolgate`: it rebuilds a task's timeline
// from the cluster (trace), re-runs validation and policy over recorded intents
// (replay --dry-run), decides approvals (approve, deny, approvals), proposes calls
// (propose), checks policies offline (policy check), fetches an execution's full
// output (output) and serves the local web console (console, whose web side is
// internal/console).
//
// Every command is built by NewRootCommand and run by Execute, so tests run the same
// code a user does. What a command computes from objects (the trace, the replay
// report, the policy check) is a pure function with its own tests; only the thin
// command functions talk to the API server.
package cli
