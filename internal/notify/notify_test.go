package notify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

const token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"

func approval(state v1.ApprovalState) *v1.Approval {
	return &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: "fix-t0-0", Namespace: "team-a", UID: "u-1"},
		Spec: v1.ApprovalSpec{
			IntentRef: v1.LocalObjectReference{Name: "fix-t0-0"}, TaskRef: v1.LocalObjectReference{Name: "fix"},
			Request: v1.ApprovalRequest{
				Tool: v1.ToolBash, Input: `{"command":"curl -H 'Authorization: Bearer ` + token + `' https://api.example.com"}`,
				Risk: v1.RiskHigh, Category: v1.CategoryNetwork,
				PolicyRuleRef:  v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "team", 2, "ask-network"),
				ProposerReason: "see <https://evil.example|the docs> and tell <!channel> <@U123> & " + token,
				Walls:          &v1.SandboxWalls{ReadOnlyWorkspace: true},
				Sandbox: &v1.DecidedSandbox{Profile: v1.SandboxProfile{Network: v1.NetworkSpec{
					Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8", Ports: []int32{443}}}, ClusterDNS: true}}},
			},
			RequestedBy: "agent", Approvers: &v1.Approvers{Users: []string{"alice"}, Groups: []string{"sre"}},
			ExpiresAt: metav1.NewTime(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
			Votes:     []v1.ApprovalVote{{User: "alice", Decision: v1.DecisionApproved, Comment: "ok"}},
		},
		Status: v1.ApprovalStatus{State: state},
	}
}

func TestEventOf(t *testing.T) {
	for state, want := range map[v1.ApprovalState]v1.NotificationEvent{
		v1.ApprovalStatePending: v1.EventRequested, v1.ApprovalStateApproved: v1.EventDecided,
		v1.ApprovalStateDenied: v1.EventDecided, v1.ApprovalStateConsumed: v1.EventDecided,
		v1.ApprovalStateExpired: v1.EventExpired, v1.ApprovalStateSuperseded: v1.EventSuperseded,
	} {
		if o, ok := EventOf(approval(state)); !ok || o.Event != want {
			t.Errorf("state %s: event %s %v, want %s", state, o.Event, ok, want)
		}
	}
	if _, ok := EventOf(approval("")); ok {
		t.Error("an approval with no state recorded announces an event")
	}
	if o, _ := EventOf(approval(v1.ApprovalStateApproved)); o.Decision != v1.DecisionApproved || len(o.DecidedBy) != 1 || o.DecidedBy[0] != "alice" {
		t.Errorf("decided outcome %+v", o)
	}
}

// TestBefore: a channel created after an Approval was decided, expired or superseded
// does not hear of it (a restart would otherwise send it every old event in its
// reach); what still waits for a person, and what happens later, it hears.
func TestBefore(t *testing.T) {
	created := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(state v1.ApprovalState, when time.Time) *v1.Approval {
		a := approval(state)
		a.CreationTimestamp = metav1.NewTime(when.Add(-time.Minute))
		a.Status.DecidedAt = &metav1.Time{Time: when}
		a.Spec.ExpiresAt = metav1.NewTime(when)
		return a
	}
	for _, tc := range []struct {
		event v1.NotificationEvent
		when  time.Time
		want  bool
	}{
		{v1.EventRequested, created.Add(-time.Hour), false},
		{v1.EventDecided, created.Add(-time.Minute), true},
		{v1.EventDecided, created.Add(time.Minute), false},
		{v1.EventExpired, created.Add(-time.Second), true},
		{v1.EventExpired, created.Add(time.Second), false},
		{v1.EventSuperseded, created.Add(-time.Hour), true},
		{v1.EventSuperseded, created.Add(time.Hour), false},
	} {
		if got := Before(at(v1.ApprovalStateApproved, tc.when), tc.event, created); got != tc.want {
			t.Errorf("%s at %s, channel created %s: Before %v, want %v", tc.event, tc.when, created, got, tc.want)
		}
	}
	undecided := approval(v1.ApprovalStateApproved)
	if Before(undecided, v1.EventDecided, created) {
		t.Error("a decision the controller has not timed yet counts as old")
	}
}

func TestBuildCarriesWhatIsAskedAndNoSecret(t *testing.T) {
	m, ok := Build(approval(v1.ApprovalStatePending), "fix the tests, token="+token, []v1.CommandPart{{Command: "curl -H Authorization: Bearer " + token, Category: v1.CategoryNetwork}}, "https://console.example.com")
	if !ok {
		t.Fatal("no message for a pending approval")
	}
	slack, err := Slack(m)
	if err != nil {
		t.Fatal(err)
	}
	ce, err := CloudEventJSON(m, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"slack": string(slack), "cloudevent": string(ce)} {
		if strings.Contains(body, token) || strings.Contains(body, "abcdefghijklmnop") {
			t.Errorf("%s message carries the token: %s", name, body)
		}
		for _, want := range []string{"fix the tests", "kubectl toolgate approve fix-t0-0 -n team-a", "read-only workspace", "10.0.0.0/8 ports 443", "cluster DNS allowed",
			"users alice", "groups sre", "2030-01-02T03:04:05Z", "ToolPolicy/team/ask-network (generation 2)", "https://console.example.com", "Network"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s message lacks %q: %s", name, want, body)
			}
		}
	}
	// The agent's text can neither link nor mention anyone in Slack. (JSON writes
	// & as \u0026.)
	text := strings.ReplaceAll(string(slack), `\u0026`, "&")
	for _, bad := range []string{"<https://evil", "<!channel>", "<@U123>", " & "} {
		if strings.Contains(text, bad) {
			t.Errorf("slack message carries %q unescaped", bad)
		}
	}
	if !strings.Contains(text, "&lt;!channel&gt;") {
		t.Errorf("slack message does not show the agent's text escaped: %s", slack)
	}
}

// TestBuildShowsWhatRuns: the input and its parts are masked as the Approval masks
// them (mask.Command): a value the call uses as code is shown to the approver in
// the notification too, and a secret only assigned is not.
func TestBuildShowsWhatRuns(t *testing.T) {
	a := approval(v1.ApprovalStatePending)
	a.Spec.Request.Input = `{"command":"run_token=uname; $run_token -a; PASSWORD=hunter22 mysql db"}`
	m, _ := Build(a, "g", []v1.CommandPart{{Command: "run_token=uname; $run_token -a"}}, "")
	if !strings.Contains(m.Input, "run_token=uname; $run_token -a") || strings.Contains(m.Input, "hunter22") {
		t.Errorf("input = %q, want the program shown and the password masked", m.Input)
	}
	if len(m.Parts) != 1 || m.Parts[0].Command != "run_token=uname; $run_token -a" {
		t.Errorf("parts = %+v, want the program shown", m.Parts)
	}
}

func TestBuildDecidedHasNoApproveLine(t *testing.T) {
	m, _ := Build(approval(v1.ApprovalStateApproved), "g", nil, "")
	if m.ApproveCommand != "" || m.Outcome == nil || m.Outcome.Decision != "Approved" {
		t.Fatalf("decided message: %+v", m)
	}
}

func TestSlackShape(t *testing.T) {
	m, _ := Build(approval(v1.ApprovalStatePending), "goal", nil, "")
	b, _ := Slack(m)
	var p struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(b, &p); err != nil || p.Text == "" || len(p.Blocks) < 4 || p.Blocks[0].Type != "header" {
		t.Fatalf("slack payload %s: %v", b, err)
	}
}

func TestCloudEventAttributes(t *testing.T) {
	m, _ := Build(approval(v1.ApprovalStateExpired), "goal", nil, "")
	b, _ := CloudEventJSON(m, time.Unix(1700000000, 0))
	var e CloudEvent
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if e.SpecVersion != "1.0" || e.Type != "dev.toolgate.approval.expired" || e.ID != "u-1.expired" || e.Subject != "fix-t0-0" ||
		e.Source != "/apis/toolgate.dev/v1alpha1/namespaces/team-a/approvals" || e.Data.Event != v1.EventExpired {
		t.Fatalf("cloudevent %+v", e)
	}
}

func TestVerify(t *testing.T) {
	key, body := []byte("k3y"), []byte(`{"a":1}`)
	now := time.Unix(1700000000, 0)
	ts := "1700000000"
	sig := Sign(key, now, body)
	cases := []struct {
		name      string
		key       []byte
		ts, sig   string
		body      []byte
		at        time.Time
		wantError string
	}{
		{"signed", key, ts, sig, body, now.Add(time.Minute), ""},
		{"other key", []byte("other"), ts, sig, body, now, "does not match"},
		{"body changed", key, ts, sig, []byte(`{"a":2}`), now, "does not match"},
		{"timestamp changed", key, "1700000001", sig, body, now, "does not match"},
		{"played again later", key, ts, sig, body, now.Add(DefaultMaxAge + time.Second), "more than"},
		{"from the future", key, ts, sig, body, now.Add(-DefaultMaxAge - time.Second), "more than"},
		{"no scheme", key, ts, strings.TrimPrefix(sig, "v1="), body, now, "must start with v1="},
		{"no timestamp", key, "", sig, body, now, "not Unix seconds"},
	}
	for _, c := range cases {
		err := Verify(c.key, c.ts, c.sig, c.body, c.at, DefaultMaxAge)
		if c.wantError == "" && err != nil || c.wantError != "" && (err == nil || !strings.Contains(err.Error(), c.wantError)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.wantError)
		}
	}
}

func TestRetryDue(t *testing.T) {
	r := Retry{Base: time.Second, Cap: 4 * time.Second, MaxAttempts: 5}
	now := time.Unix(1000, 0)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	cases := []struct {
		name string
		rec  *v1.NotificationRecord
		due  bool
		wait time.Duration
	}{
		{"never tried", nil, true, 0},
		{"first failed just now", &v1.NotificationRecord{Attempts: 1, LastAttemptAt: at(0)}, false, time.Second},
		{"first failed a second ago", &v1.NotificationRecord{Attempts: 1, LastAttemptAt: at(time.Second)}, true, 0},
		{"third failed a second ago", &v1.NotificationRecord{Attempts: 3, LastAttemptAt: at(time.Second)}, false, 3 * time.Second},
		{"capped", &v1.NotificationRecord{Attempts: 4, LastAttemptAt: at(0)}, false, 4 * time.Second},
		{"out of attempts", &v1.NotificationRecord{Attempts: 5, LastAttemptAt: at(time.Hour)}, false, 0},
		{"delivered", &v1.NotificationRecord{Attempts: 1, LastAttemptAt: at(time.Hour), DeliveredAt: at(time.Hour)}, false, 0},
	}
	for _, c := range cases {
		due, wait := r.Due(c.rec, now)
		if due != c.due || wait != c.wait {
			t.Errorf("%s: due %v wait %s, want %v %s", c.name, due, wait, c.due, c.wait)
		}
	}
}

func TestParseURLNeverRepeatsIt(t *testing.T) {
	for _, raw := range []string{"ftp://hooks.example/T0/secret-path", "hooks.example/secret-path", "https:///secret-path"} {
		err := ParseURL(raw)
		if err == nil || strings.Contains(err.Error(), "secret-path") {
			t.Errorf("ParseURL(%q) = %v", raw, err)
		}
	}
	if err := ParseURL("https://hooks.example/T0/x"); err != nil {
		t.Error(err)
	}
}
