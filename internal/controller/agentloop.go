package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/transcript"
)

// The controller reads API key Secrets (only those labelled v1.LabelModelCredentials,
// which its cache is limited to: CacheOptions).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// The agent loop of a task with spec.agent.model. Each turn the controller rebuilds
// the conversation from the cluster (the turn records and the observations of the
// task's ToolIntents), asks the model, records its reply in a ConfigMap and turns each
// proposed tool call into a ToolIntent. Recording the reply before creating the
// intents makes a turn restartable: a controller that stops in between finds the
// record and creates the missing intents without asking the model again.

const (
	// MaxTurnRecordBytes bounds a turn record, well under the 1 MiB a ConfigMap holds.
	// A reply larger than this keeps its text's head, and only then loses its largest
	// arguments (the intent created from it then fails validation and the model is
	// told so).
	MaxTurnRecordBytes = 512 << 10
	// DefaultModelRetryDelay is how long a task waits after a temporary model error
	// (rate limit, server error, timeout) that outlasted the client's own retries,
	// when the provider named no Retry-After.
	DefaultModelRetryDelay = 30 * time.Second

	// ReasonCredentialsNotAllowed: Ready=False because the task's API key Secret is
	// not labelled v1.LabelModelCredentials=true; the model is not called.
	ReasonCredentialsNotAllowed = "CredentialsNotAllowed"
	// ReasonEndpointNotAllowed: Ready=False because the task's baseURL is not on the
	// controller's --model-endpoints allow-list; the model is not called.
	ReasonEndpointNotAllowed = "EndpointNotAllowed"

	// EventIntentNameTaken (Warning) is emitted on a task when another user's
	// ToolIntent took the name of one of its model's calls first: the call was
	// created under another name, and the other intent is no part of the task.
	EventIntentNameTaken = "IntentNameTaken"
)

// ModelFactory makes the model client for one task's endpoint.
type ModelFactory func(agent.ClientConfig) (agent.Model, error)

// NewModelClient is the default ModelFactory: the OpenAI-compatible agent.Client.
func NewModelClient(cfg agent.ClientConfig) (agent.Model, error) {
	c, err := agent.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// loopState is what the recorded turns and the task's intents say about the loop.
type loopState struct {
	// world is the summary the task status is rebuilt from.
	world pipeline.ModelWorld
	// history is every recorded turn with its observations, for BuildMessages. It is
	// complete only when world.NextTurnDue.
	history []agent.Turn
	// missing are the indexes of the last turn's calls that have no ToolIntent yet.
	missing []int
}

// loopStateOf pairs the recorded turns with the task's intents (transcript.Pair: an
// intent in a call's place that the loop did not create for that call fails the
// task) and says what is due. A turn whose final answer a completion check
// redirected is a step like any other, and the next turn is due. The last turn's
// answer is the task's only once its check accepted it (CompletionDue until then).
func loopStateOf(task *v1.AgentTask, records []agent.TurnRecord, checks map[int32]v1.CompletionCheck, intents []v1.ToolIntent, identity string) loopState {
	var s loopState
	s.world.Turns = int32(len(records))
	for _, rec := range records {
		s.world.TokensUsed += rec.Usage.Total()
	}
	if len(records) == 0 {
		s.world.NextTurnDue = true
		return s
	}
	paired := transcript.Pair(task, records, checks, intents, identity)
	s.history, s.missing = paired.Turns, paired.Missing
	if paired.Failure != "" {
		s.world.Failure = paired.Failure
		return s
	}
	last := records[len(records)-1]
	if len(last.ToolCalls) == 0 {
		switch {
		case last.Refusal != "":
			s.world.Failure = fmt.Sprintf("the model refused in turn %d: %s", last.Turn, mask.Secrets(last.Refusal))
		case last.FinishReason == "length":
			s.world.Failure = fmt.Sprintf("the model's reply in turn %d was cut at its length limit (finish_reason length) before it proposed a tool call or finished its answer", last.Turn)
		case last.FinishReason == "content_filter":
			s.world.Failure = fmt.Sprintf("the endpoint's content filter stopped the model's reply in turn %d (finish_reason content_filter)", last.Turn)
		default:
			check, checked := checks[last.Turn]
			switch {
			case !checked:
				s.world.CompletionDue = true
			case check.Action == v1.DecisionRedirect:
				s.world.NextTurnDue = true
			case check.Action == v1.DecisionDeny:
				s.world.CompletionDenied = fmt.Sprintf("the final answer of turn %d was refused by rule %s: %s", last.Turn, check.DecidedBy(), check.Reason)
			default:
				answer := last.Text
				s.world.Answer = &answer
			}
		}
		return s
	}
	due := len(s.missing) == 0
	for _, c := range s.history[len(s.history)-1].Calls {
		due = due && c.Observed
	}
	s.world.NextTurnDue = due
	return s
}

// maxTurnCalls is the API's bound on spec.turnCalls: a reply with more calls fails
// the task (its turn could not be held together).
const maxTurnCalls = 1024

// numberCalls gives every call of a reply an id that is unique in its turn. Some
// OpenAI-compatible servers send no id or repeat one; the conversation stays
// consistent because both the assistant message and the tool messages are rebuilt
// from the record.
func numberCalls(turn int32, calls []agent.ToolCall) {
	seen := map[string]bool{}
	for i := range calls {
		if calls[i].ID == "" || seen[calls[i].ID] {
			calls[i].ID = fmt.Sprintf("toolgate_call_%d_%d", turn, i)
		}
		seen[calls[i].ID] = true
	}
}

// agentStep is what one reconcile's loop did, reported after the status write.
type agentStep struct {
	// turn is the record written in this reconcile, if any.
	turn *agent.TurnRecord
	// intents are the intents created in this reconcile.
	intents []string
	// retryAfter is when to try the model again after a temporary error.
	retryAfter time.Duration
	// refused is why the model was not called with what the task names, if so.
	refused *modelRefusal
	// completion is the completion check made in this reconcile, if any.
	completion *v1.CompletionCheck
	// nameTaken says, for each call created under another name in this reconcile,
	// whose intent took its name.
	nameTaken []string
}

// modelWait is a temporary model failure and when to try again. The reconciler
// keeps one per task UID so that events during the wait (the task's own status
// write among them) do not bypass the backoff. It is lost on restart, which costs
// one early attempt.
type modelWait struct {
	until   time.Time
	message string
}

// runAgentLoop reads the turn records into world.Model and, when the task runs and
// its workspace is ready, moves the loop one step: it creates the intents of a
// recorded turn that are missing, or, when every call of the last turn is observed
// and no budget is spent, asks the model for the next turn.
func (r *AgentTaskReconciler) runAgentLoop(ctx context.Context, task *v1.AgentTask, world *pipeline.TaskWorld) (agentStep, error) {
	var step agentStep
	records, checks, problem, err := transcript.Read(ctx, r.APIReader, task)
	if err != nil {
		return step, err
	}
	identity := r.Options.identity()
	var state loopState
	refresh := func() {
		state = loopStateOf(task, records, checks, world.Intents, identity)
		if problem != "" {
			state.world.Unavailable = problem
		}
		world.Model = &state.world
		world.CompletionChecks = checks
	}
	refresh()
	if problem != "" {
		// Polled: the fix (deleting what is in a record's place) is no event of the
		// task's.
		step.retryAfter = r.modelRetryDelay()
		return step, nil
	}
	if !world.WorkspaceReady || r.finished(task, *world) {
		return step, nil
	}
	if state.world.CompletionDue {
		check, wait, err := r.checkCompletion(ctx, task, records[len(records)-1], checks, world.Intents)
		if err != nil || wait != "" {
			state.world.Unavailable = wait
			step.retryAfter = r.modelRetryDelay()
			return step, err
		}
		checks[check.Turn] = check
		step.completion = &check
		refresh()
		if !state.world.NextTurnDue {
			return step, nil
		}
	}
	if len(state.missing) == 0 && !state.world.NextTurnDue {
		return step, nil
	}
	if state.world.NextTurnDue {
		if w, ok := r.modelWaits.Load(task.UID); ok {
			if remaining := w.(modelWait).until.Sub(r.Now()); remaining > 0 {
				state.world.Unavailable = w.(modelWait).message
				step.retryAfter = remaining
				return step, nil
			}
		}
		// A model call costs money and is not idempotent: make sure this reconcile does
		// not work from a stale cached task (one whose newer status, perhaps the end of
		// the task, is still on its way) before asking the model for a turn.
		fresh := &v1.AgentTask{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(task), fresh); err != nil {
			return step, client.IgnoreNotFound(err)
		}
		if fresh.ResourceVersion != task.ResourceVersion {
			step.retryAfter = time.Second
			return step, nil
		}
		// The endpoint and the Secret are checked every turn, not once per task: an
		// admin narrows the allow-list, an owner removes a Secret's label, and the
		// next turn honours it.
		apiKey, refused, unavailable, err := r.modelAccess(ctx, task)
		switch {
		case err != nil:
			return step, err
		case refused != nil:
			state.world.Unavailable = refused.message
			step.refused = refused
			// Polled, because the fix (a label, a flag) is not an event of this task.
			step.retryAfter = r.modelRetryDelay()
			return step, nil
		case unavailable != "":
			state.world.Unavailable = unavailable
			step.retryAfter = r.modelRetryDelay()
			return step, nil
		}
		rec, unavailable, failure, retryAfter, err := r.takeTurn(ctx, task, int32(len(records)), state.history, apiKey)
		switch {
		case err != nil:
			return step, err
		case failure != "":
			state.world.Failure = failure
			return step, nil
		case unavailable != "":
			state.world.Unavailable = unavailable
			step.retryAfter = retryAfter
			r.modelWaits.Store(task.UID, modelWait{until: r.Now().Add(retryAfter), message: unavailable})
			return step, nil
		}
		r.modelWaits.Delete(task.UID)
		records = append(records, rec)
		step.turn = &rec
		refresh()
	}
	last := records[len(records)-1]
	for _, i := range state.missing {
		intent, taken, err := r.createCall(ctx, task, last, i, identity)
		if err != nil {
			return step, err
		}
		if intent == nil {
			continue
		}
		if taken != "" {
			step.nameTaken = append(step.nameTaken, taken)
		}
		world.Intents = append(world.Intents, *intent)
		step.intents = append(step.intents, intent.Name)
	}
	refresh()
	return step, nil
}

// createCall creates the intent of call i of the turn rec, or finds it created
// already (nil). Its name, transcript.ModelIntentName, is predictable: anyone who
// may create ToolIntents in the namespace can create one under it first. An intent
// there that the loop did not create is left alone (it is no part of the task, and
// one that names the task fails validation: only the loop proposes for a model
// task) and the call is created under a name the API server makes up. taken then
// says whose intent took the name.
//
// A made-up name is not idempotent as the call's own name is, so before it is used
// the task's intents of the turn are read from the API server, not the cache: a call
// created a moment ago under a made-up name is found there and never created twice.
func (r *AgentTaskReconciler) createCall(ctx context.Context, task *v1.AgentTask, rec agent.TurnRecord, i int, identity string) (created *v1.ToolIntent, taken string, err error) {
	intent := transcript.ModelIntent(task, rec, i, identity)
	call := fmt.Sprintf("tool call %s of turn %d", rec.ToolCalls[i].ID, rec.Turn)
	err = r.Create(ctx, intent)
	if err == nil {
		return intent, "", nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, "", fmt.Errorf("creating ToolIntent %s for %s: %w", intent.Name, call, err)
	}
	theirs := &v1.ToolIntent{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(intent), theirs); err != nil {
		return nil, "", fmt.Errorf("reading ToolIntent %s, in the place of %s: %w", intent.Name, call, err)
	}
	if transcript.IsLoopIntent(theirs, task, identity) {
		// Another reconcile created it; the cache has not brought it yet.
		return nil, "", nil
	}
	var turn v1.ToolIntentList
	if err := r.APIReader.List(ctx, &turn, client.InNamespace(task.Namespace), client.MatchingLabels{v1.LabelTurn: fmt.Sprint(rec.Turn)}); err != nil {
		return nil, "", fmt.Errorf("listing the intents of turn %d: %w", rec.Turn, err)
	}
	for j := range turn.Items {
		if in := &turn.Items[j]; transcript.IsLoopIntent(in, task, identity) && in.Spec.Turn == rec.Turn && in.Spec.Index == int32(i) {
			return nil, "", nil
		}
	}
	intent.Name, intent.GenerateName = "", transcript.ModelIntentGenerateName(task.Name, rec.Turn, int32(i))
	if err := r.Create(ctx, intent); err != nil {
		return nil, "", fmt.Errorf("creating the ToolIntent of %s under a new name (%s was taken by %s): %w", call, theirs.Name, orUnknown(theirs.Spec.RequestedBy), err)
	}
	taken = fmt.Sprintf("ToolIntent %s, the name of %s, was created by %s, not by the agent loop: it is no part of this task (if it names the task, validation refuses it and it never runs); the call is ToolIntent %s",
		theirs.Name, call, orUnknown(theirs.Spec.RequestedBy), intent.Name)
	return intent, taken, nil
}

func orUnknown(user string) string {
	if user == "" {
		return "an unknown user"
	}
	return user
}

// finished says whether the task, with its status rebuilt from world, takes no more
// turns (it succeeded, failed or was cancelled, including by a budget spent now).
func (r *AgentTaskReconciler) finished(task *v1.AgentTask, world pipeline.TaskWorld) bool {
	now := task.DeepCopy()
	now.Status = pipeline.TaskStatus(task, world, metav1.NewTime(r.Now()))
	done, _ := pipeline.TaskFinished(now)
	return done
}

// ownCalls are the intents the agent loop created for task: controlled by it and
// requested by the controller (loopStateOf takes no other as a call's). An intent
// someone else created under the task's name is no part of its history.
func (r *AgentTaskReconciler) ownCalls(task *v1.AgentTask, intents []v1.ToolIntent) []v1.ToolIntent {
	identity := r.Options.identity()
	out := make([]v1.ToolIntent, 0, len(intents))
	for i := range intents {
		if metav1.IsControlledBy(&intents[i], task) && intents[i].Spec.RequestedBy == identity {
			out = append(out, intents[i])
		}
	}
	return out
}

// checkCompletion checks the final answer of turn rec against the Completion rules
// of the policies in force and records the verdict in an immutable ConfigMap owned by
// the task (another reconcile's record, if it was first). wait says why the check
// cannot be made now: a policy in scope is not Ready, and an answer is not accepted
// past a gate that cannot be read.
func (r *AgentTaskReconciler) checkCompletion(ctx context.Context, task *v1.AgentTask, rec agent.TurnRecord, checks map[int32]v1.CompletionCheck, intents []v1.ToolIntent) (v1.CompletionCheck, string, error) {
	loaded, err := r.Policies.LoadFresh(ctx, r.APIReader, task.Namespace, time.Now())
	if err != nil {
		return v1.CompletionCheck{}, "", err
	}
	if len(loaded.Broken) > 0 {
		// A policy that cannot be read may hold a Completion rule.
		return v1.CompletionCheck{}, fmt.Sprintf("the final answer of turn %d waits for its completion check: %s in scope is not Ready", rec.Turn, strings.Join(loaded.Broken, ", ")), nil
	}
	past := make([]v1.CompletionCheck, 0, len(checks))
	for _, c := range checks {
		past = append(past, c)
	}
	now := r.Now()
	check := policy.DecideCompletion(policy.CompletionRequest{
		Namespace: task.Namespace, Task: task.Name, Answer: rec.Text,
		History: pipeline.CompletionHistory(r.ownCalls(task, intents)),
		Fires:   pipeline.FireCountsOf(pipeline.RuleFires(string(task.UID), nil, past)),
		Now:     now,
	}, loaded.Cluster, loaded.Namespaced)
	check.Turn = rec.Turn
	at := metav1.NewTime(now)
	check.CheckedAt = &at
	data, err := json.Marshal(check)
	if err != nil {
		return v1.CompletionCheck{}, "", err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: task.Namespace, Name: transcript.CompletionCheckName(task.Name, rec.Turn), Labels: map[string]string{v1.LabelTurn: fmt.Sprint(rec.Turn)}},
		Immutable:  ptr.To(true),
		Data:       map[string]string{transcript.CompletionCheckKey: string(data)},
	}
	if len(validation.IsValidLabelValue(task.Name)) == 0 {
		cm.Labels[v1.LabelTask] = task.Name
	}
	if err := controllerutil.SetControllerReference(task, cm, r.Scheme); err != nil {
		return v1.CompletionCheck{}, "", err
	}
	if err := r.Create(ctx, cm); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return v1.CompletionCheck{}, "", fmt.Errorf("recording the completion check of turn %d: %w", rec.Turn, err)
		}
		theirs := &corev1.ConfigMap{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cm), theirs); err != nil {
			return v1.CompletionCheck{}, "", err
		}
		recorded, problem := transcript.ParseCompletionCheck(task, rec.Turn, theirs)
		return recorded, problem, nil
	}
	return check, "", nil
}

// takeTurn asks the model for turn and records its reply. It returns the record
// that is now in the cluster (another reconcile's, if one recorded the turn first),
// or why there is none: unavailable (wait, retry after retryAfter) or failure (the
// task fails). err is for API errors and the controller stopping.
func (r *AgentTaskReconciler) takeTurn(ctx context.Context, task *v1.AgentTask, turn int32, history []agent.Turn, apiKey string) (rec agent.TurnRecord, unavailable, failure string, retryAfter time.Duration, err error) {
	spec := task.Spec.Agent.Model
	model, err := r.NewModel(agent.ClientConfig{
		BaseURL:        spec.BaseURL,
		APIKey:         apiKey,
		RequestTimeout: time.Duration(spec.RequestTimeoutSeconds) * time.Second,
	})
	if err != nil {
		return rec, "", fmt.Sprintf("spec.agent.model: %s", mask.Secrets(err.Error(), apiKey)), 0, nil
	}
	messages, err := agent.BuildMessages(agent.SystemPrompt, task.Spec.Goal, history)
	if err != nil {
		return rec, "", fmt.Sprintf("the conversation of turn %d cannot be rebuilt: %v", turn, err), 0, nil
	}
	ctrl.LoggerFrom(ctx).V(2).Info("asking the model", "turn", turn, "model", spec.Model, "messages", len(messages))
	resp, err := model.Complete(ctx, agent.Request{Model: spec.Model, Messages: messages, Tools: transcript.ModelTools(task)})
	if err != nil {
		var merr *agent.ModelError
		switch {
		case ctx.Err() != nil:
			return rec, "", "", 0, ctx.Err()
		case errors.As(err, &merr) && merr.Temporary():
			return rec, fmt.Sprintf("turn %d waits for the model: %s", turn, mask.Secrets(merr.Error(), apiKey)), "", max(merr.RetryAfter, r.modelRetryDelay()), nil
		default:
			return rec, "", fmt.Sprintf("turn %d: %s", turn, mask.Secrets(err.Error(), apiKey)), 0, nil
		}
	}
	if len(resp.ToolCalls) > maxTurnCalls {
		return rec, "", fmt.Sprintf("the model proposed %d tool calls in turn %d, more than the %d a turn may have", len(resp.ToolCalls), turn, maxTurnCalls), 0, nil
	}
	numberCalls(turn, resp.ToolCalls)
	for i, c := range resp.ToolCalls {
		if c.Name == "" {
			return rec, "", fmt.Sprintf("the model's reply in turn %d is unusable: tool call %d (%s) has no tool name", turn, i, c.ID), 0, nil
		}
	}
	rec = agent.NewTurnRecord(turn, resp)
	// The record is readable by every viewer of the namespace and goes back to the
	// model in later turns: its prose is masked like an observation. The tool calls'
	// arguments are not: they are the calls themselves (each becomes a ToolIntent,
	// where the approver sees the input with its secrets masked), and masking them
	// would change what runs.
	rec.Text = mask.Secrets(rec.Text, apiKey)
	rec.Refusal = mask.Secrets(rec.Refusal, apiKey)
	rec, err = rec.Bound(MaxTurnRecordBytes)
	if err != nil {
		return rec, "", err.Error(), 0, nil
	}
	return r.writeTurn(ctx, task, rec)
}

// writeTurn creates the turn's record. If it exists already, a racing reconcile
// asked the model first: its record is the turn, and this reply is dropped.
func (r *AgentTaskReconciler) writeTurn(ctx context.Context, task *v1.AgentTask, rec agent.TurnRecord) (agent.TurnRecord, string, string, time.Duration, error) {
	data, err := rec.Marshal()
	if err != nil {
		return rec, "", "", 0, err
	}
	labels := map[string]string{v1.LabelTurn: fmt.Sprint(rec.Turn)}
	if len(validation.IsValidLabelValue(task.Name)) == 0 {
		labels[v1.LabelTask] = task.Name
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: task.Namespace, Name: transcript.TurnRecordName(task.Name, rec.Turn), Labels: labels},
		// A record is history: nobody edits it, not even the controller.
		Immutable: ptr.To(true),
		Data:      map[string]string{transcript.TurnRecordKey: string(data)},
	}
	if err := controllerutil.SetControllerReference(task, cm, r.Scheme); err != nil {
		return rec, "", "", 0, err
	}
	err = r.Create(ctx, cm)
	if err == nil {
		return rec, "", "", 0, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return rec, "", "", 0, fmt.Errorf("recording turn %d: %w", rec.Turn, err)
	}
	theirs := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cm), theirs); err != nil {
		return rec, "", "", 0, fmt.Errorf("reading turn record %d recorded meanwhile: %w", rec.Turn, err)
	}
	recorded, problem := transcript.ParseTurnRecord(task, rec.Turn, theirs)
	return recorded, problem, "", r.modelRetryDelay(), nil
}

// modelRefusal is why the controller will not call a task's model with what the task
// names: the endpoint is not allowed, or the Secret has not opted in. The task waits
// (Ready=False with reason) until its owner or an admin changes what is wrong.
type modelRefusal struct {
	reason, message string
}

// modelAccess checks that the task's endpoint is allowed and reads its API key. The
// endpoint is checked first so that a Secret is never even read for a host the
// controller would not send it to. unavailable is a reason to wait that may pass by
// itself (the Secret is applied after the task); refused is one that needs a change.
func (r *AgentTaskReconciler) modelAccess(ctx context.Context, task *v1.AgentTask) (key string, refused *modelRefusal, unavailable string, err error) {
	baseURL := task.Spec.Agent.Model.BaseURL
	if err := r.Options.modelEndpoints().Allow(baseURL); err != nil {
		return "", &modelRefusal{ReasonEndpointNotAllowed, fmt.Sprintf(
			"spec.agent.model.baseURL %q is not allowed: %v. The controller sends a task's API key and conversation only to the model endpoints it is configured with, so that creating a task cannot send credentials or workspace content to any host: name an allowed endpoint, or ask the cluster admin to add this one to the controller's --model-endpoints flag",
			agent.RedactURL(baseURL), err)}, "", nil
	}
	return r.apiKey(ctx, task)
}

// apiKey reads the key named by spec.agent.model.apiKeySecretRef. A missing Secret
// or key is a reason to wait (it may be applied after the task), not an error.
//
// Only a Secret labelled v1.LabelModelCredentials=true is used: the controller may
// read Secrets, and without the opt-in anyone who may create an AgentTask could have
// it send any Secret of the namespace to a model endpoint (a confused deputy). The
// label is checked on the Secret as the API server has it now (its metadata only, so
// an unlabelled Secret's data is never fetched), and the key is then read through the
// manager's cache, which holds only labelled Secrets (CacheOptions): a Secret whose
// label is removed is not used for the next turn.
func (r *AgentTaskReconciler) apiKey(ctx context.Context, task *v1.AgentTask) (key string, refused *modelRefusal, unavailable string, err error) {
	ref := task.Spec.Agent.Model.APIKeySecretRef
	if ref == nil {
		return "", nil, "", nil
	}
	optional := ptr.Deref(ref.Optional, false)
	name := client.ObjectKey{Namespace: task.Namespace, Name: ref.Name}
	md := &metav1.PartialObjectMetadata{}
	md.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = r.APIReader.Get(ctx, name, md)
	switch {
	case apierrors.IsNotFound(err) && optional:
		return "", nil, "", nil
	case apierrors.IsNotFound(err):
		return "", nil, fmt.Sprintf("Secret %q named by spec.agent.model.apiKeySecretRef does not exist in namespace %s; create it with the API key under key %q and the label %s=%s",
			ref.Name, task.Namespace, ref.Key, v1.LabelModelCredentials, v1.ModelCredentialsValue), nil
	case apierrors.IsForbidden(err):
		return "", nil, fmt.Sprintf("the controller may not read Secret %q named by spec.agent.model.apiKeySecretRef: %v", ref.Name, err), nil
	case err != nil:
		return "", nil, "", fmt.Errorf("reading the API key Secret %s: %w", ref.Name, err)
	}
	if md.Labels[v1.LabelModelCredentials] != v1.ModelCredentialsValue {
		return "", credentialsNotAllowed(task, ref.Name), "", nil
	}
	secret := &corev1.Secret{}
	err = r.Get(ctx, name, secret)
	switch {
	case apierrors.IsNotFound(err):
		// Labelled a moment ago: the cache has not seen it yet.
		return "", nil, fmt.Sprintf("Secret %q named by spec.agent.model.apiKeySecretRef is labelled %s=%s but not yet in the controller's cache; it is used as soon as it is",
			ref.Name, v1.LabelModelCredentials, v1.ModelCredentialsValue), nil
	case err != nil:
		return "", nil, "", fmt.Errorf("reading the API key Secret %s: %w", ref.Name, err)
	case secret.Labels[v1.LabelModelCredentials] != v1.ModelCredentialsValue:
		// The cache still has the Secret from before its label was removed.
		return "", credentialsNotAllowed(task, ref.Name), "", nil
	}
	value, ok := secret.Data[ref.Key]
	switch {
	case !ok && optional:
		return "", nil, "", nil
	case !ok:
		return "", nil, fmt.Sprintf("Secret %q has no key %q, named by spec.agent.model.apiKeySecretRef.key; add the API key under that key", ref.Name, ref.Key), nil
	}
	// Keys written from a file often end with a newline, which no endpoint accepts.
	return strings.TrimSpace(string(value)), nil, "", nil
}

func credentialsNotAllowed(task *v1.AgentTask, secret string) *modelRefusal {
	return &modelRefusal{ReasonCredentialsNotAllowed, fmt.Sprintf(
		"Secret %q named by spec.agent.model.apiKeySecretRef is not labelled %s=%s, so the controller does not use it: a task may send only a Secret that opts in to being a model credential, or anyone who may create a task could send any Secret of the namespace to a model endpoint. If it holds the API key for %s, label it: kubectl label secret -n %s %s %s=%s",
		secret, v1.LabelModelCredentials, v1.ModelCredentialsValue, transcript.ProviderOf(task.Spec.Agent.Model.BaseURL), task.Namespace, secret, v1.LabelModelCredentials, v1.ModelCredentialsValue)}
}

// applyModelRefusal gives the Ready condition the refusal's own reason: the pipeline
// reports every wait of the model loop as ModelUnavailable, and a refusal is not
// something that passes by itself.
func applyModelRefusal(status *v1.AgentTaskStatus, step agentStep) {
	if step.refused == nil {
		return
	}
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type == v1.ConditionReady && c.Status == metav1.ConditionFalse && c.Reason == v1.ReasonModelUnavailable && c.Message == step.refused.message {
			c.Reason = step.refused.reason
		}
	}
}

func (r *AgentTaskReconciler) modelRetryDelay() time.Duration {
	if r.ModelRetryDelay > 0 {
		return r.ModelRetryDelay
	}
	return DefaultModelRetryDelay
}

// reportTurn emits the event and audit line of what the loop did in a reconcile.
func (r *AgentTaskReconciler) reportTurn(ctx context.Context, task *v1.AgentTask, step agentStep) {
	log := ctrl.LoggerFrom(ctx)
	if rec := step.turn; rec != nil {
		var note string
		if len(rec.ToolCalls) == 0 {
			note = fmt.Sprintf("turn %d: the model answered without a tool call (%d tokens)", rec.Turn, rec.Usage.Total())
		} else {
			names := make([]string, 0, len(rec.ToolCalls))
			for _, c := range rec.ToolCalls {
				names = append(names, c.Name)
			}
			note = fmt.Sprintf("turn %d: the model proposed %d tool calls (%s) (%d tokens)", rec.Turn, len(rec.ToolCalls), clip.Bytes(strings.Join(names, ", "), 512), rec.Usage.Total())
		}
		r.Recorder.Eventf(task, nil, corev1.EventTypeNormal, EventModelTurn, EventModelTurn, "%s", note)
		log.Info(note, "audit", true, "step", EventModelTurn, "namespace", task.Namespace, "task", task.Name,
			"turn", rec.Turn, "model", rec.Model, "record", transcript.TurnRecordName(task.Name, rec.Turn), "intents", step.intents,
			"tokens", rec.Usage.Total(), "finishReason", rec.FinishReason)
	} else if len(step.intents) > 0 {
		note := fmt.Sprintf("created the missing intents %v of a recorded turn", step.intents)
		r.Recorder.Eventf(task, nil, corev1.EventTypeNormal, EventModelTurn, EventModelTurn, "%s", note)
		log.Info(note, "audit", true, "step", EventModelTurn, "namespace", task.Namespace, "task", task.Name, "intents", step.intents)
	}
	for _, note := range step.nameTaken {
		r.Recorder.Eventf(task, nil, corev1.EventTypeWarning, EventIntentNameTaken, EventIntentNameTaken, "%s", note)
		log.Info(note, "audit", true, "step", EventIntentNameTaken, "namespace", task.Namespace, "task", task.Name)
	}
	if c := step.completion; c != nil {
		kind, by := corev1.EventTypeNormal, "no rule"
		if c.Action != v1.DecisionAllow {
			kind, by = corev1.EventTypeWarning, c.DecidedBy()
		}
		note := fmt.Sprintf("turn %d: the final answer was checked: %s by %s: %s", c.Turn, c.Action, by, c.Reason)
		r.Recorder.Eventf(task, nil, kind, EventCompletionChecked, EventCompletionChecked, "%s", note)
		log.Info(note, "audit", true, "step", EventCompletionChecked, "namespace", task.Namespace, "task", task.Name,
			"turn", c.Turn, "action", c.Action, "rule", c.DecidedBy(), "record", transcript.CompletionCheckName(task.Name, c.Turn))
		metrics.CompletionChecks.WithLabelValues(string(c.Action), c.DecidedBy()).Inc()
	}
	if c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady); c != nil && c.Reason == v1.ReasonModelUnavailable {
		log.Info(c.Message, "step", v1.ReasonModelUnavailable, "retryAfter", step.retryAfter)
	}
}
