package agent

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNewTurnRecordAndRoundTrip(t *testing.T) {
	resp := Response{
		Model:        "m-2025",
		Text:         "checking",
		ToolCalls:    []ToolCall{{ID: "c1", Name: "grep", Arguments: `{"pattern":"TODO"}`}},
		FinishReason: "tool_calls",
		Usage:        Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15},
	}
	rec := NewTurnRecord(3, resp)
	resp.ToolCalls[0].Name = "changed after recording"
	data, err := rec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"apiVersion":"turnrecord.toolgate.dev/v1","turn":3,"model":"m-2025","text":"checking","toolCalls":[{"id":"c1","name":"grep","arguments":"{\"pattern\":\"TODO\"}"}],"usage":{"prompt":10,"completion":5,"total":15},"finishReason":"tool_calls"}`
	if string(data) != wantJSON {
		t.Errorf("JSON\n got %s\nwant %s", data, wantJSON)
	}
	back, err := ParseTurnRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rec) {
		t.Errorf("round trip\n got %+v\nwant %+v", back, rec)
	}
}

func TestParseTurnRecord(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{"final turn", `{"apiVersion":"turnrecord.toolgate.dev/v1","turn":0,"text":"done","usage":{}}`, ""},
		{"written before records had a version", `{"turn":0,"text":"done","usage":{}}`, ""},
		// A newer format is refused rather than misread as this one.
		{"another version", `{"apiVersion":"turnrecord.toolgate.dev/v2","turn":0,"text":"done"}`,
			`turn record apiVersion "turnrecord.toolgate.dev/v2" is not one this toolgate reads (it reads turnrecord.toolgate.dev/v1): run a toolgate controller and kubectl-toolgate that read it`},
		{"not a version string", `{"apiVersion":1,"turn":0}`, "turn record is not valid JSON"},
		{"unknown fields from a newer writer are ignored", `{"turn":1,"usage":{},"reasoning":"x"}`, ""},
		{"not JSON", `{"turn":`, "turn record is not valid JSON"},
		{"negative turn", `{"turn":-1}`, "turn is -1"},
		{"call without id", `{"turn":2,"toolCalls":[{"name":"bash","arguments":"{}"}]}`, "turn record 2: toolCalls[0].id is empty"},
		{"call without name", `{"turn":2,"toolCalls":[{"id":"a","arguments":"{}"}]}`, "turn record 2: toolCalls[0].name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTurnRecord([]byte(tt.data))
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestParseTurnRecordReadsTheCurrentVersion: a record written before records had a
// version has the current format, and reads as it.
func TestParseTurnRecordReadsTheCurrentVersion(t *testing.T) {
	for _, data := range []string{`{"turn":1,"text":"done","usage":{}}`, `{"apiVersion":"turnrecord.toolgate.dev/v1","turn":1,"text":"done","usage":{}}`} {
		rec, err := ParseTurnRecord([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if want := (TurnRecord{APIVersion: TurnRecordAPIVersion, Turn: 1, Text: "done"}); !reflect.DeepEqual(rec, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", data, rec, want)
		}
	}
}

func TestObservedTurn(t *testing.T) {
	rec := TurnRecord{Turn: 1, Text: "two calls", ToolCalls: []ToolCall{
		{ID: "a", Name: "glob", Arguments: `{}`},
		{ID: "b", Name: "bash", Arguments: `{"command":"ls"}`},
	}}
	got := rec.ObservedTurn(map[int]string{1: "x\n[exit code: 0]"})
	want := Turn{Text: "two calls", Calls: []ObservedCall{
		{ToolCall: rec.ToolCalls[0]},
		{ToolCall: rec.ToolCalls[1], Observed: true, Observation: "x\n[exit code: 0]"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if _, err := BuildMessages("rules", "goal", []Turn{got}); err == nil {
		t.Error("a turn with an unobserved call was accepted")
	}
}

func size(t *testing.T, r TurnRecord) int {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

func TestBound(t *testing.T) {
	small := TurnRecord{Turn: 0, Model: "m", Text: "short", Usage: Usage{TotalTokens: 3}, FinishReason: "stop"}
	longText := strings.Repeat("The build fails because x is undefined. ", 200) // 8000 bytes
	bigArgs := `{"path":"big.txt","content":"` + strings.Repeat("a", 20000) + `"}`
	tests := []struct {
		name     string
		rec      TurnRecord
		max      int
		check    func(t *testing.T, orig, got TurnRecord)
		wantErr  string
		wantSame bool
	}{
		{name: "a record that fits is unchanged", rec: small, max: 1000, wantSame: true},
		{
			name: "long text keeps its head and says what was cut",
			rec:  TurnRecord{Turn: 4, Model: "m", Text: longText, FinishReason: "stop"},
			max:  1000,
			check: func(t *testing.T, orig, got TurnRecord) {
				if !got.Truncated {
					t.Error("Truncated is false")
				}
				head, marker, ok := strings.Cut(got.Text, "\n[toolgate: truncated, ")
				if !ok || !strings.HasPrefix(orig.Text, head) || !strings.HasSuffix(marker, " of 8000 bytes kept]") {
					t.Errorf("text %q does not keep the head with a marker", got.Text)
				}
				if size(t, got) < 950 {
					t.Errorf("cut to %d bytes: more than needed for 1000", size(t, got))
				}
			},
		},
		{
			name: "multi-byte text is cut on a character boundary",
			rec:  TurnRecord{Text: strings.Repeat("検証", 1000)},
			max:  500,
			check: func(t *testing.T, orig, got TurnRecord) {
				if !utf8.ValidString(got.Text) {
					t.Errorf("text is no longer valid UTF-8: %q", got.Text)
				}
			},
		},
		{
			name: "text escaped in JSON is measured as encoded",
			rec:  TurnRecord{Text: strings.Repeat("<\"\n", 1000)},
			max:  400,
		},
		{
			name: "arguments stay when cutting the text is enough",
			rec:  TurnRecord{Text: longText, ToolCalls: []ToolCall{{ID: "c", Name: "write_file", Arguments: `{"path":"a","content":"b"}`}}},
			max:  600,
			check: func(t *testing.T, orig, got TurnRecord) {
				if got.ToolCalls[0].Arguments != orig.ToolCalls[0].Arguments {
					t.Errorf("arguments were replaced: %s", got.ToolCalls[0].Arguments)
				}
			},
		},
		{
			name: "huge arguments are omitted, largest first, and the text kept",
			rec: TurnRecord{Turn: 2, Text: "Writing the file.", ToolCalls: []ToolCall{
				{ID: "c1", Name: "read_file", Arguments: `{"path":"small.txt"}`},
				{ID: "c2", Name: "write_file", Arguments: bigArgs},
			}},
			max: 2000,
			check: func(t *testing.T, orig, got TurnRecord) {
				if got.Text != orig.Text {
					t.Errorf("text was cut to %q although omitting the arguments was enough", got.Text)
				}
				if got.ToolCalls[0] != orig.ToolCalls[0] {
					t.Errorf("small call changed: %+v", got.ToolCalls[0])
				}
				c := got.ToolCalls[1]
				if c.ID != "c2" || c.Name != "write_file" {
					t.Errorf("the call lost its id or name: %+v", c)
				}
				var marker map[string]string
				if err := json.Unmarshal([]byte(c.Arguments), &marker); err != nil {
					t.Fatalf("omitted arguments are not valid JSON: %v", err)
				}
				if want := fmt.Sprintf("arguments of %d bytes omitted from the turn record to fit its size limit", len(bigArgs)); marker["toolgate_omitted"] != want {
					t.Errorf("marker %q, want %q", marker["toolgate_omitted"], want)
				}
				if orig.ToolCalls[1].Arguments != bigArgs {
					t.Error("Bound changed the caller's record")
				}
			},
		},
		{
			name: "when nothing is enough the error says so",
			rec: TurnRecord{Turn: 7, ToolCalls: []ToolCall{
				{ID: strings.Repeat("i", 300), Name: "bash", Arguments: `{}`},
			}},
			max:     100,
			wantErr: "turn record 7 does not fit in 100 bytes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rec.Bound(tt.max)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := size(t, got); n > tt.max {
				t.Errorf("bound record is %d bytes, over %d", n, tt.max)
			}
			if tt.wantSame && !reflect.DeepEqual(got, tt.rec) {
				t.Errorf("a record that fits changed: %+v", got)
			}
			if !tt.wantSame && !got.Truncated {
				t.Error("a cut record is not marked Truncated")
			}
			if err := got.Validate(); err != nil {
				t.Errorf("bound record is invalid: %v", err)
			}
			if tt.check != nil {
				tt.check(t, tt.rec, got)
			}
		})
	}
}
