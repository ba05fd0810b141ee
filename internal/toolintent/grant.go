package toolintent

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// useGrant lets an asked call run on an ApprovalGrant of its task instead of asking
// a human again, when one covers it (pipeline.GrantCovers). It is judged at the
// moment the call would be asked, against the decision the policies in force give
// it then: the last-moment recheck comes first, and a call it denies ends denied
// whatever was granted. A grant is used only after the batch preflight lets the
// call go on; the use is taken (a compare-and-swap on the grant) before the
// Execution is named. It returns no step when no grant covers the call: then a
// human is asked.
func useGrant(w *World) (Step, bool) {
	if !w.Grants.Known {
		return read(NeedGrants), true
	}
	if len(w.Grants.Value) == 0 {
		return Step{}, false
	}
	if s, stop := recheck(w, nil); stop {
		return s, true
	}
	if !w.OtherApprovals.Known {
		return read(NeedOtherApprovals), true
	}
	intent := w.Intent
	grants := append([]v1.ApprovalGrant(nil), w.Grants.Value...)
	sort.Slice(grants, func(i, j int) bool { return grants[i].Name < grants[j].Name })
	for i := range grants {
		g := &grants[i]
		ok, _ := pipeline.GrantCovers(pipeline.GrantCheck{
			Grant: g, Approval: approvalOf(w.OtherApprovals.Value, g.Spec.ApprovalRef.Name),
			Task: w.Task.Value, Intent: intent, Decision: w.Rechecked.Value, Input: w.Input(), Now: w.Now,
		})
		if !ok {
			continue
		}
		// Batch preflight before the grant is used, as before an approval is.
		if s, held := holdForSiblings(w); held {
			return s, true
		}
		used := g.DeepCopy()
		used.Status.Uses++
		used.Status.LastUsedBy = intent.Name
		used.Status.State, used.Status.Message = v1.GrantStateActive, fmt.Sprintf("used by ToolIntent %s (use %d of %d)", intent.Name, used.Status.Uses, g.Spec.MaxUses)
		if used.Status.Uses >= g.Spec.MaxUses {
			used.Status.State = v1.GrantStateExhausted
		}
		ref := &v1.GrantReference{Name: g.Name, ApprovalName: g.Spec.ApprovalRef.Name, GrantedBy: g.Spec.GrantedBy, Scope: g.Spec.Scope, Use: used.Status.Uses, Of: g.Spec.MaxUses}
		msg := "allowed by " + ref.String()
		c := Change{
			GrantRef:   ref,
			Conditions: []metav1.Condition{Condition(intent, v1.ConditionApproved, true, v1.ReasonGrantUsed, msg)},
			Events:     []Event{event(EventGrantUsed, false, nil, "%s", msg)},
		}
		return Step{Do: UseGrant, Grant: &GrantUse{Grant: used}, Change: c}, true
	}
	return Step{}, false
}

// approvalOf is the Approval of that name among approvals, nil when none.
func approvalOf(approvals []v1.Approval, name string) *v1.Approval {
	for i := range approvals {
		if approvals[i].Name == name {
			return &approvals[i]
		}
	}
	return nil
}
