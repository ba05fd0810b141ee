// Package pipeline holds the pure decisions of the intent pipeline: validating an
// intent against its task, building the Approval and the Execution, holding a batch
// while a sibling waits for approval, and writing the observation the model sees.
// Nothing here talks to the API server; the ToolIntent reconciler gathers the world,
// calls these functions and writes the results.
package pipeline
