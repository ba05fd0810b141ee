package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// copyWorkspace copies the workspace of the task spec.workspace.copyOf names into
// the task's claim, once: it waits for that task and for its workspace to be
// there (its claim, its clone or copy), then starts a copy pod, which has a tool
// call's walls and no network at all, mounts that task's workspace read-only (the
// folder its tools see, so a git task's git directory is not even in the pod) and
// copies it into the claim. The workspace is ready once status.workspace.copiedAt
// is recorded; after that the task never copies again, whatever the other task
// does. A copy that cannot be made fails the task.
func (r *AgentTaskReconciler) copyWorkspace(ctx context.Context, task *v1.AgentTask, claim string) (workspaceSeed, error) {
	ws := &v1.WorkspaceStatus{}
	if task.Status.Workspace != nil {
		ws = task.Status.Workspace.DeepCopy()
	}
	if ws.CopiedAt != nil {
		return workspaceSeed{status: ws, ready: true}, nil
	}
	out := workspaceSeed{status: ws, reason: v1.ReasonWorkspaceCopying}
	if ended, _ := pipeline.TaskFinished(task); ended {
		// An ended task starts no copy; its Ready condition keeps saying why it has
		// none.
		if c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			out.reason, out.msg = c.Reason, c.Message
		}
		return out, nil
	}
	// A copy under way is read whatever became of the task it copies.
	if ws.CopyPodName != "" {
		pod := &corev1.Pod{}
		err := kube.GetFresh(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: task.Namespace, Name: ws.CopyPodName}, pod)
		switch {
		case err == nil:
			return r.copyStands(task, pod, out), nil
		case !apierrors.IsNotFound(err):
			return out, err
		}
	}

	src, srcClaim, usable, err := r.copySource(ctx, task, &out)
	if err != nil || !usable {
		return out, err
	}
	return r.startCopy(ctx, task, claim, src, srcClaim, out)
}

// copySource reads the task spec.workspace.copyOf names and its claim. usable is
// false when the copy waits for them, or can never be made: out then says why.
func (r *AgentTaskReconciler) copySource(ctx context.Context, task *v1.AgentTask, out *workspaceSeed) (src *v1.AgentTask, srcClaim string, usable bool, err error) {
	name := task.Spec.Workspace.CopyOf.TaskRef.Name
	if name == task.Name {
		out.failed, out.reason = true, v1.ReasonCopySourceUnusable
		out.msg = "spec.workspace.copyOf.taskRef names the task itself: a workspace cannot be copied from itself; create a task that names another one"
		return nil, "", false, nil
	}
	src = &v1.AgentTask{}
	err = r.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: name}, src)
	switch {
	case apierrors.IsNotFound(err):
		// Woken when it is created (tasksCopying).
		out.reason = v1.ReasonCopySourceNotFound
		out.msg = fmt.Sprintf("AgentTask %s, named by spec.workspace.copyOf.taskRef, does not exist in namespace %s; the copy waits for it", name, task.Namespace)
		return nil, "", false, nil
	case err != nil:
		return nil, "", false, err
	}
	if !pipeline.WorkspaceCloned(src) {
		if ended, how := pipeline.TaskFinished(src); ended {
			out.failed, out.reason = true, v1.ReasonCopySourceUnusable
			out.msg = fmt.Sprintf("AgentTask %s ended (%s) before its workspace was seeded: it has no workspace to copy", name, how)
			return nil, "", false, nil
		}
		out.reason = v1.ReasonCopySourceNotReady
		out.msg = fmt.Sprintf("AgentTask %s has not finished seeding its workspace", name)
		if c := meta.FindStatusCondition(src.Status.Conditions, v1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			out.msg += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
		out.msg += "; the copy waits for it"
		return nil, "", false, nil
	}
	srcClaim = pipeline.WorkspaceClaimName(src)
	if err := r.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: srcClaim}, &corev1.PersistentVolumeClaim{}); apierrors.IsNotFound(err) {
		out.reason = v1.ReasonCopySourceNotReady
		out.msg = fmt.Sprintf("the claim %s of AgentTask %s does not exist yet; the copy waits for it", srcClaim, name)
		return nil, "", false, nil
	} else if err != nil {
		return nil, "", false, err
	}
	return src, srcClaim, true, nil
}

// startCopy starts the pod that copies the claim srcClaim of the task src into the
// task's claim, unless it exists already: then it reads where the copy stands.
func (r *AgentTaskReconciler) startCopy(ctx context.Context, task *v1.AgentTask, claim string, src *v1.AgentTask, srcClaim string, out workspaceSeed) (workspaceSeed, error) {
	ws, subPath := out.status, pipeline.WorkspaceSubPath(src)
	// Another task of that name (deleted and created again), or another claim, is
	// another copy.
	podName := executor.GitPodName(gitws.OpCopy, string(task.UID), string(src.UID), srcClaim, subPath)
	ws.CopyPodName, ws.CopiedFrom = podName, srcClaim
	pod := &corev1.Pod{}
	err := kube.GetFresh(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: task.Namespace, Name: podName}, pod)
	switch {
	case err == nil:
		return r.copyStands(task, pod, out), nil
	case !apierrors.IsNotFound(err):
		return out, err
	}
	build := executor.GitPod{
		Namespace: task.Namespace, Name: podName, Task: task.Name, ClaimName: claim,
		Network:         v1.NetworkSpec{Mode: v1.NetworkNone},
		CopySourceClaim: srcClaim, CopySourceSubPath: subPath,
		Request: gitws.Request{Op: gitws.OpCopy},
	}
	if err := startGitPod(ctx, r.Client, r.APIReader, r.Scheme, task, build, r.Options.RunnerImage); err != nil {
		return out, err
	}
	out.msg, out.wait = copyingText(task, ws), gitPollEvery
	return out, nil
}

// copyStands reads where the task's copy pod stands into out.
func (r *AgentTaskReconciler) copyStands(task *v1.AgentTask, pod *corev1.Pod, out workspaceSeed) workspaceSeed {
	ws := out.status
	if !metav1.IsControlledBy(pod, task) {
		// Not the task's failure: the copy goes on once the pod is gone.
		out.reason = v1.ReasonWorkspaceCopyFailed
		out.msg = fmt.Sprintf("a pod named %s exists in namespace %s and is not this task's copy; delete it", pod.Name, task.Namespace)
		return out
	}
	res, finished, why := gitPodResult(pod)
	switch {
	case !finished:
		out.msg, out.wait = copyingText(task, ws), gitPollEvery
		if why != "" {
			out.msg += ": " + why
		}
	case why != "":
		out.failed, out.reason = true, v1.ReasonWorkspaceCopyFailed
		out.msg = fmt.Sprintf("the copy pod %s ended without a result (%s)", pod.Name, why)
	case res.Kind == "" && res.Copied != nil:
		now := metav1.NewTime(r.Now())
		ws.CopiedAt, ws.CopySkipped = &now, int32(min(res.Copied.Skipped, 1<<31-1))
		out.ready, out.reason, out.msg = true, "", ""
	default:
		out.failed, out.reason = true, v1.ReasonWorkspaceCopyFailed
		out.msg = fmt.Sprintf("copying the workspace of AgentTask %s (claim %s) with pod %s failed: %s", task.Spec.Workspace.CopyOf.TaskRef.Name, ws.CopiedFrom, pod.Name, res.Message)
	}
	return out
}

func copyingText(task *v1.AgentTask, ws *v1.WorkspaceStatus) string {
	return fmt.Sprintf("copying the workspace of AgentTask %s (claim %s) into claim %s (pod %s)",
		task.Spec.Workspace.CopyOf.TaskRef.Name, ws.CopiedFrom, pipeline.WorkspaceClaimName(task), ws.CopyPodName)
}

// tasksCopying maps a task to the tasks of its namespace waiting to copy its
// workspace.
func (r *AgentTaskReconciler) tasksCopying(ctx context.Context, o client.Object) []reconcile.Request {
	var tasks v1.AgentTaskList
	if err := r.List(ctx, &tasks, client.InNamespace(o.GetNamespace()), client.MatchingFields{IndexTaskCopyOf: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the tasks that copy a task's workspace: they are not woken", "agenttask", klog.KObj(o))
		return nil
	}
	var reqs []reconcile.Request
	for i := range tasks.Items {
		if t := &tasks.Items[i]; !pipeline.WorkspaceCloned(t) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(t)})
		}
	}
	return reqs
}

// copySourceChanged passes a task change a task waiting to copy it acts on: it
// appeared, went, was created again, seeded its workspace (or its claim appeared:
// it became Ready), or ended.
var copySourceChanged = predicate.TypedFuncs[client.Object]{
	GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		old, oldOK := e.ObjectOld.(*v1.AgentTask)
		now, nowOK := e.ObjectNew.(*v1.AgentTask)
		if !oldOK || !nowOK {
			return true
		}
		oldEnded, _ := pipeline.TaskFinished(old)
		nowEnded, _ := pipeline.TaskFinished(now)
		return old.UID != now.UID || oldEnded != nowEnded || pipeline.WorkspaceCloned(old) != pipeline.WorkspaceCloned(now) ||
			meta.IsStatusConditionTrue(old.Status.Conditions, v1.ConditionReady) != meta.IsStatusConditionTrue(now.Status.Conditions, v1.ConditionReady)
	},
}
