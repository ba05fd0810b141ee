package controller

import (
	"context"
	"encoding/json"
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
	l := &agentLoop{task: task, world: world, records: records, checks: checks, problem: problem, identity: r.Options.identity()}
	l.refresh()
	if problem != "" {
		// Polled: the fix (deleting what is in a record's place) is no event of the
		// task's.
		step.retryAfter = r.modelRetryDelay()
		return step, nil
	}
	if !world.WorkspaceReady || r.finished(task, *world) {
		return step, nil
	}
	if l.state.world.CompletionDue {
		if settled, err := r.checkDueCompletion(ctx, l, &step); err != nil || settled {
			return step, err
		}
	}
	if len(l.state.missing) == 0 && !l.state.world.NextTurnDue {
		return step, nil
	}
	if l.state.world.NextTurnDue {
		if settled, err := r.askForNextTurn(ctx, l, &step); err != nil || settled {
			return step, err
		}
	}
	return step, r.createMissingCalls(ctx, l, &step)
}

// agentLoop is what one step of a model task's loop works from: the turn records,
// the completion checks and the task's intents, and the loop state they give, made
// again (refresh) whenever the step records a check, a turn or a call.
type agentLoop struct {
	task     *v1.AgentTask
	world    *pipeline.TaskWorld
	records  []agent.TurnRecord
	checks   map[int32]v1.CompletionCheck
	problem  string
	identity string
	state    loopState
}

// refresh makes the loop state again from what the step recorded so far, and
// shows it in the task's world.
func (l *agentLoop) refresh() {
	l.state = loopStateOf(l.task, l.records, l.checks, l.world.Intents, l.identity)
	if l.problem != "" {
		l.state.world.Unavailable = l.problem
	}
	l.world.Model = &l.state.world
	l.world.CompletionChecks = l.checks
}

// checkDueCompletion checks the final answer of the last turn (checkCompletion)
// and records the check. settled says that the step ends here: the check must
// wait, or the answer was accepted (no next turn is due).
func (r *AgentTaskReconciler) checkDueCompletion(ctx context.Context, l *agentLoop, step *agentStep) (settled bool, err error) {
	check, wait, err := r.checkCompletion(ctx, l.task, l.records[len(l.records)-1], l.checks, l.world.Intents)
	if err != nil || wait != "" {
		l.state.world.Unavailable = wait
		step.retryAfter = r.modelRetryDelay()
		return true, err
	}
	l.checks[check.Turn] = check
	step.completion = &check
	l.refresh()
	return !l.state.world.NextTurnDue, nil
}

// askForNextTurn asks the model for the next turn and records it, unless the model
// is backed off, the cached task is stale, or the model may not or cannot be
// reached now. settled says that the step ends here, with no turn taken.
func (r *AgentTaskReconciler) askForNextTurn(ctx context.Context, l *agentLoop, step *agentStep) (settled bool, err error) {
	if r.modelBackedOff(l, step) {
		return true, nil
	}
	if stale, err := r.cachedTaskIsStale(ctx, l.task, step); err != nil || stale {
		return true, err
	}
	apiKey, reachable, err := r.modelReachable(ctx, l, step)
	if err != nil || !reachable {
		return true, err
	}
	rec, unavailable, failure, retryAfter, err := r.takeTurn(ctx, l.task, int32(len(l.records)), l.state.history, apiKey)
	switch {
	case err != nil:
		return true, err
	case failure != "":
		l.state.world.Failure = failure
		return true, nil
	case unavailable != "":
		l.state.world.Unavailable = unavailable
		step.retryAfter = retryAfter
		r.modelWaits.Store(l.task.UID, modelWait{until: r.Now().Add(retryAfter), message: unavailable})
		return true, nil
	}
	r.modelWaits.Delete(l.task.UID)
	l.records = append(l.records, rec)
	step.turn = &rec
	l.refresh()
	return false, nil
}

// createMissingCalls creates the intents of the last turn's calls that have none
// yet, and adds them to the task's world.
func (r *AgentTaskReconciler) createMissingCalls(ctx context.Context, l *agentLoop, step *agentStep) error {
	last := l.records[len(l.records)-1]
	for _, i := range l.state.missing {
		intent, taken, err := r.createCall(ctx, l.task, last, i, l.identity)
		if err != nil {
			return err
		}
		if intent == nil {
			continue
		}
		if taken != "" {
			step.nameTaken = append(step.nameTaken, taken)
		}
		l.world.Intents = append(l.world.Intents, *intent)
		step.intents = append(step.intents, intent.Name)
	}
	l.refresh()
	return nil
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
			note = fmt.Sprintf("turn %d: the model proposed %d tool calls (%s) (%d tokens)", rec.Turn, len(rec.ToolCalls), clip.Bytes(mask.Secrets(strings.Join(names, ", ")), 512), rec.Usage.Total())
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
		note := fmt.Sprintf("turn %d: the final answer was checked: %s by %s: %s", c.Turn, c.Action, by, mask.Secrets(c.Reason))
		r.Recorder.Eventf(task, nil, kind, EventCompletionChecked, EventCompletionChecked, "%s", note)
		log.Info(note, "audit", true, "step", EventCompletionChecked, "namespace", task.Namespace, "task", task.Name,
			"turn", c.Turn, "action", c.Action, "rule", c.DecidedBy(), "record", transcript.CompletionCheckName(task.Name, c.Turn))
		metrics.CompletionChecks.WithLabelValues(string(c.Action), c.DecidedBy()).Inc()
	}
	if c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady); c != nil && c.Reason == v1.ReasonModelUnavailable {
		log.Info(c.Message, "step", v1.ReasonModelUnavailable, "retryAfter", step.retryAfter)
	}
}
