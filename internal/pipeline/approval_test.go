package pipeline

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

func askDecision() *v1.Decision {
	return &v1.Decision{
		Action:        v1.DecisionAsk,
		PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "default", 4, "ask-network"),
		Reason:        "network access needs a human; password=hunter22",
		Risk:          v1.RiskHigh,
		Category:      v1.CategoryNetwork,
		Fingerprint:   "sha256:abc",
	}
}

func TestBuildApproval(t *testing.T) {
	intent := makeIntent("t-t2-0").task("fix-tests").tool(v1.ToolBash).turn(2).
		input(`{"command":"curl -H 'Authorization: Bearer abcdefghijkl' https://x"}`).
		reason("fetch the spec; token=s3cr3tvalue").requestedBy("alice").obj()
	normalized := json.RawMessage(`{"command":"curl -H 'Authorization: Bearer abcdefghijkl' https://x"}`)

	got := BuildApproval(intent, askDecision(), normalized, 15*time.Minute, epoch)
	want := &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "t-t2-0",
			Namespace: testNS,
			Labels:    map[string]string{v1.LabelTask: "fix-tests", v1.LabelIntent: "t-t2-0"},
		},
		Spec: v1.ApprovalSpec{
			IntentRef:   v1.LocalObjectReference{Name: "t-t2-0"},
			TaskRef:     v1.LocalObjectReference{Name: "fix-tests"},
			Fingerprint: "sha256:abc",
			Request: v1.ApprovalRequest{
				Tool:           v1.ToolBash,
				Input:          `{"command":"curl -H 'Authorization: [MASKED]' https://x"}`,
				Risk:           v1.RiskHigh,
				Category:       v1.CategoryNetwork,
				PolicyRuleRef:  v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "default", 4, "ask-network"),
				Reason:         "network access needs a human; password=[MASKED]",
				ProposerReason: "fetch the spec; token=[MASKED]",
			},
			RequestedBy: "alice",
			ExpiresAt:   metav1.NewTime(epoch.Add(15 * time.Minute)),
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BuildApproval() mismatch (-want +got):\n%s", diff)
	}
	// The controller sets the owner; the builder leaves it to it.
	if len(got.OwnerReferences) != 0 {
		t.Errorf("owner references = %v, want none", got.OwnerReferences)
	}
	// The same intent always gets the same name: a second create is AlreadyExists.
	if again := BuildApproval(intent, askDecision(), normalized, time.Hour, epoch.Add(time.Hour)); again.Name != got.Name || ApprovalName(intent) != got.Name {
		t.Errorf("approval names differ: %q, %q, %q", got.Name, again.Name, ApprovalName(intent))
	}
}

// The approver sees where the call will run: an Ask for a read-only call carries
// the decision's walls, a copy the decision cannot change afterwards.
func TestBuildApprovalShowsTheWalls(t *testing.T) {
	d := askDecision()
	d.Category = v1.CategoryReadOnly
	d.Walls = &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "every part of the call is read-only"}
	got := BuildApproval(makeIntent("i").tool(v1.ToolBash).obj(), d, json.RawMessage(`{"command":"cat notes.txt"}`), time.Minute, epoch)
	if diff := cmp.Diff(d.Walls, got.Spec.Request.Walls); diff != "" {
		t.Fatalf("request walls (-decision +approval):\n%s", diff)
	}
	d.Walls.NoNetwork = false
	if !got.Spec.Request.Walls.NoNetwork {
		t.Error("the Approval shares the decision's walls instead of copying them")
	}
	if got := BuildApproval(makeIntent("i").obj(), askDecision(), json.RawMessage(`{}`), time.Minute, epoch); got.Spec.Request.Walls != nil {
		t.Errorf("a call without walls is asked with walls %+v", got.Spec.Request.Walls)
	}
}

func TestBuildApprovalApprovers(t *testing.T) {
	cases := []struct {
		name      string
		approvers v1.Approvers
		want      *v1.Approvers
	}{
		{name: "none: anyone the RBAC allows"},
		{name: "users", approvers: v1.Approvers{Users: []string{"bob"}}, want: &v1.Approvers{Users: []string{"bob"}}},
		{name: "groups", approvers: v1.Approvers{Groups: []string{"sre"}}, want: &v1.Approvers{Groups: []string{"sre"}}},
		{name: "both", approvers: v1.Approvers{Users: []string{"bob"}, Groups: []string{"sre"}}, want: &v1.Approvers{Users: []string{"bob"}, Groups: []string{"sre"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := askDecision()
			d.Approvers = tc.approvers
			got := BuildApproval(makeIntent("i").obj(), d, json.RawMessage(`{}`), time.Minute, epoch)
			if diff := cmp.Diff(tc.want, got.Spec.Approvers); diff != "" {
				t.Errorf("approvers mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildApprovalCutsLongInput(t *testing.T) {
	cases := []struct {
		name       string
		input      string
		wantCut    bool
		wantSuffix string
	}{
		{name: "at the limit: whole", input: `"` + strings.Repeat("a", maxApprovalInput-2) + `"`},
		{name: "one byte over", input: `"` + strings.Repeat("a", maxApprovalInput-1) + `"`, wantCut: true, wantSuffix: "…[1 more bytes not shown]"},
		{name: "far over", input: `"` + strings.Repeat("a", 100000) + `"`, wantCut: true, wantSuffix: "…[92002 more bytes not shown]"},
		// 3-byte runes put the limit inside a rune; the cut must not split it.
		{name: "multi-byte text", input: `"` + strings.Repeat("é€", 3000) + `"`, wantCut: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := BuildApproval(makeIntent("i").obj(), askDecision(), json.RawMessage(tc.input), time.Minute, epoch).Spec.Request.Input
			if len(got) > 8192 {
				t.Errorf("input is %d bytes, over the 8 KiB the API allows", len(got))
			}
			if !utf8.ValidString(got) {
				t.Errorf("input is not valid UTF-8 after the cut: ...%q", got[len(got)-40:])
			}
			if !tc.wantCut {
				if got != tc.input {
					t.Errorf("input was changed though it fits")
				}
				return
			}
			if !strings.Contains(got, " more bytes not shown]") || !strings.HasSuffix(got, tc.wantSuffix) {
				t.Errorf("input does not end with the cut marker %q: ...%q", tc.wantSuffix, got[len(got)-40:])
			}
			head, _, _ := strings.Cut(got, "…[")
			if !strings.HasPrefix(tc.input, head) || len(head) > maxApprovalInput {
				t.Errorf("the kept head (%d bytes) is not a prefix of the input within %d bytes", len(head), maxApprovalInput)
			}
		})
	}
}

func TestJudgeApproval(t *testing.T) {
	const fp = "sha256:abc"
	expires := epoch.Add(10 * time.Minute)
	approval := func(decision v1.ApprovalDecision, state v1.ApprovalState, consumedBy string) *v1.Approval {
		return &v1.Approval{
			ObjectMeta: metav1.ObjectMeta{Name: "i", Namespace: testNS},
			Spec:       v1.ApprovalSpec{Fingerprint: fp, ExpiresAt: metav1.NewTime(expires), Votes: fixtures.Votes(decision, "alice", "")},
			Status:     v1.ApprovalStatus{State: state, ConsumedByExecutionName: consumedBy},
		}
	}
	decidedAt := func(a *v1.Approval, at time.Time) *v1.Approval {
		t := metav1.NewTime(at)
		a.Status.DecidedAt = &t
		return a
	}
	cases := []struct {
		name        string
		approval    *v1.Approval
		fingerprint string
		now         time.Time
		want        ApprovalVerdict
	}{
		{name: "pending, in time", approval: approval("", v1.ApprovalStatePending, ""), fingerprint: fp, now: epoch, want: VerdictWait},
		{name: "no decision field yet", approval: approval("", "", ""), fingerprint: fp, now: epoch, want: VerdictWait},
		{name: "pending, a moment before expiry", approval: approval("", v1.ApprovalStatePending, ""), fingerprint: fp, now: expires.Add(-time.Nanosecond), want: VerdictWait},
		{name: "pending, at expiry", approval: approval("", v1.ApprovalStatePending, ""), fingerprint: fp, now: expires, want: VerdictExpired},
		{name: "pending, after expiry", approval: approval("", v1.ApprovalStatePending, ""), fingerprint: fp, now: expires.Add(time.Hour), want: VerdictExpired},
		{name: "expired by state before the clock says so", approval: approval("", v1.ApprovalStateExpired, ""), fingerprint: fp, now: epoch, want: VerdictExpired},
		{name: "approved, same call", approval: decidedAt(approval(v1.DecisionApproved, v1.ApprovalStateApproved, ""), epoch), fingerprint: fp, now: epoch, want: VerdictApproved},
		{name: "approved, other call", approval: decidedAt(approval(v1.DecisionApproved, v1.ApprovalStateApproved, ""), epoch), fingerprint: "sha256:other", now: epoch, want: VerdictMismatch},
		{name: "denied", approval: approval(v1.DecisionDenied, v1.ApprovalStateDenied, ""), fingerprint: fp, now: epoch, want: VerdictDenied},
		{name: "denied, even with another fingerprint", approval: approval(v1.DecisionDenied, v1.ApprovalStateDenied, ""), fingerprint: "sha256:other", now: epoch, want: VerdictDenied},
		{name: "consumed by this execution (a restart)", approval: approval(v1.DecisionApproved, v1.ApprovalStateConsumed, "i"), fingerprint: fp, now: epoch, want: VerdictApproved},
		{name: "consumed by this execution after expiry", approval: approval(v1.DecisionApproved, v1.ApprovalStateConsumed, "i"), fingerprint: fp, now: expires.Add(time.Hour), want: VerdictApproved},
		{name: "consumed by another execution", approval: approval(v1.DecisionApproved, v1.ApprovalStateConsumed, "other"), fingerprint: fp, now: epoch, want: VerdictConsumedElsewhere},
		// Expiry first: a decision the controller first sees at or after expiresAt
		// is Expired, whatever it says.
		{name: "approved after expiry", approval: approval(v1.DecisionApproved, v1.ApprovalStatePending, ""), fingerprint: fp, now: expires.Add(time.Second), want: VerdictExpired},
		{name: "approved at expiry", approval: approval(v1.DecisionApproved, v1.ApprovalStatePending, ""), fingerprint: fp, now: expires, want: VerdictExpired},
		{name: "denied after expiry", approval: approval(v1.DecisionDenied, v1.ApprovalStatePending, ""), fingerprint: fp, now: expires.Add(time.Second), want: VerdictExpired},
		{name: "approved, seen in time, judged after expiry", approval: decidedAt(approval(v1.DecisionApproved, v1.ApprovalStatePending, ""), expires.Add(-time.Second)), fingerprint: fp, now: expires.Add(time.Minute), want: VerdictApproved},
		{name: "approved, seen at expiry", approval: decidedAt(approval(v1.DecisionApproved, v1.ApprovalStatePending, ""), expires), fingerprint: fp, now: expires.Add(time.Minute), want: VerdictExpired},
		{name: "superseded, never used", approval: decidedAt(approval(v1.DecisionApproved, v1.ApprovalStateSuperseded, ""), epoch), fingerprint: fp, now: epoch, want: VerdictSuperseded},
		{name: "consumed by this execution, fingerprint changed", approval: approval(v1.DecisionApproved, v1.ApprovalStateConsumed, "i"), fingerprint: "sha256:other", now: epoch, want: VerdictMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// What the intent makes of the Approval once its reconciler recorded it
			// at now.
			recorded := tc.approval.DeepCopy()
			recorded.Status, _ = ApprovalStatusAt(tc.approval, tc.now)
			if got := JudgeApproval(recorded, tc.fingerprint, "i"); got != tc.want {
				t.Errorf("JudgeApproval(ApprovalStatusAt()) = %d, want %d (state %s)", got, tc.want, recorded.Status.State)
			}
		})
	}
}

// TestJudgeApprovalBelievesApprovedOnlyWithItsGrounds: an Approved state is the
// controller's record, believed only with what it rests on (a person's Approved,
// first seen before expiresAt). A status written otherwise (by hand past
// admission, or by an older controller) that says Approved without them is
// refused, not run.
func TestJudgeApprovalBelievesApprovedOnlyWithItsGrounds(t *testing.T) {
	const fp = "sha256:abc"
	expires := epoch.Add(10 * time.Minute)
	at := func(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }
	for _, tc := range []struct {
		name      string
		decision  v1.ApprovalDecision
		decidedAt *metav1.Time
		want      ApprovalVerdict
	}{
		{name: "approved, seen before expiry", decision: v1.DecisionApproved, decidedAt: at(epoch), want: VerdictApproved},
		{name: "no decidedAt", decision: v1.DecisionApproved, want: VerdictExpired},
		{name: "seen at expiry", decision: v1.DecisionApproved, decidedAt: at(expires), want: VerdictExpired},
		{name: "seen after expiry", decision: v1.DecisionApproved, decidedAt: at(expires.Add(time.Second)), want: VerdictExpired},
		{name: "nobody decided", decision: "", decidedAt: at(epoch), want: VerdictExpired},
		{name: "a person denied it", decision: v1.DecisionDenied, decidedAt: at(epoch), want: VerdictExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &v1.Approval{
				ObjectMeta: metav1.ObjectMeta{Name: "i", Namespace: testNS},
				Spec:       v1.ApprovalSpec{Fingerprint: fp, ExpiresAt: metav1.NewTime(expires), Votes: fixtures.Votes(tc.decision, "alice", "")},
				Status:     v1.ApprovalStatus{State: v1.ApprovalStateApproved, DecidedAt: tc.decidedAt},
			}
			if got := JudgeApproval(a, fp, "i"); got != tc.want {
				t.Errorf("JudgeApproval(state Approved) = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestApprovalStatusAt: the states the Approval's reconciler records, and that a
// state it did not record is not believed.
func TestApprovalStatusAt(t *testing.T) {
	expires := epoch.Add(10 * time.Minute)
	approval := func(decision v1.ApprovalDecision, state v1.ApprovalState) *v1.Approval {
		return &v1.Approval{
			ObjectMeta: metav1.ObjectMeta{Name: "i", Namespace: testNS},
			Spec:       v1.ApprovalSpec{Fingerprint: "sha256:abc", ExpiresAt: metav1.NewTime(expires), Votes: fixtures.Votes(decision, "alice", "")},
			Status:     v1.ApprovalStatus{State: state},
		}
	}
	cases := []struct {
		name      string
		approval  *v1.Approval
		now       time.Time
		state     v1.ApprovalState
		decidedAt *time.Time
		message   string
		recheck   time.Duration
	}{
		{name: "new", approval: approval("", ""), now: epoch, state: v1.ApprovalStatePending, recheck: 10 * time.Minute},
		{name: "pending, looks again at expiry", approval: approval("", v1.ApprovalStatePending), now: expires.Add(-time.Second), state: v1.ApprovalStatePending, recheck: time.Second},
		{name: "pending at expiry", approval: approval("", v1.ApprovalStatePending), now: expires, state: v1.ApprovalStateExpired, message: "nobody decided before 2025-03-01T12:10:00Z"},
		{name: "approved in time", approval: approval(v1.DecisionApproved, v1.ApprovalStatePending), now: epoch, state: v1.ApprovalStateApproved, decidedAt: &epoch, message: "approved by alice"},
		{name: "denied in time", approval: approval(v1.DecisionDenied, v1.ApprovalStatePending), now: epoch, state: v1.ApprovalStateDenied, decidedAt: &epoch, message: "denied by alice"},
		{name: "approved, first seen after expiry", approval: approval(v1.DecisionApproved, v1.ApprovalStatePending), now: expires.Add(time.Second), state: v1.ApprovalStateExpired, decidedAt: ptr(expires.Add(time.Second)),
			message: "Approved by alice, but first seen by the controller at 2025-03-01T12:10:01Z, not before expiresAt 2025-03-01T12:10:00Z: a late decision does not count"},
		{name: "final states stay", approval: approval(v1.DecisionApproved, v1.ApprovalStateConsumed), now: expires.Add(time.Hour), state: v1.ApprovalStateConsumed},
		{name: "an expired one decided later stays expired", approval: approval(v1.DecisionApproved, v1.ApprovalStateExpired), now: epoch, state: v1.ApprovalStateExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, recheck := ApprovalStatusAt(tc.approval, tc.now)
			if st.State != tc.state || recheck != tc.recheck || !strings.Contains(st.Message, tc.message) {
				t.Fatalf("ApprovalStatusAt() = %s %q, look again in %s; want %s %q, in %s", st.State, st.Message, recheck, tc.state, tc.message, tc.recheck)
			}
			if (st.DecidedAt == nil) != (tc.decidedAt == nil) || (st.DecidedAt != nil && !st.DecidedAt.Time.Equal(*tc.decidedAt)) {
				t.Fatalf("decidedAt %v, want %v", st.DecidedAt, tc.decidedAt)
			}
		})
	}

	// A state the reconciler did not record (the status is the controller's alone,
	// so only a path past admission could write it) is not believed.
	forged := approval(v1.DecisionApproved, v1.ApprovalStateApproved)
	if got := JudgeApproval(forged, "sha256:abc", "i"); got != VerdictExpired {
		t.Errorf("Approved with no decidedAt: verdict %d, want Expired", got)
	}
	forged = approval("", v1.ApprovalStateApproved)
	forged.Status.DecidedAt = &metav1.Time{Time: epoch}
	if got := JudgeApproval(forged, "sha256:abc", "i"); got != VerdictExpired {
		t.Errorf("Approved state on a pending decision: verdict %d, want Expired", got)
	}
}

func TestDeniedReason(t *testing.T) {
	a := &v1.Approval{ObjectMeta: metav1.ObjectMeta{Name: "t-t2-0"}, Spec: v1.ApprovalSpec{
		Approvers: &v1.Approvers{Required: 2},
		Votes:     []v1.ApprovalVote{{User: "alice", Decision: v1.DecisionApproved, Comment: "fine by me"}, {User: "bob", Decision: v1.DecisionDenied}},
	}}
	if got, want := DeniedReason(a), "Approval t-t2-0 was denied by bob."; got != want {
		t.Errorf("DeniedReason() = %q, want %q", got, want)
	}
	a.Spec.Votes[1].Comment = "use the mirror instead"
	if got, want := DeniedReason(a), "Approval t-t2-0 was denied by bob. Their comment: use the mirror instead"; got != want {
		t.Errorf("DeniedReason() = %q, want %q", got, want)
	}
}

func TestChildLabels(t *testing.T) {
	long := strings.Repeat("x", 64)
	cases := []struct {
		name   string
		intent *v1.ToolIntent
		want   map[string]string
	}{
		{name: "both", intent: makeIntent("t-t0-0").task("t").obj(), want: map[string]string{v1.LabelTask: "t", v1.LabelIntent: "t-t0-0"}},
		{name: "a name too long for a label value is left out", intent: makeIntent(long).task("t").obj(), want: map[string]string{v1.LabelTask: "t"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ChildLabels(tc.intent)); diff != "" {
				t.Errorf("ChildLabels() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildApprovalCutsLongReasons(t *testing.T) {
	intent := makeIntent("t-t0-0").tool(v1.ToolBash).input(`{"command":"make"}`).obj()
	intent.Spec.Reason = strings.Repeat("é", 3000) // 6000 bytes
	d := &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "r"), Reason: strings.Repeat("x", 5000), Fingerprint: strings.Repeat("a", 64)}
	a := BuildApproval(intent, d, json.RawMessage(`{"command":"make"}`), time.Hour, time.Now())
	for name, s := range map[string]string{"reason": a.Spec.Request.Reason, "proposerReason": a.Spec.Request.ProposerReason} {
		if len(s) > 4096 || !utf8.ValidString(s) || !strings.Contains(s, "more bytes not shown") {
			t.Errorf("%s: %d bytes, valid UTF-8 %t: %q…", name, len(s), utf8.ValidString(s), s[:40])
		}
	}
}
