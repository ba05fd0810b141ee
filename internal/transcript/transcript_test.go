package transcript_test

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/mask/masktest"
	"github.com/toolgate/toolgate/internal/transcript"
)

func TestBoundedNames(t *testing.T) {
	long := strings.Repeat("a", 250)
	other := strings.Repeat("a", 249) + "b"
	for _, tc := range []struct {
		name, got, want string
	}{
		{"record", transcript.TurnRecordName("fix", 3), "fix-turn-3"},
		{"intent", transcript.ModelIntentName("fix", 2, 1), "fix-t2-1"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	// Long names are cut to 253 characters, stay valid and distinct, and keep the suffix.
	for _, name := range []string{transcript.TurnRecordName(long, 999), transcript.ModelIntentName(long, 999, 31), transcript.TurnRecordName(strings.Repeat("a.", 125)+"b", 1)} {
		if len(name) > 253 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Errorf("%q (%d characters) is not a valid object name: %v", name, len(name), validation.IsDNS1123Subdomain(name))
		}
	}
	if a, b := transcript.ModelIntentName(long, 0, 0), transcript.ModelIntentName(other, 0, 0); a == b || !strings.HasSuffix(a, "-t0-0") {
		t.Errorf("two long task names give %q and %q", a, b)
	}
}

func TestCallInput(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{"command":"ls"}`, `{"command":"ls"}`},
		{`  {"path":"a"} `, `{"path":"a"}`},
		{``, `{}`},
		{" \n", `{}`},
		{`go test ./...`, `{"arguments_not_a_json_object":"go test ./..."}`},
		{`["ls"]`, `{"arguments_not_a_json_object":"[\"ls\"]"}`},
		{`"ls"`, `{"arguments_not_a_json_object":"\"ls\""}`},
		{`null`, `{"arguments_not_a_json_object":"null"}`},
		{`{"command":"ls"} trailing`, `{"arguments_not_a_json_object":"{\"command\":\"ls\"} trailing"}`},
		{`{"command":`, `{"arguments_not_a_json_object":"{\"command\":"}`},
	} {
		if got := string(transcript.CallInput(tc.args)); got != tc.want {
			t.Errorf("transcript.CallInput(%q) = %s, want %s", tc.args, got, tc.want)
		}
	}
}

func TestToolName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"bash", "bash"},
		{"read_file", "read_file"},
		{"made_up2", "made_up2"},
		{"Bash", "invalid_bash"},
		{"Delete-Everything", "invalid_delete_everything"},
		{"", "invalid_"},
		{"2fast", "invalid_2fast"},
		{"rm -rf /", "invalid_rm__rf__"},
		{strings.Repeat("x", 64), "invalid_" + strings.Repeat("x", 55)},
	} {
		if got := transcript.ToolName(tc.name); string(got) != tc.want {
			t.Errorf("transcript.ToolName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestModelIntent(t *testing.T) {
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fix", UID: "uid-1"},
		Spec:       v1.AgentTaskSpec{Agent: v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: "https://user:pw@api.example.com:8443/v1", Model: "m"}}},
	}
	rec := agent.TurnRecord{Turn: 2, Model: "m-2025", Text: "using key sk-abcdefghijklmnop to look",
		ToolCalls: []agent.ToolCall{{ID: "c0", Name: "read_file", Arguments: `{"path":"a"}`}, {ID: "c1", Name: "Oops!", Arguments: "x"}}}
	in := transcript.ModelIntent(task, rec, 0, "me")
	if in.Name != "fix-t2-0" || in.Namespace != "ns" || in.Spec.Turn != 2 || in.Spec.Index != 0 || in.Spec.Tool != "read_file" ||
		in.Spec.RequestedBy != "me" || in.Spec.TaskRef.Name != "fix" || string(in.Spec.Input.Raw) != `{"path":"a"}` ||
		in.Spec.ProposedBy != (v1.ProposedBy{Provider: "api.example.com", Model: "m-2025", ToolCallID: "c0"}) ||
		!metav1.IsControlledBy(in, task) || in.Labels["toolgate.dev/task"] != "fix" || in.Labels["toolgate.dev/turn"] != "2" {
		t.Fatalf("intent: %+v %+v", in.ObjectMeta, in.Spec)
	}
	if strings.Contains(in.Spec.Reason, "sk-abcdefghijklmnop") {
		t.Errorf("reason shows the key: %s", in.Spec.Reason)
	}
	bad := transcript.ModelIntent(task, rec, 1, "me")
	if bad.Name != "fix-t2-1" || bad.Spec.Tool != "invalid_oops_" || string(bad.Spec.Input.Raw) != `{"arguments_not_a_json_object":"x"}` {
		t.Fatalf("invalid call: %+v", bad.Spec)
	}
	if !strings.Contains(bad.Spec.Reason, `"Oops!"`) {
		t.Errorf("reason does not name the made-up tool: %s", bad.Spec.Reason)
	}
	long := transcript.ModelIntent(task, agent.TurnRecord{Text: strings.Repeat("é", 3000), ToolCalls: rec.ToolCalls}, 0, "me")
	if len(long.Spec.Reason) > transcript.MaxIntentReason || !utf8.ValidString(long.Spec.Reason) {
		t.Errorf("reason of %d bytes, valid UTF-8 %t", len(long.Spec.Reason), utf8.ValidString(long.Spec.Reason))
	}
}

// The name of a call whose own name was taken keeps the turn and call readable
// and leaves the API server room for its random tail.
func TestModelIntentGenerateName(t *testing.T) {
	if got := transcript.ModelIntentGenerateName("fix", 2, 1); got != "fix-t2-1-" {
		t.Errorf("%q, want fix-t2-1-", got)
	}
	long, other := strings.Repeat("a", 250), strings.Repeat("a", 249)+"b"
	a, b := transcript.ModelIntentGenerateName(long, 999, 31), transcript.ModelIntentGenerateName(other, 999, 31)
	if len(a) > 58 || a == b || !strings.HasSuffix(a, "-t999-31-") || len(validation.IsDNS1123Subdomain(a+"x7k2p")) > 0 {
		t.Errorf("long task names give %q and %q", a, b)
	}
}

// Pair takes a call's intent by what it is, the loop's own for that turn and call,
// whatever its name; another user's intent under the call's name is no part of the
// conversation.
func TestPairTakesOnlyTheLoopsOwnIntents(t *testing.T) {
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fix", UID: "uid-1"},
		Spec: v1.AgentTaskSpec{Agent: v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: "http://m/v1"}}}}
	rec := agent.TurnRecord{Turn: 0, ToolCalls: []agent.ToolCall{{ID: "c0", Name: "bash", Arguments: `{"command":"ls"}`}}}
	observed := func(in *v1.ToolIntent, summary string) v1.ToolIntent {
		in.Status.Observation = &v1.Observation{Outcome: v1.OutcomeSucceeded, Summary: summary}
		return *in
	}
	squatter := observed(transcript.ModelIntent(task, rec, 0, "mallory"), "planted")
	forgedOwner := observed(transcript.ModelIntent(task, rec, 0, "me"), "planted")
	forgedOwner.Name = "fix-t0-0-forged"
	forgedOwner.OwnerReferences[0].Kind = "ConfigMap"
	renamed := transcript.ModelIntent(task, rec, 0, "me")
	renamed.Name = "fix-t0-0-x7k2p"
	mine := observed(renamed, "the real output")

	p := transcript.Pair(task, []agent.TurnRecord{rec}, nil, []v1.ToolIntent{squatter, forgedOwner}, "me")
	if p.Failure != "" || len(p.Missing) != 1 || p.Intents[0][0] != nil || p.Turns[0].Calls[0].Observed {
		t.Fatalf("only other users' intents: %+v; want the call missing, nothing observed", p)
	}
	p = transcript.Pair(task, []agent.TurnRecord{rec}, nil, []v1.ToolIntent{squatter, forgedOwner, mine}, "me")
	if p.Failure != "" || len(p.Missing) != 0 || p.Intents[0][0] == nil || p.Intents[0][0].Name != "fix-t0-0-x7k2p" || p.Turns[0].Calls[0].Observation != "the real output" {
		t.Fatalf("the loop's intent under a made-up name: %+v; want it the call's", p)
	}
}

// TestParseTurnRecordVersions: the record of the current format reads back as it was
// written; a record of another format stops the loop (and replay) with a problem
// that names the ConfigMap and says what to do, rather than being misread.
func TestParseTurnRecordVersions(t *testing.T) {
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fix", UID: "uid-1"}}
	record := func(data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: transcript.TurnRecordName("fix", 0),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}},
			Data: map[string]string{transcript.TurnRecordKey: data},
		}
	}

	rec := agent.NewTurnRecord(0, agent.Response{Model: "m", Text: "look", FinishReason: "tool_calls",
		ToolCalls: []agent.ToolCall{{ID: "c0", Name: "bash", Arguments: `{"command":"ls"}`}}})
	data, err := rec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"apiVersion":"`+agent.TurnRecordAPIVersion+`"`) {
		t.Fatalf("the record does not say its version: %s", data)
	}
	back, problem := transcript.ParseTurnRecord(task, 0, record(string(data)))
	if problem != "" || !reflect.DeepEqual(back, rec) {
		t.Fatalf("round trip: got %+v (%s), want %+v", back, problem, rec)
	}

	newer := strings.Replace(string(data), agent.TurnRecordAPIVersion, "turnrecord.toolgate.dev/v2", 1)
	_, problem = transcript.ParseTurnRecord(task, 0, record(newer))
	want := `ConfigMap fix-turn-0, the record of turn 0, cannot be read: turn record apiVersion "turnrecord.toolgate.dev/v2" is not one this toolgate reads (it reads turnrecord.toolgate.dev/v1): run a toolgate controller and kubectl-toolgate that read it`
	if !strings.HasPrefix(problem, want) {
		t.Fatalf("a record of another version: problem %q, want it to start with %q", problem, want)
	}
}

// TestEverySecretIsMaskedInTheModelsReason: the prose of a turn record becomes the
// reason of each intent the turn proposed; every fake secret of the corpus
// (gitleaks' own true positives, toolgate's own cases) is masked there.
func TestEverySecretIsMaskedInTheModelsReason(t *testing.T) {
	corpus, err := masktest.Corpus(mask.Rules(), 3)
	if err != nil {
		t.Fatal(err)
	}
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fix", UID: "uid-1"},
		Spec:       v1.AgentTaskSpec{Agent: v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: "https://api.example.com/v1", Model: "m"}}},
	}
	for _, f := range corpus {
		rec := agent.TurnRecord{Turn: 1, Text: f.Text, ToolCalls: []agent.ToolCall{{ID: "c0", Name: "read_file", Arguments: `{"path":"a"}`}}}
		reason := transcript.ModelIntent(task, rec, 0, "me").Spec.Reason
		if !strings.Contains(reason, mask.Masked) || mask.Secrets(reason) != reason {
			t.Errorf("%s: the secret of %q is not masked in the intent's reason: %q", f.Rule, f.Text, reason)
		}
	}
}
