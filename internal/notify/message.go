package notify

import (
	"fmt"
	"strings"
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
)

// Message is what every channel is told about one event of an Approval; the Slack
// text and the CloudEvents data are two shapes of it. Its JSON is the CloudEvents
// data.
type Message struct {
	Event     v1.NotificationEvent `json:"event"`
	Approval  string               `json:"approval"`
	Namespace string               `json:"namespace"`
	UID       string               `json:"uid"`
	State     v1.ApprovalState     `json:"state"`
	// StateMessage is the controller's explanation of the state.
	StateMessage string `json:"stateMessage,omitempty"`
	Task         string `json:"task"`
	Goal         string `json:"goal,omitempty"`
	Intent       string `json:"intent"`
	Tool         string `json:"tool"`
	// Input is the call's input as the Approval shows it, masked again.
	Input          string  `json:"input"`
	Risk           string  `json:"risk,omitempty"`
	Category       string  `json:"category,omitempty"`
	Rule           string  `json:"rule"`
	Reason         string  `json:"reason,omitempty"`
	ProposerReason string  `json:"proposerReason,omitempty"`
	Parts          []Part  `json:"parts,omitempty"`
	Walls          string  `json:"walls"`
	Network        string  `json:"network"`
	RequestedBy    string  `json:"requestedBy"`
	Approvers      string  `json:"approvers"`
	ExpiresAt      string  `json:"expiresAt"`
	Outcome        *Result `json:"outcome,omitempty"`
	// ApproveCommand is the line an approver runs, with their own credentials;
	// only while the approval waits.
	ApproveCommand string `json:"approveCommand,omitempty"`
	ConsoleURL     string `json:"consoleURL,omitempty"`
}

// Part is one part of the call with its category.
type Part struct {
	Command  string `json:"command"`
	Category string `json:"category"`
}

// Result is the decision of a decided Approval.
type Result struct {
	Decision  string   `json:"decision"`
	DecidedBy []string `json:"decidedBy,omitempty"`
	Comment   string   `json:"comment,omitempty"`
}

// Build is the message announcing the Approval's current event, with the task's
// goal and the parts of the call (from the intent's decision; nil when unknown).
// false when the Approval is at no event yet.
func Build(a *v1.Approval, goal string, parts []v1.CommandPart, consoleURL string) (Message, bool) {
	o, ok := EventOf(a)
	if !ok {
		return Message{}, false
	}
	r := a.Spec.Request
	m := Message{
		Event: o.Event, Approval: a.Name, Namespace: a.Namespace, UID: string(a.UID),
		State: a.Status.State, StateMessage: mask.Secrets(a.Status.Message),
		Task: a.Spec.TaskRef.Name, Goal: mask.Secrets(goal), Intent: a.Spec.IntentRef.Name,
		// The input and its parts are what runs: masked as the Approval masks
		// them (mask.Command), so a value the call uses as code stays visible
		// to the approver here too.
		Tool: string(r.Tool), Input: mask.Command(r.Input),
		Risk: string(r.Risk), Category: string(r.Category), Rule: r.PolicyRuleRef.WithGeneration(),
		Reason: mask.Secrets(r.Reason), ProposerReason: mask.Secrets(r.ProposerReason),
		Walls: walls(r.Walls), Network: network(r.Sandbox, r.Walls),
		RequestedBy: a.Spec.RequestedBy, Approvers: approvers(a.Spec.Approvers),
		ExpiresAt:  a.Spec.ExpiresAt.UTC().Format(time.RFC3339),
		ConsoleURL: consoleURL,
	}
	for _, p := range parts {
		m.Parts = append(m.Parts, Part{Command: mask.Command(p.Command), Category: string(p.Category)})
	}
	if o.Event == v1.EventRequested {
		m.ApproveCommand = fmt.Sprintf("kubectl toolgate approve %s -n %s", a.Name, a.Namespace)
	}
	if o.Event == v1.EventDecided {
		m.Outcome = &Result{Decision: string(o.Decision), DecidedBy: o.DecidedBy, Comment: mask.Secrets(o.Comment)}
	}
	return m, true
}

func walls(w *v1.SandboxWalls) string {
	if w == nil || (!w.ReadOnlyWorkspace && !w.NoNetwork && !w.NoOutputCopy) {
		return "none: the task's own sandbox (a writable workspace, the task's egress)"
	}
	var parts []string
	if w.ReadOnlyWorkspace {
		parts = append(parts, "read-only workspace")
	}
	if w.NoNetwork {
		parts = append(parts, "no network")
	}
	if w.NoOutputCopy {
		parts = append(parts, "no copy of the output in the workspace")
	}
	s := strings.Join(parts, ", ")
	if w.Reason != "" {
		s += " (" + mask.Secrets(w.Reason) + ")"
	}
	return s
}

// network is the egress and DNS the call gets if approved, after the walls.
func network(s *v1.DecidedSandbox, w *v1.SandboxWalls) string {
	if w != nil && w.NoNetwork {
		return "none (walled off), no DNS"
	}
	if s == nil {
		return "the task's network at the time the call runs (not recorded on this approval)"
	}
	n := s.Profile.Network
	if n.Mode != v1.NetworkAllowList || len(n.Egress) == 0 && !n.ClusterDNS {
		return "none: all egress denied, no DNS"
	}
	var to []string
	for _, e := range n.Egress {
		if len(e.Ports) == 0 {
			to = append(to, e.CIDR+" (all ports)")
			continue
		}
		ports := make([]string, len(e.Ports))
		for i, p := range e.Ports {
			ports[i] = fmt.Sprint(p)
		}
		to = append(to, e.CIDR+" ports "+strings.Join(ports, ","))
	}
	s2 := "egress to " + strings.Join(to, "; ")
	if len(to) == 0 {
		s2 = "no egress"
	}
	if n.ClusterDNS {
		return s2 + "; cluster DNS allowed"
	}
	return s2 + "; no DNS"
}

func approvers(ap *v1.Approvers) string {
	if ap == nil || len(ap.Users) == 0 && len(ap.Groups) == 0 {
		return "anyone with the approve verb on approvals in the namespace, except the requester"
	}
	var parts []string
	if len(ap.Users) > 0 {
		parts = append(parts, "users "+strings.Join(ap.Users, ", "))
	}
	if len(ap.Groups) > 0 {
		parts = append(parts, "groups "+strings.Join(ap.Groups, ", "))
	}
	return strings.Join(parts, "; ") + " (not the requester)"
}
