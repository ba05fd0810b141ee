package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// ensureNetworkPolicy makes sure the NetworkPolicy that fences a sandbox's pods
// exists: the namespace's policy for its network walls (executor.NetworkPolicyName),
// made by the first pod behind those walls. One found by name (or AlreadyExists)
// counts only when its spec is what BuildNetworkPolicy makes: it then fences the pod
// exactly as the controller's own would, whoever made it. A policy of the name that
// selects nothing, or allows more, would leave the pod unfenced: a refusal.
func ensureNetworkPolicy(ctx context.Context, c client.Client, api client.Reader, policy *networkingv1.NetworkPolicy) (*refusal, error) {
	key := client.ObjectKeyFromObject(policy)
	existing := &networkingv1.NetworkPolicy{}
	err := c.Get(ctx, key, existing)
	if err == nil {
		return policyInTheWay(policy, existing), nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err := c.Create(ctx, policy); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating NetworkPolicy %s: %w", policy.Name, err)
		}
		if err := api.Get(ctx, key, existing); err != nil {
			return nil, err
		}
		return policyInTheWay(policy, existing), nil
	}
	return nil, nil
}

// startSession creates the task's session pod for profile, behind its NetworkPolicy
// (made first, so that the pod never runs unfenced), unless another NetworkPolicy
// would open its walls (wallsWidened). An existing pod of the name is left as it
// is: the caller checks it (sessionInTheWay).
func startSession(ctx context.Context, c client.Client, api client.Reader, scheme *runtime.Scheme, task *v1.AgentTask, session executor.Session, runnerImage string) (*refusal, error) {
	policy, err := executor.BuildProfileNetworkPolicy(task.Namespace, session.Profile)
	if err != nil {
		return refuse(EventChainBroken, "%s", err), nil
	}
	if refused, err := ensureNetworkPolicy(ctx, c, api, policy); err != nil || refused != nil {
		return refused, err
	}
	pod, err := executor.BuildSessionPod(task.Namespace, session, runnerImage)
	if err != nil {
		return refuse(EventChainBroken, "%s", err), nil
	}
	if refused, err := wallsWidened(ctx, c, policy, "session pod "+pod.Name, pod.Labels); err != nil || refused != nil {
		return refused, err
	}
	if err := controllerutil.SetControllerReference(task, pod, scheme); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating session pod %s: %w", pod.Name, err)
	}
	return nil, nil
}

// sessionInTheWay refuses a pod found under a session's name that is not the task's
// session for that profile: the task must control it and it must carry the
// session's labels. A pod of an earlier task of the same name is not refused but
// waited out (errEarlierTask): the garbage collector removes it.
func sessionInTheWay(pod *corev1.Pod, task *v1.AgentTask, session executor.Session) (*refusal, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "AgentTask" || owner.Name != task.Name {
		return refuse(toolintent.EventObjectInTheWay, "a pod named %s exists in namespace %s and is not a session of AgentTask %s; delete it, and the next call starts the session", pod.Name, pod.Namespace, task.Name), nil
	}
	if owner.UID != task.UID {
		return nil, errEarlierTask
	}
	for k, v := range session.Labels() {
		if pod.Labels[k] != v {
			return refuse(toolintent.EventObjectInTheWay, "session pod %s in namespace %s lost its label %s=%s; it is not trusted to run calls. Delete it, and the next call starts a new session", pod.Name, pod.Namespace, k, v), nil
		}
	}
	return nil, nil
}

// errEarlierTask: the pod belongs to a deleted task of the same name.
var errEarlierTask = errors.New("the pod belongs to an earlier AgentTask of this name, which is being deleted")
