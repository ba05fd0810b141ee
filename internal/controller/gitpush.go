package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tools"
	"github.com/toolgate/toolgate/internal/transcript"
)

// EventPushProposed: the task would succeed, its change was read, and the
// controller proposed the git_push call that pushes it.
const EventPushProposed = "PushProposed"

// pushRequest is the change request the push's change is recorded under (the
// change ConfigMap names it), one per task.
func pushRequest(task *v1.AgentTask) string { return "push-" + string(task.UID) }

// pushReading says whether the task's push is reading its change: the task would
// succeed, and the git_push intent is not proposed yet.
func pushReading(task *v1.AgentTask) bool {
	ws := task.Status.Workspace
	if ws == nil || ws.Push == nil || ws.Push.IntentName != "" {
		return false
	}
	done, _ := pipeline.TaskFinished(task)
	return !done
}

// observePush is what the task's push stands at, once the task would succeed
// (status.workspace.push is set): its intent, or the change recorded for it, or
// what it waits for before the change is read, or why there is nothing to push.
// nil before. intents are the task's.
func (r *AgentTaskReconciler) observePush(ctx context.Context, task *v1.AgentTask, intents []v1.ToolIntent) (*pipeline.PushWorld, error) {
	g := task.Spec.Workspace.Git
	ws := task.Status.Workspace
	if g == nil || g.Push == nil || ws == nil || ws.Push == nil {
		return nil, nil
	}
	pw := &pipeline.PushWorld{}
	// Looked up by name, not among the task's intents: one of that name that names
	// another task would otherwise block the push's create for ever.
	name := pipeline.PushIntentName(task.Name)
	in := &v1.ToolIntent{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: name}, in); {
	case err == nil && in.Spec.TaskRef.Name == task.Name && metav1.IsControlledBy(in, task) &&
		in.Spec.RequestedBy == r.Options.identity() && in.Spec.Tool == v1.ToolGitPush:
		pw.Intent = in
		return pw, nil
	case err == nil:
		// Someone else's intent in the push's place is never taken for the push (its
		// outcome would say the change was pushed or refused).
		pw.Failure = fmt.Sprintf("a ToolIntent named %s exists and is not this task's push (it names AgentTask %s and was requested by %q; the controller creates the push, owned by the task and requested by itself): nothing was pushed",
			name, in.Spec.TaskRef.Name, in.Spec.RequestedBy)
		return pw, nil
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	if ws.Push.IntentName != "" {
		pw.Failure = fmt.Sprintf("ToolIntent %s, the push, was deleted before it was observed: whether anything was pushed is unknown, look at branch %s on the server", ws.Push.IntentName, g.Push.Branch)
		return pw, nil
	}
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: pipeline.PushRecordName(task.Name)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		pw.Waiting, err = r.pushReadWaitsFor(ctx, task, intents)
		return pw, err
	case err != nil:
		return nil, err
	case !transcript.ControlledByTask(cm, task):
		pw.Failure = fmt.Sprintf("ConfigMap %s exists and is not this task's push record (the task does not control it), so the change to push cannot be recorded: nothing was pushed", cm.Name)
		return pw, nil
	}
	var rec gitws.Record
	switch err := json.Unmarshal([]byte(cm.Data[gitws.RecordKey]), &rec); {
	case err != nil:
		pw.Failure = fmt.Sprintf("the push record %s does not parse (%v): nothing was pushed", cm.Name, err)
	case rec.Kind != "":
		pw.Failure = fmt.Sprintf("the workspace's change could not be read (%s): %s", rec.Kind, rec.Message)
	default:
		pw.Record = &rec
	}
	return pw, nil
}

// maxNamedWaits is how many of the things a push waits for its message names.
const maxNamedWaits = 5

// pushReadWaitsFor names what of the task still runs, or may still run, before its
// change is read for the push: an intent of the agent's not observed yet (it may
// yet be allowed and run), an Execution not finished, a session pod (its calls and
// background jobs), a call's pod whose container has not ended. "" once none is
// left: then nothing of the agent's writes the worktree while the change is read,
// approved and pushed. A Job call is waited for, not stopped: it was decided (and
// perhaps approved) before the task would succeed, and its timeout bounds the wait;
// sessions are stopped by keepSessions, since a background job has no end of its own.
func (r *AgentTaskReconciler) pushReadWaitsFor(ctx context.Context, task *v1.AgentTask, intents []v1.ToolIntent) (string, error) {
	var running []string
	push := pipeline.PushIntentName(task.Name)
	for i := range intents {
		if in := &intents[i]; in.Name != push && in.Status.Observation == nil {
			running = append(running, "ToolIntent "+in.Name)
		}
	}
	var execs v1.ExecutionList
	if err := r.List(ctx, &execs, client.InNamespace(task.Namespace), client.MatchingFields{IndexExecutionTask: task.Name}); err != nil {
		return "", err
	}
	calls := map[string]bool{}
	for i := range execs.Items {
		exec := &execs.Items[i]
		if exec.Spec.TaskRef.Name != task.Name {
			continue
		}
		calls[exec.Name] = true
		if !executor.IsFinished(&exec.Status) {
			running = append(running, "Execution "+exec.Name)
		}
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(task.Namespace), client.MatchingLabels{v1.LabelTask: executor.LabelValue(task.Name)}); err != nil {
		return "", err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if _, git := pod.Labels[v1.LabelGit]; git {
			continue // toolgate's own (clone, change), never the agent's
		}
		ended := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		switch {
		case metav1.IsControlledBy(pod, task):
			// A session pod runs its processes until it is gone, whatever its phase.
			running = append(running, "session pod "+pod.Name)
		case calls[pod.Labels[v1.LabelExecution]] && !ended:
			running = append(running, "pod "+pod.Name)
		}
	}
	if len(running) > maxNamedWaits {
		running = append(running[:maxNamedWaits], fmt.Sprintf("%d more", len(running)-maxNamedWaits))
	}
	return strings.Join(running, ", "), nil
}

// preparePush moves a push that reads its change on: once nothing of the task
// runs (keepSessions stops its sessions and background jobs), it records the
// change in the push's own immutable record (a change pod, as for kubectl
// toolgate diff), then proposes the git_push intent that pushes exactly that
// change (its base and tree), which policy decides and a human approves like any
// call. It returns when to look again.
func (r *AgentTaskReconciler) preparePush(ctx context.Context, task *v1.AgentTask, pw *pipeline.PushWorld) (time.Duration, error) {
	switch {
	case !pushReading(task):
		return 0, nil
	case pw == nil:
		// This pass wrote the status that starts the push: the task's calls are
		// looked at on the next one, before anything is read.
		return time.Second, nil
	case pw.Intent != nil || pw.Failure != "":
		return 0, nil
	case pw.Waiting != "":
		return gitPollEvery, nil
	case pw.Record == nil:
		return r.recordPushChange(ctx, task)
	case pw.Record.FileCount == 0:
		return 0, nil // nothing to push: the task succeeds
	}
	input, err := json.Marshal(pipeline.PushInput(task, *pw.Record))
	if err != nil {
		return 0, err
	}
	labels := map[string]string{v1.LabelTurn: fmt.Sprint(task.Status.Turn)}
	if len(validation.IsValidLabelValue(task.Name)) == 0 {
		labels[v1.LabelTask] = task.Name
	}
	g := task.Spec.Workspace.Git
	intent := &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       task.Namespace,
			Name:            pipeline.PushIntentName(task.Name),
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))},
		},
		Spec: v1.ToolIntentSpec{
			TaskRef:   v1.LocalObjectReference{Name: task.Name},
			Turn:      task.Status.Turn,
			TurnCalls: 1,
			Tool:      v1.ToolGitPush,
			Input:     runtime.RawExtension{Raw: input},
			Reason: clip.Bytes(fmt.Sprintf("the task would succeed: push its change (%d file(s) against %s, tree %s, recorded in ConfigMap %s) as one commit on the new branch %s of %s (spec.workspace.git.push)",
				pw.Record.FileCount, pw.Record.Base, pw.Record.Tree, pipeline.PushRecordName(task.Name), g.Push.Branch, g.URL), transcript.MaxIntentReason),
			RequestedBy: r.Options.identity(),
			ProposedBy:  v1.ProposedBy{Provider: "toolgate"},
		},
	}
	if err := r.Create(ctx, intent); apierrors.IsAlreadyExists(err) {
		return time.Second, nil
	} else if err != nil {
		return 0, fmt.Errorf("creating the push ToolIntent %s: %w", intent.Name, err)
	}
	r.Recorder.Eventf(task, intent, corev1.EventTypeNormal, EventPushProposed, EventPushProposed,
		"ToolIntent %s pushes %d changed file(s) (tree %s) to branch %s of %s once it is decided (and approved, when asked)", intent.Name, pw.Record.FileCount, pw.Record.Tree, g.Push.Branch, mask.Secrets(g.URL))
	ctrl.LoggerFrom(ctx).Info("proposed the push", "audit", true, "step", EventPushProposed, "namespace", task.Namespace, "task", task.Name,
		"intent", intent.Name, "branch", g.Push.Branch, "base", pw.Record.Base, "tree", pw.Record.Tree, "files", pw.Record.FileCount)
	return 0, nil
}

// reconcileGitPush carries out an allowed (or approved) git_push: the chain is
// checked as for any call, then a push pod (the whole claim, the push's Secret,
// egress only to the repository's host) commits the worktree on top of the
// intent's base and pushes it to the new branch, refusing a worktree that is not
// the tree that was approved. Its result is the call's answer. A push pod that
// was started is never started again: a second push could not tell its own
// branch from someone else's.
func (r *ExecutionReconciler) reconcileGitPush(ctx context.Context, exec *v1.Execution) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	name := executor.GitPodName(gitws.OpPush, string(exec.UID))
	var (
		obs     executor.Observation
		refused *refusal
		wait    time.Duration
		spent   *corev1.Pod
	)
	pod := &corev1.Pod{}
	err := kube.GetFresh(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: exec.Namespace, Name: name}, pod)
	switch {
	case apierrors.IsNotFound(err) && exec.Status.PodName == name:
		// The task's end deletes its pods too, and may get there before this does.
		if done, why, err := r.readTaskEnded(ctx, exec, pipeline.TaskFinished); err != nil {
			return ctrl.Result{}, err
		} else if done {
			obs.Answer = r.pushStoppedByTaskEnd(exec, name, why)
			break
		}
		obs.Answer = pushFailed(r.Now(), "not pushed as far as toolgate knows: the push pod %s was deleted before it reported; whether the branch was created is unknown, look at the server", name)
	case apierrors.IsNotFound(err):
		var started *corev1.Pod
		if wait, refused, started, obs.Answer, err = r.startPush(ctx, exec, name); err != nil {
			return ctrl.Result{}, err
		}
		if wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if refused != nil {
			obs.BuildError = refused
		}
		if started != nil {
			obs.Pod, wait = started, gitPollEvery
		}
	case err != nil:
		return ctrl.Result{}, err
	case !metav1.IsControlledBy(pod, exec):
		obs.Answer = pushFailed(r.Now(), "not pushed: a pod named %s exists and is not this call's push pod", name)
	default:
		if obs, wait, spent, err = r.pushStands(ctx, exec, pod); err != nil {
			return ctrl.Result{}, err
		}
	}
	before, conflicted, err := r.writeStatus(ctx, log, exec, obs)
	if err != nil || conflicted {
		return conflictRequeue(conflicted), err
	}
	if before != nil {
		r.recordSteps(log, exec, before, nil, false, refused)
	}
	if spent != nil && executor.IsFinished(&exec.Status) {
		// Its result is the call's: the pod would only hold the claim.
		if err := kube.DeleteByUID(ctx, r.Client, spent); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}

// pushStands reads where the call's push pod stands: still running (stopped, and
// its pod deleted, when the task ended meanwhile), or ended with its answer; spent
// is the pod of an ended push, deleted once the answer is recorded.
func (r *ExecutionReconciler) pushStands(ctx context.Context, exec *v1.Execution, pod *corev1.Pod) (obs executor.Observation, wait time.Duration, spent *corev1.Pod, err error) {
	name := pod.Name
	res, finished, why := gitPodResult(pod)
	switch {
	case !finished:
		if done, why, err := r.readTaskEnded(ctx, exec, pipeline.TaskFinished); err != nil {
			return obs, 0, nil, err
		} else if done {
			if err := kube.DeleteByUID(ctx, r.Client, pod); err != nil {
				return obs, 0, nil, err
			}
			obs.Answer = r.pushStoppedByTaskEnd(exec, name, why)
			return obs, 0, nil, nil
		}
		obs.Pod, wait = pod, gitPollEvery
	case why != "":
		obs.Answer, spent = pushFailed(r.Now(), "the push pod %s ended without a result (%s); whether the branch was created is unknown, look at the server", name, why), pod
	case res.Kind != "" || res.Pushed == nil:
		obs.Answer, spent = pushFailed(r.Now(), "not pushed (%s): %s", res.Kind, res.Message), pod
	default:
		var in tools.GitPushInput
		_ = json.Unmarshal(exec.Spec.Input.Raw, &in)
		obs.Answer, spent = &executor.JobToolAnswer{At: r.Now(), Output: pipeline.PushedText(*res.Pushed, in.URL)}, pod
	}
	return obs, wait, spent, nil
}

// pushStoppedByTaskEnd is the answer of a push whose pod (name) was deleted
// because its task ended (why).
func (r *ExecutionReconciler) pushStoppedByTaskEnd(exec *v1.Execution, name, why string) *executor.JobToolAnswer {
	return pushFailed(r.Now(), "stopped: AgentTask %s ended while its push ran (%s), so the push pod %s was deleted; whether the branch was created is unknown, look at the server", exec.Spec.TaskRef.Name, why, name)
}

// startPush checks the chain and the push's Secret and network, then creates the
// push pod. It returns a wait (the chain is pending), a refusal (the chain is
// broken), the pod it started, or an answer saying why nothing was pushed.
func (r *ExecutionReconciler) startPush(ctx context.Context, exec *v1.Execution, name string) (time.Duration, *refusal, *corev1.Pod, *executor.JobToolAnswer, error) {
	wait, refused, err := r.authorize(ctx, exec)
	if err != nil || wait > 0 || refused != nil {
		return wait, refused, nil, nil, err
	}
	notPushed := func(format string, args ...any) *executor.JobToolAnswer {
		return pushFailed(r.Now(), "not pushed: "+format, args...)
	}
	var in tools.GitPushInput
	if err := json.Unmarshal(exec.Spec.Input.Raw, &in); err != nil {
		return 0, nil, nil, notPushed("the input is not a git_push input: %v", err), nil
	}
	task := &v1.AgentTask{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.TaskRef.Name}, task); apierrors.IsNotFound(err) {
		return 0, nil, nil, notPushed("AgentTask %s does not exist", exec.Spec.TaskRef.Name), nil
	} else if err != nil {
		return 0, nil, nil, nil, err
	}
	remote, err := gitws.ParseRemote(in.URL)
	if err != nil {
		return 0, nil, nil, notPushed("input/url: %v", err), nil
	}
	var ref *v1.LocalObjectReference
	if in.Secret != "" {
		ref = &v1.LocalObjectReference{Name: in.Secret}
	}
	secret, _, problem, err := gitCredentials(ctx, r.APIReader, exec.Namespace, ref, "the push's secret (spec.workspace.git.push.secretRef, or the clone's)")
	if err != nil {
		return 0, nil, nil, nil, err
	}
	if problem != "" {
		return 0, nil, nil, notPushed("%s", problem), nil
	}
	network, problem, err := gitNetwork(ctx, r.APIReader, exec.Namespace, remote, r.Options.gitRetry())
	if err != nil {
		return 0, nil, nil, nil, err
	}
	if problem != "" {
		return 0, nil, nil, notPushed("%s", problem), nil
	}
	g := executor.GitPod{
		Namespace: exec.Namespace, Name: name, Task: task.Name, ClaimName: exec.Spec.Sandbox.WorkspaceClaimName,
		SecretName: secret, Network: network, Execution: exec.Name,
		Request: gitws.Request{
			Op: gitws.OpPush, URL: in.URL, Branch: in.Branch, Base: in.Base, Tree: in.Tree,
			Author: "AgentTask " + task.Namespace + "/" + task.Name, Email: "toolgate@" + task.Namespace + ".invalid",
			Message: pushMessage(task, exec), Date: r.Now().UTC().Truncate(time.Second),
		},
	}
	if err := startGitPod(ctx, r.Client, r.APIReader, r.Scheme, exec, g, r.Options.RunnerImage); err != nil {
		return 0, nil, nil, nil, err
	}
	pod := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: name}, pod); err != nil {
		return 0, nil, nil, nil, err
	}
	return 0, nil, pod, nil, nil
}

// pushFailed is the answer of a push that did not push (or may not have).
func pushFailed(at time.Time, format string, args ...any) *executor.JobToolAnswer {
	msg := fmt.Sprintf(format, args...)
	return &executor.JobToolAnswer{At: at, ExitCode: 1, Message: msg, Output: msg + "\n"}
}

// pushMessage is the pushed commit's message: the task's goal, then trailers that
// say which task, call and approval it came from.
func pushMessage(task *v1.AgentTask, exec *v1.Execution) string {
	goal := strings.TrimSpace(task.Spec.Goal)
	if goal == "" {
		goal = "Change of AgentTask " + task.Namespace + "/" + task.Name
	}
	msg := goal + "\n\nToolgate-Task: " + task.Namespace + "/" + task.Name + "\nToolgate-Intent: " + exec.Spec.IntentRef.Name + "\n"
	if exec.Spec.ApprovalName() != "" {
		msg += "Toolgate-Approval: " + exec.Spec.ApprovalName() + "\n"
	}
	return msg
}
