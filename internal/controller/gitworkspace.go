package controller

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/kube"
)

// +kubebuilder:rbac:groups="",resources=services,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create

const (
	// gitPollEvery is how often a git pod in progress is looked at.
	gitPollEvery = 2 * time.Second
)

// workspaceSeed is where the clone (spec.workspace.git) or the copy
// (spec.workspace.copyOf) that seeds a task's workspace stands.
type workspaceSeed struct {
	status *v1.WorkspaceStatus
	ready  bool
	// failed: the workspace can never be seeded, and the task fails with reason
	// and msg; otherwise a reason and msg say what the task waits for.
	failed bool
	reason string
	msg    string
	wait   time.Duration
}

// cloneWorkspace moves the clone of spec.workspace.git into the task's claim on:
// it checks the URL and the credentials Secret, fences a clone pod to the
// repository's host, starts it, and reads its result. The workspace is ready once
// status.workspace.commit is recorded; until then the task's calls wait.
func (r *AgentTaskReconciler) cloneWorkspace(ctx context.Context, task *v1.AgentTask, claim string) (workspaceSeed, error) {
	src := task.Spec.Workspace.Git
	ws := &v1.WorkspaceStatus{}
	if task.Status.Workspace != nil {
		ws = task.Status.Workspace.DeepCopy()
	}
	if ws.Commit != "" {
		return workspaceSeed{status: ws, ready: true}, nil
	}
	out := workspaceSeed{status: ws, reason: v1.ReasonWorkspaceCloning}
	remote, err := gitws.ParseRemote(src.URL)
	if err != nil {
		out.reason, out.msg = v1.ReasonGitURLInvalid, "spec.workspace.git.url: "+err.Error()
		return out, nil
	}
	secretName, secretVersion, problem, err := gitCredentials(ctx, r.APIReader, task.Namespace, src.SecretRef, "spec.workspace.git.secretRef")
	if err != nil || problem != "" {
		// No watch on Secrets (the controller caches none but model credentials):
		// a Secret created or labelled later is seen on the next look.
		out.reason, out.wait = v1.ReasonGitCredentialsNotFound, r.Options.gitRetry()
		out.msg = fmt.Sprintf("%s; looked at again every %s", problem, r.Options.gitRetry())
		return out, err
	}
	network, problem, err := gitNetwork(ctx, r.APIReader, task.Namespace, remote, r.Options.gitRetry())
	if err != nil {
		return out, err
	}
	if problem != "" {
		out.reason, out.msg, out.wait = v1.ReasonGitHostUnreachable, problem, r.Options.gitRetry()
		return out, nil
	}
	name := executor.GitPodName(gitws.OpClone, string(task.UID), secretName, secretVersion, networkKeyText(network))
	ws.CloneJobName = name
	pod := &corev1.Pod{}
	err = kube.GetFresh(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: task.Namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		build := executor.GitPod{
			Namespace: task.Namespace, Name: name, Task: task.Name, ClaimName: claim, SecretName: secretName, Network: network,
			Request: gitws.Request{Op: gitws.OpClone, URL: src.URL, Revision: src.Revision},
		}
		if err := startGitPod(ctx, r.Client, r.APIReader, r.Scheme, task, build, r.Options.RunnerImage); err != nil {
			return out, err
		}
		out.msg, out.wait = fmt.Sprintf("cloning %s at %s (pod %s)", src.URL, revisionText(src.Revision), name), gitPollEvery
		return out, nil
	}
	if err != nil {
		return out, err
	}
	return r.cloneStands(ctx, task, pod, out)
}

// cloneStands reads where the task's clone pod stands into out: a pod that is not
// the task's, a clone under way, done, or failed (a host that was unreachable is
// tried again, as is a Secret that changes).
func (r *AgentTaskReconciler) cloneStands(ctx context.Context, task *v1.AgentTask, pod *corev1.Pod, out workspaceSeed) (workspaceSeed, error) {
	src, ws, name := task.Spec.Workspace.Git, out.status, pod.Name
	if !metav1.IsControlledBy(pod, task) {
		out.reason = v1.ReasonGitCloneFailed
		out.msg = fmt.Sprintf("a pod named %s exists in namespace %s and is not this task's clone; delete it", name, task.Namespace)
		return out, nil
	}
	res, finished, why := gitPodResult(pod)
	switch {
	case !finished:
		out.msg, out.wait = fmt.Sprintf("cloning %s at %s (pod %s)", src.URL, revisionText(src.Revision), name), gitPollEvery
		if why != "" {
			out.msg += ": " + why
		}
	case why != "":
		out.reason = v1.ReasonGitCloneFailed
		out.msg = fmt.Sprintf("the clone pod %s ended without a result (%s); delete it to try again", name, why)
	case res.Kind == "" && res.Cloned != nil:
		now := metav1.NewTime(r.Now())
		ws.Commit, ws.Ref, ws.ClonedAt = res.Cloned.Commit, res.Cloned.Ref, &now
		out.ready, out.reason, out.msg = true, "", ""
	default:
		out.reason, out.msg = cloneFailure(res.Kind), fmt.Sprintf("cloning %s at %s failed: %s", src.URL, revisionText(src.Revision), res.Message)
		switch res.Kind {
		case gitws.FailureHostUnreachable:
			// The host may come back: the pod goes and the clone is tried again.
			out.msg += fmt.Sprintf(" (tried again every %s)", r.Options.gitRetry())
			out.wait = r.Options.gitRetry()
			if finishedAt := gitPodFinishedAt(pod); r.Now().Sub(finishedAt) >= r.Options.gitRetry() {
				if err := kube.DeleteByUID(ctx, r.Client, pod); err != nil {
					return out, err
				}
				out.wait = time.Second
			}
		case gitws.FailureCredentials:
			// A changed Secret (its resourceVersion) names another clone pod.
			out.msg += fmt.Sprintf("; the clone is tried again when the Secret changes (looked at every %s)", r.Options.gitRetry())
			out.wait = r.Options.gitRetry()
		}
	}
	return out, nil
}

// startGitPod fences and creates a git pod controlled by owner (the task; the
// push's Execution for a push).
func startGitPod(ctx context.Context, c client.Client, api client.Reader, scheme *runtime.Scheme, owner client.Object, g executor.GitPod, runnerImage string) error {
	policy, err := executor.GitNetworkPolicy(g.Namespace, g.Network)
	if err != nil {
		return err
	}
	if refused, err := ensureNetworkPolicy(ctx, c, api, policy); err != nil {
		return err
	} else if refused != nil {
		return fmt.Errorf("%s", refused.Error())
	}
	pod, err := executor.BuildGitPod(g, runnerImage)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(owner, pod, scheme); err != nil {
		return err
	}
	if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating git pod %s: %w", pod.Name, err)
	}
	return nil
}

// gitPodResult reads a git pod's result: finished once its container ended; why
// says what is wrong when it ended (or is stuck) without a result.
func gitPodResult(pod *corev1.Pod) (gitws.Result, bool, string) {
	if t := executor.ToolTermination(pod); t != nil {
		res, err := gitws.ParseResult(t.Message)
		if err != nil {
			reason := ""
			if t.Reason != "" {
				reason = ", reason " + t.Reason
			}
			return res, true, fmt.Sprintf("exit code %d%s: %v", t.ExitCode, reason, err)
		}
		return res, true, ""
	}
	if pod.Status.Phase == corev1.PodFailed {
		return gitws.Result{}, true, fmt.Sprintf("pod failed: %s %s", pod.Status.Reason, pod.Status.Message)
	}
	for _, s := range append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
			return gitws.Result{}, false, fmt.Sprintf("container %s waits: %s %s", s.Name, w.Reason, w.Message)
		}
	}
	return gitws.Result{}, false, ""
}

func gitPodFinishedAt(pod *corev1.Pod) time.Time {
	if t := executor.ToolTermination(pod); t != nil {
		return t.FinishedAt.Time
	}
	return pod.CreationTimestamp.Time
}

func cloneFailure(kind gitws.FailureKind) string {
	switch kind {
	case gitws.FailureURLInvalid:
		return v1.ReasonGitURLInvalid
	case gitws.FailureRepositoryNotFound:
		return v1.ReasonGitRepositoryNotFound
	case gitws.FailureRevisionNotFound:
		return v1.ReasonGitRevisionNotFound
	case gitws.FailureCredentials:
		return v1.ReasonGitCredentialsRefused
	case gitws.FailureHostUnreachable:
		return v1.ReasonGitHostUnreachable
	}
	return v1.ReasonGitCloneFailed
}

// gitFailure says whether a Ready reason is a clone that failed.
func gitFailure(reason string) bool {
	switch reason {
	case v1.ReasonGitURLInvalid, v1.ReasonGitRepositoryNotFound, v1.ReasonGitRevisionNotFound, v1.ReasonGitCredentialsRefused,
		v1.ReasonGitHostUnreachable, v1.ReasonGitCredentialsNotFound, v1.ReasonGitCloneFailed:
		return true
	}
	return false
}

func revisionText(rev string) string {
	if rev == "" {
		return "HEAD"
	}
	return rev
}

// gitCredentials checks the Secret a git step names: it must exist and be
// labelled v1.LabelGitCredentials=true. It returns its name and resourceVersion (a
// changed Secret is a new attempt), or why it cannot be used. Only the Secret's
// metadata is read: its data goes to the git pod alone.
func gitCredentials(ctx context.Context, api client.Reader, namespace string, ref *v1.LocalObjectReference, field string) (name, version, problem string, err error) {
	if ref == nil || ref.Name == "" {
		return "", "", "", nil
	}
	md := &metav1.PartialObjectMetadata{}
	md.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, md)
	switch {
	case apierrors.IsNotFound(err):
		return "", "", fmt.Sprintf("Secret %q named by %s does not exist in namespace %s; create it (keys token, or ssh-privatekey and known_hosts) with the label %s=true", ref.Name, field, namespace, v1.LabelGitCredentials), nil
	case err != nil:
		return "", "", "", fmt.Errorf("reading Secret %s: %w", ref.Name, err)
	}
	if md.Labels[v1.LabelGitCredentials] != "true" {
		return "", "", fmt.Sprintf("Secret %q named by %s is not labelled %s=true: a task may send only a Secret labelled so to a git host (kubectl label secret %s %s=true)", ref.Name, field, v1.LabelGitCredentials, ref.Name, v1.LabelGitCredentials), nil
	}
	return ref.Name, md.ResourceVersion, "", nil
}

// gitNetwork is the egress of a git pod: the repository's host alone, on its port,
// and the cluster DNS to resolve its name. A host that is a Service of the cluster
// (NAME, NAME.NAMESPACE, NAME.NAMESPACE.svc[.DOMAIN]) is reached at its endpoints'
// addresses and target ports, since NetworkPolicy sees a connection to a Service
// after it was translated to a pod; any other host at the addresses it resolves to
// from the controller.
func gitNetwork(ctx context.Context, api client.Reader, namespace string, remote gitws.Remote, retry time.Duration) (v1.NetworkSpec, string, error) {
	var rules []v1.EgressRule
	add := func(ip string, port int32) {
		bits := "/32"
		if strings.Contains(ip, ":") {
			bits = "/128"
		}
		rules = append(rules, v1.EgressRule{CIDR: ip + bits, Ports: []int32{port}})
	}
	if ip := net.ParseIP(remote.Host); ip != nil {
		add(ip.String(), int32(remote.Port))
		return v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: rules}, "", nil
	}
	if svc, ns, ok := serviceName(remote.Host, namespace); ok {
		exists, problem, err := serviceEndpoints(ctx, api, svc, ns, int32(remote.Port), retry, add)
		if err != nil || problem != "" && (exists || !strings.Contains(remote.Host, ".")) {
			return v1.NetworkSpec{}, problem, err
		}
		if exists {
			return v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: rules, ClusterDNS: true}, "", nil
		}
	}
	lookup, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(lookup, remote.Host)
	if err != nil || len(addrs) == 0 {
		return v1.NetworkSpec{}, fmt.Sprintf("the host %s of spec.workspace.git.url does not resolve from the controller (%v), so its git pod cannot be let through to it; tried again every %s", remote.Host, err, retry), nil
	}
	for i, a := range addrs {
		if i == 16 {
			break
		}
		add(a.IP.String(), int32(remote.Port))
	}
	return v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: rules, ClusterDNS: true}, "", nil
}

// serviceName reads a host as a Service of the cluster.
func serviceName(host, namespace string) (name, ns string, ok bool) {
	parts := strings.Split(host, ".")
	switch {
	case len(parts) == 1:
		return parts[0], namespace, true
	case len(parts) == 2:
		return parts[0], parts[1], true
	case len(parts) >= 3 && parts[2] == "svc":
		return parts[0], parts[1], true
	}
	return "", "", false
}

// serviceEndpoints adds the ready endpoints of Service name's port to the rules;
// exists says whether the Service exists.
func serviceEndpoints(ctx context.Context, api client.Reader, name, ns string, port int32, retry time.Duration, add func(string, int32)) (bool, string, error) {
	svc := &corev1.Service{}
	if err := api.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return false, fmt.Sprintf("no Service %s in namespace %s", name, ns), nil
	} else if err != nil {
		return false, "", err
	}
	portName := ""
	known := false
	for _, p := range svc.Spec.Ports {
		if p.Port == port && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
			portName, known = p.Name, true
		}
	}
	if !known {
		return true, fmt.Sprintf("Service %s/%s has no TCP port %d, which spec.workspace.git.url names", ns, name, port), nil
	}
	var slices discoveryv1.EndpointSliceList
	if err := api.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return false, "", err
	}
	found := false
	for _, s := range slices.Items {
		var target int32
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				target = *p.Port
			}
		}
		if target == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				add(a, target)
				found = true
			}
		}
	}
	if !found {
		return true, fmt.Sprintf("Service %s/%s has no ready endpoint for port %d; tried again every %s", ns, name, port, retry), nil
	}
	return true, "", nil
}

// networkKeyText is a network spec as a key part of a pod's name: a clone fenced
// otherwise (the host moved) is another attempt.
func networkKeyText(n v1.NetworkSpec) string {
	var b strings.Builder
	for _, e := range n.Egress {
		fmt.Fprintf(&b, "%s:%v,", e.CIDR, e.Ports)
	}
	return b.String()
}
