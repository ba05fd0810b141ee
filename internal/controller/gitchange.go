package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/transcript"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

const (
	// maxRecordedDiff is the largest diff a change ConfigMap holds (a ConfigMap
	// holds at most 1 MiB).
	maxRecordedDiff = 900 * 1024
)

// recordChange answers the task's change request, if one is open: a change pod
// (the claim read-only, no network, no credentials) reads the worktree against the
// cloned commit, and its diff is recorded, checked byte for byte against the pod's
// result, in the task's change ConfigMap. Only the controller writes a ConfigMap
// an AgentTask owns (the turn-records admission policy), so what `kubectl toolgate
// diff` prints is what the pod read.
func (r *AgentTaskReconciler) recordChange(ctx context.Context, task *v1.AgentTask, request string) (time.Duration, error) {
	if request == "" || !pipeline.WorkspaceCloned(task) || task.Spec.Workspace.Git == nil {
		return 0, nil
	}
	key := client.ObjectKey{Namespace: task.Namespace, Name: gitws.ChangeConfigMapName(task.Name)}
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = nil
	case err != nil:
		return 0, err
	case !transcript.ControlledByTask(cm, task):
		// Said on the task, not retried: the request that wakes it again is the next
		// diff, after the ConfigMap is gone.
		r.Recorder.Eventf(task, nil, corev1.EventTypeWarning, EventChangeNotRecorded, EventChangeNotRecorded,
			"ConfigMap %s exists and is not this task's change record (the task does not control it): delete it and ask again", key.Name)
		return 0, nil
	case cm.Annotations[v1.AnnotationChangeRequest] == request:
		return 0, nil
	}
	read, wait, err := r.readChange(ctx, task, request)
	if read == nil || err != nil {
		return wait, err
	}
	if cm == nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := controllerutil.SetControllerReference(task, cm, r.Scheme); err != nil {
			return 0, err
		}
	}
	if err := read.into(cm, task); err != nil {
		return 0, err
	}
	if cm.ResourceVersion == "" {
		err = r.Create(ctx, cm)
	} else {
		err = r.Update(ctx, cm)
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return time.Second, nil
	}
	if err != nil {
		return 0, fmt.Errorf("recording the change of AgentTask %s: %w", task.Name, err)
	}
	return 0, r.changeRecorded(ctx, task, cm.Name, read)
}

// recordPushChange reads the change a task's push pushes, as recordChange does,
// into the push's own record (pipeline.PushRecordName): a ConfigMap created once,
// immutable, that no later read replaces. It is what the push intent binds (its
// base and tree), what `kubectl toolgate diff` shows while the push is pending, and
// what `kubectl toolgate approve` shows before the push is approved.
func (r *AgentTaskReconciler) recordPushChange(ctx context.Context, task *v1.AgentTask) (time.Duration, error) {
	read, wait, err := r.readChange(ctx, task, pushRequest(task))
	if read == nil || err != nil {
		return wait, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: task.Namespace, Name: pipeline.PushRecordName(task.Name)},
		Immutable:  ptr.To(true),
	}
	if err := controllerutil.SetControllerReference(task, cm, r.Scheme); err != nil {
		return 0, err
	}
	if err := read.into(cm, task); err != nil {
		return 0, err
	}
	if err := r.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
		// Whose it is is looked at on the next pass (observePush): the task's own
		// record is the push's, another one fails the push.
		return time.Second, nil
	} else if err != nil {
		return 0, fmt.Errorf("recording the change AgentTask %s pushes: %w", task.Name, err)
	}
	return 0, r.changeRecorded(ctx, task, cm.Name, read)
}

// changeRead is a change pod's read, ready to be recorded.
type changeRead struct {
	rec  gitws.Record
	diff string
	pod  *corev1.Pod
	// keepPod: the pod's log holds what the record could not (a diff too large
	// for a ConfigMap, or one that is not what the pod's result describes).
	keepPod bool
}

// into writes the read into cm, answering its request.
func (c *changeRead) into(cm *corev1.ConfigMap, task *v1.AgentTask) error {
	info, err := json.Marshal(c.rec)
	if err != nil {
		return err
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	if len(validation.IsValidLabelValue(task.Name)) == 0 {
		cm.Labels[v1.LabelTask] = task.Name
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[v1.AnnotationChangeRequest] = c.rec.Request
	cm.Data = map[string]string{gitws.RecordKey: string(info), gitws.DiffKey: c.diff}
	return nil
}

// changeRecorded says on the task that a read was recorded in ConfigMap name, and
// deletes its change pod unless its log is needed.
func (r *AgentTaskReconciler) changeRecorded(ctx context.Context, task *v1.AgentTask, name string, c *changeRead) error {
	switch {
	case c.rec.Complete:
		r.Recorder.Eventf(task, nil, corev1.EventTypeNormal, EventChangeRecorded, EventChangeRecorded,
			"%d file(s) changed against %s, in ConfigMap %s (tree %s)", c.rec.FileCount, c.rec.Base, name, c.rec.Tree)
	default:
		r.Recorder.Eventf(task, nil, corev1.EventTypeWarning, EventChangeNotRecorded, EventChangeNotRecorded, "%s", c.rec.Message)
	}
	if c.keepPod {
		return nil
	}
	return kube.DeleteByUID(ctx, r.Client, c.pod)
}

// readChange moves the change pod of request on: it starts it, waits for it, and
// once it finished returns what it read (nil, and when to look again, before).
func (r *AgentTaskReconciler) readChange(ctx context.Context, task *v1.AgentTask, request string) (*changeRead, time.Duration, error) {
	name := executor.GitPodName(gitws.OpChange, string(task.UID), request)
	pod := &corev1.Pod{}
	err := kube.GetFresh(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: task.Namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		g := executor.GitPod{
			Namespace: task.Namespace, Name: name, Task: task.Name, ClaimName: pipeline.WorkspaceClaimName(task),
			ReadOnlyClaim: true, Network: v1.NetworkSpec{Mode: v1.NetworkNone},
			Request: gitws.Request{Op: gitws.OpChange, Base: task.Status.Workspace.Commit},
		}
		return nil, gitPollEvery, startGitPod(ctx, r.Client, r.APIReader, r.Scheme, task, g, r.Options.RunnerImage)
	}
	if err != nil {
		return nil, 0, err
	}
	if !metav1.IsControlledBy(pod, task) {
		r.Recorder.Eventf(task, nil, corev1.EventTypeWarning, EventChangeNotRecorded, EventChangeNotRecorded,
			"a pod named %s exists and is not this task's change pod: delete it and ask again", name)
		return nil, 0, nil
	}
	res, finished, why := gitPodResult(pod)
	if !finished {
		return nil, gitPollEvery, nil
	}
	read := &changeRead{pod: pod, rec: gitws.Record{Request: request, Base: task.Status.Workspace.Commit, RecordedAt: r.Now().UTC().Truncate(time.Second), Pod: name}}
	rec := &read.rec
	switch {
	case why != "":
		rec.Kind, rec.Message = gitws.FailureOther, fmt.Sprintf("the change pod %s ended without a result: %s", name, why)
	case res.Kind != "" || res.Change == nil:
		// The change pod's message can carry what git or a remote printed (a
		// URL with its credentials).
		rec.Kind, rec.Message = res.Kind, mask.Secrets(res.Message)
	default:
		c := res.Change
		rec.Tree, rec.Files, rec.Binary, rec.Skipped = c.Tree, c.Files, c.Binary, c.Skipped
		rec.FileCount, rec.DiffBytes, rec.DiffSHA256 = res.FileCount, res.DiffBytes, res.DiffSHA256
		if res.DiffBytes > maxRecordedDiff {
			read.keepPod = true
			rec.Message = fmt.Sprintf("the diff is %d bytes, more than a ConfigMap holds: it is the log of pod %s (kubectl logs %s -n %s), kept while the task exists", res.DiffBytes, name, name, task.Namespace)
			break
		}
		log, err := r.Logs.ReadLog(ctx, task.Namespace, name, corev1.PodLogOptions{Container: executor.ToolContainerName, LimitBytes: ptr.To(int64(maxRecordedDiff + 1))})
		sum := sha256.Sum256(log)
		switch {
		case err != nil:
			return nil, r.Options.gitRetry(), fmt.Errorf("reading the log of change pod %s: %w", name, err)
		case len(log) != res.DiffBytes || hex.EncodeToString(sum[:]) != res.DiffSHA256:
			read.keepPod = true
			rec.Kind, rec.Message = gitws.FailureOther, fmt.Sprintf("the log of change pod %s (%d bytes) is not the diff its result describes (%d bytes, sha256 %s): it is not recorded", name, len(log), res.DiffBytes, res.DiffSHA256)
		default:
			read.diff, rec.Complete, rec.Pod = string(log), true, ""
		}
	}
	return read, 0, nil
}
