package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
)

const (
	volumeCredentials = "git-credentials"
	volumeCopySource  = "copy-source"
	// gitDeadlineSeconds bounds a clone, change, push or copy pod.
	gitDeadlineSeconds = 600
)

// GitPod is one of toolgate's own workspace steps for a task: a pod with the walls
// of a tool call's (no token, non-root, read-only root, no capabilities, seccomp,
// resources, fenced by the NetworkPolicy of Network), that mounts the whole claim
// (worktree and git directory), for a clone or a push the credentials Secret, and
// for a copy the workspace copied from, read-only. No tool runs in it: the runner
// carries out Request (a git step with go-git, or a copy).
type GitPod struct {
	Namespace, Name string
	Task            string
	ClaimName       string
	// ReadOnlyClaim mounts the claim read-only (a change only reads).
	ReadOnlyClaim bool
	SecretName    string
	Network       toolgatev1alpha1.NetworkSpec
	Request       gitws.Request
	// Execution names the Execution a push pod carries out (it wakes it); "" for
	// the task's own clone, change and copy pods.
	Execution string
	// CopySourceClaim, for a copy, is the claim copied from, mounted read-only at
	// gitws.PodCopySourceRoot; CopySourceSubPath is the folder of it mounted, the
	// one the copied task's tools see (a git task's worktree: its git directory is
	// not even in the pod).
	CopySourceClaim, CopySourceSubPath string
}

// GitPodName is the name of a task's git pod for op, unique to what it is asked
// (key): toolgate-git-<op>-<digest>, a DNS label whatever the task's name.
func GitPodName(op string, key ...string) string {
	h := sha256.New()
	for _, k := range key {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return "toolgate-git-" + op + "-" + hex.EncodeToString(h.Sum(nil))[:20]
}

// BuildGitPod returns the pod of a git step: a bare pod that runs once (no Job: a
// step that failed is looked at before it is tried again, and the task owns the
// pod). The caller sets the owner reference.
func BuildGitPod(g GitPod, runnerImage string) (*corev1.Pod, error) {
	if runnerImage == "" {
		return nil, fmt.Errorf("the controller has no runner image: start it with --runner-image")
	}
	request, err := json.Marshal(g.Request)
	if err != nil {
		return nil, err
	}
	profile := toolgatev1alpha1.SandboxProfile{
		// The runner is the program: it runs from the runner image itself.
		Image:              runnerImage,
		Network:            g.Network,
		WorkspaceClaimName: g.ClaimName,
		ReadOnlyWorkspace:  g.ReadOnlyClaim,
	}
	pod := sandboxPodSpec(profile, runnerImage, []string{RunnerPath, "git"}, []corev1.EnvVar{{Name: gitws.RequestEnv, Value: string(request)}})
	tool := &pod.Containers[0]
	for i := range tool.VolumeMounts {
		if tool.VolumeMounts[i].Name == volumeWorkspace {
			tool.VolumeMounts[i].MountPath = gitws.PodClaimRoot
		}
	}
	tool.WorkingDir = gitws.PodClaimRoot
	if g.SecretName != "" {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: volumeCredentials, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: g.SecretName, DefaultMode: ptr.To[int32](0o440)},
		}})
		tool.VolumeMounts = append(tool.VolumeMounts, corev1.VolumeMount{Name: volumeCredentials, MountPath: gitws.PodCredentialsDir, ReadOnly: true})
	}
	if g.CopySourceClaim != "" {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: volumeCopySource, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: g.CopySourceClaim, ReadOnly: true},
		}})
		tool.VolumeMounts = append(tool.VolumeMounts, corev1.VolumeMount{Name: volumeCopySource, MountPath: gitws.PodCopySourceRoot, SubPath: g.CopySourceSubPath, ReadOnly: true})
	}
	labels := map[string]string{
		toolgatev1alpha1.LabelTask:    LabelValue(g.Task),
		toolgatev1alpha1.LabelGit:     g.Request.Op,
		toolgatev1alpha1.LabelNetwork: networkKey(g.Network),
	}
	if g.Execution != "" {
		labels[toolgatev1alpha1.LabelExecution] = g.Execution
	}
	pod.ActiveDeadlineSeconds = ptr.To[int64](gitDeadlineSeconds)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: g.Name, Namespace: g.Namespace, Labels: labels},
		Spec:       pod,
	}, nil
}

// GitNetworkPolicy is the NetworkPolicy that fences a git pod.
func GitNetworkPolicy(namespace string, network toolgatev1alpha1.NetworkSpec) (*networkingv1.NetworkPolicy, error) {
	return BuildProfileNetworkPolicy(namespace, toolgatev1alpha1.SandboxProfile{Network: network})
}
