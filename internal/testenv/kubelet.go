package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/protocol"
)

// envtest runs neither the Job controller nor a kubelet; tests play both with these.

// JobPod is the pod the Job controller would create for job: the Job's pod
// template and labels, named job.Name+suffix, with the Job as its controller.
func JobPod(job *batchv1.Job, suffix string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name + suffix, Namespace: job.Namespace, Labels: job.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
}

// FinishJobPod creates the Job's pod (JobPod, suffix "-pod"; an existing one is
// kept) and reports it finished as the kubelet would after a successful call: the
// runner's install container and the tool container exited 0, the runner's result
// (exit code 0, empty output) in the termination message. The images are only
// named in the status.
func FinishJobPod(ctx context.Context, c client.Client, job *batchv1.Job, runnerImage, sandboxImage string) error {
	pod := JobPod(job, "-pod")
	if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		return err
	}
	sum := sha256.Sum256(nil)
	msg, err := json.Marshal(protocol.Result{ExitCode: 0, OutputSHA256: hex.EncodeToString(sum[:]),
		InvocationSHA256: InvocationSHA256(pod)})
	if err != nil {
		return err
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	exited := func(name, image, message string) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name: name, Image: image, ImageID: image + "@sha256:1", Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", Message: message, StartedAt: now, FinishedAt: now,
			}},
		}
	}
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{exited(executor.InstallContainerName, runnerImage, "")}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{exited(executor.ToolContainerName, sandboxImage, string(msg))}
	return c.Status().Update(ctx, pod)
}

// InvocationSHA256 is what the runner of a Job's pod names in its result: the hash
// of the invocation in its tool container's environment ("" for none).
func InvocationSHA256(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if c.Name == executor.ToolContainerName && e.Name == protocol.InvocationEnv {
				return protocol.HashInvocation([]byte(e.Value))
			}
		}
	}
	return ""
}
