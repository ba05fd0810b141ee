package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// ErrChainPending marks a chain that is whole so far but not yet complete: the intent
// has not recorded its decision or its Execution yet. The ToolIntent controller
// creates the Execution before its status write records it, so a fresh Execution
// is seen in this state for a moment; waiting (a bounded time) is right, refusing is
// not. Every other CheckChain error is final.
var ErrChainPending = errors.New("the intent has not recorded this Execution yet")

// ChainError says which link of the authorization chain between an Execution and
// the decision that allows it is broken.
type ChainError struct {
	// Link names the broken link: owner, task, spec, decision, approval,
	// fingerprint, sandbox or executionName.
	Link string
	// Message says what is wrong and what to do, in words a person can check.
	Message string
	// Pending is true when the link may still close (ErrChainPending).
	Pending bool
}

func (e *ChainError) Error() string { return e.Message }

// Is makes a pending ChainError match ErrChainPending.
func (e *ChainError) Is(target error) bool { return e.Pending && target == ErrChainPending }

// CheckChain verifies that exec is the one invocation its ToolIntent decided to run,
// before anything runs: exec is controlled by intent (the live one, by UID); both
// name the same task; the tool, input, timeout, baseline and walls are the intent's;
// the sandbox (image, runtimeClass, network, workspace claim and mount, resources,
// output cap, workdir, env) is the one the decision recorded;
// the decision is Allow, or Ask with an Approval (controlled by the intent) consumed
// by exec under the same fingerprint, or Ask with the use of a grant recorded; exec's fingerprint is the decision's; and the
// intent's status names exec as its Execution.
//
// intent is nil when spec.intentRef names no ToolIntent; approval is nil when
// spec.approvalRef names none (or is empty). A nil result means the chain is whole.
// An error matching ErrChainPending means the intent has not caught up yet.
func CheckChain(exec *v1.Execution, intent *v1.ToolIntent, approval *v1.Approval) error {
	broken := func(link, format string, args ...any) error {
		return &ChainError{Link: link, Message: fmt.Sprintf(format, args...)}
	}
	owner := metav1.GetControllerOf(exec)
	if intent == nil {
		return broken("owner", "ToolIntent %s named by spec.intentRef does not exist; only an intent's own Execution, created by the controller, runs", exec.Spec.IntentRef.Name)
	}
	if owner == nil || owner.Kind != "ToolIntent" || owner.APIVersion != v1.GroupVersion.String() {
		return broken("owner", "Execution %s is not controlled by a ToolIntent; only an intent's own Execution, created by the controller, runs", exec.Name)
	}
	if owner.Name != intent.Name || owner.UID != intent.UID {
		return broken("owner", "Execution %s is controlled by ToolIntent %s (uid %s), not by the live ToolIntent %s (uid %s) that spec.intentRef names; it is not that intent's Execution", exec.Name, owner.Name, owner.UID, intent.Name, intent.UID)
	}
	if !intent.DeletionTimestamp.IsZero() {
		return broken("owner", "ToolIntent %s is being deleted; its call does not run", intent.Name)
	}
	if exec.Spec.TaskRef != intent.Spec.TaskRef {
		return broken("task", "spec.taskRef %s is not ToolIntent %s's task %s", exec.Spec.TaskRef.Name, intent.Name, intent.Spec.TaskRef.Name)
	}
	if exec.Spec.Tool != intent.Spec.Tool {
		return broken("spec", "spec.tool %s is not ToolIntent %s's tool %s", exec.Spec.Tool, intent.Name, intent.Spec.Tool)
	}
	normalized, errs := NormalizedInput(intent)
	if len(errs) > 0 {
		return broken("spec", "ToolIntent %s's input does not validate (%s); its call never runs", intent.Name, errs[0])
	}
	if !sameJSON(exec.Spec.Input.Raw, normalized) {
		return broken("spec", "spec.input is not ToolIntent %s's validated input; an Execution runs exactly the input that was decided", intent.Name)
	}

	dec := intent.Status.Decision
	if dec == nil {
		if intent.Status.Observation != nil {
			return broken("decision", "ToolIntent %s ended (%s) without a decision to run; nothing may run for it", intent.Name, intent.Status.Observation.Outcome)
		}
		return &ChainError{Link: "decision", Pending: true, Message: fmt.Sprintf("ToolIntent %s has not recorded its decision yet", intent.Name)}
	}
	switch dec.Action {
	case v1.DecisionAllow:
		if exec.Spec.ApprovalName() != "" {
			return broken("approval", "ToolIntent %s was allowed without an approval, but spec.approvalRef names Approval %s", intent.Name, exec.Spec.ApprovalName())
		}
	case v1.DecisionAsk:
		if dec.GrantRef != nil {
			// Allowed on an earlier approval's grant, whose use the controller
			// recorded in the decision (intent status only it writes), before it
			// named this Execution.
			if exec.Spec.ApprovalName() != "" {
				return broken("approval", "ToolIntent %s runs on %s, but spec.approvalRef names Approval %s", intent.Name, dec.GrantRef, exec.Spec.ApprovalName())
			}
			break
		}
		if err := checkApproval(exec, intent, approval); err != nil {
			return err
		}
	default:
		return broken("decision", "ToolIntent %s was decided %s; only an Allow, or an Ask with a consumed approval, runs", intent.Name, dec.Action)
	}
	if dec.Fingerprint == "" || exec.Spec.Fingerprint != dec.Fingerprint {
		return broken("fingerprint", "spec.fingerprint %q is not the fingerprint %q of ToolIntent %s's decision; an Execution runs only the call that was decided", exec.Spec.Fingerprint, dec.Fingerprint, intent.Name)
	}
	if val := intent.Status.Validation; val == nil || exec.Spec.TimeoutSeconds != val.TimeoutSeconds || exec.Spec.BaselineSHA256 != val.BaselineSHA256 {
		return broken("spec", "spec.timeoutSeconds or spec.baselineSHA256 is not what ToolIntent %s's validation recorded", intent.Name)
	}
	if err := checkWalls(exec, dec.Walls); err != nil {
		return broken("spec", "%s (the walls of ToolIntent %s's decision)", err, intent.Name)
	}
	if dec.Sandbox == nil {
		return broken("sandbox", "ToolIntent %s's decision records no sandbox (it was decided before decisions recorded one), so where it may run is unknown; it does not run: propose the call again", intent.Name)
	}
	if err := checkSandbox(exec, dec.Sandbox); err != nil {
		return broken("sandbox", "%s (ToolIntent %s's decision); an Execution runs only where its call was decided to run", err, intent.Name)
	}

	switch ref := intent.Status.ExecutionName; {
	case ref == exec.Name:
		return nil
	case ref != "":
		return broken("executionName", "ToolIntent %s ran its call as Execution %s, not %s; an intent runs once", intent.Name, ref, exec.Name)
	case intent.Status.Observation != nil:
		return broken("executionName", "ToolIntent %s ended (%s) without naming an Execution; nothing may run for it", intent.Name, intent.Status.Observation.Outcome)
	default:
		return &ChainError{Link: "executionName", Pending: true, Message: fmt.Sprintf("ToolIntent %s's status does not name Execution %s yet", intent.Name, exec.Name)}
	}
}

// checkApproval verifies the approval an Ask decision runs on.
func checkApproval(exec *v1.Execution, intent *v1.ToolIntent, approval *v1.Approval) error {
	broken := func(format string, args ...any) error {
		return &ChainError{Link: "approval", Message: fmt.Sprintf(format, args...)}
	}
	if exec.Spec.ApprovalName() == "" {
		return broken("ToolIntent %s was decided Ask, and spec.approvalRef names no Approval; an asked call runs only on a consumed approval", intent.Name)
	}
	if intent.Status.ApprovalName != "" && intent.Status.ApprovalName != exec.Spec.ApprovalName() {
		return broken("spec.approvalRef %s is not ToolIntent %s's Approval %s", exec.Spec.ApprovalName(), intent.Name, intent.Status.ApprovalName)
	}
	if approval == nil {
		return broken("Approval %s named by spec.approvalRef does not exist", exec.Spec.ApprovalName())
	}
	if !metav1.IsControlledBy(approval, intent) || approval.Spec.IntentRef.Name != intent.Name {
		return broken("Approval %s is not ToolIntent %s's own (its controller must be the intent, by UID)", approval.Name, intent.Name)
	}
	if approval.Status.State != v1.ApprovalStateConsumed || approval.Status.ConsumedByExecutionName != exec.Name {
		return broken("Approval %s is %s and consumed by %q, not consumed by Execution %s; an asked call runs only once its approval is used by that very Execution", approval.Name, stateOrPending(approval.Status.State), approval.Status.ConsumedByExecutionName, exec.Name)
	}
	if approval.Spec.Fingerprint != exec.Spec.Fingerprint {
		return broken("Approval %s was given for fingerprint %q, not this Execution's %q", approval.Name, approval.Spec.Fingerprint, exec.Spec.Fingerprint)
	}
	return nil
}

func stateOrPending(s v1.ApprovalState) v1.ApprovalState {
	if s == "" {
		return v1.ApprovalStatePending
	}
	return s
}

// checkWalls verifies that exec carries the decision's walls and honours them. A
// decision without walls (recorded before walls existed) has its walls decided again
// from the task when the Execution is built; that is not checked here.
func checkWalls(exec *v1.Execution, walls *v1.SandboxWalls) error {
	if walls == nil {
		return nil
	}
	if !equality.Semantic.DeepEqual(exec.Spec.Walls, walls) {
		return fmt.Errorf("spec.walls are not the decision's")
	}
	if walls.ReadOnlyWorkspace && !exec.Spec.Sandbox.ReadOnlyWorkspace {
		return fmt.Errorf("the decision walls the workspace read-only, but spec.sandbox.readOnlyWorkspace is false")
	}
	if network := exec.Spec.Sandbox.Network; walls.NoNetwork && ((network.Mode != "" && network.Mode != v1.NetworkNone) || len(network.Egress) > 0 || network.ClusterDNS) {
		return fmt.Errorf("the decision walls off the network, but spec.sandbox.network allows egress")
	}
	return nil
}

// sameJSON compares two JSON documents by value: the API server may re-encode what it
// stores (key order, spacing, 1.0 as 1).
func sameJSON(a, b []byte) bool {
	decode := func(raw []byte) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			return nil, false
		}
		return canonicalNumbers(v), true
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	return okA && okB && reflect.DeepEqual(va, vb)
}

// canonicalNumbers replaces each number by an int64 when it is one, else a float64,
// so that equal numbers written differently compare equal and large integers do not
// lose precision.
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			if i := int64(f); float64(i) == f && f >= -1<<53 && f <= 1<<53 {
				return i
			}
			return f
		}
		return x.String()
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumbers(e)
		}
	}
	return v
}
