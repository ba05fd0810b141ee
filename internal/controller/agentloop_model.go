package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/transcript"
)

// modelWait is a temporary model failure and when to try again. The reconciler
// keeps one per task UID so that events during the wait (the task's own status
// write among them) do not bypass the backoff. It is lost on restart, which costs
// one early attempt.
type modelWait struct {
	until   time.Time
	message string
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

// modelBackedOff says whether the task waits out a backoff the model endpoint
// asked for, and records the wait in the step.
func (r *AgentTaskReconciler) modelBackedOff(l *agentLoop, step *agentStep) bool {
	w, ok := r.modelWaits.Load(l.task.UID)
	if !ok {
		return false
	}
	remaining := w.(modelWait).until.Sub(r.Now())
	if remaining <= 0 {
		return false
	}
	l.state.world.Unavailable = w.(modelWait).message
	step.retryAfter = remaining
	return true
}

// cachedTaskIsStale reads the task from the API server and says whether the cached
// copy is behind it (the step then looks again a second later). A model call costs
// money and is not idempotent: make sure this reconcile does not work from a stale
// cached task (one whose newer status, perhaps the end of the task, is still on its
// way) before asking the model for a turn. A task gone is stale too.
func (r *AgentTaskReconciler) cachedTaskIsStale(ctx context.Context, task *v1.AgentTask, step *agentStep) (bool, error) {
	fresh := &v1.AgentTask{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(task), fresh); err != nil {
		return true, client.IgnoreNotFound(err)
	}
	if fresh.ResourceVersion != task.ResourceVersion {
		step.retryAfter = time.Second
		return true, nil
	}
	return false, nil
}

// modelReachable returns the model's API key when the task may reach the model
// now, and otherwise records in the step why not. The endpoint and the Secret are
// checked every turn, not once per task: an admin narrows the allow-list, an owner
// removes a Secret's label, and the next turn honours it.
func (r *AgentTaskReconciler) modelReachable(ctx context.Context, l *agentLoop, step *agentStep) (apiKey string, reachable bool, err error) {
	apiKey, refused, unavailable, err := r.modelAccess(ctx, l.task)
	switch {
	case err != nil:
		return "", false, err
	case refused != nil:
		l.state.world.Unavailable = refused.message
		step.refused = refused
		// Polled, because the fix (a label, a flag) is not an event of this task.
		step.retryAfter = r.modelRetryDelay()
		return "", false, nil
	case unavailable != "":
		l.state.world.Unavailable = unavailable
		step.retryAfter = r.modelRetryDelay()
		return "", false, nil
	}
	return apiKey, true, nil
}
