// Package executor turns an Execution into the sandboxed Job that runs it, and the
// Job, its Pod and the runner's result back into the Execution's status. Building and
// projecting are pure functions; reading the container log (logs.go) is the only part
// that talks to the API.
package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/tools"
	"github.com/toolgate/toolgate/internal/workspace"
)

// Fixed parts of the pod.
const (
	// ToolContainerName is the container that runs the runner and the tool; its log
	// is the tool's output.
	ToolContainerName = "tool"
	// InstallContainerName is the init container that copies the runner into the pod.
	InstallContainerName = "install-runner"
	// RunnerDir is the emptyDir the runner binary is copied into; the tool container
	// mounts it read-only.
	RunnerDir = protocol.PodRunnerDir
	// RunnerPath is the runner binary inside the tool container.
	RunnerPath = protocol.PodRunnerPath
	// RunnerImageBinary is the runner binary inside the runner image. The init
	// container runs it as `runner install DEST`, which copies itself to DEST, so the
	// runner image needs no shell or cp.
	RunnerImageBinary = "/runner"
	// TmpDir is a writable emptyDir: the root filesystem is read-only. Each bash
	// call's home is made in it, and removed after the call.
	TmpDir = "/tmp"

	// SandboxUID and SandboxGID are the non-root user and group the pod runs as; the
	// workspace is made group-writable for SandboxGID through fsGroup.
	SandboxUID int64 = 65532
	SandboxGID int64 = 65532

	// DeadlineGraceSeconds is added to the tool's timeout to get the Job's
	// activeDeadlineSeconds. The runner kills the tool at its timeout and writes a
	// result; the deadline is the backstop for a runner that cannot, and the grace
	// covers pod start-up (the deadline counts from the Job's start) and the result.
	DeadlineGraceSeconds = 60
	// JobTTLSeconds is how long a finished Job (and its pod, with the full log) is
	// kept before Kubernetes deletes it, when its Execution does not hold the whole
	// result (HoldsWholeResult); a spent Job goes much sooner (the controller's
	// --spent-job-ttl). The Execution's status keeps the result.
	JobTTLSeconds = 24 * 60 * 60
)

// Volume names.
const (
	volumeWorkspace = "workspace"
	volumeRunner    = "runner"
	volumeTmp       = "tmp"
)

// DefaultResources are the tool container's resources when the sandbox profile
// names none (the AgentTask API documents the same defaults).
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("1"),
			corev1.ResourceMemory: resource.MustParse("512Mi"),
		},
	}
}

// installResources are the init container's: it copies one file.
func installResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("16Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
	}
}

// JobName is the name of the Execution's Job and its Pod's prefix: the
// Execution's own name, so that creating it twice is AlreadyExists, never a second Job.
func JobName(exec *toolgatev1alpha1.Execution) string {
	return exec.Name
}

// Labels are the labels of the Execution's Job and Pod.
func Labels(exec *toolgatev1alpha1.Execution) map[string]string {
	labels := FindLabels(exec)
	labels[toolgatev1alpha1.LabelNetwork] = NetworkKey(exec)
	return labels
}

// FindLabels are the labels the Execution's Job and pod are found by; a Job of the
// Execution's that lost one of them cannot be trusted to be its own. Jobs made
// before toolgate fenced pods by toolgatev1alpha1.LabelNetwork carry only these.
func FindLabels(exec *toolgatev1alpha1.Execution) map[string]string {
	return map[string]string{
		toolgatev1alpha1.LabelExecution: exec.Name,
		toolgatev1alpha1.LabelIntent:    LabelValue(exec.Spec.IntentRef.Name),
		toolgatev1alpha1.LabelTask:      LabelValue(exec.Spec.TaskRef.Name),
	}
}

// NetworkKey identifies the network walls an Execution runs behind: a digest of its
// sandbox's network spec. Pods with the same key are fenced by the same rules.
func NetworkKey(exec *toolgatev1alpha1.Execution) string {
	return networkKey(exec.Spec.Sandbox.Network)
}

func networkKey(network toolgatev1alpha1.NetworkSpec) string {
	if network.Mode == "" {
		network.Mode = toolgatev1alpha1.NetworkNone // the API's default: the same walls
	}
	spec, err := json.Marshal(network)
	if err != nil {
		panic(err) // a struct of strings and numbers always marshals
	}
	sum := sha256.Sum256(spec)
	// 128 bits: a network spec made to collide with another's key would put its
	// rules on the other's pods.
	return hex.EncodeToString(sum[:16])
}

// NetworkPolicyName is the name of the NetworkPolicy that fences the Execution's
// pod: one per namespace and network walls, shared by every call behind the same
// walls, so that a call costs no NetworkPolicy of its own (one write less on its
// path to its Job). It has no owner: deleting a task or a call never removes the
// fence of another call's pod that is still running, or shutting down.
func NetworkPolicyName(exec *toolgatev1alpha1.Execution) string {
	return networkPolicyName(exec.Spec.Sandbox.Network)
}

func networkPolicyName(network toolgatev1alpha1.NetworkSpec) string {
	return "toolgate-net-" + networkKey(network)
}

// LabelValue returns name when it is a valid label value. Intent and task names may be
// longer than a label value's 63 characters; those are cut (the labels only help
// people find pods, nothing selects on them).
func LabelValue(name string) string {
	if len(name) <= validation.LabelValueMaxLength {
		return name
	}
	v := name[:validation.LabelValueMaxLength]
	for len(v) > 0 && !isAlphanumeric(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	return v
}

func isAlphanumeric(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
}

// BuildInvocation is what the runner is asked to do, from the Execution's spec.
func BuildInvocation(exec *toolgatev1alpha1.Execution) protocol.Invocation {
	var env map[string]string
	if len(exec.Spec.Env) > 0 {
		env = make(map[string]string, len(exec.Spec.Env))
		for _, e := range exec.Spec.Env {
			env[e.Name] = e.Value
		}
	}
	return protocol.Invocation{
		ExecutionName:  exec.Name,
		Tool:           string(exec.Spec.Tool),
		Input:          json.RawMessage(exec.Spec.Input.Raw),
		Workdir:        exec.Spec.Workdir,
		TimeoutSeconds: exec.Spec.TimeoutSeconds,
		MaxOutputBytes: exec.Spec.MaxOutputBytes,
		BaselineSHA256: exec.Spec.BaselineSHA256,
		Env:            env,
		Background:     tools.IsBackground(exec.Spec.Tool, exec.Spec.Input.Raw),
		// What the pod's NetworkPolicy (BuildNetworkPolicy) and workspace mount are
		// built from: the runner proves them before the tool starts.
		Walls: protocol.Walls{
			Network:           *exec.Spec.Sandbox.Network.DeepCopy(),
			ReadOnlyWorkspace: exec.Spec.Sandbox.ReadOnlyWorkspace,
			NoOutputCopy:      exec.Spec.Walls != nil && exec.Spec.Walls.NoOutputCopy,
		},
	}
}

// wallProbeEnv is the environment the runner finds its probe targets in, besides
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, which the kubelet sets in
// every container: the node's address, from the downward API. It is the runner's
// alone; the tool's environment is built by the runner (protocol.Invocation.Env).
func wallProbeEnv() []corev1.EnvVar {
	return []corev1.EnvVar{{
		Name:      protocol.NodeIPEnv,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"}},
	}}
}

// EncodeInvocation is the invocation of exec as the runner reads it: a Job's pod
// carries it in protocol.InvocationEnv, a session call sends it as its first line.
func EncodeInvocation(exec *toolgatev1alpha1.Execution) ([]byte, error) {
	return json.Marshal(BuildInvocation(exec))
}

// validate reports the first thing that makes exec impossible to run, naming the field.
func validate(exec *toolgatev1alpha1.Execution, runnerImage string) error {
	if errs := validation.IsDNS1123Label(exec.Name); len(errs) > 0 {
		return fmt.Errorf("metadata.name %q cannot name the Execution's Job (Job names become pod labels, so they must be DNS labels of at most 63 characters): %s", exec.Name, errs[0])
	}
	switch {
	case runnerImage == "":
		return fmt.Errorf("the controller has no runner image: start it with --runner-image")
	case exec.Spec.Sandbox.Image == "":
		return fmt.Errorf("spec.sandbox.image is empty: the Execution must name the image its tool runs in")
	case exec.Spec.Sandbox.WorkspaceClaimName == "":
		return fmt.Errorf("spec.sandbox.workspaceClaimName is empty: the Execution must name the workspace claim to mount")
	case exec.Spec.TimeoutSeconds < 1:
		return fmt.Errorf("spec.timeoutSeconds is %d: it must be at least 1", exec.Spec.TimeoutSeconds)
	case len(exec.Spec.Input.Raw) == 0 || !json.Valid(exec.Spec.Input.Raw):
		return fmt.Errorf("spec.input is not a JSON object: the Execution must carry the tool's validated input")
	case tools.IsBackground(exec.Spec.Tool, exec.Spec.Input.Raw):
		return fmt.Errorf("spec.input.runInBackground: a background job runs only in a session (spec.sandbox.isolation: Session), never as a Job")
	}
	return nil
}

// BuildJob returns the Job that runs exec: one pod, no retries, a deadline, no
// service-account token, non-root, a read-only root filesystem, every capability
// dropped, seccomp RuntimeDefault, the runner injected by an init container, and the
// workspace mounted (read-only for read-only tools). The caller sets the owner
// reference. It fails, naming the field, when exec cannot be run.
func BuildJob(exec *toolgatev1alpha1.Execution, runnerImage string) (*batchv1.Job, error) {
	if err := validate(exec, runnerImage); err != nil {
		return nil, err
	}
	invocation, err := EncodeInvocation(exec)
	if err != nil {
		return nil, fmt.Errorf("encoding the runner's invocation: %w", err)
	}
	labels := Labels(exec)
	pod := sandboxPodSpec(exec.Spec.Sandbox, runnerImage, []string{RunnerPath},
		// Only the invocation and the walls' probe targets: the tool's environment
		// is in the invocation, and the runner sets it for the tool alone.
		append([]corev1.EnvVar{{Name: protocol.InvocationEnv, Value: string(invocation)}}, wallProbeEnv()...))
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      JobName(exec),
			Namespace: exec.Namespace,
			Labels:    maps.Clone(labels),
		},
		Spec: batchv1.JobSpec{
			// A tool call runs at most once: a retry could repeat a write.
			BackoffLimit:            ptr.To[int32](0),
			Parallelism:             ptr.To[int32](1),
			Completions:             ptr.To[int32](1),
			ActiveDeadlineSeconds:   ptr.To(int64(exec.Spec.TimeoutSeconds) + DeadlineGraceSeconds),
			TTLSecondsAfterFinished: ptr.To[int32](JobTTLSeconds),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec:       pod,
			},
		},
	}
	return job, nil
}

// sandboxPodSpec is the pod every call runs in, as a Job's pod or as a session: no
// service-account token, non-root, a read-only root filesystem, every capability
// dropped, seccomp RuntimeDefault, the profile's resources (or DefaultResources),
// the runner injected by an init container, and the workspace mounted (read-only
// when the profile says so). The tool container runs command with env.
func sandboxPodSpec(profile toolgatev1alpha1.SandboxProfile, runnerImage string, command []string, env []corev1.EnvVar) corev1.PodSpec {
	resources := profile.Resources.Requirements()
	if len(resources.Requests) == 0 && len(resources.Limits) == 0 {
		resources = DefaultResources()
	}
	toolContainer := corev1.Container{
		Name:                     ToolContainerName,
		Image:                    profile.Image,
		Command:                  command,
		WorkingDir:               workspace.Root,
		Env:                      env,
		Resources:                resources,
		TerminationMessagePath:   protocol.TerminationMessagePath,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          containerSecurityContext(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: volumeWorkspace, MountPath: workspace.Root, SubPath: profile.WorkspaceSubPath, ReadOnly: profile.ReadOnlyWorkspace},
			{Name: volumeRunner, MountPath: RunnerDir, ReadOnly: true},
			{Name: volumeTmp, MountPath: TmpDir},
		},
	}
	installContainer := corev1.Container{
		Name:                     InstallContainerName,
		Image:                    runnerImage,
		Command:                  []string{RunnerImageBinary, "install", RunnerPath},
		Resources:                installResources(),
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          containerSecurityContext(),
		VolumeMounts:             []corev1.VolumeMount{{Name: volumeRunner, MountPath: RunnerDir}},
	}
	return corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		RuntimeClassName:             profile.RuntimeClassName,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true),
			RunAsUser:    ptr.To(SandboxUID),
			RunAsGroup:   ptr.To(SandboxGID),
			FSGroup:      ptr.To(SandboxGID),
			// Re-owning a large workspace on every mount would slow every
			// tool call; only a workspace whose root is not ours is walked.
			FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
			SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		InitContainers: []corev1.Container{installContainer},
		Containers:     []corev1.Container{toolContainer},
		Volumes: []corev1.Volume{
			{Name: volumeWorkspace, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
					ClaimName: profile.WorkspaceClaimName,
					ReadOnly:  profile.ReadOnlyWorkspace,
				},
			}},
			{Name: volumeRunner, VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("256Mi"))},
			}},
			{Name: volumeTmp, VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{},
			}},
		},
	}
}

func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// BuildNetworkPolicy returns the NetworkPolicy that fences exec's pod (and every pod
// of the namespace behind the same network walls, NetworkPolicyName): no ingress at
// all, and no egress unless the sandbox's network mode is AllowList, in which case
// exactly the listed CIDRs (on the listed TCP ports, or every port when none are
// listed), and the cluster's DNS pods when clusterDNS is set. It selects pods by
// toolgatev1alpha1.LabelNetwork alone: a pod is selected only by the policy made from its own network
// spec, so no policy widens another's rules.
func BuildNetworkPolicy(exec *toolgatev1alpha1.Execution) (*networkingv1.NetworkPolicy, error) {
	return BuildProfileNetworkPolicy(exec.Namespace, exec.Spec.Sandbox)
}

// BuildProfileNetworkPolicy is BuildNetworkPolicy for the pods of a sandbox profile
// in namespace (a session's pod has no Execution of its own).
func BuildProfileNetworkPolicy(namespace string, profile toolgatev1alpha1.SandboxProfile) (*networkingv1.NetworkPolicy, error) {
	network := profile.Network
	var egress []networkingv1.NetworkPolicyEgressRule
	switch network.Mode {
	case "", toolgatev1alpha1.NetworkNone:
		if len(network.Egress) > 0 {
			return nil, fmt.Errorf("spec.sandbox.network.egress lists %d destinations but network.mode is %q: egress is only allowed with mode AllowList", len(network.Egress), network.Mode)
		}
		if network.ClusterDNS {
			return nil, fmt.Errorf("spec.sandbox.network.clusterDNS is true but network.mode is %q: cluster DNS is only allowed with mode AllowList", network.Mode)
		}
	case toolgatev1alpha1.NetworkAllowList:
		for i, rule := range network.Egress {
			if _, _, err := net.ParseCIDR(rule.CIDR); err != nil {
				return nil, fmt.Errorf("spec.sandbox.network.egress[%d].cidr %q is not a CIDR block such as 10.0.0.0/8: %v", i, rule.CIDR, err)
			}
			r := networkingv1.NetworkPolicyEgressRule{
				To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: rule.CIDR}}},
			}
			for _, port := range slices.Sorted(slices.Values(rule.Ports)) {
				r.Ports = append(r.Ports, networkingv1.NetworkPolicyPort{
					Protocol: ptr.To(corev1.ProtocolTCP),
					Port:     ptr.To(intstr.FromInt32(port)),
				})
			}
			egress = append(egress, r)
		}
		if network.ClusterDNS {
			egress = append(egress, clusterDNSRule())
		}
	default:
		return nil, fmt.Errorf("spec.sandbox.network.mode %q is not None or AllowList", network.Mode)
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      networkPolicyName(network),
			Namespace: namespace,
			Labels:    map[string]string{toolgatev1alpha1.LabelNetwork: networkKey(network)},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{toolgatev1alpha1.LabelNetwork: networkKey(network)}},
			// Both types with no ingress rules and only the allowed egress rules:
			// everything else is denied.
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}, nil
}

// clusterDNSRule allows DNS (UDP and TCP port 53) to the cluster's DNS pods: the
// kube-system pods labelled k8s-app=kube-dns, the label CoreDNS is deployed with by
// kubeadm and most distributions. Pods, not the Service's address: a connection to
// the Service is translated to a pod's address before NetworkPolicy sees it.
func clusterDNSRule() networkingv1.NetworkPolicyEgressRule {
	port := intstr.FromInt32(53)
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptr.To(corev1.ProtocolUDP), Port: &port},
			{Protocol: ptr.To(corev1.ProtocolTCP), Port: &port},
		},
	}
}
