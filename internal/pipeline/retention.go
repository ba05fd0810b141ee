package pipeline

import (
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Retention: a finished call leaves the cluster once the archive holds its record
// and its retention window has passed; what the task's status and its later calls
// need from it is folded into the task's status.history first (docs/archive.md).
//
// Calls retire by whole turns, in order, so that what the batch rules read of a
// turn (its Stop or Redirect, its announced calls) is never half gone: a turn is
// retired when every call of it is observed and past the window, and a later turn
// has started (or the task ended). A model task's calls stay until the task ends:
// the agent loop rebuilds the conversation, and Completion rules read the history,
// from them.

// LiveIntents is intents without the ones status.history counts already (listed
// as retiring: deleted, or about to be, and possibly still in a cache).
func LiveIntents(h *v1.CallHistory, intents []v1.ToolIntent) []v1.ToolIntent {
	if h == nil || len(h.Retiring) == 0 {
		return intents
	}
	retiring := make(map[string]bool, len(h.Retiring))
	for _, r := range h.Retiring {
		retiring[r.UID] = true
	}
	out := make([]v1.ToolIntent, 0, len(intents))
	for _, in := range intents {
		if !retiring[string(in.UID)] {
			out = append(out, in)
		}
	}
	return out
}

// RetirableCalls returns the calls of task that may retire now, in order (whole
// turns; see above), of live (LiveIntents), and how long until the next one may
// (0 when none waits for its window). push names the controller's push intent,
// which stays while the task runs (the push is observed from it). retention is the
// window after an observation.
func RetirableCalls(task *v1.AgentTask, live []v1.ToolIntent, push string, retention time.Duration, now time.Time) ([]v1.ToolIntent, time.Duration) {
	ended := EndedBy(task.Status.Conditions) != ""
	if task.Spec.Agent.Model != nil && !ended {
		return nil, 0
	}
	ordered := append([]v1.ToolIntent(nil), live...)
	sort.Slice(ordered, func(i, j int) bool { return IntentBefore(&ordered[i], &ordered[j]) })
	var lastTurn int32
	for i := range ordered {
		if ordered[i].Name != push {
			lastTurn = max(lastTurn, ordered[i].Spec.Turn)
		}
	}
	room := v1.MaxRetiringIntents
	if h := task.Status.History; h != nil {
		room -= len(h.Retiring)
	}
	var out []v1.ToolIntent
	for start := 0; start < len(ordered); {
		turn := ordered[start].Spec.Turn
		end := start
		for end < len(ordered) && ordered[end].Spec.Turn == turn {
			end++
		}
		calls := ordered[start:end]
		if !ended && (turn >= lastTurn || containsName(calls, push)) {
			return out, 0
		}
		if wait := dueIn(calls, retention, now); wait != 0 {
			return out, max(wait, 0)
		}
		if len(out)+len(calls) > room {
			return out, 0
		}
		out = append(out, calls...)
		start = end
	}
	return out, 0
}

// dueIn is how long until every call of a turn is past its window: 0 when all
// are, -1 (never, as far as time goes) when one is not observed.
func dueIn(calls []v1.ToolIntent, retention time.Duration, now time.Time) time.Duration {
	var wait time.Duration
	for i := range calls {
		obs := calls[i].Status.Observation
		if obs == nil || obs.ObservedAt == nil || !meta.IsStatusConditionTrue(calls[i].Status.Conditions, v1.ConditionObserved) {
			return -1
		}
		wait = max(wait, obs.ObservedAt.Add(retention).Sub(now))
	}
	return wait
}

func containsName(intents []v1.ToolIntent, name string) bool {
	for i := range intents {
		if name != "" && intents[i].Name == name {
			return true
		}
	}
	return false
}

// Retire folds calls (RetirableCalls' result, archived) into the history h,
// listing them as retiring, and returns the new history. ok is false when the
// history would exceed its bounds (more rules than MaxRuleFires): then nothing is
// retired, and the calls stay. push names the controller's push intent, which is
// counted nowhere (as in status.intents).
func Retire(h *v1.CallHistory, taskUID, push string, calls []v1.ToolIntent) (*v1.CallHistory, bool) {
	out := &v1.CallHistory{}
	if h != nil {
		out = h.DeepCopy()
	}
	if len(calls) == 0 {
		return out, true
	}
	ordered := append([]v1.ToolIntent(nil), calls...)
	sort.Slice(ordered, func(i, j int) bool { return IntentBefore(&ordered[i], &ordered[j]) })
	byOutcome := outcomeMap(out.Intents.ByOutcome)
	counted := ordered[:0:0]
	for i := range ordered {
		in := &ordered[i]
		out.Retiring = append(out.Retiring, v1.RetiringIntent{Name: in.Name, UID: string(in.UID)})
		if in.Name == push {
			continue
		}
		counted = append(counted, *in)
		if in.Status.ApprovalName != "" {
			out.ApprovalRequests++
		}
		if rc := in.Status.Observation.ResultCheck; rc != nil && rc.Action == v1.RuleAsk {
			// A release asked of a human (ResultAskLimit); one withheld at the
			// limit counts too, which changes nothing once the limit is reached.
			out.ApprovalRequests++
		}
		if d := in.Status.Decision; d != nil && in.Status.Observation.Outcome == v1.OutcomeApprovalDenied && d.Fingerprint != "" {
			out.DeniedFingerprints = append(slices.DeleteFunc(out.DeniedFingerprints, func(f string) bool { return f == d.Fingerprint }), d.Fingerprint)
		}
		out.Intents.Total++
		out.ThroughTurn = max(out.ThroughTurn, in.Spec.Turn)
		byOutcome[in.Status.Observation.Outcome]++
		if isRefusal(in.Status.Observation.Outcome) {
			out.ConsecutiveRefusals++
		} else {
			out.ConsecutiveRefusals = 0
		}
	}
	out.Intents.ByOutcome = v1.OutcomeCounts(byOutcome)
	if n := len(out.DeniedFingerprints) - v1.MaxHistoryDenials; n > 0 {
		out.DeniedFingerprints = out.DeniedFingerprints[n:]
	}
	out.RuleFires = MergeRuleFires(out.RuleFires, RuleFires(taskUID, counted, nil))
	if len(out.RuleFires) > v1.MaxRuleFires {
		return h, false
	}
	out.Baselines = foldBaselines(out.Baselines, Baselines(counted))
	return out, true
}

// Forget drops from h's retiring list the intents no longer listed: their
// deletion was seen. intents is every listed intent of the task.
func Forget(h *v1.CallHistory, intents []v1.ToolIntent) *v1.CallHistory {
	if h == nil || len(h.Retiring) == 0 {
		return h
	}
	listed := make(map[string]bool, len(intents))
	for i := range intents {
		listed[string(intents[i].UID)] = true
	}
	out := h.DeepCopy()
	out.Retiring = out.Retiring[:0]
	for _, r := range h.Retiring {
		if listed[r.UID] {
			out.Retiring = append(out.Retiring, r)
		}
	}
	return out
}

func outcomeMap(counts []v1.OutcomeCount) map[v1.Outcome]int32 {
	m := make(map[v1.Outcome]int32, len(counts))
	for _, c := range counts {
		m[c.Outcome] += c.Count
	}
	return m
}

// MergeRuleFires adds b's fires to a's, rule by rule, keeping each rule's latest
// fire; the result is sorted as RuleFires sorts.
func MergeRuleFires(a, b []v1.RuleFires) []v1.RuleFires {
	if len(b) == 0 {
		return a
	}
	byID := make(map[string]*v1.RuleFires, len(a)+len(b))
	var out []v1.RuleFires
	for _, f := range append(append([]v1.RuleFires(nil), a...), b...) {
		seen := byID[f.ID]
		if seen == nil {
			f := f
			byID[f.ID] = &f
			continue
		}
		seen.Fires += f.Fires
		if f.LastFiredAt != nil && (seen.LastFiredAt == nil || seen.LastFiredAt.Before(f.LastFiredAt)) {
			t := *f.LastFiredAt
			seen.LastFiredAt = &t
		}
	}
	for _, f := range byID {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return ruleFiresBefore(out[i], out[j]) })
	return out
}

// foldBaselines adds the newer baselines to old, oldest first: a path seen again
// moves to the end, and beyond MaxHistoryBaselines the oldest are dropped (an edit
// of a dropped file needs a new read: it fails closed).
func foldBaselines(old []v1.FileBaseline, newer map[string]Baseline) []v1.FileBaseline {
	if len(newer) == 0 {
		return old
	}
	paths := make([]string, 0, len(newer))
	for p := range newer {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := make([]v1.FileBaseline, 0, len(old)+len(paths))
	for _, b := range old {
		if _, again := newer[b.Path]; !again {
			out = append(out, b)
		}
	}
	for _, p := range paths {
		if len(p) > 1024 {
			continue // longer than the API keeps: dropped, fails closed
		}
		out = append(out, v1.FileBaseline{Path: p, SHA256: newer[p].SHA256, Intent: newer[p].Intent})
	}
	if n := len(out) - v1.MaxHistoryBaselines; n > 0 {
		out = out[n:]
	}
	return out
}

// HistoryBaselines is the history's baselines with those of live (earlier intents,
// in order) over them: a live call is newer than any retired one of an older turn.
func HistoryBaselines(h *v1.CallHistory, live []v1.ToolIntent) map[string]Baseline {
	out := Baselines(live)
	if h == nil {
		return out
	}
	for _, b := range h.Baselines {
		if _, newer := out[b.Path]; !newer {
			out[b.Path] = Baseline{SHA256: b.SHA256, Intent: b.Intent}
		}
	}
	return out
}

// RetiredCount is how many of the task's intents the history counts.
func RetiredCount(h *v1.CallHistory) int {
	if h == nil {
		return 0
	}
	return int(h.Intents.Total)
}

// TurnRetired says whether intent proposes into a turn whose calls were retired:
// such a turn is closed (its batch is gone from the cluster).
func TurnRetired(h *v1.CallHistory, intent *v1.ToolIntent) bool {
	return h != nil && h.Intents.Total > 0 && intent.Spec.Turn <= h.ThroughTurn
}

// EndedAt is when the task's status recorded its end (nil while it runs).
func EndedAt(conditions []metav1.Condition) *metav1.Time {
	for _, t := range []string{v1.ConditionSucceeded, v1.ConditionFailed} {
		if c := meta.FindStatusCondition(conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			at := c.LastTransitionTime
			return &at
		}
	}
	return nil
}
