package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tools"
)

// serverFor is the MCP server of a new session: the task's visible tools, as the
// agent loop offers them to a model, and toolgate_wait.
//
// The task is the one requireProposer read, as the caller, for this very request:
// serverFor runs only behind it, and reading it again could only fail vaguely (the
// SDK answers a nil server with "no server available").
func (s *Server) serverFor(r *http.Request) *mcp.Server {
	task, ok := r.Context().Value(taskKey{}).(*v1.AgentTask)
	if !ok {
		return nil
	}
	ns, name := task.Namespace, task.Name
	server := mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "toolgate: AgentTask " + ns + "/" + name, Version: "v1alpha1"}, &mcp.ServerOptions{
		Instructions: "Every tool call here is proposed to toolgate as a ToolIntent of AgentTask " + ns + "/" + name +
			": it is validated, decided by policy, may wait for a human's approval, runs in a sandbox, and its result is the observation. " +
			"A result that says nothing ran means the call was refused: change the call, do not repeat it unchanged.",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		// The session's id names the endpoint it was opened at, so that it is
		// refused at any other (requireProposer): its tools act on this task only.
		GetSessionID: func() string { return rand.Text() + "-" + endpointTag(ns, name) },
	})
	for _, t := range tools.Visible(task.Spec.Mode, task.Spec.Tools, task.Spec.Sandbox.Isolation) {
		name := t.Name
		server.AddTool(&mcp.Tool{Name: string(t.Name), Description: t.Description, InputSchema: json.RawMessage(t.Schema),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: t.ReadOnly}},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return s.call(ctx, req, ns, task.Name, name)
			})
	}
	server.AddTool(&mcp.Tool{Name: WaitTool,
		Description: "Wait for the observation of a call toolgate is still working on (for example one waiting for a human's approval), by the intent name an earlier result gave. It proposes nothing and runs nothing.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"intentName":{"type":"string","description":"the ToolIntent's name, as the earlier result named it"}},"required":["intentName"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return s.wait(ctx, req, ns, task.Name)
		})
	return server
}

// call proposes one tool call as the caller and waits for its observation.
func (s *Server) call(ctx context.Context, req *mcp.CallToolRequest, ns, taskName string, tool v1.ToolName) (*mcp.CallToolResult, error) {
	c, err := s.callerFrom(ctx, req.Extra)
	if err != nil {
		return nil, err
	}
	task := &v1.AgentTask{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: taskName}, task); err != nil {
		return nil, fmt.Errorf("reading AgentTask %s/%s: %w", ns, taskName, err)
	}
	if problem := proposerProblem(task, c.user, c.groups); problem != "" {
		return nil, fmt.Errorf("%s", problem)
	}
	var intents v1.ToolIntentList
	if err := c.client.List(ctx, &intents, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing the task's intents as %s: %w", c.user, err)
	}
	var existing []v1.ToolIntent
	for _, in := range intents.Items {
		if in.Spec.TaskRef.Name == taskName {
			existing = append(existing, in)
		}
	}
	input := req.Params.Arguments
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	client := "an MCP client"
	if info := req.Session.InitializeParams(); info != nil && info.ClientInfo != nil && info.ClientInfo.Name != "" {
		// The client names itself: data, shown to approvers, bounded and printable.
		client = clip.Bytes(strings.Map(func(r rune) rune {
			if unicode.IsPrint(r) {
				return r
			}
			return -1
		}, info.ClientInfo.Name), 253)
		if client == "" {
			client = "an MCP client"
		}
	}
	session := req.Session.ID()
	intent := pipeline.Proposal(task, existing, tool, input, "proposed over MCP by "+client, c.user, c.groups,
		v1.ProposedBy{Provider: Provider, Model: client, ToolCallID: clip.Bytes(session, 253)})
	intent.Annotations = map[string]string{v1.AnnotationSession: session}
	if err := c.client.Create(ctx, intent); err != nil {
		return nil, fmt.Errorf("creating the ToolIntent as %s: %w", c.user, err)
	}
	s.Log.Info("proposed over MCP", "audit", true, "step", "MCPToolCall", "mcpSession", session, "namespace", ns, "task", taskName,
		"intent", intent.Name, "tool", tool, "requestedBy", c.user, "client", client)
	return s.observe(ctx, req, c, intent, session, true)
}

// wait is toolgate_wait: the observation of an earlier call of this task that the
// caller proposed.
func (s *Server) wait(ctx context.Context, req *mcp.CallToolRequest, ns, taskName string) (*mcp.CallToolResult, error) {
	c, err := s.callerFrom(ctx, req.Extra)
	if err != nil {
		return nil, err
	}
	var args struct {
		Intent string `json:"intentName"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &args); err != nil || args.Intent == "" {
		return errorResult(`toolgate_wait needs {"intentName": NAME}, the intent an earlier result named`), nil
	}
	intent := &v1.ToolIntent{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: args.Intent}, intent); err != nil {
		return errorResult(fmt.Sprintf("ToolIntent %s: %v", args.Intent, err)), nil
	}
	if intent.Spec.TaskRef.Name != taskName || intent.Spec.RequestedBy != c.user {
		return errorResult(fmt.Sprintf("ToolIntent %s is not a call you proposed for AgentTask %s", args.Intent, taskName)), nil
	}
	task := &v1.AgentTask{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: taskName}, task); err != nil {
		return nil, fmt.Errorf("reading AgentTask %s/%s: %w", ns, taskName, err)
	}
	if problem := proposerProblem(task, c.user, c.groups); problem != "" {
		return nil, fmt.Errorf("%s", problem)
	}
	// Waiting proposes nothing: a wait the client gives up on leaves the call as it is.
	return s.observe(ctx, req, c, intent, req.Session.ID(), false)
}

// observe waits for the intent's observation, sending a progress notification for
// each step (and a heartbeat while nothing changes), up to MaxWait. When the client
// cancels the request and cancelOnAbandon is set (the call's own request), the call
// is withdrawn.
func (s *Server) observe(ctx context.Context, req *mcp.CallToolRequest, c *caller, intent *v1.ToolIntent, session string, cancelOnAbandon bool) (*mcp.CallToolResult, error) {
	abandoned := func(current *v1.ToolIntent) (*mcp.CallToolResult, error) {
		if cancelOnAbandon {
			s.cancel(ctx, c, current, session)
		}
		return nil, ctx.Err()
	}
	token := req.Params.GetProgressToken()
	progress, last, lastSent := 0.0, "", time.Time{}
	notify := func(message string) {
		if token == nil {
			return
		}
		progress++
		lastSent = time.Now()
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: progress, Message: message})
	}
	deadline := time.Now().Add(s.MaxWait)
	key := client.ObjectKeyFromObject(intent)
	current := &v1.ToolIntent{}
	if err := c.client.Get(ctx, key, current); err != nil {
		if ctx.Err() != nil {
			return abandoned(intent)
		}
		return nil, fmt.Errorf("reading ToolIntent %s: %w", key.Name, err)
	}
	// The intent is watched, not polled: a waiting call costs the API server one
	// open watch instead of a read every few hundred milliseconds, and its result is
	// sent the moment the controller writes the observation.
	var changes watch.Interface
	defer func() {
		if changes != nil {
			changes.Stop()
		}
	}()
	for {
		if obs := current.Status.Observation; obs != nil {
			notify("observed: " + string(obs.Outcome))
			metrics.MCPCalls.WithLabelValues(string(obs.Outcome)).Inc()
			s.Log.Info("observed over MCP", "audit", true, "step", "MCPToolResult", "mcpSession", session, "namespace", current.Namespace,
				"task", current.Spec.TaskRef.Name, "intent", current.Name, "outcome", obs.Outcome, "executed", obs.Executed)
			return observationResult(current.Name, obs), nil
		}
		if state := step(current); state != last {
			last = state
			notify(state)
		} else if time.Since(lastSent) >= s.Heartbeat {
			notify(state)
		}
		if !time.Now().Before(deadline) {
			metrics.MCPCalls.WithLabelValues("StillWaiting").Inc()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
				"[still waiting] toolgate has not observed ToolIntent %s yet: %s. Nothing is known about its result yet. Call %s with {\"intentName\": %q} to wait for its observation.",
				current.Name, last, WaitTool, current.Name)}}}, nil
		}
		if changes == nil {
			w, err := c.client.Watch(ctx, &v1.ToolIntentList{}, client.InNamespace(key.Namespace), client.MatchingFields{"metadata.name": key.Name},
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: current.ResourceVersion, AllowWatchBookmarks: true}})
			if err != nil {
				if ctx.Err() != nil {
					return abandoned(current)
				}
				return nil, fmt.Errorf("watching ToolIntent %s as %s (a proposer needs watch on toolintents, as the toolgate agent role gives): %w", key.Name, c.user, err)
			}
			changes = w
		}
		wake := min(time.Until(deadline), s.Heartbeat-time.Since(lastSent))
		if token == nil {
			wake = time.Until(deadline)
		}
		timer := time.NewTimer(max(wake, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return abandoned(current)
		case <-timer.C:
		case ev, open := <-changes.ResultChan():
			timer.Stop()
			next, isIntent := ev.Object.(*v1.ToolIntent)
			switch {
			case open && isIntent && (ev.Type == watch.Added || ev.Type == watch.Modified):
				current = next
			case open && ev.Type == watch.Bookmark:
			case open && ev.Type == watch.Deleted:
				return nil, fmt.Errorf("ToolIntent %s was deleted before toolgate observed it", key.Name)
			default:
				// The watch ended (the API server closes watches from time to
				// time) or its resource version expired: read the intent again
				// and watch from there.
				changes.Stop()
				changes = nil
				if err := c.client.Get(ctx, key, current); err != nil {
					if ctx.Err() != nil {
						return abandoned(current)
					}
					return nil, fmt.Errorf("reading ToolIntent %s: %w", key.Name, err)
				}
			}
		}
	}
}

// cancel withdraws a call whose request the client cancelled (notifications/
// cancelled, or the session closed) before it was observed: spec.cancel, set as the
// caller, ends a call that has not run without running it and aborts one that runs,
// as a task's cancel does.
func (s *Server) cancel(ctx context.Context, c *caller, intent *v1.ToolIntent, session string) {
	patchCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	err := c.client.Patch(patchCtx, intent.DeepCopy(), patch)
	s.Log.Info("cancelled over MCP", "audit", true, "step", "MCPToolCancel", "mcpSession", session, "namespace", intent.Namespace,
		"task", intent.Spec.TaskRef.Name, "intent", intent.Name, "requestedBy", c.user, "error", err)
	outcome := "Cancelled"
	if err != nil {
		outcome = "CancelFailed"
	}
	metrics.MCPCalls.WithLabelValues(outcome).Inc()
}

// step says where an intent stands, for progress notifications.
func step(in *v1.ToolIntent) string {
	switch {
	case in.Status.ApprovalName != "" && !meta.IsStatusConditionTrue(in.Status.Conditions, v1.ConditionApproved):
		return fmt.Sprintf("waiting for Approval %s (kubectl toolgate approve %s -n %s)", in.Status.ApprovalName, in.Status.ApprovalName, in.Namespace)
	case in.Status.ExecutionName != "":
		return "running: Execution " + in.Status.ExecutionName
	case in.Status.Decision != nil:
		return "decided: " + string(in.Status.Decision.Action)
	case in.Status.Validation != nil:
		return "validated"
	}
	return "proposed: ToolIntent " + in.Name + " waits for " + mask.Secrets(pipeline.WaitingFor(in))
}

// observationResult is the observation as a tool result: the summary the model
// would see. Anything but a success is an error result, as MCP clients expect of a
// tool that failed (a non-zero exit code, a timeout, an abort); one that did not
// run says so, and structuredContent.executed tells the two apart.
func observationResult(intent string, obs *v1.Observation) *mcp.CallToolResult {
	text := obs.Summary
	if obs.Instruction != "" {
		text += "\n\nInstruction from the policy:\n" + obs.Instruction
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: obs.Outcome != v1.OutcomeSucceeded}
	res.StructuredContent = map[string]any{"intentName": intent, "outcome": obs.Outcome, "executed": obs.Executed, "exitCode": obs.ExitCode, "truncated": obs.Truncated}
	return res
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "toolgate: " + text}}, IsError: true}
}
