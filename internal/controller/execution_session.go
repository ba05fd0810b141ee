package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/tools"
)

// reconcileSession moves a call of a session (isolation Session) forward: the chain
// is checked as for a Job; then the call waits for its session pod to take calls
// (starting it when there is none, replacing it when it died); then the session and
// the start are recorded, and only once that write succeeded is the call delivered
// (sessionCalls.deliver), so that a controller that restarts or lags never delivers
// a call twice: it finds the record, and a call recorded but not in this process's
// memory is lost, never run again. Its run, when it ends, wakes this reconcile
// and is projected into the status like a Job's terminated pod.
func (r *ExecutionReconciler) reconcileSession(ctx context.Context, exec *toolgatev1alpha1.Execution) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("session", executor.ExecutionSession(exec))
	var (
		step sessionStep
		err  error
	)
	switch {
	case exec.Status.SessionName != "":
		var settled bool
		if step, settled, err = r.observeDeliveredCall(ctx, exec); err != nil || settled {
			return ctrl.Result{}, err
		}
	case r.sessions.known(exec.UID):
		return ctrl.Result{}, nil // delivered a moment ago; the cache has not caught up
	default:
		var wait time.Duration
		if step, wait, err = r.prepareSessionCall(ctx, exec); err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}
	before, conflicted, err := r.writeStatus(ctx, log, exec, step.obs)
	if err != nil || conflicted {
		return conflictRequeue(conflicted), err
	}
	if before == nil {
		return ctrl.Result{RequeueAfter: step.requeue}, nil
	}
	if step.deliver != "" {
		r.sessions.deliver(ctx, exec, step.deliver, step.podUID)
	}
	if executor.IsFinished(&exec.Status) {
		if err := r.settleFinishedSessionCall(ctx, exec, step.obs.Session); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.recordSteps(log, exec, before, nil, false, step.refused)
	return ctrl.Result{RequeueAfter: step.requeue}, nil
}

// sessionStep is what a reconcile of a session call observed, and what it does
// once the status recorded it.
type sessionStep struct {
	obs     executor.Observation
	refused *refusal
	// deliver names the session pod the call is delivered to, of UID podUID.
	deliver string
	podUID  types.UID
	requeue time.Duration
}

// observeDeliveredCall observes a call recorded as delivered to its session. A
// call still in flight is stopped when it must end, and otherwise only its
// background job's start is recorded; settled says that nothing is to be written.
func (r *ExecutionReconciler) observeDeliveredCall(ctx context.Context, exec *toolgatev1alpha1.Execution) (step sessionStep, settled bool, err error) {
	run, inFlight := r.sessions.run(exec.UID)
	step.obs.Session = &executor.SessionObservation{Name: exec.Status.SessionName, Started: exec.Status.StartTime, Run: run, Background: exec.Status.Background}
	if run == nil && inFlight {
		// Its end wakes this reconcile.
		if why, err := r.whyStopCallInFlight(ctx, exec); err != nil || why != "" {
			if why != "" {
				r.sessions.stop(exec.UID, why)
			}
			return step, true, err
		}
		// A background job is recorded started once its runner said so: its
		// intent is observed then.
		if exec.Status.Background != nil || r.sessions.job(exec.UID).startedAt().IsZero() {
			return step, true, nil
		}
		step.obs.Session.Background = &toolgatev1alpha1.BackgroundStatus{StartedAt: metav1.NewTime(r.sessions.job(exec.UID).startedAt())}
		return step, false, nil
	}
	return step, false, r.observeEndedCall(ctx, exec, step.obs.Session, run)
}

// whyStopCallInFlight says why a call in flight must stop, or "": its task ended
// (the task's end deletes its sessions, which wakes this reconcile), its proposer
// cancelled it, its task was set to an isolation without background jobs while it
// runs one, or a NetworkPolicy now opens its session's walls. The task is read from
// the cache: a call stopped a moment late loses nothing.
func (r *ExecutionReconciler) whyStopCallInFlight(ctx context.Context, exec *toolgatev1alpha1.Execution) (string, error) {
	task := &toolgatev1alpha1.AgentTask{}
	err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.TaskRef.Name}, task)
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	if done, why := pipeline.TaskFinished(task); err == nil && done {
		return fmt.Sprintf("its AgentTask %s ended (%s)", exec.Spec.TaskRef.Name, why), nil
	}
	// Its proposer cancelled it (spec.cancel; the intent's watch wakes this
	// reconcile): the call alone stops, the session goes on.
	if why, err := r.sessionCallCancelled(ctx, exec); err != nil || why != "" {
		return why, err
	}
	// The job tools are gone with the sessions: nobody could see or stop it. A task
	// that is gone has no isolation Session either.
	if r.sessions.job(exec.UID) != nil && task.Spec.Sandbox.Isolation != toolgatev1alpha1.IsolationSession {
		return fmt.Sprintf("its AgentTask %s was set to isolation %s, which has no background jobs", exec.Spec.TaskRef.Name, task.Spec.Sandbox.Isolation), nil
	}
	return r.sessionWallsWidened(ctx, exec)
}

// observeEndedCall fills s with what ended a delivered call that is no longer in
// flight: its run, why the controller stopped it, or that its run was lost with the
// controller that delivered it (run nil).
func (r *ExecutionReconciler) observeEndedCall(ctx context.Context, exec *toolgatev1alpha1.Execution, s *executor.SessionObservation, run *executor.SessionRun) error {
	if run != nil && s.Background == nil && !run.JobStartedAt.IsZero() {
		s.Background = &toolgatev1alpha1.BackgroundStatus{StartedAt: metav1.NewTime(run.JobStartedAt)}
	}
	s.Stopped = r.sessions.stoppedBy(exec.UID)
	if run != nil && s.Stopped == "" && (run.Err != nil || len(run.Result) == 0 || (run.ExitCode != protocol.ExitSucceeded && run.ExitCode != protocol.ExitFailed)) {
		// A run cut short may have been stopped by its task's end, which stops
		// the task's sessions and the calls in them.
		done, why, err := r.readTaskEnded(ctx, exec, pipeline.TaskFinished)
		if err != nil {
			return err
		}
		if done {
			s.Stopped = fmt.Sprintf("its AgentTask %s ended (%s)", exec.Spec.TaskRef.Name, why)
		}
	}
	if run == nil {
		s.Lost = fmt.Sprintf("the call was delivered to session pod %s by a controller that is gone (it restarted, or lost its lead), and its result with it; the call's stream closed, which stops it in the session, and it is not run again; whether it changed anything is unknown, and the session is replaced before the next call", exec.Status.SessionName)
	}
	return nil
}

// prepareSessionCall checks the chain of a call not delivered yet, then whether its
// session takes calls: the step delivers the call when it does, waits when it does
// not yet, and records the refusal of one that may not run. wait > 0 is how long
// the chain check waits for the intent, with nothing to write.
func (r *ExecutionReconciler) prepareSessionCall(ctx context.Context, exec *toolgatev1alpha1.Execution) (step sessionStep, wait time.Duration, err error) {
	wait, step.refused, err = r.authorize(ctx, exec)
	if err != nil || wait > 0 {
		return step, wait, err
	}
	if step.refused == nil {
		var waiting string
		if waiting, step.podUID, step.refused, err = r.readySession(ctx, exec); err != nil {
			return step, 0, err
		}
		name := executor.ExecutionSession(exec)
		switch {
		case step.refused != nil:
		case waiting != "":
			step.obs.Session = &executor.SessionObservation{Name: name, Waiting: waiting}
			step.requeue = sessionRecheck
		default:
			step.obs.Session = &executor.SessionObservation{Name: name, Started: ptr.To(metav1.NewTime(r.Now()))}
			step.deliver = name
		}
	}
	if step.refused != nil {
		step.obs = executor.Observation{BuildError: step.refused}
	}
	return step, 0, nil
}

// settleFinishedSessionCall drops the recorded run of a call whose end the status
// now holds, and retires its session when it must take no further call: a session
// takes no call after one that did not end clean, nor after one delivered by a
// controller that is gone (what it did is unknown); a background job's session was
// its own.
func (r *ExecutionReconciler) settleFinishedSessionCall(ctx context.Context, exec *toolgatev1alpha1.Execution, s *executor.SessionObservation) error {
	r.sessions.forget(exec.UID)
	failpoint.Reached(failpoint.ResultRead)
	if s == nil {
		return nil
	}
	why, pod := s.Lost, types.UID("")
	if s.Run != nil {
		why, pod = retireAfter(s.Run, tools.IsBackground(exec.Spec.Tool, exec.Spec.Input.Raw)), s.Run.PodUID
	}
	if why == "" {
		return nil
	}
	return r.retireSession(ctx, exec.Namespace, exec.Status.SessionName, pod, why)
}

// sessionCallCancelled says why a session call must stop because its proposer
// cancelled it (pipeline.CallStopped), or "". Read from the cache, as the task is.
func (r *ExecutionReconciler) sessionCallCancelled(ctx context.Context, exec *toolgatev1alpha1.Execution) (string, error) {
	intent := &toolgatev1alpha1.ToolIntent{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.IntentRef.Name}, intent); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	return pipeline.CallStopped("", intent), nil
}

// sessionWallsWidened says why a call in flight must stop because a NetworkPolicy
// now opens its session pod's walls (wallsWidened; a change to any NetworkPolicy
// wakes the call), or "". A call delivered but waiting for its turn then never
// starts; one that runs is stopped (the session then takes no further call:
// readySession checks the walls before each one).
func (r *ExecutionReconciler) sessionWallsWidened(ctx context.Context, exec *toolgatev1alpha1.Execution) (string, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Status.SessionName}, pod); err != nil {
		return "", client.IgnoreNotFound(err) // a pod gone ends its call anyway
	}
	policy, err := executor.BuildNetworkPolicy(exec)
	if err != nil {
		return "", nil // it was built before the call was delivered
	}
	refused, err := wallsWidened(ctx, r.Client, policy, "session pod "+pod.Name, pod.Labels)
	if err != nil || refused == nil {
		return "", err
	}
	return refused.Error(), nil
}

// retireSession deletes the session pod a call ran in (of that UID, when known: a
// new pod of the name is not the one), for why. The next call starts a new session.
func (r *ExecutionReconciler) retireSession(ctx context.Context, namespace, name string, uid types.UID, why string) error {
	pod := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !pod.DeletionTimestamp.IsZero() || (uid != "" && pod.UID != uid) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("replacing the session", "pod", name, "why", why)
	return kube.DeleteByUID(ctx, r.Client, pod)
}

// readySession returns "" and the pod's UID when the Execution's session pod takes
// calls, else why
// the call waits: the session is started when it does not exist, and replaced when
// it died. A pod under the session's name that is not the task's session is a
// refusal. The NetworkPolicy of the call's walls is made first, as for a Job, and
// a session whose walls another NetworkPolicy opens takes no call
// (wallsWidened).
func (r *ExecutionReconciler) readySession(ctx context.Context, exec *toolgatev1alpha1.Execution) (string, types.UID, *refusal, error) {
	task := &toolgatev1alpha1.AgentTask{}
	if err := kube.GetFresh(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.TaskRef.Name}, task); apierrors.IsNotFound(err) {
		return "", "", refuse(EventChainBroken, "AgentTask %s is gone: its session cannot be started", exec.Spec.TaskRef.Name), nil
	} else if err != nil {
		return "", "", nil, err
	}
	// Sessions are named after the task's name: a call decided for an earlier task
	// of the name must not run in the sessions of the one that replaced it.
	if decided, err := r.decidedTaskUID(ctx, r.Client, exec); err != nil {
		return "", "", nil, err
	} else if decided != task.UID {
		// The cache may lag behind either object: only the API server's copies
		// refuse the call.
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(task), task); apierrors.IsNotFound(err) {
			return "", "", refuse(EventChainBroken, "AgentTask %s is gone: its session cannot be started", exec.Spec.TaskRef.Name), nil
		} else if err != nil {
			return "", "", nil, err
		}
		if decided, err = r.decidedTaskUID(ctx, r.APIReader, exec); err != nil {
			return "", "", nil, err
		}
		if decided != task.UID {
			return "", "", refuse(EventChainBroken, "AgentTask %s (uid %s) is not the task this call was decided for (uid %q): it was deleted and created again since, and the call does not run in the new task's sessions", task.Name, task.UID, decided), nil
		}
	}
	name := executor.ExecutionSession(exec)
	pod := &corev1.Pod{}
	err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		refused, err := startSession(ctx, r.Client, r.APIReader, r.Scheme, task, executor.ExecutionSessionOf(exec), r.Options.RunnerImage)
		if err != nil || refused != nil {
			return "", "", refused, err
		}
		return fmt.Sprintf("session pod %s is starting", name), "", nil, nil
	} else if err != nil {
		return "", "", nil, err
	}
	if refused, err := sessionInTheWay(pod, task, executor.ExecutionSessionOf(exec)); errors.Is(err, errEarlierTask) {
		return fmt.Sprintf("session pod %s: %v", name, err), "", nil, nil
	} else if err != nil || refused != nil {
		return "", "", refused, err
	}
	if ended, why := executor.SessionEnded(pod); ended && pod.DeletionTimestamp.IsZero() {
		if err := kube.DeleteByUID(ctx, r.Client, pod); err != nil {
			return "", "", nil, err
		}
		return why + "; a new session is started for this call", "", nil, nil
	}
	if ready, why := executor.SessionReady(pod); !ready {
		return why, "", nil, nil
	}
	// The policy made before the pod may have been deleted since: the call still
	// runs only behind it. Another policy made since the pod started may open its
	// walls: checked before every call.
	policy, err := executor.BuildNetworkPolicy(exec)
	if err != nil {
		return "", "", refuse(EventChainBroken, "%s", err), nil
	}
	if refused, err := ensureNetworkPolicy(ctx, r.Client, r.APIReader, policy); err != nil || refused != nil {
		return "", "", refused, err
	}
	refused, err := wallsWidened(ctx, r.Client, policy, "session pod "+pod.Name, pod.Labels)
	if err != nil || refused != nil {
		return "", "", refused, err
	}
	return "", pod.UID, nil, nil
}
