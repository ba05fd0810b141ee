package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policyset"
	"github.com/toolgate/toolgate/internal/transcript"
)

// How a replayed call compares with the recorded turn.
const (
	// CallSame: the model proposed the recorded call (same tool, same input).
	CallSame = "Same"
	// CallChanged: the model proposed the same tool with another input.
	CallChanged = "Changed"
	// CallAdded: the model proposed a call the recorded turn does not have.
	CallAdded = "Added"
	// CallMissing: the recorded turn has a call the model did not propose.
	CallMissing = "Missing"
)

// How a replayed turn ended.
const (
	// TurnSame: the same calls, or an answer where the record has one.
	TurnSame = "Same"
	// TurnChanged: at least one call changed, was added or is missing, or the model
	// answered where it had called tools (or the other way round).
	TurnChanged = "Changed"
	// TurnError: the model could not be asked; no later turn is replayed.
	TurnError = "Error"
	// TurnNotReplayed: the turn was not replayed (Reason says why).
	TurnNotReplayed = "NotReplayed"
)

// maxReplayText bounds the answer texts a report shows.
const maxReplayText = 2000

// ModelReplayReport is what `replay --model -o json` prints.
type ModelReplayReport struct {
	Task      string `json:"task"`
	Namespace string `json:"namespace"`
	// Endpoint and Model are what was asked (the endpoint without credentials).
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	// SystemPrompt is "toolgate's" or the file the prompt came from.
	SystemPrompt string `json:"systemPrompt"`
	// Policies says where the policies came from: "cluster" or the --policy file.
	Policies string   `json:"policies"`
	Broken   []string `json:"broken,omitempty"`
	// Turns in order, one per recorded turn.
	Turns []ReplayedTurn `json:"turns"`
	// Changed counts the turns whose outcome is TurnChanged.
	Changed int `json:"changed"`
	// Tokens is what the replay spent, as the endpoint reported it.
	Tokens int64 `json:"tokens"`
	// Error is why the replay stopped early, if it did.
	Error string `json:"error,omitempty"`
}

// ReplayedTurn compares what the model proposes today, given the conversation the
// recorded model saw before that turn, with what it proposed then.
type ReplayedTurn struct {
	Turn int32 `json:"turn"`
	// Outcome is TurnSame, TurnChanged, TurnError or TurnNotReplayed.
	Outcome string `json:"outcome"`
	// Reason says why the turn was not replayed or what the error was.
	Reason        string `json:"reason,omitempty"`
	RecordedModel string `json:"recordedModel,omitempty"`
	Model         string `json:"model,omitempty"`
	// RecordedAnswer and Answer are the final answers, when the turn gave one.
	RecordedAnswer *string `json:"recordedAnswer,omitempty"`
	Answer         *string `json:"answer,omitempty"`
	// Calls pairs the proposed calls with the recorded ones.
	Calls  []ReplayedCall `json:"calls,omitempty"`
	Tokens int64          `json:"tokens,omitempty"`
}

// ReplayedCall is one call of a replayed turn: proposed now, recorded then, or both.
type ReplayedCall struct {
	// Comparison is CallSame, CallChanged, CallAdded or CallMissing.
	Comparison string `json:"comparison"`
	// Tool and Input are the proposed call (Input with secrets masked); empty for a
	// missing call.
	Tool  v1.ToolName `json:"tool,omitempty"`
	Input string      `json:"input,omitempty"`
	// RecordedIntent, RecordedTool and RecordedInput are the recorded call; empty for
	// an added one.
	RecordedIntent string      `json:"recordedIntent,omitempty"`
	RecordedTool   v1.ToolName `json:"recordedTool,omitempty"`
	RecordedInput  string      `json:"recordedInput,omitempty"`
	// Diff says, one line per field, how a changed input differs.
	Diff []string `json:"diff,omitempty"`
	// Recorded is the recorded call's verdict; Replayed the proposed call's today.
	Recorded *Verdict `json:"recorded,omitempty"`
	Replayed *Verdict `json:"replayed,omitempty"`
}

// modelReplay is what ReplayModel needs besides the task's record.
type modelReplay struct {
	model        agent.Model
	modelName    string
	systemPrompt string
	policies     policyset.Set
	// maxTokens bounds what the replay spends; 0 is no bound.
	maxTokens int64
	// apiKey is masked out of everything reported.
	apiKey string
}

// ReplayModel asks the model, for each recorded turn, what it would propose given
// the conversation as the recorded model saw it before that turn (the recorded
// replies and observations, never new ones), and compares its calls with the
// recorded ones. Each proposed call is validated and decided as judge does, with the
// intents of the earlier turns recorded before it. It creates nothing.
//
// A turn is not replayed when the conversation before it cannot be rebuilt (a call
// of an earlier turn has no observation: the task was cancelled or is still
// running), or when the replay's token bound is spent. A model error stops the
// replay: the report says which turn, and the error with the key masked.
func ReplayModel(ctx context.Context, task *v1.AgentTask, records []agent.TurnRecord, checks map[int32]v1.CompletionCheck, intents []v1.ToolIntent, approvals []v1.Approval, r modelReplay) ModelReplayReport {
	rep := ModelReplayReport{Task: task.Name, Namespace: task.Namespace, Model: r.modelName, Turns: []ReplayedTurn{}}
	sorted := append([]v1.ToolIntent(nil), intents...)
	sort.Slice(sorted, func(i, j int) bool { return pipeline.IntentBefore(&sorted[i], &sorted[j]) })
	identity := loopIdentity(task, sorted)
	paired := transcript.Pair(task, records, checks, sorted, identity)
	live := runningTask(task)
	approvalOf := map[string]*v1.Approval{}
	for i := range approvals {
		approvalOf[approvals[i].Spec.IntentRef.Name] = &approvals[i]
	}
	tools := transcript.ModelTools(task)

	stopped := ""
	for t, rec := range records {
		turn := ReplayedTurn{Turn: int32(t), RecordedModel: rec.Model}
		if len(rec.ToolCalls) == 0 {
			answer := cutText(mask.Secrets(rec.Text, r.apiKey))
			turn.RecordedAnswer = &answer
		}
		if stopped == "" {
			stopped = unreplayable(paired, t)
		}
		if stopped == "" && r.maxTokens > 0 && rep.Tokens >= r.maxTokens {
			stopped = fmt.Sprintf("the replay spent its token budget (%d of %d tokens; --max-tokens)", rep.Tokens, r.maxTokens)
		}
		if stopped != "" {
			turn.Outcome, turn.Reason = TurnNotReplayed, stopped
			rep.Turns = append(rep.Turns, turn)
			continue
		}
		messages, err := agent.BuildMessages(r.systemPrompt, task.Spec.Goal, paired.Turns[:t])
		if err != nil {
			stopped = fmt.Sprintf("the conversation before turn %d cannot be rebuilt: %v", t, err)
			turn.Outcome, turn.Reason = TurnNotReplayed, stopped
			rep.Turns = append(rep.Turns, turn)
			continue
		}
		resp, err := r.model.Complete(ctx, agent.Request{Model: r.modelName, Messages: messages, Tools: tools})
		if err != nil {
			msg := mask.Secrets(err.Error(), r.apiKey)
			var merr *agent.ModelError
			if errors.As(err, &merr) && merr.Temporary() {
				msg += " (a temporary error that outlasted the client's retries; run the replay again later)"
			}
			rep.Error = fmt.Sprintf("turn %d: %s", t, msg)
			stopped = "the model failed on an earlier turn"
			turn.Outcome, turn.Reason = TurnError, msg
			rep.Turns = append(rep.Turns, turn)
			continue
		}
		turn.Model, turn.Tokens = resp.Model, resp.Usage.Total()
		rep.Tokens += turn.Tokens
		if len(resp.ToolCalls) == 0 {
			answer := cutText(mask.Secrets(resp.Text, r.apiKey))
			turn.Answer = &answer
		}
		// The intents of the turns before this one, as the controller counted them
		// when it validated this turn's calls.
		var earlier []v1.ToolIntent
		for i := range sorted {
			if sorted[i].Spec.Turn < int32(t) {
				earlier = append(earlier, sorted[i])
			}
		}
		proposed := agent.NewTurnRecord(int32(t), resp)
		var recordedIntents []*v1.ToolIntent
		if t < len(paired.Intents) {
			recordedIntents = paired.Intents[t]
		}
		turn.Calls = pairCalls(task, rec, proposed, recordedIntents, func(i int) *Verdict {
			in := transcript.ModelIntent(task, proposed, i, identity)
			v := judge(task, live, in, earlier, approvalOf, r.policies, identity)
			return &v
		})
		turn.Outcome = TurnSame
		for _, c := range turn.Calls {
			if c.Comparison != CallSame {
				turn.Outcome = TurnChanged
			}
		}
		if (len(rec.ToolCalls) == 0) != (len(resp.ToolCalls) == 0) {
			turn.Outcome = TurnChanged
		}
		if turn.Outcome == TurnChanged {
			rep.Changed++
		}
		rep.Turns = append(rep.Turns, turn)
	}
	return rep
}

// unreplayable says why turn t cannot be replayed from the record, or "".
func unreplayable(p transcript.Paired, t int) string {
	if t > len(p.Turns) {
		return p.Failure
	}
	for prev := 0; prev < t; prev++ {
		for i, c := range p.Turns[prev].Calls {
			if !c.Observed {
				return fmt.Sprintf("call %d (%s) of turn %d has no observation, so the conversation before turn %d is not known", i, c.Name, prev, t)
			}
		}
	}
	return ""
}

// pairCalls pairs the proposed calls with the recorded ones: first the same tool
// with the same input, in order; then, of the calls left, the same tool (changed);
// what is left is added or missing. judge decides a proposed call by its index.
// intents are the recorded calls' intents, by call (transcript.Paired.Intents: the
// loop's own, whatever their names; nil for a call without one).
func pairCalls(task *v1.AgentTask, rec, proposed agent.TurnRecord, intents []*v1.ToolIntent, judgeCall func(int) *Verdict) []ReplayedCall {
	type side struct {
		tool   v1.ToolName
		input  string // canonical JSON
		name   string // the recorded intent
		intent *v1.ToolIntent
		taken  bool
	}
	recorded := make([]side, len(rec.ToolCalls))
	for i, c := range rec.ToolCalls {
		r := side{tool: transcript.ToolName(c.Name), name: transcript.ModelIntentName(task.Name, rec.Turn, int32(i))}
		raw := transcript.CallInput(c.Arguments)
		if i < len(intents) && intents[i] != nil {
			r.intent, r.name = intents[i], intents[i].Name
			// The record may have omitted large arguments; the intent holds them whole.
			if len(r.intent.Spec.Input.Raw) > 0 {
				raw = r.intent.Spec.Input.Raw
			}
		}
		r.input = canonicalJSON(raw)
		recorded[i] = r
	}
	out := make([]ReplayedCall, len(proposed.ToolCalls))
	matched := make([]bool, len(proposed.ToolCalls))
	pairedWith := make([]int, len(proposed.ToolCalls))
	match := func(same func(p, r side) bool, comparison string) {
		for i, c := range proposed.ToolCalls {
			if matched[i] {
				continue
			}
			p := side{tool: transcript.ToolName(c.Name), input: canonicalJSON(transcript.CallInput(c.Arguments))}
			for j := range recorded {
				if recorded[j].taken || !same(p, recorded[j]) {
					continue
				}
				recorded[j].taken, matched[i], pairedWith[i] = true, true, j
				out[i] = ReplayedCall{Comparison: comparison, Tool: p.tool, Input: mask.Secrets(p.input),
					RecordedIntent: recorded[j].name, RecordedTool: recorded[j].tool, RecordedInput: mask.Secrets(recorded[j].input)}
				if comparison == CallChanged {
					out[i].Diff = inputDiff(recorded[j].input, p.input)
				}
				break
			}
		}
	}
	match(func(p, r side) bool { return p.tool == r.tool && p.input == r.input }, CallSame)
	match(func(p, r side) bool { return p.tool == r.tool }, CallChanged)
	for i, c := range proposed.ToolCalls {
		if !matched[i] {
			out[i] = ReplayedCall{Comparison: CallAdded, Tool: transcript.ToolName(c.Name), Input: mask.Secrets(canonicalJSON(transcript.CallInput(c.Arguments)))}
		}
		out[i].Replayed = judgeCall(i)
		if matched[i] && recorded[pairedWith[i]].intent != nil {
			v := recordedVerdict(recorded[pairedWith[i]].intent)
			out[i].Recorded = &v
		}
	}
	for _, r := range recorded {
		if r.taken {
			continue
		}
		c := ReplayedCall{Comparison: CallMissing, RecordedIntent: r.name, RecordedTool: r.tool, RecordedInput: mask.Secrets(r.input)}
		if r.intent != nil {
			v := recordedVerdict(r.intent)
			c.Recorded = &v
		}
		out = append(out, c)
	}
	return out
}

// canonicalJSON is raw with its object keys sorted and no insignificant space, so
// that two inputs compare equal when they say the same; raw itself when it is not
// JSON.
func canonicalJSON(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(out)
}

// inputDiff says field by field how two inputs (JSON objects) differ, as
// "field: recorded -> proposed", secrets masked, in field order.
func inputDiff(recorded, proposed string) []string {
	var a, b map[string]any
	if json.Unmarshal([]byte(recorded), &a) != nil || json.Unmarshal([]byte(proposed), &b) != nil {
		return []string{fmt.Sprintf("input: %s -> %s", mask.Secrets(oneLine(recorded, 200)), mask.Secrets(oneLine(proposed, 200)))}
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []string
	for _, k := range names {
		va, inA := a[k]
		vb, inB := b[k]
		switch {
		case !inA:
			out = append(out, fmt.Sprintf("%s: (absent) -> %s", k, fieldText(vb)))
		case !inB:
			out = append(out, fmt.Sprintf("%s: %s -> (absent)", k, fieldText(va)))
		case !reflect.DeepEqual(va, vb):
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, fieldText(va), fieldText(vb)))
		}
	}
	return out
}

func fieldText(v any) string {
	data, _ := json.Marshal(v)
	return mask.Secrets(oneLine(string(data), 200))
}

func cutText(s string) string {
	if len(s) <= maxReplayText {
		return s
	}
	kept := clip.Bytes(s, maxReplayText)
	return kept + fmt.Sprintf(" [... %d more bytes]", len(s)-len(kept))
}

// RenderModelReplay writes the report as text: every turn, the changed ones marked.
func RenderModelReplay(w io.Writer, rep ModelReplayReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Model replay of task %s/%s: asked %s at %s with %s system prompt, each turn given the recorded conversation before it; decisions by %s policies; nothing was executed or created.\n",
		rep.Namespace, rep.Task, rep.Model, rep.Endpoint, rep.SystemPrompt, rep.Policies)
	if len(rep.Broken) > 0 {
		fmt.Fprintf(&b, "Not Ready (do not compile): %s; while they are in scope nothing is allowed without a human.\n", strings.Join(rep.Broken, ", "))
	}
	for _, t := range rep.Turns {
		mark := "  "
		if t.Outcome == TurnChanged || t.Outcome == TurnError {
			mark = "! "
		}
		fmt.Fprintf(&b, "\n%sturn %d: %s", mark, t.Turn, t.Outcome)
		if t.Model != "" && t.Model != t.RecordedModel {
			fmt.Fprintf(&b, " (recorded by %s, replayed by %s)", orDash(t.RecordedModel), t.Model)
		}
		b.WriteString("\n")
		if t.Reason != "" {
			fmt.Fprintf(&b, "    %s\n", t.Reason)
		}
		for _, c := range t.Calls {
			switch c.Comparison {
			case CallMissing:
				fmt.Fprintf(&b, "    %-8s %s %s  %s\n", c.Comparison, c.RecordedTool, c.RecordedIntent, oneLine(c.RecordedInput, 100))
			case CallAdded:
				fmt.Fprintf(&b, "    %-8s %s  %s\n", c.Comparison, c.Tool, oneLine(c.Input, 100))
			default:
				fmt.Fprintf(&b, "    %-8s %s %s  %s\n", c.Comparison, c.Tool, c.RecordedIntent, oneLine(c.Input, 100))
			}
			for _, d := range c.Diff {
				fmt.Fprintf(&b, "               %s\n", d)
			}
			if c.Recorded != nil {
				fmt.Fprintf(&b, "             recorded: %s\n", verdictText(*c.Recorded))
			}
			if c.Replayed != nil {
				fmt.Fprintf(&b, "             now:      %s\n", verdictText(*c.Replayed))
			}
		}
		if t.Outcome != TurnNotReplayed && t.Outcome != TurnError {
			switch {
			case t.Answer != nil && t.RecordedAnswer == nil:
				fmt.Fprintf(&b, "    answered instead of calling tools: %s\n", oneLine(*t.Answer, 200))
			case t.Answer == nil && t.RecordedAnswer != nil:
				fmt.Fprintf(&b, "    called tools where the recorded model answered: %s\n", oneLine(*t.RecordedAnswer, 200))
			case t.Answer != nil:
				fmt.Fprintf(&b, "    answered, as recorded: %s\n", oneLine(*t.Answer, 200))
			}
		}
	}
	if rep.Error != "" {
		fmt.Fprintf(&b, "\nThe replay stopped: %s\n", rep.Error)
	}
	fmt.Fprintf(&b, "\n%d of %d turns changed (%d tokens spent).\n", rep.Changed, len(rep.Turns), rep.Tokens)
	_, err := io.WriteString(w, b.String())
	return err
}

// modelFlags are replay --model's flags.
type modelFlags struct {
	from, baseURL, name, apiKeyEnv, systemPrompt string
	maxTokens                                    int64
}

func (m *modelFlags) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&m.from, "model-from", "", "With --model: use the spec.agent.model block of this AgentTask (default: the replayed task's own)")
	cmd.Flags().StringVar(&m.baseURL, "base-url", "", "With --model: the OpenAI-compatible endpoint, for example https://api.openai.com/v1")
	cmd.Flags().StringVar(&m.name, "model-name", "", "With --model: the model the endpoint serves")
	cmd.Flags().StringVar(&m.apiKeyEnv, "api-key-env", "", "With --model: read the API key from this environment variable")
	cmd.Flags().StringVar(&m.systemPrompt, "system-prompt", "", "With --model: a file whose text replaces toolgate's system prompt")
	cmd.Flags().Int64Var(&m.maxTokens, "max-tokens", -1, "With --model: stop asking once the replay has spent this many tokens (default: the task's budgets.maxTokens; 0: no bound)")
}

// modelBlockOf is the agent.model block and the task it is read from: --model-from's
// task, or the replayed one's.
func (m modelFlags) modelBlockOf(ctx context.Context, c *cluster, task *v1.AgentTask) (*v1.ModelAgent, string, error) {
	if m.from == "" {
		return task.Spec.Agent.Model, task.Name, nil
	}
	other := &v1.AgentTask{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: m.from}, other); err != nil {
		return nil, "", fmt.Errorf("--model-from: %w", apiError(err))
	}
	if other.Spec.Agent.Model == nil {
		return nil, "", fmt.Errorf("--model-from: AgentTask %s has no spec.agent.model (its agent is external); name a task with a model block, or give --base-url and --model-name", m.from)
	}
	return other.Spec.Agent.Model, other.Name, nil
}

// modelClient builds the client replay --model asks, and the key to mask.
func (m modelFlags) modelClient(ctx context.Context, c *cluster, task *v1.AgentTask) (agent.Model, string, string, string, error) {
	block, from, err := m.modelBlockOf(ctx, c, task)
	if err != nil {
		return nil, "", "", "", err
	}
	var baseURL, name string
	var timeout time.Duration
	if block != nil {
		baseURL, name = block.BaseURL, block.Model
		timeout = time.Duration(block.RequestTimeoutSeconds) * time.Second
	}
	if m.baseURL != "" {
		baseURL = m.baseURL
	}
	if m.name != "" {
		name = m.name
	}
	if baseURL == "" || name == "" {
		return nil, "", "", "", fmt.Errorf("--model needs an endpoint and a model: AgentTask %s has no spec.agent.model; name a task with one (--model-from) or give --base-url and --model-name", task.Name)
	}
	var key string
	switch {
	case m.apiKeyEnv != "":
		key = strings.TrimSpace(os.Getenv(m.apiKeyEnv))
		if key == "" {
			return nil, "", "", "", fmt.Errorf("--api-key-env: the environment variable %s is unset or empty", m.apiKeyEnv)
		}
	case block != nil && block.APIKeySecretRef != nil:
		if baseURL != block.BaseURL {
			// The Secret is the key of that endpoint; sending it elsewhere because a flag
			// said so is how keys leak.
			return nil, "", "", "", fmt.Errorf("the API key of AgentTask %s (Secret %s) is sent only to its own endpoint %s, not to --base-url %s: pass the other endpoint's key with --api-key-env",
				from, block.APIKeySecretRef.Name, agent.RedactURL(block.BaseURL), agent.RedactURL(baseURL))
		}
		secret := &corev1.Secret{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: block.APIKeySecretRef.Name}, secret); err != nil {
			return nil, "", "", "", fmt.Errorf("reading the API key Secret %s named by AgentTask %s's spec.agent.model.apiKeySecretRef (with your own credentials): %w; or pass the key with --api-key-env", block.APIKeySecretRef.Name, from, apiError(err))
		}
		value, ok := secret.Data[block.APIKeySecretRef.Key]
		if !ok {
			return nil, "", "", "", fmt.Errorf("the Secret %s has no key %q, named by AgentTask %s's spec.agent.model.apiKeySecretRef.key", block.APIKeySecretRef.Name, block.APIKeySecretRef.Key, from)
		}
		key = strings.TrimSpace(string(value))
	}
	model, err := agent.NewClient(agent.ClientConfig{BaseURL: baseURL, APIKey: key, RequestTimeout: timeout})
	if err != nil {
		return nil, "", "", "", fmt.Errorf("--model: %s", mask.Secrets(err.Error(), key))
	}
	return model, agent.RedactURL(baseURL), name, key, nil
}

// runModelReplay is replay --model.
func runModelReplay(ctx context.Context, o *Options, c *cluster, objs *taskObjects, policySource string, policies policyset.Set, m modelFlags, output string) error {
	task := objs.task
	records, checks, problem, err := turnRecords(ctx, c, objs)
	switch {
	case err != nil:
		return apiError(err)
	case problem != "":
		return fmt.Errorf("the turn records of AgentTask %s cannot be replayed: %s", task.Name, problem)
	case len(records) == 0 && task.Spec.Agent.Model == nil:
		return fmt.Errorf("AgentTask %s has no turn records: its agent is external, and only a task with spec.agent.model records the model's turns; replay --dry-run judges an external agent's calls", task.Name)
	case len(records) == 0:
		return fmt.Errorf("AgentTask %s has no turn records yet: its model has not been asked", task.Name)
	}
	model, endpoint, name, key, err := m.modelClient(ctx, c, task)
	if err != nil {
		return err
	}
	r := modelReplay{model: model, modelName: name, systemPrompt: agent.SystemPrompt, policies: policies, maxTokens: m.maxTokens, apiKey: key}
	promptSource := "toolgate's"
	if m.systemPrompt != "" {
		data, err := os.ReadFile(m.systemPrompt)
		if err != nil {
			return fmt.Errorf("--system-prompt: %w", err)
		}
		if strings.TrimSpace(string(data)) == "" {
			return fmt.Errorf("--system-prompt: %s is empty", m.systemPrompt)
		}
		r.systemPrompt, promptSource = string(data), "the file "+m.systemPrompt+"'s"
	}
	if r.maxTokens < 0 {
		r.maxTokens = ptr.Deref(task.Spec.Budgets.MaxTokens, 0)
	}
	rep := ReplayModel(ctx, task, records, checks, objs.intents, objs.approvals, r)
	rep.Endpoint, rep.SystemPrompt, rep.Policies, rep.Broken = endpoint, promptSource, policySource, policies.Broken
	if output != outputText {
		err = printData(o.Streams.Out, output, rep)
	} else {
		err = RenderModelReplay(o.Streams.Out, rep)
	}
	switch {
	case err != nil:
		return err
	case rep.Error != "":
		return &ExitError{Code: replayError, Err: fmt.Errorf("the model replay stopped at %s", rep.Error)}
	case rep.Changed > 0:
		return &ExitError{Code: replayChanged}
	}
	return nil
}
