// Package agent is the model side of toolgate's agent loop: it asks an
// OpenAI-compatible Chat Completions endpoint for the next step, rebuilds the
// conversation from what the cluster recorded, and keeps a compact record of what
// the model said in each turn.
//
// The package needs nothing from the cluster. Values go in and values come out; the
// HTTP client, the sleep between retries and the clock are injected. The AgentTask
// reconciler owns the loop: it reads the recorded turns and observations from the
// cluster, calls [BuildMessages] and [Model.Complete], stores a [TurnRecord] and turns
// each returned tool call into a ToolIntent.
//
// What the model returns is untrusted data. Tool call arguments are passed on
// verbatim (they may not even be valid JSON); validating them is the intent
// pipeline's job, and an invalid call becomes an observation the model sees.
package agent
