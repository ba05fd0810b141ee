// Package transcript is the agent loop's record in the cluster: the ConfigMaps that
// hold what the model said in each turn, the ToolIntents made from its tool calls,
// and how the two pair up into the conversation the model saw. The controller writes
// it; the controller and `kubectl toolgate replay --model` read it, through the one
// reading here, so that a replay rebuilds exactly the conversation the loop did.
package transcript

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tools"
)

const (
	// TurnRecordKey is the ConfigMap data key holding a turn's agent.TurnRecord as JSON.
	TurnRecordKey = "turn.json"
	// CompletionCheckKey is the ConfigMap data key holding the v1.CompletionCheck of
	// a turn's final answer as JSON (CompletionCheckName).
	CompletionCheckKey = "completion.json"
	// InvalidArgumentsKey wraps tool call arguments that are not a JSON object, so the
	// intent can be created (its input must be an object) and validation reports the
	// problem to the model instead of the call vanishing.
	InvalidArgumentsKey = "arguments_not_a_json_object"
	// InvalidToolPrefix marks a tool name the model made up that is not even a valid
	// tool name (for example "Bash!"); validation then reports an unknown tool.
	InvalidToolPrefix = "invalid_"

	// MaxIntentReason bounds spec.reason of a model's intent.
	MaxIntentReason   = 4096
	maxProposedByText = 253
	maxToolName       = 63
)

// TurnRecordName is the name of the ConfigMap recording a task's turn.
func TurnRecordName(task string, turn int32) string {
	return pipeline.BoundedName(task, fmt.Sprintf("-turn-%d", turn))
}

// CompletionCheckName is the name of the ConfigMap recording the completion check of
// a task's turn that gave a final answer.
func CompletionCheckName(task string, turn int32) string {
	return pipeline.BoundedName(task, fmt.Sprintf("-turn-%d-completion", turn))
}

// ModelIntentName is the name of the ToolIntent for call index of a task's turn.
// Anyone who may create ToolIntents in the namespace can predict it and take it
// first: the loop then creates the call under ModelIntentGenerateName, and the
// call's intent is found by what it is (Pair), never by its name alone.
func ModelIntentName(task string, turn, index int32) string {
	return pipeline.BoundedName(task, fmt.Sprintf("-t%d-%d", turn, index))
}

// maxGenerateName is the longest generateName the API server keeps whole (it cuts a
// longer one to leave room for its five random characters in 63).
const maxGenerateName = 58

// ModelIntentGenerateName is the metadata.generateName of the ToolIntent for call
// index of a task's turn when another user's intent took ModelIntentName first: the
// API server adds a random tail that nobody can predict. A long task name is cut
// and a hash of it kept, as in pipeline.BoundedName, so that the turn and call stay
// readable.
func ModelIntentGenerateName(task string, turn, index int32) string {
	suffix := fmt.Sprintf("-t%d-%d-", turn, index)
	if len(task)+len(suffix) <= maxGenerateName {
		return task + suffix
	}
	sum := sha256.Sum256([]byte(task))
	hash := hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(task[:maxGenerateName-len(suffix)-len(hash)-1], "-.") + "-" + hash + suffix
}

// IsLoopIntent says whether the agent loop of task created in: it is controlled by
// the task and requested by identity, the controller's (admission makes
// spec.requestedBy the creator's user name, so nobody else can write it). Its name
// says nothing: anyone can create an intent under a name the loop would use.
func IsLoopIntent(in *v1.ToolIntent, task *v1.AgentTask, identity string) bool {
	return identity != "" && in.Spec.RequestedBy == identity && ControlledByTask(in, task)
}

// ModelIntent is the ToolIntent for call index of a recorded turn. The model's
// output is data: the arguments go into spec.input unchanged when they are a JSON
// object (validation checks them against the tool's schema), and anything else is
// wrapped so that validation reports it to the model.
func ModelIntent(task *v1.AgentTask, rec agent.TurnRecord, index int, identity string) *v1.ToolIntent {
	call := rec.ToolCalls[index]
	labels := map[string]string{v1.LabelTurn: fmt.Sprint(rec.Turn)}
	if len(validation.IsValidLabelValue(task.Name)) == 0 {
		labels[v1.LabelTask] = task.Name
	}
	tool, reason := ToolName(call.Name), ""
	if string(tool) != call.Name {
		reason = fmt.Sprintf("[the model called a tool named %q, which is not a valid tool name] ", clip.Bytes(call.Name, 128))
	}
	if rec.Text != "" {
		reason += mask.Secrets(rec.Text)
	} else {
		reason += fmt.Sprintf("proposed by the model in turn %d without an explanation", rec.Turn)
	}
	return &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       task.Namespace,
			Name:            ModelIntentName(task.Name, rec.Turn, int32(index)),
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))},
		},
		Spec: v1.ToolIntentSpec{
			TaskRef:     v1.LocalObjectReference{Name: task.Name},
			Turn:        rec.Turn,
			Index:       int32(index),
			TurnCalls:   int32(len(rec.ToolCalls)),
			Tool:        tool,
			Input:       runtime.RawExtension{Raw: CallInput(call.Arguments)},
			Reason:      clip.Bytes(reason, MaxIntentReason),
			RequestedBy: identity,
			ProposedBy: v1.ProposedBy{
				Provider:   ProviderOf(task.Spec.Agent.Model.BaseURL),
				Model:      clip.Bytes(rec.Model, maxProposedByText),
				ToolCallID: clip.Bytes(call.ID, maxProposedByText),
			},
		},
	}
}

// CallInput is the intent input for the model's raw arguments: a JSON object as it
// is, no arguments at all as {} (some servers send "" for a call without
// arguments), and anything else (invalid JSON, an array, a string) wrapped in an
// object under InvalidArgumentsKey, which no tool's schema allows.
func CallInput(arguments string) []byte {
	trimmed := strings.TrimSpace(arguments)
	if trimmed == "" {
		return []byte("{}")
	}
	var object map[string]json.RawMessage
	if json.Unmarshal([]byte(trimmed), &object) == nil && object != nil {
		return []byte(trimmed)
	}
	wrapped, _ := json.Marshal(map[string]string{InvalidArgumentsKey: arguments})
	return wrapped
}

// ToolName is the model's tool name when it is a valid ToolName, and otherwise a
// name that cannot be a real tool (InvalidToolPrefix and the name's letters), so
// that validation reports an unknown tool and lists the real ones.
func ToolName(name string) v1.ToolName {
	valid := name != "" && len(name) <= maxToolName && name[0] >= 'a' && name[0] <= 'z'
	for _, r := range name {
		valid = valid && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}
	if valid {
		return v1.ToolName(name)
	}
	var b strings.Builder
	b.WriteString(InvalidToolPrefix)
	for _, r := range strings.ToLower(name) {
		if b.Len() >= maxToolName {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return v1.ToolName(b.String())
}

// ProviderOf names the provider by the endpoint's host (never its credentials or
// path).
func ProviderOf(baseURL string) string {
	if u, err := url.Parse(baseURL); err == nil && u.Hostname() != "" {
		return clip.Bytes(u.Hostname(), maxProposedByText)
	}
	return "openai-compatible"
}

// ModelTools are the task's visible tools as offered to the model.
func ModelTools(task *v1.AgentTask) []agent.Tool {
	visible := tools.Visible(task.Spec.Mode, task.Spec.Tools, task.Spec.Sandbox.Isolation)
	out := make([]agent.Tool, 0, len(visible))
	for _, t := range visible {
		out = append(out, agent.Tool{Name: string(t.Name), Description: t.Description, Schema: t.Schema})
	}
	return out
}

// Read reads the task's turn records from turn 0 up to the first turn not
// recorded. The controller passes a reader around its cache: a record just written
// must be seen, or the model would be asked twice for one turn. With each turn that gave a final answer it reads that
// answer's completion check, if one was made. A record the loop cannot use stops it,
// and problem says why.
func Read(ctx context.Context, api client.Reader, task *v1.AgentTask) (records []agent.TurnRecord, checks map[int32]v1.CompletionCheck, problem string, err error) {
	checks = map[int32]v1.CompletionCheck{}
	for turn := int32(0); ; turn++ {
		cm := &corev1.ConfigMap{}
		err := api.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: TurnRecordName(task.Name, turn)}, cm)
		switch {
		case apierrors.IsNotFound(err):
			return records, checks, "", nil
		case err != nil:
			return nil, nil, "", fmt.Errorf("reading turn record %d: %w", turn, err)
		}
		rec, problem := ParseTurnRecord(task, turn, cm)
		if problem != "" {
			return records, checks, problem, nil
		}
		records = append(records, rec)
		if len(rec.ToolCalls) > 0 {
			continue
		}
		check := &corev1.ConfigMap{}
		err = api.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: CompletionCheckName(task.Name, turn)}, check)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, nil, "", fmt.Errorf("reading the completion check of turn %d: %w", turn, err)
		}
		c, problem := ParseCompletionCheck(task, turn, check)
		if problem != "" {
			return records, checks, problem, nil
		}
		checks[turn] = c
	}
}

// ParseCompletionCheck checks that cm is the task's completion check of turn and
// reads it.
func ParseCompletionCheck(task *v1.AgentTask, turn int32, cm *corev1.ConfigMap) (v1.CompletionCheck, string) {
	if !ControlledByTask(cm, task) {
		return v1.CompletionCheck{}, fmt.Sprintf("ConfigMap %s is in the place of the completion check of turn %d but is not controlled by this AgentTask; delete it so that the check can be recorded", cm.Name, turn)
	}
	var c v1.CompletionCheck
	if err := json.Unmarshal([]byte(cm.Data[CompletionCheckKey]), &c); err != nil || c.Turn != turn {
		return v1.CompletionCheck{}, fmt.Sprintf("ConfigMap %s, the completion check of turn %d, cannot be read (%v) or is not that turn's", cm.Name, turn, err)
	}
	return c, ""
}

// ControlledByTask says whether obj's controller reference is task: toolgate's
// AgentTask kind and version, the task's name and UID. metav1.IsControlledBy compares
// the UID alone, and a reference with the task's UID under another kind or
// apiVersion is one the admission policy of turn records may not see as the task's.
func ControlledByTask(obj metav1.Object, task *v1.AgentTask) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == task.UID && ref.Name == task.Name &&
		ref.Kind == "AgentTask" && ref.APIVersion == v1.GroupVersion.String()
}

// ParseTurnRecord checks that cm is the task's record of turn and reads it.
func ParseTurnRecord(task *v1.AgentTask, turn int32, cm *corev1.ConfigMap) (agent.TurnRecord, string) {
	if !ControlledByTask(cm, task) {
		return agent.TurnRecord{}, fmt.Sprintf("ConfigMap %s is in the place of the record of turn %d but is not controlled by this AgentTask; delete it so that the turn can be recorded", cm.Name, turn)
	}
	rec, err := agent.ParseTurnRecord([]byte(cm.Data[TurnRecordKey]))
	if err != nil {
		return agent.TurnRecord{}, fmt.Sprintf("ConfigMap %s, the record of turn %d, cannot be read: %v", cm.Name, turn, err)
	}
	if rec.Turn != turn {
		return agent.TurnRecord{}, fmt.Sprintf("ConfigMap %s should record turn %d but records turn %d", cm.Name, turn, rec.Turn)
	}
	return rec, ""
}

// Paired is a task's recorded turns paired with the intents made from their calls.
type Paired struct {
	// Turns is every recorded turn with the observations of its calls, for
	// agent.BuildMessages; a call without an observation yet is not Observed.
	Turns []agent.Turn
	// Intents are, by turn of Turns and by call, the intent the loop created for the
	// call, or nil.
	Intents [][]*v1.ToolIntent
	// Missing are the indexes of the last turn's calls that have no ToolIntent yet.
	Missing []int
	// Failure says why the record cannot be the model's conversation: an intent the
	// loop created for a turn's call that is not that call. Turns is then cut.
	Failure string
}

// Pair pairs each recorded tool call with the ToolIntent the loop created for it
// (IsLoopIntent, for the call's turn and index), whatever its name: ModelIntentName,
// or the name the API server made up when someone else's intent took that one
// first. Another user's intent is never taken as a call's observation, whatever
// name it took; it is no part of the conversation. An intent of the loop's for a
// call whose tool call id is not the call's fails the pairing.
//
// A turn whose final answer a completion check redirected is a step like any other:
// the answer, then the rule's instruction.
func Pair(task *v1.AgentTask, records []agent.TurnRecord, checks map[int32]v1.CompletionCheck, intents []v1.ToolIntent, identity string) Paired {
	type callKey struct{ turn, index int32 }
	own := map[callKey]*v1.ToolIntent{}
	for i := range intents {
		in := &intents[i]
		if !IsLoopIntent(in, task, identity) {
			continue
		}
		key := callKey{in.Spec.Turn, in.Spec.Index}
		// The loop creates one intent a call; were there two, the one under the
		// call's own name, else the first, stands for it.
		named := func(in *v1.ToolIntent) bool { return in.Name == ModelIntentName(task.Name, key.turn, key.index) }
		if prev, ok := own[key]; ok && (named(prev) || !named(in) && pipeline.IntentBefore(prev, in)) {
			continue
		}
		own[key] = in
	}
	var p Paired
	for t, rec := range records {
		observations := map[int]string{}
		var instructions []agent.Instruction
		calls := make([]*v1.ToolIntent, len(rec.ToolCalls))
		p.Intents = append(p.Intents, calls)
		for i, call := range rec.ToolCalls {
			in, ok := own[callKey{int32(t), int32(i)}]
			switch {
			case !ok:
				if t == len(records)-1 {
					p.Missing = append(p.Missing, i)
				}
				continue
			case in.Spec.ProposedBy.ToolCallID != clip.Bytes(call.ID, maxProposedByText):
				p.Failure = fmt.Sprintf("ToolIntent %s was created as call %d of turn %d, but for tool call %s, not %s as the turn record says: its observation is not the model's; delete it and create a new task", in.Name, i, t, in.Spec.ProposedBy.ToolCallID, call.ID)
				p.Intents = p.Intents[:t]
				return p
			}
			calls[i] = in
			switch {
			case in.Status.Observation != nil:
				observations[i] = in.Status.Observation.Summary
				if rc := in.Status.Observation.ResultCheck; rc != nil && rc.Action == v1.RuleReplace && rc.PolicyRuleRef != nil && in.Status.Observation.Instruction != "" {
					// A Replace result rule's instruction, in place of the output.
					instructions = append(instructions, agent.Instruction{Rule: rc.PolicyRuleRef.String(), Text: in.Status.Observation.Instruction})
				} else if text := in.Status.Observation.Instruction; text != "" && in.Status.Decision != nil {
					instructions = append(instructions, agent.Instruction{Rule: in.Status.Decision.PolicyRuleRef.String(), Text: text})
				}
			}
		}
		turn := rec.ObservedTurn(observations)
		if c, ok := checks[int32(t)]; ok && len(rec.ToolCalls) == 0 && c.Action == v1.DecisionRedirect {
			instructions = append(instructions, agent.Instruction{Rule: c.DecidedBy(), Text: c.Instruction})
		}
		turn.Instructions = instructions
		p.Turns = append(p.Turns, turn)
	}
	return p
}
