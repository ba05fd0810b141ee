package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"
)

// TurnRecordAPIVersion is the format of the turn records this code writes and the
// only one it reads. A change an older reader would misread (a field renamed, or
// its meaning changed) needs a new version; a field an older reader may ignore does
// not.
const TurnRecordAPIVersion = "turnrecord.toolgate.dev/v1"

// TurnRecord is the compact record of what the model said in one turn, small enough
// to keep on a cluster object, so that the conversation can be rebuilt from the
// cluster alone. Store it with [TurnRecord.Marshal] and read it back with
// [ParseTurnRecord].
type TurnRecord struct {
	// APIVersion is the record's format, TurnRecordAPIVersion. It is in the JSON
	// itself, not in an annotation of the ConfigMap, so that it cannot be changed
	// without the data (the ConfigMap's data is immutable, its metadata is not) and
	// goes wherever the JSON is copied.
	APIVersion string `json:"apiVersion"`
	// Turn is the turn number, starting at 0.
	Turn int32 `json:"turn"`
	// Model is the model that answered, as the endpoint reported it.
	Model string `json:"model,omitempty"`
	// Text is the assistant's text.
	Text string `json:"text,omitempty"`
	// Refusal is the model's refusal, if it refused.
	Refusal string `json:"refusal,omitempty"`
	// ToolCalls are the calls the model proposed, in its order; the index of a call
	// here is the index of its ToolIntent.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// Usage counts the turn's tokens.
	Usage Usage `json:"usage"`
	// FinishReason is why the model stopped.
	FinishReason string `json:"finishReason,omitempty"`
	// Truncated is true when Bound had to cut the text or omit arguments; the cuts
	// themselves carry a marker saying what was removed.
	Truncated bool `json:"truncated,omitempty"`
}

// NewTurnRecord records the model's reply for turn.
func NewTurnRecord(turn int32, resp Response) TurnRecord {
	return TurnRecord{
		APIVersion:   TurnRecordAPIVersion,
		Turn:         turn,
		Model:        resp.Model,
		Text:         resp.Text,
		Refusal:      resp.Refusal,
		ToolCalls:    append([]ToolCall(nil), resp.ToolCalls...),
		Usage:        resp.Usage,
		FinishReason: resp.FinishReason,
	}
}

// Marshal is the record's JSON, in the current format (TurnRecordAPIVersion).
func (r TurnRecord) Marshal() ([]byte, error) {
	r.APIVersion = TurnRecordAPIVersion
	return json.Marshal(r)
}

// ParseTurnRecord reads a record written with [TurnRecord.Marshal] and checks it.
// A record of another format is refused rather than misread. A record without
// apiVersion was written before records had one, in the format that became
// TurnRecordAPIVersion, and is read as that. Unknown fields are ignored: a newer
// writer may add fields that this reader does not need.
func ParseTurnRecord(data []byte) (TurnRecord, error) {
	var r TurnRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return TurnRecord{}, fmt.Errorf("turn record is not valid JSON: %w", err)
	}
	switch r.APIVersion {
	case TurnRecordAPIVersion:
	case "":
		r.APIVersion = TurnRecordAPIVersion
	default:
		return TurnRecord{}, fmt.Errorf("turn record apiVersion %q is not one this toolgate reads (it reads %s): run a toolgate controller and kubectl-toolgate that read it (the version that wrote it, or a newer one), or delete the AgentTask and create it again to start a new conversation",
			r.APIVersion, TurnRecordAPIVersion)
	}
	if err := r.Validate(); err != nil {
		return TurnRecord{}, err
	}
	return r, nil
}

// Validate checks what rebuilding the conversation relies on: a turn number that
// is not negative and calls with an id and a tool name.
func (r TurnRecord) Validate() error {
	if r.Turn < 0 {
		return fmt.Errorf("turn record: turn is %d; it must be 0 or more", r.Turn)
	}
	for i, c := range r.ToolCalls {
		if c.ID == "" {
			return fmt.Errorf("turn record %d: toolCalls[%d].id is empty", r.Turn, i)
		}
		if c.Name == "" {
			return fmt.Errorf("turn record %d: toolCalls[%d].name is empty", r.Turn, i)
		}
	}
	return nil
}

// ObservedTurn pairs the record's calls with their observation summaries, keyed by
// call index; a call with no entry is not observed yet. The result goes to
// [BuildMessages].
func (r TurnRecord) ObservedTurn(observations map[int]string) Turn {
	turn := Turn{Text: r.Text, Calls: make([]ObservedCall, 0, len(r.ToolCalls))}
	for i, c := range r.ToolCalls {
		summary, ok := observations[i]
		turn.Calls = append(turn.Calls, ObservedCall{ToolCall: c, Observed: ok, Observation: summary})
	}
	return turn
}

// Bound returns the record cut to at most maxBytes of JSON. It prefers cutting the
// text (then the refusal): the head is kept and a marker says how much. Only when no
// cut of the text is enough does it replace tool call arguments, largest first, with
// a small JSON object saying they were omitted (the ToolIntent keeps the input in
// full, so a caller rebuilding the conversation may put them back), and then cuts
// the text as far as still needed. It sets Truncated whenever it cut anything and
// fails when even the fully cut record is larger than maxBytes. A record that fits
// is returned unchanged.
func (r TurnRecord) Bound(maxBytes int) (TurnRecord, error) {
	if encodedSize(r) <= maxBytes {
		return r, nil
	}
	b := r
	b.ToolCalls = append([]ToolCall(nil), r.ToolCalls...)
	b.Truncated = true
	byArgumentSize := make([]int, len(b.ToolCalls))
	for i := range byArgumentSize {
		byArgumentSize[i] = i
	}
	sort.SliceStable(byArgumentSize, func(x, y int) bool {
		return len(b.ToolCalls[byArgumentSize[x]].Arguments) > len(b.ToolCalls[byArgumentSize[y]].Arguments)
	})
	for _, i := range byArgumentSize {
		if cut, ok := cutTexts(b, maxBytes); ok {
			return cut, nil
		}
		b.ToolCalls[i].Arguments = omittedArguments(len(b.ToolCalls[i].Arguments))
	}
	if cut, ok := cutTexts(b, maxBytes); ok {
		return cut, nil
	}
	return TurnRecord{}, fmt.Errorf("turn record %d does not fit in %d bytes even with its text cut and all arguments omitted: raise the limit", r.Turn, maxBytes)
}

// cutTexts cuts the text, then the refusal, as little as makes b fit. It reports
// false when no cut of them does.
func cutTexts(b TurnRecord, maxBytes int) (TurnRecord, bool) {
	for _, field := range []*string{&b.Text, &b.Refusal} {
		if encodedSize(b) <= maxBytes {
			return b, true
		}
		orig := *field
		if orig == "" {
			continue
		}
		// The encoded size only grows with the kept length: find the longest head
		// that still fits (keep+1 is the first that does not).
		keep := sort.Search(len(orig), func(n int) bool {
			*field = truncatedText(orig, n+1)
			return encodedSize(b) > maxBytes
		})
		*field = truncatedText(orig, keep)
	}
	return b, encodedSize(b) <= maxBytes
}

// truncatedText keeps at most keep bytes of s, cut on a rune boundary, and says so.
func truncatedText(s string, keep int) string {
	if keep >= len(s) {
		return s
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return fmt.Sprintf("%s\n[toolgate: truncated, %d of %d bytes kept]", s[:keep], keep, len(s))
}

// omittedArguments stands in for arguments too large for the record. It is valid
// JSON so that endpoints which parse past tool calls still accept the conversation.
func omittedArguments(size int) string {
	data, _ := json.Marshal(map[string]string{
		"toolgate_omitted": fmt.Sprintf("arguments of %d bytes omitted from the turn record to fit its size limit", size),
	})
	return string(data)
}

// encodedSize is the record's JSON size, as Marshal writes it.
func encodedSize(r TurnRecord) int {
	data, err := r.Marshal()
	if err != nil {
		// A struct of strings and numbers always encodes.
		panic(errors.Join(errors.New("agent: encoding a turn record"), err))
	}
	return len(data)
}
