package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/tools"
)

// A session is a warm pod of one task for one sandbox profile (isolation Session):
// every call of the task decided to run in that profile is delivered to it by the
// controller through pods/exec, as `runner exec` (internal/protocol/sessioncall.go).
// Its name is deterministic, from the task and the profile, so that every call of a
// profile finds the same pod and two creators make one.

// SessionPrefix starts the name of every session pod; the admission policy of
// config/admission/sessions.yaml keeps the name, and exec into such a pod, to the
// controller.
const SessionPrefix = "toolgate-session-"

// SessionGraceSeconds is a session pod's termination grace period: its PID 1
// ignores SIGTERM (a call's tool could send it one), so the kubelet's SIGKILL ends
// it, and a call in flight has no result to save: it ends as an Exception anyway.
const SessionGraceSeconds = 1

// ExecCommand is the command the controller execs in a session pod's tool
// container, and the only one config/admission/sessions.yaml lets it exec.
var ExecCommand = []string{RunnerPath, protocol.ExecCommand}

// IsSession reports whether the profile runs its calls in a session.
func IsSession(profile toolgatev1alpha1.SandboxProfile) bool {
	return profile.Isolation == toolgatev1alpha1.IsolationSession
}

// Session is one session pod of a task: the profile its calls were decided into,
// and, for a background job's own session, the job (its Execution's name). A
// background job runs in a session of its own, so that no other call ever runs
// beside it: processes of one uid in one pod can reach each other.
type Session struct {
	Task    string
	Profile toolgatev1alpha1.SandboxProfile
	// Job is the background job's Execution; empty for the session shared by the
	// task's calls of Profile.
	Job string
}

// TaskSession is the session shared by the task's calls decided into profile.
func TaskSession(task string, profile toolgatev1alpha1.SandboxProfile) Session {
	return Session{Task: task, Profile: profile}
}

// ExecutionSessionOf is the session an Execution runs in: its own for a
// background job, else the one its task shares for its profile.
func ExecutionSessionOf(exec *toolgatev1alpha1.Execution) Session {
	s := TaskSession(exec.Spec.TaskRef.Name, exec.Spec.Sandbox)
	if tools.IsBackground(exec.Spec.Tool, exec.Spec.Input.Raw) {
		s.Job = exec.Name
	}
	return s
}

// Key identifies the session: a digest of the task's name, the whole profile and
// the job, so that a call runs only in a session whose pod was built from exactly
// its sandbox.
func (s Session) Key() string {
	spec, err := json.Marshal(s.Profile)
	if err != nil {
		panic(err) // a struct of strings, numbers and quantities always marshals
	}
	in := append(append([]byte(s.Task), 0), spec...)
	if s.Job != "" {
		in = append(append(in, 0), s.Job...)
	}
	sum := sha256.Sum256(in)
	// 80 bits: the name stays short, and a collision needs a second profile of the
	// same task made to collide, which buys nothing the task's owner does not have.
	return hex.EncodeToString(sum[:10])
}

// Name is the session's pod.
func (s Session) Name() string { return SessionPrefix + s.Key() }

// Labels are the labels of the session's pod: the task, the session's key and the
// network walls the profile's NetworkPolicy selects.
func (s Session) Labels() map[string]string {
	labels := map[string]string{
		toolgatev1alpha1.LabelTask:    LabelValue(s.Task),
		toolgatev1alpha1.LabelSession: s.Key(),
		toolgatev1alpha1.LabelNetwork: networkKey(s.Profile.Network),
	}
	if s.Job != "" {
		labels[toolgatev1alpha1.LabelJob] = LabelValue(s.Job)
	}
	return labels
}

// SessionName is the name of the task's shared session pod for a profile.
func SessionName(task string, profile toolgatev1alpha1.SandboxProfile) string {
	return TaskSession(task, profile).Name()
}

// ExecutionSession is the session pod an Execution runs in.
func ExecutionSession(exec *toolgatev1alpha1.Execution) string {
	return ExecutionSessionOf(exec).Name()
}

// BuildSessionPod returns the session's pod: the walls of a Job's pod
// (sandboxPodSpec), its PID 1 `runner session`, and a short grace period. It has no
// deadline: it lives until the task ends, the session is idle, or its job ended.
// The caller sets the task as its controller.
func BuildSessionPod(namespace string, s Session, runnerImage string) (*corev1.Pod, error) {
	profile := s.Profile
	switch {
	case runnerImage == "":
		return nil, fmt.Errorf("the controller has no runner image: start it with --runner-image")
	case profile.Image == "":
		return nil, fmt.Errorf("spec.sandbox.image is empty: the Execution must name the image its tool runs in")
	case profile.WorkspaceClaimName == "":
		return nil, fmt.Errorf("spec.sandbox.workspaceClaimName is empty: the Execution must name the workspace claim to mount")
	}
	spec := sandboxPodSpec(profile, runnerImage, []string{RunnerPath, protocol.SessionCommand}, wallProbeEnv())
	spec.TerminationGracePeriodSeconds = ptr.To[int64](SessionGraceSeconds)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      s.Name(),
			Namespace: namespace,
			Labels:    maps.Clone(s.Labels()),
		},
		Spec: spec,
	}, nil
}

// SessionReady says whether a session pod takes calls: running, its tool container
// started and not terminated, and not being deleted. Otherwise it says why not.
func SessionReady(pod *corev1.Pod) (bool, string) {
	if pod.DeletionTimestamp != nil {
		return false, fmt.Sprintf("session pod %s is being deleted", pod.Name)
	}
	if ended, why := SessionEnded(pod); ended {
		return false, why
	}
	tool := containerStatus(pod, ToolContainerName, false)
	if pod.Status.Phase == corev1.PodRunning && tool != nil && tool.State.Running != nil {
		return true, ""
	}
	install := containerStatus(pod, InstallContainerName, true)
	return false, fmt.Sprintf("session pod %s is starting: %s", pod.Name, waitingMessage(nil, pod, install, tool))
}

// SessionEnded says whether a session pod is dead (it never runs a call again and is
// replaced), and why.
func SessionEnded(pod *corev1.Pod) (bool, string) {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return true, fmt.Sprintf("session pod %s ended (%s%s)", pod.Name, pod.Status.Phase, reasonSuffix(pod.Status.Reason))
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if t := cs.State.Terminated; t != nil && (cs.Name == ToolContainerName || t.ExitCode != 0) {
				return true, fmt.Sprintf("session pod %s: container %s exited %d%s", pod.Name, cs.Name, t.ExitCode, reasonSuffix(t.Reason))
			}
		}
	}
	return false, ""
}

// SessionRun is one call's run in a session, as the controller received it.
type SessionRun struct {
	// StartedAt and FinishedAt bound the exec.
	StartedAt, FinishedAt time.Time
	// ExitCode is the exit code of `runner exec`.
	ExitCode int32
	// Result is what the runner wrote on stderr: its Result, last.
	Result []byte
	// Output is what it sent on stdout (protocol.Capture).
	Output []byte
	// NotRun says why the call never started, when it is known not to have: its
	// session pod was replaced while it waited for its turn, or the exec was refused
	// before its stream opened (NeverOpened).
	NotRun string
	// PodUID is the session pod the call was delivered to.
	PodUID types.UID
	// InvocationSHA256 is protocol.HashInvocation of the invocation the controller
	// sent: the runner's Result must name the same one.
	InvocationSHA256 string
	// JobStartedAt is when a background job's runner reported it started; zero for
	// other calls.
	JobStartedAt time.Time
	// Err is set when the exec itself failed: no connection, or the stream broke
	// (the session pod died, or the controller's connection did); nothing the call
	// sent is then trusted.
	Err error
}

// SessionObservation is what the controller knows of a call delivered (or to be
// delivered) to a session.
type SessionObservation struct {
	// Name is the session pod.
	Name string
	// Waiting says why the call has not been delivered yet (the session is starting
	// or being replaced); empty once it was.
	Waiting string
	// Started is when the call was delivered, as recorded before it was.
	Started *metav1.Time
	// Run is the call's finished run; nil while it runs.
	Run *SessionRun
	// Lost says why the run's result will never come (the controller that delivered
	// it is gone); set only with Run nil.
	Lost string
	// Stopped says why the call was stopped (its task ended, or job_kill), when it
	// was: a run that then ended before its tool did was aborted.
	Stopped string
	// Background is the record of a background job: set once its runner reported
	// it started.
	Background *toolgatev1alpha1.BackgroundStatus
}

// projectSession fills st from a session call and returns the Complete reason.
func projectSession(st *toolgatev1alpha1.ExecutionStatus, exec *toolgatev1alpha1.Execution, obs Observation) string {
	s := obs.Session
	st.SessionName, st.PodName = s.Name, s.Name
	if s.Background != nil {
		st.Background = s.Background.DeepCopy()
		if s.Stopped != "" && s.Run != nil {
			st.Background.StoppedBy = s.Stopped
		}
	}
	failed := func(kind toolgatev1alpha1.ErrorKind, msg string) string {
		st.Phase, st.ErrorKind, st.Message = toolgatev1alpha1.ExecutionFailed, kind, msg
		return toolgatev1alpha1.ReasonJobFailed
	}
	switch {
	case s.Started == nil:
		st.SessionName, st.PodName = "", ""
		st.Phase, st.Message = toolgatev1alpha1.ExecutionPending, s.Waiting
		return toolgatev1alpha1.ReasonSessionPending
	case s.Run == nil && s.Lost != "":
		st.StartTime = s.Started
		return failed(toolgatev1alpha1.ErrorException, s.Lost)
	case s.Run == nil:
		st.StartTime = s.Started
		st.Phase = toolgatev1alpha1.ExecutionRunning
		return toolgatev1alpha1.ReasonSessionRunning
	case s.Run.NotRun != "":
		st.StartTime = s.Started
		st.CompletionTime = ptr.To(metav1.NewTime(s.Run.FinishedAt))
		return failed(toolgatev1alpha1.ErrorException, fmt.Sprintf("not run: %s; nothing of the call ran, and it is not run again: propose it again", s.Run.NotRun))
	case s.Run.Err != nil && s.Stopped != "":
		st.StartTime = s.Started
		st.CompletionTime = ptr.To(metav1.NewTime(s.Run.FinishedAt))
		return failed(toolgatev1alpha1.ErrorAborted, fmt.Sprintf("session pod %s was stopped while the call ran, because %s; whether the call changed anything is unknown", s.Name, s.Stopped))
	case s.Run.Err != nil:
		st.StartTime = s.Started
		st.CompletionTime = ptr.To(metav1.NewTime(s.Run.FinishedAt))
		return failed(toolgatev1alpha1.ErrorException, fmt.Sprintf("the call's stream from session pod %s broke before the runner reported (%v): the session pod ended, or the connection to it did; whether the call changed anything is unknown, it is not run again, and the session is replaced before the next call", s.Name, s.Run.Err))
	}
	run := s.Run
	if len(run.Result) == 0 && s.Stopped == "" {
		st.StartTime = s.Started
		st.CompletionTime = ptr.To(metav1.NewTime(run.FinishedAt))
		st.ExitCode = ptr.To(run.ExitCode)
		SetOutput(st, LogText{Head: run.Output, Total: -1}, exec.Spec.MaxOutputBytes)
		return failed(toolgatev1alpha1.ErrorException, fmt.Sprintf("the runner in session pod %s exited %d%s without sending its result: it was killed (the tool can signal it, or the pod was stopped), so whether the tool ran to its end, and what it changed, is unknown; the call is not run again, and the session is replaced before the next call", s.Name, run.ExitCode, signalSuffix(run.ExitCode)))
	}
	log := LogText{Head: run.Output, Total: -1}
	if res, err := protocol.DecodeResult(run.Result); err == nil {
		log = SessionLog(run.Output, TotalOutputBytes(res), exec.Spec.MaxOutputBytes)
	}
	terminated := &corev1.ContainerStateTerminated{
		ExitCode:   run.ExitCode,
		Message:    string(run.Result),
		StartedAt:  *s.Started,
		FinishedAt: metav1.NewTime(run.FinishedAt),
	}
	obs.Log = log
	reason := projectTerminated(st, exec, obs, terminated, false, "", run.InvocationSHA256)
	if s.Stopped != "" && st.ErrorKind == toolgatev1alpha1.ErrorTimeout && st.Sandbox != nil {
		// The runner reports a call stopped by its stream's end as a Timeout; the
		// controller ended the stream, and says why.
		st.ErrorKind = toolgatev1alpha1.ErrorAborted
		st.Message = appendNote(fmt.Sprintf("the call was stopped while it ran, because %s; whether the call changed anything is unknown, and its output until then is kept", s.Stopped), st.Message)
	}
	if st.Sandbox == nil {
		// No trusted result: say where the call ran, and why it was cut short.
		if s.Stopped != "" {
			st.ErrorKind = toolgatev1alpha1.ErrorAborted
			st.Message = fmt.Sprintf("session pod %s was stopped while the call ran, because %s; whether the call changed anything is unknown (%s)", s.Name, s.Stopped, st.Message)
		} else {
			st.Message = appendNote(st.Message, "in session pod "+s.Name+", which is replaced before the next call")
		}
	}
	return reason
}

// SessionLog is the log of a session call from what was kept of its output
// (protocol.Capture: all of it when total fits in maxOutputBytes, else exactly the
// head budget, then the tail) and its whole length.
func SessionLog(kept []byte, total int64, maxOutputBytes int32) LogText {
	log := LogText{Head: kept, Total: total}
	if headBudget, _ := Budgets(maxOutputBytes); total > int64(maxOutputBytes) && len(kept) > headBudget {
		log.Head, log.Tail = kept[:headBudget], kept[headBudget:]
	}
	return log
}

// AnsweredByController reports whether the Execution was a background-job tool the
// controller answered (no pod ran it).
func AnsweredByController(status *toolgatev1alpha1.ExecutionStatus) bool {
	c := meta.FindStatusCondition(status.Conditions, toolgatev1alpha1.ConditionComplete)
	return c != nil && c.Reason == toolgatev1alpha1.ReasonJobToolAnswered
}
