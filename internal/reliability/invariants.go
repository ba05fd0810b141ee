// Package reliability checks the promises toolgate makes under faults: a call runs at
// most once, and only when allowed or approved. A History records what the API
// server showed over a run (every version of every intent, Approval, Execution and
// Job seen by a watch); Check compares it with the promises and lists each broken
// one. The fault tests of this package (kill points, split brain, a flaky API
// server, fuzzed intents) drive the real controller and call Check at the end.
package reliability

import (
	"fmt"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Violation is one broken promise, said so that a tired reader knows which object
// and what it did.
type Violation string

// History is everything a run showed, by object UID. Feed it every version a watch
// delivers (Intent, Approval, Execution, Job); versions of one object must come in
// the order the API server wrote them (a watch's order). It is not safe for
// concurrent use: the Recorder serializes.
type History struct {
	intents    map[types.UID]*intentHistory
	approvals  map[types.UID]*approvalHistory
	executions map[types.UID]*v1.Execution
	jobs       map[types.UID]*batchv1.Job
	// problems found while feeding (a changed observation, a re-consumed approval).
	problems []Violation
}

type intentHistory struct {
	last *v1.ToolIntent
	// observation is the first observation seen, which must never change.
	observation *v1.Observation
}

type approvalHistory struct {
	last       *v1.Approval
	consumedBy string
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{
		intents:    map[types.UID]*intentHistory{},
		approvals:  map[types.UID]*approvalHistory{},
		executions: map[types.UID]*v1.Execution{},
		jobs:       map[types.UID]*batchv1.Job{},
	}
}

// Intent records a version of a ToolIntent.
func (h *History) Intent(in *v1.ToolIntent) {
	ih := h.intents[in.UID]
	if ih == nil {
		ih = &intentHistory{}
		h.intents[in.UID] = ih
	}
	ih.last = in.DeepCopy()
	if in.Status.Observation == nil {
		if ih.observation != nil {
			h.problems = append(h.problems, Violation(fmt.Sprintf("ToolIntent %s/%s lost its observation (%s) in resourceVersion %s", in.Namespace, in.Name, ih.observation.Outcome, in.ResourceVersion)))
		}
		return
	}
	if ih.observation == nil {
		ih.observation = in.Status.Observation.DeepCopy()
		return
	}
	if !equality.Semantic.DeepEqual(ih.observation, in.Status.Observation) {
		h.problems = append(h.problems, Violation(fmt.Sprintf("ToolIntent %s/%s changed its observation: first %s %q, then %s %q (resourceVersion %s)",
			in.Namespace, in.Name, ih.observation.Outcome, ih.observation.Summary, in.Status.Observation.Outcome, in.Status.Observation.Summary, in.ResourceVersion)))
	}
}

// Approval records a version of an Approval.
func (h *History) Approval(a *v1.Approval) {
	ah := h.approvals[a.UID]
	if ah == nil {
		ah = &approvalHistory{}
		h.approvals[a.UID] = ah
	}
	ah.last = a.DeepCopy()
	if ah.consumedBy != "" && a.Status.ConsumedByExecutionName != ah.consumedBy {
		h.problems = append(h.problems, Violation(fmt.Sprintf("Approval %s/%s was consumed by Execution %s and then by %q (resourceVersion %s): an approval is used once",
			a.Namespace, a.Name, ah.consumedBy, a.Status.ConsumedByExecutionName, a.ResourceVersion)))
	}
	if ah.consumedBy == "" {
		ah.consumedBy = a.Status.ConsumedByExecutionName
	}
}

// Execution records a version of an Execution.
func (h *History) Execution(e *v1.Execution) { h.executions[e.UID] = e.DeepCopy() }

// Job records a version of a Job.
func (h *History) Job(j *batchv1.Job) { h.jobs[j.UID] = j.DeepCopy() }

// Check lists every broken promise of the run:
//
//   - every intent has exactly one observation, which never changed (also while
//     the run went on);
//   - at most one Execution and one Job per intent, ever;
//   - no Execution without an Allow decision or an approval consumed by it;
//   - an approval is consumed at most once, by one Execution;
//   - a call that was refused (validation, policy, a person, expiry) has no
//     Execution, and a call observed as not executed has no Job.
//
// Objects deleted during the run count too: the History keeps what it saw.
func (h *History) Check() []Violation {
	out := append([]Violation(nil), h.problems...)
	execsOf := map[types.UID][]*v1.Execution{}
	for _, e := range h.executions {
		if owner := metav1.GetControllerOf(e); owner != nil {
			execsOf[owner.UID] = append(execsOf[owner.UID], e)
		} else {
			out = append(out, Violation(fmt.Sprintf("Execution %s/%s has no controlling ToolIntent", e.Namespace, e.Name)))
		}
	}
	jobsOf := map[types.UID][]*batchv1.Job{} // by Execution UID
	for _, j := range h.jobs {
		owner := metav1.GetControllerOf(j)
		if owner == nil || owner.Kind != "Execution" {
			out = append(out, Violation(fmt.Sprintf("Job %s/%s is not controlled by an Execution", j.Namespace, j.Name)))
			continue
		}
		jobsOf[owner.UID] = append(jobsOf[owner.UID], j)
	}
	approvalsByName := map[string]*v1.Approval{}
	usedBy := map[string][]string{} // approval key -> Executions naming it
	for _, ah := range h.approvals {
		a := ah.last
		approvalsByName[a.Namespace+"/"+a.Name] = a
	}
	for uid, ih := range h.intents {
		in := ih.last
		name := in.Namespace + "/" + in.Name
		if in.Status.Observation == nil {
			out = append(out, Violation(fmt.Sprintf("ToolIntent %s has no observation at the end of the run (conditions %s)", name, conditionsText(in.Status.Conditions))))
		}
		execs := execsOf[uid]
		if len(execs) > 1 {
			out = append(out, Violation(fmt.Sprintf("ToolIntent %s has %d Executions: %s", name, len(execs), execNames(execs))))
		}
		var jobs []*batchv1.Job
		for _, e := range execs {
			jobs = append(jobs, jobsOf[e.UID]...)
			if e.Spec.ApprovalName() != "" {
				key := e.Namespace + "/" + e.Spec.ApprovalName()
				usedBy[key] = append(usedBy[key], e.Name)
			}
			if v := executionWithoutLicence(in, e, approvalsByName); v != "" {
				out = append(out, v)
			}
		}
		if len(jobs) > 1 {
			out = append(out, Violation(fmt.Sprintf("ToolIntent %s ran %d Jobs: %s", name, len(jobs), jobNames(jobs))))
		}
		if obs := in.Status.Observation; obs != nil {
			if refused(obs.Outcome) && len(execs) > 0 {
				out = append(out, Violation(fmt.Sprintf("ToolIntent %s was refused (%s) but has Execution %s", name, obs.Outcome, execs[0].Name)))
			}
			if !obs.Executed && len(jobs) > 0 && obs.Outcome != v1.OutcomeAborted {
				out = append(out, Violation(fmt.Sprintf("ToolIntent %s is observed as not executed (%s) but Job %s was made", name, obs.Outcome, jobs[0].Name)))
			}
		}
	}
	for key, names := range usedBy {
		if len(names) > 1 {
			sort.Strings(names)
			out = append(out, Violation(fmt.Sprintf("Approval %s is named by %d Executions: %v", key, len(names), names)))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// executionWithoutLicence says why an Execution should not exist: its intent was
// not allowed, and no approval was consumed by it.
func executionWithoutLicence(in *v1.ToolIntent, e *v1.Execution, approvals map[string]*v1.Approval) Violation {
	d := in.Status.Decision
	name := in.Namespace + "/" + in.Name
	if d == nil {
		return Violation(fmt.Sprintf("Execution %s/%s exists but ToolIntent %s has no decision", e.Namespace, e.Name, name))
	}
	if d.Action == v1.DecisionAllow && e.Spec.ApprovalName() == "" {
		return ""
	}
	if e.Spec.ApprovalName() == "" {
		return Violation(fmt.Sprintf("Execution %s/%s names no approval but ToolIntent %s was decided %s", e.Namespace, e.Name, name, d.Action))
	}
	a := approvals[e.Namespace+"/"+e.Spec.ApprovalName()]
	if a == nil {
		return Violation(fmt.Sprintf("Execution %s/%s names Approval %s, which was never seen", e.Namespace, e.Name, e.Spec.ApprovalName()))
	}
	if a.Status.State != v1.ApprovalStateConsumed || a.Status.ConsumedByExecutionName != e.Name || pipeline.CountVotes(a).Decision != v1.DecisionApproved {
		return Violation(fmt.Sprintf("Execution %s/%s runs on Approval %s, which is %s (votes %s, consumed by %q), not consumed by it",
			e.Namespace, e.Name, a.Name, a.Status.State, pipeline.CountVotes(a), a.Status.ConsumedByExecutionName))
	}
	return ""
}

// refused outcomes are those of calls that must never have run.
func refused(o v1.Outcome) bool {
	switch o {
	case v1.OutcomeValidationFailed, v1.OutcomeDenied, v1.OutcomeApprovalDenied, v1.OutcomeApprovalExpired, v1.OutcomeRedirected, v1.OutcomeStopped:
		return true
	}
	return false
}

func conditionsText(cs []metav1.Condition) string {
	s := ""
	for _, c := range cs {
		s += fmt.Sprintf("%s=%s/%s ", c.Type, c.Status, c.Reason)
	}
	return s
}

func execNames(es []*v1.Execution) string {
	var names []string
	for _, e := range es {
		names = append(names, e.Name+"("+string(e.UID)+")")
	}
	sort.Strings(names)
	return fmt.Sprint(names)
}

func jobNames(js []*batchv1.Job) string {
	var names []string
	for _, j := range js {
		names = append(names, j.Name+"("+string(j.UID)+")")
	}
	sort.Strings(names)
	return fmt.Sprint(names)
}
