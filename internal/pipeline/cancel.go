package pipeline

import (
	"fmt"
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/mask"
)

// CancelledBy names who cancelled the intent (spec.cancel): its requester, or "its
// proposer" when it names none.
func CancelledBy(intent *v1.ToolIntent) string {
	if intent.Spec.RequestedBy == "" {
		return "its proposer"
	}
	return intent.Spec.RequestedBy
}

// Withdrawn says whether the intent's proposer cancelled it (spec.cancel), and says
// so in words.
func Withdrawn(intent *v1.ToolIntent) (bool, string) {
	if intent == nil || !intent.Spec.Cancel {
		return false, ""
	}
	return true, fmt.Sprintf("ToolIntent %s was cancelled by %s (spec.cancel)", intent.Name, CancelledBy(intent))
}

// CallStopped is the one rule for a call that has not finished: it does not start,
// and is stopped if it runs, once its task ended (taskEnded says why, "" while the
// task runs) or its proposer cancelled it (spec.cancel). It returns why, or "" when
// the call goes on. The task's end comes first: it ends every call of the task.
func CallStopped(taskEnded string, intent *v1.ToolIntent) string {
	if taskEnded != "" {
		return taskEnded
	}
	_, why := Withdrawn(intent)
	return why
}

// CancelledBeforeRun is the observation of a call its proposer cancelled before it
// ran: Aborted, nothing executed.
func CancelledBeforeRun(intent *v1.ToolIntent, now time.Time) *v1.Observation {
	return Refusal(v1.OutcomeAborted, CancelledBeforeRunReason(intent), now)
}

// CancelledBeforeRunReason says that the proposer cancelled the call before it ran.
func CancelledBeforeRunReason(intent *v1.ToolIntent) string {
	return fmt.Sprintf("%s before it ran; nothing of it ran, and the workspace is as it was.", withdrawnText(intent))
}

// CancelledWhileRunning adds to the observation of a call that was stopped while it
// ran (Aborted, executed) that its proposer cancelled it, and what that means for
// the workspace. Any other observation is returned as it is: a call that finished
// before the cancel reached it keeps its result.
func CancelledWhileRunning(intent *v1.ToolIntent, obs *v1.Observation) *v1.Observation {
	if !intent.Spec.Cancel || obs.Outcome != v1.OutcomeAborted || !obs.Executed {
		return obs
	}
	note := mask.Secrets(fmt.Sprintf("\n%s while it ran, and it was stopped before it finished: the workspace may be partly changed by it.", withdrawnText(intent)))
	summary, _ := executor.CutToStored(obs.Summary, v1.MaxOutputTextBytes-executor.StoredSize(note))
	obs.Summary = summary + note
	return obs
}

func withdrawnText(intent *v1.ToolIntent) string {
	return fmt.Sprintf("The call was cancelled by %s (spec.cancel on ToolIntent %s)", CancelledBy(intent), intent.Name)
}
