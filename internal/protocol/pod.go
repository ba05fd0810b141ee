package protocol

// PodRunnerDir is the folder the runner is copied into in a sandbox pod, and
// PodRunnerPath the runner there.
const (
	PodRunnerDir  = "/toolgate-runner"
	PodRunnerPath = PodRunnerDir + "/runner"
)

// SessionCommand and ExecCommand are the runner's first argument in a session pod.
const (
	SessionCommand = "session"
	ExecCommand    = "exec"
)

// Fixed locations inside the Execution's pod.
const (
	// TerminationMessagePath is where the compact JSON result is written.
	TerminationMessagePath = "/dev/termination-log"
	// MaxTerminationMessageBytes is the kubelet's limit for the termination message.
	MaxTerminationMessageBytes = 4096
)

// InvocationEnv names the environment variable that carries the Invocation JSON.
const InvocationEnv = "TOOLGATE_INVOCATION"

// Environment variables of the runner (never of the tool) that name the targets of
// its wall probes: the pod spec sets NodeIPEnv; tests set the others, which a pod
// spec never does.
const (
	// NodeIPEnv carries the node's IP address: the pod spec sets it from the
	// downward API (status.hostIP).
	NodeIPEnv = "TOOLGATE_NODE_IP"
	// KubeletPortEnv overrides the runner's DefaultKubeletPort, for tests.
	KubeletPortEnv = "TOOLGATE_KUBELET_PORT"
	// DNSServerEnv overrides the nameservers of /etc/resolv.conf with one
	// host:port, for tests.
	DNSServerEnv = "TOOLGATE_DNS_SERVER"
)
