package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/protocol"
)

// maxMessageBytes is the API's limit on status.message.
const maxMessageBytes = 4096

// Observation is what the controller saw of one Execution's world.
type Observation struct {
	// BuildError is set when the Execution could not be turned into a Job; nothing
	// else is looked at then. The Complete condition's reason is ReasonJobInvalid,
	// or the one a ReasonedError in its chain names.
	BuildError error
	// Job is the Execution's Job, nil when it does not exist.
	Job *batchv1.Job
	// JobCreated is true when a Job was created for the Execution earlier, so that a
	// missing Job means it was deleted.
	JobCreated bool
	// Pod is the Job's pod, nil when there is none (yet, or any more).
	Pod *corev1.Pod
	// Log is what was read of the tool container's log; only looked at when the tool
	// container terminated.
	Log LogText
	// Session is set for a call of a session (isolation Session) instead of Job, Pod
	// and Log.
	Session *SessionObservation
	// Answer is set for a background-job tool (job_output, job_list, job_kill),
	// which the controller answers itself; nothing else is looked at then.
	Answer *JobToolAnswer
}

// ReasonedError is a BuildError that names the Complete condition's reason (a
// documented constant of the API package) for why the call was not run.
type ReasonedError interface {
	error
	ConditionReason() string
}

// JobToolAnswer is the controller's answer to a background-job tool.
type JobToolAnswer struct {
	// Output is what the tool shows; ExitCode is 0 when it did what was asked.
	Output   string
	ExitCode int32
	// Message says why it did not, when ExitCode is not 0.
	Message string
	// At is when it was answered.
	At time.Time
}

// ToolTermination returns the tool container's terminated state, or nil while it has
// not terminated (or pod is nil).
func ToolTermination(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	if cs := containerStatus(pod, ToolContainerName, false); cs != nil {
		return cs.State.Terminated
	}
	return nil
}

// ParseResult parses the runner's result from the tool container's termination
// message. It fails, saying so plainly, when there is none or it is not the runner's.
func ParseResult(terminated *corev1.ContainerStateTerminated) (protocol.Result, error) {
	msg := strings.TrimSpace(terminated.Message)
	if msg == "" {
		return protocol.Result{}, fmt.Errorf("the runner left no result in the termination message (container exit code %d%s): whether the tool ran, and how it ended, is unknown", terminated.ExitCode, reasonSuffix(terminated.Reason))
	}
	var res protocol.Result
	dec := json.NewDecoder(strings.NewReader(msg))
	if err := dec.Decode(&res); err != nil || dec.More() {
		if err == nil {
			err = fmt.Errorf("trailing data after the JSON object")
		}
		return protocol.Result{}, fmt.Errorf("the termination message is not the runner's JSON result (container exit code %d%s): %v; whether the tool ran, and how it ended, is unknown", terminated.ExitCode, reasonSuffix(terminated.Reason), err)
	}
	return res, nil
}

// TotalOutputBytes is the size of the tool's combined output the runner wrote to the
// container log.
func TotalOutputBytes(res protocol.Result) int64 {
	return res.StdoutBytes + res.StderrBytes
}

// IsFinished reports whether status is final: the Complete condition is True.
func IsFinished(status *toolgatev1alpha1.ExecutionStatus) bool {
	return meta.IsStatusConditionTrue(status.Conditions, toolgatev1alpha1.ConditionComplete)
}

// HoldsWholeResult reports whether a finished Execution's status holds everything its
// Job's pod has to tell: the runner's trusted result (an exit code, the observed
// sandbox, the size and hash of the output) and, byte for byte, that output. The
// pod's log then holds nothing more, and the Job and its pod are spent
// (ExecutionReconciler reaps them). Anything less keeps the Job for JobTTLSeconds,
// because its pod holds what the status does not: output that was truncated, not read
// whole from the log, or changed by masking; or, for a call that ended without a
// result the runner can be trusted for, why.
func HoldsWholeResult(status *toolgatev1alpha1.ExecutionStatus) bool {
	return status.JobName != "" && HoldsWholeOutput(status)
}

// HoldsWholeOutput reports whether a finished Execution's status holds the runner's
// trusted result and, byte for byte, the call's whole output: nothing of it is cut,
// masked or missing.
func HoldsWholeOutput(status *toolgatev1alpha1.ExecutionStatus) bool {
	if !IsFinished(status) || status.ExitCode == nil || status.Truncated ||
		status.Sandbox == nil || status.OutputSHA256 == "" {
		return false
	}
	sum := sha256.Sum256([]byte(status.Output))
	return hex.EncodeToString(sum[:]) == status.OutputSHA256 && int64(len(status.Output)) == status.StdoutBytes+status.StderrBytes
}

// FinishedAt is when status became final (its Complete condition turned True), or
// the zero time when it is not final.
func FinishedAt(status *toolgatev1alpha1.ExecutionStatus) time.Time {
	c := meta.FindStatusCondition(status.Conditions, toolgatev1alpha1.ConditionComplete)
	if c == nil || c.Status != metav1.ConditionTrue {
		return time.Time{}
	}
	return c.LastTransitionTime.Time
}

// Project computes the Execution's status from what was observed. It is rebuilt from
// the world every time; only the conditions of the current status are carried over,
// so that LastTransitionTime moves only on a real change. now stamps a condition that
// changes.
func Project(exec *toolgatev1alpha1.Execution, obs Observation, now time.Time) toolgatev1alpha1.ExecutionStatus {
	st := toolgatev1alpha1.ExecutionStatus{Conditions: slices.Clone(exec.Status.Conditions)}
	reason := project(&st, exec, obs)
	// The message carries the runner's and the tool's words (an error, what a git
	// remote answered) and is read by every viewer of the namespace, by the
	// observation and by the Execution's events: masked like the output.
	st.Message = truncateMessage(mask.Secrets(st.Message))
	cond := metav1.Condition{
		Type:               toolgatev1alpha1.ConditionComplete,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            st.Message,
		ObservedGeneration: exec.Generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	if st.Phase == toolgatev1alpha1.ExecutionSucceeded || st.Phase == toolgatev1alpha1.ExecutionFailed {
		cond.Status = metav1.ConditionTrue
	}
	if cond.Message == "" {
		cond.Message = defaultConditionMessage(st.Phase)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}

// project fills st and returns the Complete condition's reason.
func project(st *toolgatev1alpha1.ExecutionStatus, exec *toolgatev1alpha1.Execution, obs Observation) string {
	if obs.BuildError != nil {
		st.Phase = toolgatev1alpha1.ExecutionFailed
		st.ErrorKind = toolgatev1alpha1.ErrorException
		st.Message = "not run: " + obs.BuildError.Error()
		var reasoned ReasonedError
		if errors.As(obs.BuildError, &reasoned) && reasoned.ConditionReason() != "" {
			return reasoned.ConditionReason()
		}
		return toolgatev1alpha1.ReasonJobInvalid
	}
	if obs.Session != nil {
		return projectSession(st, exec, obs)
	}
	if a := obs.Answer; a != nil {
		at := ptr.To(metav1.NewTime(a.At))
		st.StartTime, st.CompletionTime, st.ExitCode = at, at, ptr.To(a.ExitCode)
		SetOutput(st, LogText{Head: []byte(a.Output), Total: int64(len(a.Output))}, exec.Spec.MaxOutputBytes)
		st.StdoutBytes = int64(len(a.Output))
		st.Phase = toolgatev1alpha1.ExecutionSucceeded
		if a.ExitCode != 0 {
			st.Phase, st.ErrorKind, st.Message = toolgatev1alpha1.ExecutionFailed, toolgatev1alpha1.ErrorExitCode, a.Message
		}
		return toolgatev1alpha1.ReasonJobToolAnswered
	}
	job, pod := obs.Job, obs.Pod
	if job != nil || obs.JobCreated {
		st.JobName = JobName(exec)
	}
	if pod != nil {
		st.PodName = pod.Name
	}
	tool := containerStatus(pod, ToolContainerName, false)
	install := containerStatus(pod, InstallContainerName, true)
	deadline, deadlineMessage := deadlineExceeded(job, pod)
	if tool != nil && tool.State.Running != nil {
		st.StartTime = ptr.To(tool.State.Running.StartedAt)
	}

	failed := func(kind toolgatev1alpha1.ErrorKind, format string, args ...any) string {
		st.Phase = toolgatev1alpha1.ExecutionFailed
		st.ErrorKind = kind
		st.Message = fmt.Sprintf(format, args...)
		return toolgatev1alpha1.ReasonJobFailed
	}

	switch {
	case tool != nil && tool.State.Terminated != nil:
		return projectTerminated(st, exec, obs, tool.State.Terminated, deadline, deadlineMessage, sentInvocation(exec))
	case deadline:
		return failed(toolgatev1alpha1.ErrorTimeout, "the Job's deadline of %ds passed before the runner reported (%s); the tool was killed", ptr.Deref(activeDeadline(job), 0), deadlineMessage)
	case install != nil && install.State.Terminated != nil && install.State.Terminated.ExitCode != 0:
		t := install.State.Terminated
		return failed(toolgatev1alpha1.ErrorException, "not run: the init container %s that installs the runner failed (exit code %d%s): %s", InstallContainerName, t.ExitCode, reasonSuffix(t.Reason), strings.TrimSpace(t.Message))
	case job == nil && obs.JobCreated:
		return failed(toolgatev1alpha1.ErrorAborted, "the Job %s was deleted before the tool finished; whether it changed anything is unknown", JobName(exec))
	case job != nil && job.DeletionTimestamp != nil:
		return failed(toolgatev1alpha1.ErrorAborted, "the Job %s is being deleted before the tool finished; whether it changed anything is unknown", job.Name)
	case pod != nil && pod.DeletionTimestamp != nil:
		return failed(toolgatev1alpha1.ErrorAborted, "the pod %s is being deleted before the tool finished; whether it changed anything is unknown", pod.Name)
	case jobCondition(job, batchv1.JobFailed) != nil:
		c := jobCondition(job, batchv1.JobFailed)
		return failed(toolgatev1alpha1.ErrorAborted, "the Job %s failed (%s: %s) before the runner reported, and its pod is gone; whether the tool changed anything is unknown", job.Name, c.Reason, c.Message)
	case pod != nil && pod.Status.Phase == corev1.PodFailed:
		return failed(toolgatev1alpha1.ErrorException, "the pod %s failed before the runner reported%s: %s", pod.Name, reasonSuffix(pod.Status.Reason), pod.Status.Message)
	case tool != nil && tool.State.Running != nil:
		st.Phase = toolgatev1alpha1.ExecutionRunning
		return toolgatev1alpha1.ReasonJobRunning
	default:
		st.Phase = toolgatev1alpha1.ExecutionPending
		st.Message = waitingMessage(job, pod, install, tool)
		return toolgatev1alpha1.ReasonJobPending
	}
}

// projectTerminated reads the runner's result of a terminated tool container;
// sent is protocol.HashInvocation of the invocation the runner was given.
func projectTerminated(st *toolgatev1alpha1.ExecutionStatus, exec *toolgatev1alpha1.Execution, obs Observation,
	terminated *corev1.ContainerStateTerminated, deadline bool, deadlineMessage, sent string) string {
	st.StartTime = ptr.To(terminated.StartedAt)
	st.CompletionTime = ptr.To(terminated.FinishedAt)
	st.Phase = toolgatev1alpha1.ExecutionFailed
	res, err := ParseResult(terminated)
	if err != nil {
		// Never a success: without the runner's result nothing says the tool worked.
		st.ErrorKind = toolgatev1alpha1.ErrorException
		st.ExitCode = ptr.To(terminated.ExitCode)
		st.Message = err.Error()
		if deadline {
			st.ErrorKind = toolgatev1alpha1.ErrorTimeout
			st.Message = fmt.Sprintf("the Job's deadline passed (%s) and %s", deadlineMessage, err.Error())
		}
		SetOutput(st, obs.Log, exec.Spec.MaxOutputBytes)
		st.Message = appendNote(st.Message, obs.Log.Err)
		return toolgatev1alpha1.ReasonJobFailed
	}

	if why := otherInvocation(sent, res); why != "" {
		// Fail closed: what ran is not known to be this call, so nothing of it, not
		// even its output, is shown as the call's.
		st.ErrorKind = toolgatev1alpha1.ErrorException
		st.ExitCode = ptr.To(terminated.ExitCode)
		st.Message = "the runner's result cannot be trusted: " + why + "; whether the call ran, and what ran instead, is unknown, and nothing of it is shown"
		return toolgatev1alpha1.ReasonJobFailed
	}

	if why := untrustedResult(terminated.ExitCode, res); why != "" {
		// Fail closed: a Result the runner's exit code contradicts may have been
		// written by the tool (it shares the runner's uid and container), so none of
		// it is shown as fact; only the container's exit code and log are.
		st.ErrorKind = toolgatev1alpha1.ErrorException
		st.ExitCode = ptr.To(terminated.ExitCode)
		st.Message = "the result in the termination message cannot be trusted: " + why + "; whether the tool ran, and how it ended, is unknown"
		if deadline {
			st.Message = appendNote(st.Message, fmt.Sprintf("the Job's deadline passed (%s)", deadlineMessage))
		}
		SetOutput(st, obs.Log, exec.Spec.MaxOutputBytes)
		st.Message = appendNote(st.Message, obs.Log.Err)
		return toolgatev1alpha1.ReasonJobFailed
	}

	st.ExitCode = ptr.To(int32(res.ExitCode))
	st.DurationMillis = res.DurationMs
	st.StdoutBytes = res.StdoutBytes
	st.StderrBytes = res.StderrBytes
	st.OutputSHA256 = res.OutputSHA256
	st.ArtifactPath = res.ArtifactPath
	st.Sandbox = &toolgatev1alpha1.ObservedSandbox{UID: int64(res.UID), ReadOnlyRootFilesystem: res.ReadOnlyRoot}
	if facts := (toolgatev1alpha1.ToolFacts{
		ContentSHA256: res.ContentSHA256,
		LinesAdded:    int32(res.LinesAdded),
		LinesRemoved:  int32(res.LinesRemoved),
		Binary:        res.Binary,
		Matches:       int32(res.Matches),
	}); facts != (toolgatev1alpha1.ToolFacts{}) {
		st.Facts = &facts
	}
	SetOutput(st, obs.Log, exec.Spec.MaxOutputBytes)
	st.Truncated = res.Truncated || st.Truncated
	st.Message = res.Message

	switch kind := res.ErrorKind; {
	case deadline:
		st.ErrorKind = toolgatev1alpha1.ErrorTimeout
		st.Message = appendNote(fmt.Sprintf("the Job's deadline passed (%s); the tool was killed", deadlineMessage), res.Message)
	case kind == "" && res.ExitCode == 0:
		st.Phase = toolgatev1alpha1.ExecutionSucceeded
	case kind == "":
		st.ErrorKind = toolgatev1alpha1.ErrorExitCode
	case kind == protocol.KindExitCode, kind == protocol.KindTimeout, kind == protocol.KindStale, kind == protocol.KindException:
		st.ErrorKind = toolgatev1alpha1.ErrorKind(kind)
	default:
		st.ErrorKind = toolgatev1alpha1.ErrorException
		st.Message = appendNote(fmt.Sprintf("the runner reported an unknown error kind %q", kind), res.Message)
	}
	if st.ErrorKind == toolgatev1alpha1.ErrorTimeout && !deadline {
		if deleted := jobDeleted(exec, obs); deleted != "" {
			// The runner reports a stop by SIGTERM as a Timeout; when the Job was being
			// deleted (the task ended, or someone deleted it) the call was aborted, and
			// the result says what ran until then.
			st.ErrorKind = toolgatev1alpha1.ErrorAborted
			st.Message = appendNote(deleted+" while the tool ran, so the runner was terminated and stopped it; whether it changed anything is unknown", res.Message)
		}
	}
	st.Message = appendNote(st.Message, verifyLog(obs.Log, res, exec.Spec.MaxOutputBytes))
	if st.Phase == toolgatev1alpha1.ExecutionSucceeded {
		return toolgatev1alpha1.ReasonJobSucceeded
	}
	return toolgatev1alpha1.ReasonJobFailed
}

// jobDeleted says which of the Execution's Job or pod is being (or was) deleted, or "".
func jobDeleted(exec *toolgatev1alpha1.Execution, obs Observation) string {
	switch {
	case obs.Job == nil && obs.JobCreated:
		return "the Job " + JobName(exec) + " was deleted"
	case obs.Job != nil && obs.Job.DeletionTimestamp != nil:
		return "the Job " + obs.Job.Name + " was deleted"
	case obs.Pod != nil && obs.Pod.DeletionTimestamp != nil:
		return "the pod " + obs.Pod.Name + " was deleted"
	}
	return ""
}

// untrustedResult says why res cannot be the Result the runner wrote, given the tool
// container's exit code, or "" when they agree. The runner writes its Result last and
// then exits protocol.ProcessExitCode of it (see package protocol): 0 for a success,
// protocol.ExitFailed for a failure. Any other exit code means the runner did not
// finish its protocol (it could not write the Result, was killed, or crashed), so the
// termination message holds something else's words.
func untrustedResult(exitCode int32, res protocol.Result) string {
	switch exitCode {
	case protocol.ExitSucceeded:
		if !res.Succeeded() {
			return fmt.Sprintf("the runner exited 0, which it does only after reporting a success, but the result reports a failure (exit code %d, error kind %q)", res.ExitCode, res.ErrorKind)
		}
	case protocol.ExitFailed:
		if res.Succeeded() {
			return fmt.Sprintf("the runner exited %d, which it does only after reporting a failure, but the result reports a success", exitCode)
		}
	case protocol.ExitNoResult:
		return fmt.Sprintf("the runner exited %d: it could not write its result, so the termination message was written by something else", exitCode)
	default:
		return fmt.Sprintf("the runner exited %d%s, a code it never exits with after writing its result (it was killed or crashed), so the termination message was written by something else", exitCode, signalSuffix(exitCode))
	}
	return ""
}

// otherInvocation says why res is not the result of the invocation whose hash is
// sent (protocol.HashInvocation of what the controller gave the runner), or "" when
// it is. The runner names the invocation it read (Result.InvocationSHA256); a
// result that names another one ran something else (the call's input was swapped
// on its way to the runner, as a process left in a session pod could try), and one
// that names none was written by a runner older than the controller, or by
// something else: both are refused.
func otherInvocation(sent string, res protocol.Result) string {
	switch {
	case res.InvocationSHA256 == "":
		return "it names no invocation (invocationSHA256 is empty): it was written by a runner older than this controller (the runner image must be the one of the controller's version), or by something else"
	case sent == "":
		return "the controller could not encode the call's invocation to check the result against it"
	case res.InvocationSHA256 != sent:
		return fmt.Sprintf("it is the result of another invocation (sha256 %s) than the one the controller sent (sha256 %s): the call's input was changed on its way to the runner, so what ran is not the call", res.InvocationSHA256, sent)
	}
	return ""
}

// sentInvocation is protocol.HashInvocation of the invocation a Job's pod was given:
// the Execution's, as BuildJob encoded it (the spec is immutable), or "" when it
// cannot be encoded. It is computed, not read from the pod: the controller's cache
// keeps no pod spec.
func sentInvocation(exec *toolgatev1alpha1.Execution) string {
	invocation, err := EncodeInvocation(exec)
	if err != nil {
		return ""
	}
	return protocol.HashInvocation(invocation)
}

// signalSuffix names the signal of an exit code above 128, as the runtime reports a
// process killed by a signal.
func signalSuffix(exitCode int32) string {
	if exitCode > 128 && exitCode < 128+65 {
		return fmt.Sprintf(" (killed by signal %d)", exitCode-128)
	}
	return ""
}

// verifyLog checks the log read against the runner's hash when the whole output fit,
// and returns a note for the message when it does not match or could not be read.
func verifyLog(log LogText, res protocol.Result, maxOutputBytes int32) string {
	if log.Err != "" {
		return log.Err
	}
	total := TotalOutputBytes(res)
	if total > int64(maxOutputBytes) || res.OutputSHA256 == "" {
		return ""
	}
	sum := sha256.Sum256(log.Head)
	if got := hex.EncodeToString(sum[:]); got != res.OutputSHA256 || int64(len(log.Head)) != total {
		return fmt.Sprintf("the container log read (%d bytes, sha256 %s) does not match the runner's output (%d bytes, sha256 %s): the output shown is not exactly what the tool printed",
			len(log.Head), got, total, res.OutputSHA256)
	}
	return ""
}

// deadlineExceeded reports whether the Job's activeDeadlineSeconds killed it.
func deadlineExceeded(job *batchv1.Job, pod *corev1.Pod) (bool, string) {
	if c := jobCondition(job, batchv1.JobFailed); c != nil && c.Reason == batchv1.JobReasonDeadlineExceeded {
		return true, strings.TrimSpace(c.Reason + ": " + c.Message)
	}
	if c := jobCondition(job, batchv1.JobFailureTarget); c != nil && c.Reason == batchv1.JobReasonDeadlineExceeded {
		return true, strings.TrimSpace(c.Reason + ": " + c.Message)
	}
	if pod != nil && pod.Status.Reason == "DeadlineExceeded" {
		return true, strings.TrimSpace(pod.Status.Reason + ": " + pod.Status.Message)
	}
	return false, ""
}

func activeDeadline(job *batchv1.Job) *int64 {
	if job == nil {
		return nil
	}
	return job.Spec.ActiveDeadlineSeconds
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	if job == nil {
		return nil
	}
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func containerStatus(pod *corev1.Pod, name string, init bool) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	statuses := pod.Status.ContainerStatuses
	if init {
		statuses = pod.Status.InitContainerStatuses
	}
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// waitingMessage says what a pending Execution waits for, such as an image pull.
func waitingMessage(job *batchv1.Job, pod *corev1.Pod, statuses ...*corev1.ContainerStatus) string {
	switch {
	case job == nil:
		return "waiting for the Job to be created"
	case pod == nil:
		return "waiting for the Job's pod to be created"
	}
	for _, cs := range statuses {
		if cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			return strings.TrimSpace(fmt.Sprintf("container %s is waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(fmt.Sprintf("the pod is not scheduled: %s %s", c.Reason, c.Message))
		}
	}
	return "waiting for the tool to start"
}

func defaultConditionMessage(phase toolgatev1alpha1.ExecutionPhase) string {
	switch phase {
	case toolgatev1alpha1.ExecutionSucceeded:
		return "the tool exited 0"
	case toolgatev1alpha1.ExecutionRunning:
		return "the tool is running"
	}
	return "waiting for the tool to start"
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ", reason " + reason
}

func appendNote(msg, note string) string {
	switch {
	case note == "":
		return msg
	case msg == "":
		return note
	}
	return msg + "; " + note
}

// truncateMessage fits a message into the API's limit, on a rune boundary.
func truncateMessage(msg string) string {
	if len(msg) <= maxMessageBytes {
		return msg
	}
	const notice = " …[message cut]"
	end := maxMessageBytes - len(notice)
	for end > 0 && !utf8.RuneStart(msg[end]) {
		end--
	}
	return msg[:end] + notice
}
