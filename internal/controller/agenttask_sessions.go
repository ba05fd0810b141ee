package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// keepSessions keeps the task's session pods (isolation Session): while the task is
// Ready and has had a call within the idle timeout (or was created within it), its
// two warm sessions (pipeline.SessionProfiles) exist; a session with no call for
// the idle timeout is deleted, as is every session once the task ended or pushes
// its change (which stops the calls in them, background jobs too), and every
// session with no call in it when the task was set to PerCall or is not Ready. It
// returns when to look again: when the sessions would go idle.
func (r *AgentTaskReconciler) keepSessions(ctx context.Context, task *v1.AgentTask, status v1.AgentTaskStatus) (time.Duration, error) {
	own, err := r.ownSessionPods(ctx, task)
	if err != nil {
		return 0, err
	}
	use, err := r.sessionUseOf(ctx, task)
	if err != nil {
		return 0, err
	}
	if _, ended := taskEnded(task, status); ended {
		return 0, r.deleteSessions(ctx, task, own, use.busy, true)
	}
	// A task that pushes its change runs nothing of the agent's any more: what
	// the push read is what it pushes (pipeline.PushPending).
	if pushing, _ := pipeline.PushPending(task); pushing {
		return 0, r.deleteSessions(ctx, task, own, use.busy, true)
	}
	if task.Spec.Sandbox.Isolation != v1.IsolationSession || !meta.IsStatusConditionTrue(status.Conditions, v1.ConditionReady) {
		if len(use.busy) > 0 {
			return sessionRecheck, r.deleteSessions(ctx, task, own, use.busy, false)
		}
		return 0, r.deleteSessions(ctx, task, own, use.busy, false)
	}
	idle := r.Options.sessionIdleTimeout()
	now := r.Now()
	if now.Sub(use.taskLast) >= idle && len(use.busy) == 0 {
		return 0, r.deleteSessions(ctx, task, own, use.busy, false)
	}
	warm, ok, err := r.startWarmSessions(ctx, task, own)
	if err != nil || !ok {
		return 0, err
	}
	return r.deleteIdleSessions(ctx, own, use, warm, idle, now)
}

// ownSessionPods are the task's session pods that are not being deleted, by name.
func (r *AgentTaskReconciler) ownSessionPods(ctx context.Context, task *v1.AgentTask) (map[string]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(task.Namespace), client.HasLabels{v1.LabelSession}); err != nil {
		return nil, err
	}
	own := map[string]*corev1.Pod{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if owner := metav1.GetControllerOf(pod); owner != nil && owner.UID == task.UID && pod.DeletionTimestamp.IsZero() {
			own[pod.Name] = pod
		}
	}
	return own, nil
}

// sessionUse is when a task's sessions were last used, and which are busy. A
// session's last use is the last start or end of a call in it; the task's is the
// latest of its sessions' and its own creation. A session with an unfinished call
// (a background job's too) is busy.
type sessionUse struct {
	lastUse  map[string]time.Time
	busy     map[string]bool
	taskLast time.Time
}

// sessionUseOf reads the use of the task's sessions off its Executions.
func (r *AgentTaskReconciler) sessionUseOf(ctx context.Context, task *v1.AgentTask) (sessionUse, error) {
	use := sessionUse{lastUse: map[string]time.Time{}, busy: map[string]bool{}, taskLast: task.CreationTimestamp.Time}
	var execs v1.ExecutionList
	if err := r.List(ctx, &execs, client.InNamespace(task.Namespace), client.MatchingFields{IndexExecutionTask: task.Name}); err != nil {
		return use, err
	}
	for i := range execs.Items {
		exec := &execs.Items[i]
		if !executor.IsSession(exec.Spec.Sandbox) && exec.Status.SessionName == "" {
			continue
		}
		name := exec.Status.SessionName
		if name == "" {
			name = executor.ExecutionSession(exec)
		}
		used := exec.CreationTimestamp.Time
		if finished := executor.FinishedAt(&exec.Status); finished.After(used) {
			used = finished
		}
		if !executor.IsFinished(&exec.Status) {
			use.busy[name] = true
		}
		if used.After(use.lastUse[name]) {
			use.lastUse[name] = used
		}
		if used.After(use.taskLast) {
			use.taskLast = used
		}
	}
	return use, nil
}

// deleteSessions deletes the task's sessions; but for a task that ended, not those
// with calls in them: a task that is not Ready for a while (its model unavailable),
// or was set to PerCall, lets its calls end first. A background job's own session
// goes too once the task is not Session: the job tools went with the isolation,
// and nobody could see or stop the job.
func (r *AgentTaskReconciler) deleteSessions(ctx context.Context, task *v1.AgentTask, own map[string]*corev1.Pod, busy map[string]bool, ended bool) error {
	perCall := task.Spec.Sandbox.Isolation != v1.IsolationSession
	for name, pod := range own {
		_, job := pod.Labels[v1.LabelJob]
		if keep := busy[name] && !ended && (!job || !perCall); keep {
			continue
		}
		if err := kube.DeleteByUID(ctx, r.Client, pod); err != nil {
			return err
		}
	}
	return nil
}

// startWarmSessions starts the task's warm sessions that do not exist, and returns
// their names; ok is false when the task's sandbox gives no session profiles (its
// calls say what is wrong with it).
func (r *AgentTaskReconciler) startWarmSessions(ctx context.Context, task *v1.AgentTask, own map[string]*corev1.Pod) (warm map[string]bool, ok bool, err error) {
	profiles, err := pipeline.SessionProfiles(task, r.Options.DefaultSandboxImage)
	if err != nil {
		return nil, false, nil
	}
	warm = map[string]bool{}
	for _, profile := range profiles {
		name := executor.SessionName(task.Name, profile)
		warm[name] = true
		if _, ok := own[name]; ok {
			continue
		}
		if refused, err := startSession(ctx, r.Client, r.APIReader, r.Scheme, task, executor.TaskSession(task.Name, profile), r.Options.RunnerImage); err != nil {
			return nil, false, err
		} else if refused != nil {
			ctrl.LoggerFrom(ctx).Info("not starting a warm session", "why", refused.Error())
		}
	}
	return warm, true, nil
}

// deleteIdleSessions deletes the sessions, other than the warm ones and the busy
// ones, that had no call for the idle timeout, and returns when to look again:
// when the next would go idle, or the task would.
func (r *AgentTaskReconciler) deleteIdleSessions(ctx context.Context, own map[string]*corev1.Pod, use sessionUse, warm map[string]bool, idle time.Duration, now time.Time) (time.Duration, error) {
	wait := use.taskLast.Add(idle).Sub(now)
	for name, pod := range own {
		last := use.lastUse[name]
		if pod.CreationTimestamp.After(last) {
			last = pod.CreationTimestamp.Time
		}
		if warm[name] || use.busy[name] {
			continue
		}
		if left := last.Add(idle).Sub(now); left > 0 {
			wait = min(wait, left)
			continue
		}
		if err := kube.DeleteByUID(ctx, r.Client, pod); err != nil {
			return 0, err
		}
	}
	return max(wait, time.Second), nil
}
