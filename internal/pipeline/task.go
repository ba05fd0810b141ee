package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/tools"
)

// TaskWorld is what the AgentTask reconciler observed of a task's world.
type TaskWorld struct {
	// WorkspaceReady is true when the workspace claim exists.
	WorkspaceReady bool
	// WorkspaceMessage says what is missing when it is not ready.
	WorkspaceMessage string
	// WorkspaceReason is the Ready condition's reason when it is not ready
	// (WorkspacePending when empty).
	WorkspaceReason string
	// WorkspaceFailed says the workspace can never be ready (a copy that failed):
	// the task fails, with WorkspaceReason and WorkspaceMessage.
	WorkspaceFailed bool
	// Workspace is what seeded the workspace (spec.workspace.git, copyOf).
	Workspace *v1.WorkspaceStatus
	// Intents are the task's ToolIntents.
	Intents []v1.ToolIntent
	// Approvals counts the Approvals the task created.
	Approvals int32
	// Model is what the agent loop observed for a task with spec.agent.model; nil for
	// a task whose agent is external.
	Model *ModelWorld
	// CompletionChecks are the recorded completion checks of a model task's final
	// answers, by turn.
	CompletionChecks map[int32]v1.CompletionCheck
	// Push is what was observed of the push of a task with spec.workspace.git.push
	// (nil until it would succeed).
	Push *PushWorld
	// Retire are the calls to retire now (RetirableCalls), whose records the
	// archive holds: they are folded into status.history, then deleted.
	Retire []v1.ToolIntent
	// Archive is what the controller knows of its archive, for the Archived
	// condition.
	Archive ArchiveWorld
}

// ArchiveWorld is the archive as the task's retention saw it.
type ArchiveWorld struct {
	// Configured is false when the controller has no archive: nothing is retired.
	Configured bool
	// Unavailable, when set, says why the archive did not confirm the records of
	// calls due to retire.
	Unavailable string
}

// ModelWorld is what the recorded turns of a model task say, and what happened when
// the controller last tried to call the model.
type ModelWorld struct {
	// Turns is how many turns the model has taken (turn records written).
	Turns int32
	// TokensUsed sums the usage of every recorded turn.
	TokensUsed int64
	// NextTurnDue is true when the model is to be asked again: there is no turn yet,
	// or every tool call of the last turn has its observation.
	NextTurnDue bool
	// Answer is the final answer: the text of a last turn that proposed no tool call,
	// once its completion check accepted it.
	Answer *string
	// CompletionDue is true when the last turn gave a final answer that has not been
	// checked yet (policy.DecideCompletion).
	CompletionDue bool
	// CompletionDenied, when set, ends the task Failed with reason CompletionDenied:
	// a Completion rule refused the final answer.
	CompletionDenied string
	// Failure, when set, ends the task Failed with reason ModelError: an error of the
	// model endpoint that retrying does not cure, a refusal, or a last turn that can
	// be neither an answer nor a step (its reply was cut at the length limit).
	Failure string
	// Unavailable, when set, says why the next turn cannot start now (the API key
	// Secret is missing, the endpoint failed temporarily, a turn record is unreadable).
	// The task waits with Ready=False and reason ModelUnavailable.
	Unavailable string
}

// refusal outcomes count towards budgets.maxConsecutiveRefusals.
func isRefusal(o v1.Outcome) bool {
	return o == v1.OutcomeValidationFailed || o == v1.OutcomeDenied
}

// TaskStatus rebuilds an AgentTask's status from its world: counts, turn, phase and
// the Ready, AwaitingApproval, Succeeded and Failed conditions. A finished task stays
// finished (its terminal condition and result are carried over); everything else is
// recomputed. now stamps conditions that change.
//
// For a model task (world.Model set) the recorded turns also give the turn, the
// tokens used and the final answer, and the turn and token budgets are checked when
// the next turn is due: the calls of the turn that spent a budget still run and are
// observed, but the model is not asked again.
func TaskStatus(task *v1.AgentTask, world TaskWorld, now metav1.Time) v1.AgentTaskStatus {
	old := task.Status
	st := v1.AgentTaskStatus{
		Conditions:         append([]metav1.Condition(nil), old.Conditions...),
		ObservedGeneration: task.Generation,
		AgentKind:          task.Spec.Agent.Kind(),
		WorkspaceClaimName: WorkspaceClaimName(task),
		ApprovalRequests:   world.Approvals + retiredApprovals(old.History),
		TokensUsed:         old.TokensUsed,
		Result:             old.Result,
		Workspace:          world.Workspace,
	}
	c := taskConditions{st: &st, generation: task.Generation, now: now}
	history := Forget(old.History, world.Intents)
	live := LiveIntents(history, world.Intents)
	tally := countIntents(task, live, history, world.Push, &st)
	st.RuleFires = ruleFiresOf(task, live, history, world.CompletionChecks)
	if retired, ok := Retire(history, string(task.UID), pushIntentName(world.Push), world.Retire); ok && len(world.Retire) > 0 {
		history = retired
	}
	if history != nil && !equality.Semantic.DeepEqual(*history, v1.CallHistory{}) {
		st.History = history
	}
	if model := world.Model; model != nil {
		st.TokensUsed = model.TokensUsed
		if model.Turns > 0 {
			st.Turn = max(st.Turn, model.Turns-1)
		}
	}
	setReadyCondition(c, task, world)
	setAwaitingApprovalCondition(c, tally.awaiting)
	if EndedBy(old.Conditions) == "" {
		setEndCondition(c, task, world, tally)
	}
	settleEndConditions(c)
	setArchivedCondition(c, world.Archive, st.History)
	st.Phase = taskPhase(&st, tally.awaiting)
	return st
}

// taskConditions sets the conditions of the status being rebuilt, each stamped with
// the task's generation and, when it changes, with now.
type taskConditions struct {
	st         *v1.AgentTaskStatus
	generation int64
	now        metav1.Time
}

func (c taskConditions) set(typ string, status bool, reason, msg string) {
	cond := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: c.generation, LastTransitionTime: c.now}
	if status {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&c.st.Conditions, cond)
}

// intentTally is what a task's intents say beyond the counts of status.intents.
type intentTally struct {
	// awaiting names the intents that wait for a human, in order.
	awaiting []string
	// stopped is the first intent decided Stop, or whose result a result rule
	// stopped, for this task, if any.
	stopped *v1.ToolIntent
	// consecutiveRefusals counts the refusals since the last observed call that was
	// no refusal.
	consecutiveRefusals int
}

// countIntents fills the intent counts and the turn of st from the task's intents,
// in order, and returns what else they say. The controller's push is no call of the
// agent's: it spends no budget and is no turn; it waits for a human like any call,
// though.
func countIntents(task *v1.AgentTask, live []v1.ToolIntent, history *v1.CallHistory, push *PushWorld, st *v1.AgentTaskStatus) intentTally {
	intents := append([]v1.ToolIntent(nil), live...)
	sort.Slice(intents, func(i, j int) bool { return IntentBefore(&intents[i], &intents[j]) })
	var tally intentTally
	byOutcome := map[v1.Outcome]int32{}
	if history != nil {
		// The retired calls come first: whole turns, before every live one.
		byOutcome = outcomeMap(history.Intents.ByOutcome)
		st.Intents.Total = history.Intents.Total
		st.Turn = history.ThroughTurn
		tally.consecutiveRefusals = int(history.ConsecutiveRefusals)
	}
	pushIntent := pushIntentName(push)
	for i := range intents {
		in := &intents[i]
		if in.Name == pushIntent {
			if AwaitsApproval(in) {
				tally.awaiting = append(tally.awaiting, in.Name)
			}
			continue
		}
		st.Intents.Total++
		st.Turn = max(st.Turn, in.Spec.Turn)
		if d := in.Status.Decision; d != nil && (d.Action == v1.DecisionStop || ResultStopped(in.Status.Observation)) && tally.stopped == nil && (d.Sandbox == nil || d.Sandbox.TaskUID == string(task.UID)) {
			tally.stopped = in
		}
		if o := in.Status.Observation; o != nil {
			byOutcome[o.Outcome]++
			if isRefusal(o.Outcome) {
				tally.consecutiveRefusals++
			} else {
				tally.consecutiveRefusals = 0
			}
			continue
		}
		st.Intents.InFlight++
		if AwaitsApproval(in) || ResultAwaitsRelease(in) {
			tally.awaiting = append(tally.awaiting, in.Name)
		}
	}
	st.Intents.ByOutcome = v1.OutcomeCounts(byOutcome)
	return tally
}

// ruleFiresOf is status.ruleFires: the rules that fired for the task's intents and
// completion checks, nil when none did.
func ruleFiresOf(task *v1.AgentTask, live []v1.ToolIntent, history *v1.CallHistory, completionChecks map[int32]v1.CompletionCheck) []v1.RuleFires {
	checks := make([]v1.CompletionCheck, 0, len(completionChecks))
	for _, c := range completionChecks {
		checks = append(checks, c)
	}
	fires := RuleFires(string(task.UID), live, checks)
	if history != nil {
		fires = MergeRuleFires(history.RuleFires, fires)
	}
	if fires := lastFired(fires, v1.MaxRuleFires); len(fires) > 0 {
		return fires
	}
	return nil
}

// pushIntentName names the controller's push intent, "" when there is none.
func pushIntentName(push *PushWorld) string {
	if push != nil && push.Intent != nil {
		return push.Intent.Name
	}
	return ""
}

// setArchivedCondition says whether the task's finished calls go to the archive and
// leave the cluster, or why history stays in etcd.
func setArchivedCondition(c taskConditions, archive ArchiveWorld, history *v1.CallHistory) {
	switch {
	case !archive.Configured:
		c.set(v1.ConditionArchived, false, v1.ReasonNoArchive, "no archive is configured (the controller's --archive-dsn-file): the task's finished calls stay in etcd, and history grows there")
	case archive.Unavailable != "":
		c.set(v1.ConditionArchived, false, v1.ReasonArchiveUnavailable, "finished calls due to leave the cluster stay until the archive confirms their records: "+archive.Unavailable)
	default:
		c.set(v1.ConditionArchived, true, v1.ReasonArchiving, fmt.Sprintf("finished calls leave the cluster once archived, after the retention window; %d have", RetiredCount(history)))
	}
}

// setReadyCondition says whether the task can run calls: its workspace is ready
// and, for a model task, the model can be asked.
func setReadyCondition(c taskConditions, task *v1.AgentTask, world TaskWorld) {
	switch model := world.Model; {
	case !world.WorkspaceReady:
		reason := world.WorkspaceReason
		if reason == "" {
			reason = v1.ReasonWorkspacePending
		}
		c.set(v1.ConditionReady, false, reason, world.WorkspaceMessage)
	case model != nil && model.Unavailable != "":
		c.set(v1.ConditionReady, false, v1.ReasonModelUnavailable, model.Unavailable)
	default:
		c.set(v1.ConditionReady, true, v1.ReasonWorkspaceReady, workspaceReadyMessage(task, world.Workspace, c.st.WorkspaceClaimName))
	}
}

// workspaceReadyMessage says what the ready workspace holds: the claim, and what
// seeded it.
func workspaceReadyMessage(task *v1.AgentTask, ws *v1.WorkspaceStatus, claim string) string {
	msg := fmt.Sprintf("workspace claim %s is bound to the task", claim)
	if ws != nil && ws.Commit != "" && task.Spec.Workspace.Git != nil {
		msg += fmt.Sprintf(", cloned from %s at %s", task.Spec.Workspace.Git.URL, ws.Commit)
	}
	if ws != nil && ws.CopiedAt != nil && task.Spec.Workspace.CopyOf != nil {
		msg += fmt.Sprintf(", copied from claim %s of AgentTask %s", ws.CopiedFrom, task.Spec.Workspace.CopyOf.TaskRef.Name)
		if ws.CopySkipped > 0 {
			msg += fmt.Sprintf(" (%d entries that are no regular file, directory or symlink, or could not be read, were left out)", ws.CopySkipped)
		}
	}
	return msg
}

// setAwaitingApprovalCondition says which intents wait for a human.
func setAwaitingApprovalCondition(c taskConditions, awaiting []string) {
	if len(awaiting) > 0 {
		c.set(v1.ConditionAwaitingApproval, true, v1.ReasonIntentsAwaitingApproval, "waiting for a human decision on "+namesUpTo(awaiting, v1.MaxIntentsNamedAwaiting))
	} else {
		c.set(v1.ConditionAwaitingApproval, false, v1.ReasonNoPendingApprovals, "no intent waits for a human")
	}
}

// setEndCondition ends a task that has not finished when its world says so: Failed
// by the first rule that holds (cancelled, workspace failed, a Stop decision, a
// refused completion, a spent budget, a model error), or Succeeded (a final answer,
// or an external agent's task marked done) once its push, if any, went through
// (succeedAfterPush). The checks run in that order: the first that holds ends the
// task.
func setEndCondition(c taskConditions, task *v1.AgentTask, world TaskWorld, tally intentTally) {
	st, model, b := c.st, world.Model, task.Spec.Budgets
	switch {
	case task.IsCancelled():
		c.set(v1.ConditionFailed, true, v1.ReasonCancelled, "the task was cancelled by its owner (spec.lifecycle Cancelled)")
	case world.WorkspaceFailed:
		c.set(v1.ConditionFailed, true, world.WorkspaceReason, world.WorkspaceMessage)
	case tally.stopped != nil:
		stopped := tally.stopped
		if rc := stopped.Status.Observation; ResultStopped(rc) {
			c.set(v1.ConditionFailed, true, v1.ReasonPolicyStopped, fmt.Sprintf("the result of ToolIntent %s (turn %d) was stopped by rule %s: %s. The call ran; the task takes no more turns.", stopped.Name, stopped.Spec.Turn, rc.ResultCheck.PolicyRuleRef.String(), rc.ResultCheck.Reason))
			break
		}
		d := stopped.Status.Decision
		c.set(v1.ConditionFailed, true, v1.ReasonPolicyStopped, fmt.Sprintf("ToolIntent %s (turn %d) was decided Stop by rule %s: %s. Nothing of that turn ran, and the task takes no more turns.", stopped.Name, stopped.Spec.Turn, d.PolicyRuleRef.String(), d.Reason))
	case model != nil && model.CompletionDenied != "":
		c.set(v1.ConditionFailed, true, v1.ReasonCompletionDenied, model.CompletionDenied)
	case b.MaxConsecutiveRefusals > 0 && int32(tally.consecutiveRefusals) >= b.MaxConsecutiveRefusals:
		c.set(v1.ConditionFailed, true, v1.ReasonRefusalBudgetExhausted, fmt.Sprintf("%d intents in a row were refused (validation failures or denials), budgets.maxConsecutiveRefusals=%d: the agent is stuck repeating refused calls", tally.consecutiveRefusals, b.MaxConsecutiveRefusals))
	case b.MaxIntents > 0 && st.Intents.Total >= b.MaxIntents && st.Intents.InFlight == 0:
		c.set(v1.ConditionFailed, true, v1.ReasonIntentBudgetExhausted, fmt.Sprintf("the task used all %d intents of budgets.maxIntents", b.MaxIntents))
	case model != nil && model.Failure != "":
		c.set(v1.ConditionFailed, true, v1.ReasonModelError, model.Failure)
	case model != nil && model.Answer != nil && st.Intents.InFlight == 0:
		if succeedAfterPush(task, world.Push, st, c.set, v1.ReasonCompleted, fmt.Sprintf("the model gave its final answer in turn %d", model.Turns-1)) {
			st.Result = resultOf(*model.Answer, model.Turns-1)
		}
	case model != nil && model.NextTurnDue && b.MaxTurns > 0 && model.Turns >= b.MaxTurns:
		c.set(v1.ConditionFailed, true, v1.ReasonTurnBudgetExhausted, fmt.Sprintf("the model took all %d turns of budgets.maxTurns without a final answer", b.MaxTurns))
	case b.MaxTokens != nil && st.TokensUsed >= *b.MaxTokens && (model == nil || model.NextTurnDue):
		c.set(v1.ConditionFailed, true, v1.ReasonTokenBudgetExhausted, fmt.Sprintf("the model used %d tokens, budgets.maxTokens=%d", st.TokensUsed, *b.MaxTokens))
	case task.Spec.Agent.External != nil && task.IsMarkedDone() && st.Intents.InFlight == 0:
		succeedAfterPush(task, world.Push, st, c.set, v1.ReasonMarkedDone, "the task's owner marked it done (spec.lifecycle Done) and no intent is in flight")
	}
}

// settleEndConditions sets Succeeded and Failed False/Running while neither is
// True. A finished task has only its terminal condition: the other one, left from a
// running reconcile as False/Running ("the task has not finished"), would contradict
// it, and whether it was there would depend on history rather than on the world.
func settleEndConditions(c taskConditions) {
	switch {
	case meta.IsStatusConditionTrue(c.st.Conditions, v1.ConditionSucceeded):
		meta.RemoveStatusCondition(&c.st.Conditions, v1.ConditionFailed)
	case meta.IsStatusConditionTrue(c.st.Conditions, v1.ConditionFailed):
		meta.RemoveStatusCondition(&c.st.Conditions, v1.ConditionSucceeded)
	default:
		c.set(v1.ConditionSucceeded, false, v1.ReasonRunning, "the task has not finished")
		c.set(v1.ConditionFailed, false, v1.ReasonRunning, "the task has not failed")
	}
}

// taskPhase is the phase the conditions of st give.
func taskPhase(st *v1.AgentTaskStatus, awaiting []string) v1.TaskPhase {
	switch {
	case meta.IsStatusConditionTrue(st.Conditions, v1.ConditionSucceeded):
		return v1.TaskSucceeded
	case meta.IsStatusConditionTrue(st.Conditions, v1.ConditionFailed):
		return v1.TaskFailed
	case !meta.IsStatusConditionTrue(st.Conditions, v1.ConditionReady):
		return v1.TaskPending
	case len(awaiting) > 0:
		return v1.TaskAwaitingApproval
	default:
		return v1.TaskRunning
	}
}

// succeedAfterPush ends a task that would succeed (reason, msg): at once without
// spec.workspace.git.push; with it, once its change was pushed (Succeeded), or
// as Failed when the push was refused (PushDenied) or failed (PushFailed). Until
// then the task runs on, and status.workspace.push says where the push stands. It
// says whether the task succeeded.
func succeedAfterPush(task *v1.AgentTask, pw *PushWorld, st *v1.AgentTaskStatus, set func(string, bool, string, string), reason, msg string) bool {
	g := task.Spec.Workspace.Git
	if g == nil || g.Push == nil {
		set(v1.ConditionSucceeded, true, reason, msg)
		return true
	}
	if pw == nil {
		pw = &PushWorld{}
	}
	ws := &v1.WorkspaceStatus{}
	if st.Workspace != nil {
		ws = st.Workspace.DeepCopy()
	}
	st.Workspace = ws
	ps := &v1.PushStatus{Branch: g.Push.Branch}
	ws.Push = ps
	in := pw.Intent
	if in != nil {
		// What the intent pushes (or pushed) is what its approved input says, not
		// what the spec says now.
		var input tools.GitPushInput
		if json.Unmarshal(in.Spec.Input.Raw, &input) == nil && input.Branch != "" {
			ps.Branch = input.Branch
		}
	}
	switch {
	case in != nil && in.Status.Observation != nil:
		ps.IntentName = in.Name
		o := in.Status.Observation
		switch o.Outcome {
		case v1.OutcomeSucceeded:
			ps.Commit = PushedCommit(o.Summary)
			ps.Message = fmt.Sprintf("pushed commit %s to branch %s", ps.Commit, ps.Branch)
			set(v1.ConditionSucceeded, true, reason, fmt.Sprintf("%s; its change was pushed as commit %s to branch %s of %s (ToolIntent %s)", msg, ps.Commit, ps.Branch, g.URL, in.Name))
			return true
		case v1.OutcomeDenied, v1.OutcomeApprovalDenied, v1.OutcomeApprovalExpired:
			ps.Message = fmt.Sprintf("not pushed: ToolIntent %s ended %s", in.Name, o.Outcome)
			set(v1.ConditionFailed, true, v1.ReasonPushDenied, fmt.Sprintf("%s, but the push of its change to branch %s of %s was refused (ToolIntent %s ended %s%s): nothing was pushed; kubectl toolgate export %s -o patch still gives the change",
				msg, ps.Branch, g.URL, in.Name, o.Outcome, decisionNote(in), task.Name))
		default:
			ps.Message = fmt.Sprintf("not pushed: ToolIntent %s ended %s", in.Name, o.Outcome)
			set(v1.ConditionFailed, true, v1.ReasonPushFailed, fmt.Sprintf("%s, but its change could not be pushed to branch %s of %s (ToolIntent %s ended %s): %s; kubectl toolgate export %s -o patch still gives the change",
				msg, ps.Branch, g.URL, in.Name, o.Outcome, firstLines(o.Summary, 600), task.Name))
		}
	case in != nil:
		ps.IntentName = in.Name
		ps.Message = fmt.Sprintf("ToolIntent %s pushes the change to branch %s once it is decided (and approved, when asked)", in.Name, ps.Branch)
	case pw.Failure != "":
		ps.Message = "not pushed: " + pw.Failure
		set(v1.ConditionFailed, true, v1.ReasonPushFailed, fmt.Sprintf("%s, but its change could not be pushed: %s", msg, pw.Failure))
	case pw.Record != nil && pw.Record.FileCount == 0:
		ps.Message = fmt.Sprintf("nothing to push: the workspace has no change against %s", pw.Record.Base)
		set(v1.ConditionSucceeded, true, reason, fmt.Sprintf("%s; the workspace has no change against %s, so nothing was pushed", msg, pw.Record.Base))
		return true
	case pw.Waiting != "":
		ps.Message = fmt.Sprintf("waiting for %s to end: the workspace's change is read, to be pushed to branch %s, once nothing of the task runs", pw.Waiting, ps.Branch)
	default:
		ps.Message = fmt.Sprintf("reading the workspace's change to push it to branch %s", ps.Branch)
	}
	return false
}

func decisionNote(in *v1.ToolIntent) string {
	if d := in.Status.Decision; d != nil && d.Action == v1.DecisionDeny {
		return ", rule " + d.PolicyRuleRef.String() + ": " + d.Reason
	}
	return ""
}

// firstLines is the start of s, at most n bytes, on one line.
func firstLines(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// IntentBefore orders a task's intents: by turn and index, then creation time and name.
func IntentBefore(a, b *v1.ToolIntent) bool {
	if a.Spec.Turn != b.Spec.Turn {
		return a.Spec.Turn < b.Spec.Turn
	}
	if a.Spec.Index != b.Spec.Index {
		return a.Spec.Index < b.Spec.Index
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// namesUpTo is names in brackets, at most n of them, then how many more there are:
// a condition message holds at most 32768 characters, however many calls wait.
func namesUpTo(names []string, n int) string {
	if len(names) <= n {
		return "[" + strings.Join(names, " ") + "]"
	}
	return fmt.Sprintf("[%s] and %d more", strings.Join(names[:n], " "), len(names)-n)
}

// lastFired is fires as status.ruleFires shows them: at most n, the rules that fired
// last, sorted as RuleFires sorts them. Limits are enforced from every fire, never
// from this view.
func lastFired(fires []v1.RuleFires, n int) []v1.RuleFires {
	if len(fires) <= n {
		return fires
	}
	byTime := slices.Clone(fires)
	sort.SliceStable(byTime, func(i, j int) bool {
		a, b := byTime[i].LastFiredAt, byTime[j].LastFiredAt
		return a != nil && (b == nil || b.Before(a))
	})
	kept := byTime[:n]
	sort.SliceStable(kept, func(i, j int) bool { return ruleFiresBefore(kept[i], kept[j]) })
	return kept
}

// resultOf is a model's final answer as status.result holds it: whole when it fits
// in MaxResultBytes, else its start, cut between runes, and where the whole answer
// is (the turn record of the turn that gave it).
func resultOf(answer string, turn int32) string {
	if len(answer) <= v1.MaxResultBytes {
		return answer
	}
	note := fmt.Sprintf("\n…[toolgate: the answer is cut here to fit status.result; the whole answer is in the record of turn %d]", turn)
	return clip.Bytes(answer, v1.MaxResultBytes-len(note)) + note
}

// retiredApprovals counts the Approvals of the task's retired calls.
func retiredApprovals(h *v1.CallHistory) int32 {
	if h == nil {
		return 0
	}
	return h.ApprovalRequests
}
