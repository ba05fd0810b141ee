// Package toolintent is the life of one ToolIntent as a pure state machine.
//
// Next reads a World (the intent as this reconcile holds it, and what was read
// around it) and returns the one Step to take now: read a fact it lacks, record a
// change, hold, ask a human, retire or use an Approval, name or create the
// Execution, or write the observation. It never talks to the API server; the
// ToolIntent reconciler reads what a Need asks for, applies each Step, and writes
// the status once. The wording a person or the model reads is made here, with the
// step that causes it.
//
// The ordering invariants are Next's contract (next_test.go has a row for each):
//   - a decision is recorded before anything acts on it: an Ask is written before
//     its Approval is created, and an allowed call's decision is written with the
//     Execution's name;
//   - the Execution is named in the intent's status (a compare-and-swap write)
//     before it is created, so only a reconcile holding the latest intent creates it;
//   - a call is decided again against the policies in force just before it runs:
//     after its batch releases it and before its Approval is used or its Execution
//     named;
//   - where the cache may lag (an Execution or Approval just created, an intent the
//     controller just wrote), a NotFound is confirmed by the API server (the Need
//     says which reads must be fresh).
package toolintent
