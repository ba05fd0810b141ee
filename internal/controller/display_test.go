package controller

import (
	"strings"
	"testing"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// TestTheApproverSeesWhatRuns: the Approval masks secrets but never what runs in a
// secret's place (password=$(cat key) stays whole), and text from the agent cannot
// carry terminal escapes or bidirectional overrides to the approver's screen.
func TestTheApproverSeesWhatRuns(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"touch password=$(cat /etc/shadow) token=hunter2secret"}`)
	a := p.approval("t-t0-0")
	mustContain(t, "the approval's input", a.Spec.Request.Input, "password=$(cat /etc/shadow)")
	mustNotContain(t, "the approval's input", a.Spec.Request.Input, "hunter2secret")

	p.proposeAs("t", 1, 0, v1.ToolBash, `{"command":"touch x"}`, "tidy up\x1b[2K\r\u202eharmless")
	b := p.approval("t-t1-0")
	for _, bad := range []string{"\x1b", "\r", "\u202e"} {
		if strings.Contains(b.Spec.Request.ProposerReason, bad) {
			t.Errorf("the approval's proposer reason carries %q: %q", bad, b.Spec.Request.ProposerReason)
		}
	}
	mustContain(t, "the approval's proposer reason", b.Spec.Request.ProposerReason, `\x1b[2K`, `\u202e`)
}
