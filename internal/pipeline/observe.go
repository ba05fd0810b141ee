package pipeline

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/mask"
)

// nothingRan opens every observation of a call that never executed, so the model
// cannot mistake a refusal for a result.
const nothingRan = "[not executed] Nothing was run for this call."

// Refusal is the observation of a call that never executed: a validation failure, a
// denial, or a denied or expired approval. The reason is the feedback the model acts on.
func Refusal(outcome v1.Outcome, reason string, now time.Time) *v1.Observation {
	t := metav1.NewTime(now)
	return &v1.Observation{
		Outcome:    outcome,
		Executed:   false,
		Summary:    fitSummary(mask.Secrets(nothingRan + " " + refusalHeadline(outcome) + "\n" + reason)),
		ObservedAt: &t,
	}
}

func refusalHeadline(o v1.Outcome) string {
	switch o {
	case v1.OutcomeValidationFailed:
		return "The call was invalid; fix it and propose it again:"
	case v1.OutcomeDenied:
		return "Policy denied the call; do not repeat it unchanged:"
	case v1.OutcomeApprovalDenied:
		return "A human denied the call:"
	case v1.OutcomeApprovalExpired:
		return "Nobody approved the call in time:"
	case v1.OutcomeAborted:
		return "The call was aborted:"
	case v1.OutcomeRedirected:
		return "A policy redirected the call:"
	case v1.OutcomeStopped:
		return "A policy stopped the task:"
	}
	return string(o) + ":"
}

// ValidationReason joins validation errors into one line per error.
func ValidationReason(errs []string) string {
	return "- " + strings.Join(errs, "\n- ")
}

// FromExecution is the observation of a call that executed, built only from the
// Execution's record: it never claims more than the record shows. The summary starts
// with the [exit code: N] marker, carries the output the Execution kept (already cut
// to the task's cap, head and tail) and says plainly when and where output was cut.
func FromExecution(exec *v1.Execution, now time.Time) *v1.Observation {
	st := exec.Status
	t := metav1.NewTime(now)
	obs := &v1.Observation{
		Executed:      true,
		ExitCode:      st.ExitCode,
		Truncated:     st.Truncated,
		ObservedAt:    &t,
		MaskedSecrets: st.MaskedSecrets.DeepCopy(),
	}
	if st.Facts != nil {
		obs.ContentSHA256 = st.Facts.ContentSHA256
	}
	switch {
	case st.Phase == v1.ExecutionSucceeded:
		obs.Outcome = v1.OutcomeSucceeded
	case st.ErrorKind == v1.ErrorTimeout:
		obs.Outcome = v1.OutcomeTimedOut
	case st.ErrorKind == v1.ErrorAborted:
		obs.Outcome = v1.OutcomeAborted
	default:
		obs.Outcome = v1.OutcomeFailed
	}
	obs.Artifact = artifact(exec)

	var head strings.Builder
	if st.ExitCode != nil {
		fmt.Fprintf(&head, "[exit code: %d]", *st.ExitCode)
	} else {
		head.WriteString("[exit code: none]")
	}
	switch obs.Outcome {
	case v1.OutcomeTimedOut:
		fmt.Fprintf(&head, " [timed out after %ds: the process group was killed]", exec.Spec.TimeoutSeconds)
	case v1.OutcomeAborted:
		head.WriteString(" [aborted: the execution was stopped before it finished; it may have had effects]")
	}
	head.WriteString("\n")
	if st.ErrorKind != "" && st.ErrorKind != v1.ErrorExitCode && st.Message != "" {
		fmt.Fprintf(&head, "[%s] %s\n", st.ErrorKind, st.Message)
	}
	body := st.Output
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	truncatedNote := func() string {
		return mask.Secrets(fmt.Sprintf("[output truncated: %d bytes in all, only the head and tail are shown; the full output is at %s]\n",
			st.StdoutBytes+st.StderrBytes, obs.Artifact))
	}
	// The output is masked already (ComposeOutput); masking again changes nothing
	// it did, and cutting after it keeps the summary within what the status holds,
	// whatever escaping made of the output. Room is left for the note that says
	// the output was cut.
	header := mask.Secrets(head.String())
	room := v1.MaxOutputTextBytes - executor.StoredSize(header) - executor.StoredSize(truncatedNote())
	body, cut := executor.CutToStored(mask.Secrets(body), room)
	obs.Truncated = obs.Truncated || cut
	summary := header + body
	if obs.Truncated {
		summary += truncatedNote()
	}
	obs.Summary = fitSummary(summary)
	return obs
}

// fitSummary keeps a masked summary within what the observation holds (its head
// and tail when it is longer, the cut marked); only a summary with an unusually long
// error message or refusal reason is ever cut here.
func fitSummary(summary string) string {
	summary, _ = executor.CutToStored(summary, v1.MaxOutputTextBytes)
	return summary
}

// FromBackgroundStart is the observation of a background job that started: the
// call's result is its job id (the Execution's name); the job runs on.
func FromBackgroundStart(exec *v1.Execution, now time.Time) *v1.Observation {
	t := metav1.NewTime(now)
	return &v1.Observation{
		Executed:   true,
		Outcome:    v1.OutcomeSucceeded,
		ObservedAt: &t,
		Summary: fmt.Sprintf("[background job started: %s]\n"+
			"It runs in session pod %s until it ends, its timeout (%ds), job_kill or the task's end.\n"+
			"Read its output with job_output {\"job\": %q}; stop it with job_kill {\"job\": %q}; job_list lists the task's jobs.\n",
			exec.Name, exec.Status.SessionName, exec.Spec.TimeoutSeconds, exec.Name, exec.Name),
	}
}

func artifact(exec *v1.Execution) string {
	var where []string
	if exec.Status.ArtifactPath != "" {
		where = append(where, "read_file "+exec.Status.ArtifactPath)
	}
	switch {
	case executor.HoldsWholeResult(&exec.Status):
		// The status holds all of it; the Job and its pod are spent and soon deleted.
		where = append(where, "the Execution "+exec.Name+" (status.output)")
	case exec.Status.PodName != "" && exec.Status.SessionName == "":
		where = append(where, fmt.Sprintf("the log of pod/%s container %s (kubectl logs, while the Job exists)", exec.Status.PodName, executor.ToolContainerName))
	}
	if len(where) == 0 {
		return "the Execution " + exec.Name + " (no copy was kept)"
	}
	return strings.Join(where, ", or ")
}
