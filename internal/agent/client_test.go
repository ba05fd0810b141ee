package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testAPIKey = "sk-test-Zq8vN3kP0aX7mLr2Tq9s"

const readFileSchema = `{"type":"object","properties":{"path":{"type":"string","description":"workspace-relative path"},"offset":{"type":"integer","minimum":1},"limit":{"type":"integer","maximum":2000}},"required":["path"],"additionalProperties":false}`

const bashSchema = `{"type":"object","properties":{"command":{"type":"string"},"timeoutMs":{"type":"integer","maximum":600000}},"required":["command"]}`

var offeredTools = []Tool{
	{Name: "read_file", Description: "Read a file of the workspace.", Schema: readFileSchema},
	{Name: "bash", Description: "Run a shell command in the sandbox.", Schema: bashSchema},
}

// offeredToolsJSON is how offeredTools must look on the wire.
const offeredToolsJSON = `[
  {"type":"function","function":{"name":"read_file","description":"Read a file of the workspace.","parameters":` + readFileSchema + `}},
  {"type":"function","function":{"name":"bash","description":"Run a shell command in the sandbox.","parameters":` + bashSchema + `}}
]`

func newTestClient(t *testing.T, f *fakeEndpoint, apiKey string, sleeper *sleepRecorder, tweak func(*ClientConfig)) *Client {
	t.Helper()
	cfg := ClientConfig{
		BaseURL:        f.baseURL(),
		APIKey:         apiKey,
		RequestTimeout: 30 * time.Second, // generous: the machine running tests may be busy
		MaxAttempts:    3,
		InitialBackoff: time.Second,
		MaxBackoff:     30 * time.Second,
		HTTPClient:     f.server.Client(),
		Sleep:          sleeper.sleep,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

func okCompletion(message string, finish string, prompt, completion int) reply {
	return reply{status: http.StatusOK, body: `{
		"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"test-model-2025",
		"choices":[{"index":0,"finish_reason":"` + finish + `","message":` + message + `}],
		"usage":{"prompt_tokens":` + itoa(prompt) + `,"completion_tokens":` + itoa(completion) + `,"total_tokens":` + itoa(prompt+completion) + `}}`}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func simpleRequest() Request {
	msgs, err := BuildMessages(SystemPrompt, "Say hello.", nil)
	if err != nil {
		panic(err)
	}
	return Request{Model: "test-model", Messages: msgs}
}

// TestScriptedConversation runs two turns against the fake endpoint through the
// real SDK: the first answer proposes two tool calls, the turn is recorded, stored as
// JSON, read back, paired with observations and rebuilt; the second answer is final.
// Every request is compared in full with what must be on the wire.
func TestScriptedConversation(t *testing.T) {
	f := newFakeEndpoint(t,
		okCompletion(`{"role":"assistant","content":"Let me look at the module first.","tool_calls":[
			{"id":"call_a1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"go.mod\"}"}},
			{"id":"call_b2","type":"function","function":{"name":"bash","arguments":"{\"command\":\"go test ./...\"}"}}]}`,
			"tool_calls", 812, 64),
		okCompletion(`{"role":"assistant","content":"The module is example.com/m and all tests pass."}`, "stop", 1033, 17),
	)
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, testAPIKey, sleeper, nil)
	ctx := context.Background()
	goal := "Check that the tests pass."

	// Turn 0.
	msgs, err := BuildMessages(SystemPrompt, goal, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp0, err := client.Complete(ctx, Request{Model: "test-model", Messages: msgs, Tools: offeredTools})
	if err != nil {
		t.Fatalf("turn 0: %v", err)
	}
	want0 := Response{
		Model: "test-model-2025",
		Text:  "Let me look at the module first.",
		ToolCalls: []ToolCall{
			{ID: "call_a1", Name: "read_file", Arguments: `{"path":"go.mod"}`},
			{ID: "call_b2", Name: "bash", Arguments: `{"command":"go test ./..."}`},
		},
		FinishReason: "tool_calls",
		Usage:        Usage{PromptTokens: 812, CompletionTokens: 64, TotalTokens: 876},
	}
	if !reflect.DeepEqual(resp0, want0) {
		t.Fatalf("turn 0 response:\n got %+v\nwant %+v", resp0, want0)
	}

	// What the reconciler does between turns: record, store, read back, observe.
	stored, err := json.Marshal(NewTurnRecord(0, resp0))
	if err != nil {
		t.Fatal(err)
	}
	record, err := ParseTurnRecord(stored)
	if err != nil {
		t.Fatal(err)
	}
	turn0 := record.ObservedTurn(map[int]string{
		0: "module example.com/m\n\ngo 1.26\n[exit code: 0]",
		1: "ok  \texample.com/m\t0.01s\n[exit code: 0]",
	})

	// Turn 1.
	msgs, err = BuildMessages(SystemPrompt, goal, []Turn{turn0})
	if err != nil {
		t.Fatal(err)
	}
	resp1, err := client.Complete(ctx, Request{Model: "test-model", Messages: msgs, Tools: offeredTools})
	if err != nil {
		t.Fatalf("turn 1: %v", err)
	}
	want1 := Response{
		Model:        "test-model-2025",
		Text:         "The module is example.com/m and all tests pass.",
		FinishReason: "stop",
		Usage:        Usage{PromptTokens: 1033, CompletionTokens: 17, TotalTokens: 1050},
	}
	if !reflect.DeepEqual(resp1, want1) {
		t.Fatalf("turn 1 response:\n got %+v\nwant %+v", resp1, want1)
	}

	reqs := f.received()
	if len(reqs) != 2 {
		t.Fatalf("endpoint got %d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.method != http.MethodPost || r.path != "/v1/chat/completions" {
			t.Errorf("request %d: %s %s, want POST /v1/chat/completions", i, r.method, r.path)
		}
		if got := r.header.Get("Authorization"); got != "Bearer "+testAPIKey {
			t.Errorf("request %d: Authorization %q, want the API key as a bearer token", i, got)
		}
	}
	systemJSON, _ := json.Marshal(SystemPrompt)
	assertJSONEqual(t, "turn 0 request", reqs[0].body, `{
		"model":"test-model",
		"messages":[
			{"role":"system","content":`+string(systemJSON)+`},
			{"role":"user","content":"Check that the tests pass."}
		],
		"tools":`+offeredToolsJSON+`}`)
	assertJSONEqual(t, "turn 1 request", reqs[1].body, `{
		"model":"test-model",
		"messages":[
			{"role":"system","content":`+string(systemJSON)+`},
			{"role":"user","content":"Check that the tests pass."},
			{"role":"assistant","content":"Let me look at the module first.","tool_calls":[
				{"id":"call_a1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"go.mod\"}"}},
				{"id":"call_b2","type":"function","function":{"name":"bash","arguments":"{\"command\":\"go test ./...\"}"}}]},
			{"role":"tool","tool_call_id":"call_a1","content":"module example.com/m\n\ngo 1.26\n[exit code: 0]"},
			{"role":"tool","tool_call_id":"call_b2","content":"ok  \texample.com/m\t0.01s\n[exit code: 0]"}
		],
		"tools":`+offeredToolsJSON+`}`)
	if w := sleeper.recorded(); len(w) != 0 {
		t.Errorf("slept %v on a conversation without errors", w)
	}
}

// TestAssistantMessageWithoutText: a turn of tool calls only is sent without content.
func TestAssistantMessageWithoutText(t *testing.T) {
	f := newFakeEndpoint(t, okCompletion(`{"role":"assistant","content":"done"}`, "stop", 1, 1))
	client := newTestClient(t, f, "", &sleepRecorder{}, nil)
	msgs, err := BuildMessages("rules", "goal", []Turn{{Calls: []ObservedCall{
		{ToolCall: ToolCall{ID: "c1", Name: "list_dir", Arguments: `{}`}, Observed: true, Observation: "a.txt\n[exit code: 0]"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Complete(context.Background(), Request{Model: "m", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, "request", f.received()[0].body, `{"model":"m","messages":[
		{"role":"system","content":"rules"},
		{"role":"user","content":"goal"},
		{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"list_dir","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"a.txt\n[exit code: 0]"}]}`)
}

// TestToolCallWithoutIDGetsOne: servers that send no call id still give calls that
// can be paired with their observations.
func TestToolCallWithoutIDGetsOne(t *testing.T) {
	f := newFakeEndpoint(t, okCompletion(`{"role":"assistant","content":null,"tool_calls":[
		{"function":{"name":"glob","arguments":"{\"pattern\":\"*.go\"}"}},
		{"type":"function","function":{"name":"list_dir","arguments":"{}"}}]}`, "tool_calls", 5, 5))
	client := newTestClient(t, f, "", &sleepRecorder{}, nil)
	resp, err := client.Complete(context.Background(), simpleRequest())
	if err != nil {
		t.Fatal(err)
	}
	want := []ToolCall{
		{ID: "call_0", Name: "glob", Arguments: `{"pattern":"*.go"}`},
		{ID: "call_1", Name: "list_dir", Arguments: `{}`},
	}
	if !reflect.DeepEqual(resp.ToolCalls, want) || resp.Text != "" {
		t.Errorf("got text %q calls %+v, want no text and %+v", resp.Text, resp.ToolCalls, want)
	}
}

// TestRefusalIsNotText: a refusal must not look like a final answer.
func TestRefusalIsNotText(t *testing.T) {
	f := newFakeEndpoint(t, okCompletion(`{"role":"assistant","content":null,"refusal":"I can't help with that."}`, "stop", 3, 4))
	client := newTestClient(t, f, "", &sleepRecorder{}, nil)
	resp, err := client.Complete(context.Background(), simpleRequest())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "" || resp.Refusal != "I can't help with that." {
		t.Errorf("got text %q refusal %q", resp.Text, resp.Refusal)
	}
}

func TestAPIKeyIsSentAsBearerToken(t *testing.T) {
	f := newFakeEndpoint(t, okCompletion(`{"role":"assistant","content":"hi"}`, "stop", 1, 1))
	client := newTestClient(t, f, testAPIKey, &sleepRecorder{}, nil)
	if _, err := client.Complete(context.Background(), simpleRequest()); err != nil {
		t.Fatal(err)
	}
	if got := f.received()[0].header.Values("Authorization"); !reflect.DeepEqual(got, []string{"Bearer " + testAPIKey}) {
		t.Errorf("Authorization headers %q, want exactly one bearer token", got)
	}
}

// TestEmptyAPIKeySendsNoAuthorization: an endpoint without keys gets no header, and
// the SDK's environment defaults are not picked up.
func TestEmptyAPIKeySendsNoAuthorization(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment-0000")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/not-this")
	f := newFakeEndpoint(t, okCompletion(`{"role":"assistant","content":"hi"}`, "stop", 1, 1))
	client := newTestClient(t, f, "", &sleepRecorder{}, nil)
	if _, err := client.Complete(context.Background(), simpleRequest()); err != nil {
		t.Fatal(err)
	}
	if got := f.received()[0].header.Get("Authorization"); got != "" {
		t.Errorf("Authorization %q sent with an empty API key", got)
	}
}

// modelError asserts err is a *ModelError and that it leaks no secret.
func modelError(t *testing.T, err error, secrets ...string) *ModelError {
	t.Helper()
	var merr *ModelError
	if !errors.As(err, &merr) {
		t.Fatalf("error %v (%T) is not a *ModelError", err, err)
	}
	for _, s := range secrets {
		for _, text := range []string{err.Error(), merr.Message, merr.ProviderType, merr.ProviderCode} {
			if strings.Contains(text, s) {
				t.Errorf("error leaks a secret: %q", text)
			}
		}
	}
	return merr
}

// Test401IsSurfacedAndNotRetried: the provider's message is kept (masked: this
// provider echoes the whole key) and an authentication error is not retried.
func Test401IsSurfacedAndNotRetried(t *testing.T) {
	f := newFakeEndpoint(t, reply{status: http.StatusUnauthorized, body: `{"error":{
		"message":"Incorrect API key provided: ` + testAPIKey + `. You can find your API key in your account settings.",
		"type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`})
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, testAPIKey, sleeper, nil)
	_, err := client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err, testAPIKey, "Bearer "+testAPIKey)
	if merr.Kind != ErrorKindStatus || merr.StatusCode != http.StatusUnauthorized || merr.Attempts != 1 {
		t.Errorf("got kind %s status %d attempts %d, want Status 401 after 1 attempt", merr.Kind, merr.StatusCode, merr.Attempts)
	}
	wantMsg := "Incorrect API key provided: [MASKED]. You can find your API key in your account settings."
	if merr.Message != wantMsg {
		t.Errorf("message %q, want %q", merr.Message, wantMsg)
	}
	if merr.ProviderType != "invalid_request_error" || merr.ProviderCode != "invalid_api_key" {
		t.Errorf("provider type/code %q/%q", merr.ProviderType, merr.ProviderCode)
	}
	if want := "model endpoint answered HTTP 401 Unauthorized [invalid_request_error/invalid_api_key]: " + wantMsg; err.Error() != want {
		t.Errorf("error text\n got %q\nwant %q", err.Error(), want)
	}
	if merr.Temporary() {
		t.Error("a 401 is reported as temporary")
	}
	if n := len(f.received()); n != 1 {
		t.Errorf("endpoint got %d requests, want 1 (no retry)", n)
	}
	if w := sleeper.recorded(); len(w) != 0 {
		t.Errorf("slept %v before giving up on a 401", w)
	}
}

// TestKeyOfAnyShapeIsMasked: a key that matches no pattern is masked because it is
// the configured key.
func TestKeyOfAnyShapeIsMasked(t *testing.T) {
	const key = "local-dev-credential-7781"
	f := newFakeEndpoint(t, reply{status: http.StatusForbidden, body: `{"error":"key local-dev-credential-7781 may not use this model"}`})
	client := newTestClient(t, f, key, &sleepRecorder{}, nil)
	_, err := client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err, key)
	if merr.Message != "key [MASKED] may not use this model" {
		t.Errorf("message %q", merr.Message)
	}
}

func Test429ThenSuccessHonoursRetryAfter(t *testing.T) {
	f := newFakeEndpoint(t,
		reply{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "7"},
			body: `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`},
		okCompletion(`{"role":"assistant","content":"hello"}`, "stop", 10, 2),
	)
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, testAPIKey, sleeper, nil)
	resp, err := client.Complete(context.Background(), simpleRequest())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Text != "hello" || resp.Usage.TotalTokens != 12 {
		t.Errorf("response %+v", resp)
	}
	if got := sleeper.recorded(); !reflect.DeepEqual(got, []time.Duration{7 * time.Second}) {
		t.Errorf("waits %v, want [7s] from Retry-After", got)
	}
	reqs := f.received()
	if len(reqs) != 2 {
		t.Fatalf("endpoint got %d requests, want 2", len(reqs))
	}
	if string(reqs[0].body) != string(reqs[1].body) {
		t.Errorf("the retry sent a different body:\n%s\n%s", reqs[0].body, reqs[1].body)
	}
}

// TestRetryAfterForms: milliseconds, an HTTP date read with the injected clock, and
// no header (exponential backoff from InitialBackoff).
func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"seconds", map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{"milliseconds win", map[string]string{"Retry-After-Ms": "1500", "Retry-After": "9"}, 1500 * time.Millisecond},
		{"http date", map[string]string{"Retry-After": now.Add(12 * time.Second).Format(http.TimeFormat)}, 12 * time.Second},
		{"date in the past falls back to backoff", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, time.Second},
		{"garbage falls back to backoff", map[string]string{"Retry-After": "soon"}, time.Second},
		{"none", nil, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEndpoint(t,
				reply{status: http.StatusTooManyRequests, header: tt.header, body: `{"error":{"message":"slow down"}}`},
				okCompletion(`{"role":"assistant","content":"ok"}`, "stop", 1, 1),
			)
			sleeper := &sleepRecorder{}
			client := newTestClient(t, f, "", sleeper, func(c *ClientConfig) { c.Now = func() time.Time { return now } })
			if _, err := client.Complete(context.Background(), simpleRequest()); err != nil {
				t.Fatal(err)
			}
			if got := sleeper.recorded(); !reflect.DeepEqual(got, []time.Duration{tt.want}) {
				t.Errorf("waits %v, want [%v]", got, tt.want)
			}
		})
	}
}

// TestRetryAfterBeyondMaxBackoffIsReturned: the client does not block for a long
// rate limit; the caller gets the wait to requeue with.
func TestRetryAfterBeyondMaxBackoffIsReturned(t *testing.T) {
	f := newFakeEndpoint(t, reply{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "3600"},
		body: `{"error":{"message":"You exceeded your current quota"}}`})
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, "", sleeper, nil)
	_, err := client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err)
	if merr.StatusCode != http.StatusTooManyRequests || merr.RetryAfter != time.Hour || merr.Attempts != 1 || !merr.Temporary() {
		t.Errorf("got %+v, want a temporary 429 after 1 attempt with RetryAfter 1h", merr)
	}
	if w := sleeper.recorded(); len(w) != 0 {
		t.Errorf("slept %v", w)
	}
}

func Test500RetriedThenSurfaced(t *testing.T) {
	fail := reply{status: http.StatusInternalServerError, body: `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`}
	f := newFakeEndpoint(t, fail, fail, fail)
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, testAPIKey, sleeper, nil)
	_, err := client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err, testAPIKey)
	if merr.Kind != ErrorKindStatus || merr.StatusCode != 500 || merr.Attempts != 3 {
		t.Errorf("got kind %s status %d attempts %d, want Status 500 after 3 attempts", merr.Kind, merr.StatusCode, merr.Attempts)
	}
	if merr.Message != "The server had an error while processing your request." || !merr.Temporary() {
		t.Errorf("message %q temporary %v", merr.Message, merr.Temporary())
	}
	if want := "model endpoint answered HTTP 500 Internal Server Error (after 3 attempts) [server_error]: The server had an error while processing your request."; err.Error() != want {
		t.Errorf("error text\n got %q\nwant %q", err.Error(), want)
	}
	if got := sleeper.recorded(); !reflect.DeepEqual(got, []time.Duration{time.Second, 2 * time.Second}) {
		t.Errorf("waits %v, want exponential [1s 2s]", got)
	}
	if n := len(f.received()); n != 3 {
		t.Errorf("endpoint got %d requests, want 3", n)
	}
}

func TestBackoffIsCapped(t *testing.T) {
	fail := reply{status: http.StatusBadGateway, body: "<html>502 Bad Gateway</html>", header: map[string]string{"Content-Type": "text/html"}}
	f := newFakeEndpoint(t, fail, fail, fail, fail, fail)
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, "", sleeper, func(c *ClientConfig) {
		c.MaxAttempts = 5
		c.MaxBackoff = 5 * time.Second
	})
	_, err := client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err)
	if merr.Message != "<html>502 Bad Gateway</html>" || merr.Attempts != 5 {
		t.Errorf("message %q attempts %d", merr.Message, merr.Attempts)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}
	if got := sleeper.recorded(); !reflect.DeepEqual(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

// TestProviderMessageShapes: the message is found in the error bodies that
// OpenAI-compatible servers send.
func TestProviderMessageShapes(t *testing.T) {
	tests := []struct {
		name, body          string
		wantMsg, wantTypeID string
	}{
		{"openai", `{"error":{"message":"bad tools","type":"invalid_request_error","code":null}}`, "bad tools", "invalid_request_error"},
		{"numeric code (llama.cpp)", `{"error":{"code":400,"message":"tools param requires --jinja flag","type":"invalid_request_error"}}`, "tools param requires --jinja flag", "invalid_request_error/400"},
		{"error string (ollama)", `{"error":"model \"llama9\" not found, try pulling it first"}`, `model "llama9" not found, try pulling it first`, ""},
		{"top-level message (vllm)", `{"object":"error","message":"The model does not exist.","type":"NotFoundError","code":404}`, "The model does not exist.", "NotFoundError/404"},
		{"detail", `{"detail":"Not Found"}`, "Not Found", ""},
		{"plain text", "no healthy upstream\n", "no healthy upstream", ""},
		{"empty body", "", "Bad Request", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEndpoint(t, reply{status: http.StatusBadRequest, body: tt.body})
			client := newTestClient(t, f, "", &sleepRecorder{}, nil)
			_, err := client.Complete(context.Background(), simpleRequest())
			merr := modelError(t, err)
			typeID := strings.Trim(merr.ProviderType+"/"+merr.ProviderCode, "/")
			if merr.Message != tt.wantMsg || typeID != tt.wantTypeID || merr.StatusCode != 400 {
				t.Errorf("got message %q type/code %q status %d, want %q %q 400", merr.Message, typeID, merr.StatusCode, tt.wantMsg, tt.wantTypeID)
			}
		})
	}
}

func TestLongProviderMessageIsCut(t *testing.T) {
	long := strings.Repeat("é", 2000)
	f := newFakeEndpoint(t, reply{status: http.StatusBadRequest, body: `{"error":{"message":"` + long + `"}}`})
	client := newTestClient(t, f, "", &sleepRecorder{}, nil)
	_, err := client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err)
	if !strings.HasSuffix(merr.Message, "…(truncated)") || len(merr.Message) > maxErrorMessageBytes+len("…(truncated)") {
		t.Errorf("message of %d bytes is not cut with a marker", len(merr.Message))
	}
	if !strings.HasPrefix(long, strings.TrimSuffix(merr.Message, "…(truncated)")) {
		t.Error("the cut split a character")
	}
}

func TestRequestTimeout(t *testing.T) {
	f := newFakeEndpoint(t, reply{hang: true})
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, testAPIKey, sleeper, func(c *ClientConfig) { c.RequestTimeout = 100 * time.Millisecond })
	_, err := client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err, testAPIKey)
	if merr.Kind != ErrorKindTimeout || merr.Attempts != 1 || !merr.Temporary() {
		t.Errorf("got kind %s attempts %d, want a temporary Timeout after 1 attempt", merr.Kind, merr.Attempts)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("errors.Is(err, context.DeadlineExceeded) is false")
	}
	if want := "model request timed out: no answer within 100ms"; err.Error() != want {
		t.Errorf("error text %q, want %q", err.Error(), want)
	}
	if n := len(f.received()); n != 1 {
		t.Errorf("endpoint got %d requests, want 1 (timeouts are not retried)", n)
	}
}

func TestCallerCancellationStopsRetries(t *testing.T) {
	f := newFakeEndpoint(t, reply{status: http.StatusServiceUnavailable, body: `{"error":{"message":"overloaded"}}`})
	ctx, cancel := context.WithCancel(context.Background())
	client := newTestClient(t, f, "", &sleepRecorder{}, func(c *ClientConfig) {
		c.Sleep = func(context.Context, time.Duration) error {
			cancel() // the reconciler shuts down while we wait
			return context.Canceled
		}
	})
	_, err := client.Complete(ctx, simpleRequest())
	merr := modelError(t, err)
	if merr.Kind != ErrorKindCanceled || !errors.Is(err, context.Canceled) || merr.Attempts != 1 {
		t.Errorf("got %v (kind %s, attempts %d), want Canceled after 1 attempt", err, merr.Kind, merr.Attempts)
	}
	if f.unserved() != 0 || len(f.received()) != 1 {
		t.Errorf("endpoint got %d requests, want 1", len(f.received()))
	}
}

func TestDroppedConnectionIsRetried(t *testing.T) {
	f := newFakeEndpoint(t, reply{dropConnection: true}, okCompletion(`{"role":"assistant","content":"back"}`, "stop", 1, 1))
	sleeper := &sleepRecorder{}
	client := newTestClient(t, f, "", sleeper, nil)
	resp, err := client.Complete(context.Background(), simpleRequest())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Text != "back" || len(f.received()) != 2 {
		t.Errorf("text %q after %d requests", resp.Text, len(f.received()))
	}
	if got := sleeper.recorded(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
		t.Errorf("waits %v, want [1s]", got)
	}
}

func TestUnreachableEndpoint(t *testing.T) {
	f := newFakeEndpoint(t)
	base := f.baseURL()
	f.server.Close()
	client, err := NewClient(ClientConfig{BaseURL: base, APIKey: testAPIKey, MaxAttempts: 2, Sleep: (&sleepRecorder{}).sleep})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Complete(context.Background(), simpleRequest())
	merr := modelError(t, err, testAPIKey)
	if merr.Kind != ErrorKindTransport || merr.StatusCode != 0 || merr.Attempts != 2 || merr.Message == "" {
		t.Errorf("got %+v, want Transport with a message after 2 attempts", merr)
	}
}

func TestUnusableAnswers(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"no choices", `{"id":"x","object":"chat.completion","model":"m","choices":[]}`},
		{"not JSON", `{"id":`},
		{"custom tool call", `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"x","input":"y"}}]}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEndpoint(t, reply{status: http.StatusOK, body: tt.body})
			client := newTestClient(t, f, "", &sleepRecorder{}, nil)
			_, err := client.Complete(context.Background(), simpleRequest())
			merr := modelError(t, err)
			if merr.Kind != ErrorKindInvalidResponse || merr.Attempts != 1 {
				t.Errorf("got kind %s after %d attempts: %v", merr.Kind, merr.Attempts, err)
			}
		})
	}
}

// TestInvalidRequestsAreNotSent: mistakes of the caller are reported precisely and
// nothing reaches the endpoint.
func TestInvalidRequestsAreNotSent(t *testing.T) {
	msgs := simpleRequest().Messages
	tests := []struct {
		name    string
		req     Request
		wantErr string
	}{
		{"no model", Request{Messages: msgs}, "request.model is empty"},
		{"no messages", Request{Model: "m"}, "request.messages is empty"},
		{"schema not JSON", Request{Model: "m", Messages: msgs, Tools: []Tool{{Name: "t", Schema: `{"type":`}}}, "request.tools[0] (t).schema: not a JSON object"},
		{"schema not an object", Request{Model: "m", Messages: msgs, Tools: []Tool{{Name: "t", Schema: `["a"]`}}}, "request.tools[0] (t).schema: not a JSON object"},
		{"schema null", Request{Model: "m", Messages: msgs, Tools: []Tool{{Name: "t", Schema: `null`}}}, "request.tools[0] (t).schema: not a JSON object: null"},
		{"schema trailing data", Request{Model: "m", Messages: msgs, Tools: []Tool{{Name: "t", Schema: `{} {}`}}}, "trailing data"},
		{"tool without name", Request{Model: "m", Messages: msgs, Tools: []Tool{{Schema: `{}`}}}, "request.tools[0].name is empty"},
		{"tool twice", Request{Model: "m", Messages: msgs, Tools: []Tool{{Name: "t"}, {Name: "t"}}}, `request.tools[1]: tool "t" is offered twice`},
		{"unknown role", Request{Model: "m", Messages: []Message{{Role: "developer", Content: "x"}}}, `request.messages[0]: unknown role "developer"`},
		{"tool message without id", Request{Model: "m", Messages: []Message{{Role: RoleTool, Content: "x"}}}, "request.messages[0]: tool message has no toolCallID"},
		{"tool calls on a user message", Request{Model: "m", Messages: []Message{{Role: RoleUser, ToolCalls: []ToolCall{{ID: "a"}}}}}, `role "user" cannot carry tool calls`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEndpoint(t)
			client := newTestClient(t, f, "", &sleepRecorder{}, nil)
			_, err := client.Complete(context.Background(), tt.req)
			merr := modelError(t, err)
			if merr.Kind != ErrorKindInvalidRequest || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %q (kind %s), want InvalidRequest containing %q", err, merr.Kind, tt.wantErr)
			}
			if n := len(f.received()); n != 0 {
				t.Errorf("%d requests were sent", n)
			}
		})
	}
}

// TestSchemaNumbersKeptExact: schema numbers reach the wire as written.
func TestSchemaNumbersKeptExact(t *testing.T) {
	f := newFakeEndpoint(t, okCompletion(`{"role":"assistant","content":"ok"}`, "stop", 1, 1))
	client := newTestClient(t, f, "", &sleepRecorder{}, nil)
	schema := `{"type":"object","properties":{"n":{"type":"integer","maximum":9007199254740993}}}`
	req := simpleRequest()
	req.Tools = []Tool{{Name: "big", Schema: schema}, {Name: "noargs", Description: "takes nothing"}}
	if _, err := client.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	body := string(f.received()[0].body)
	if !strings.Contains(body, `9007199254740993`) {
		t.Errorf("the schema number was changed on the wire: %s", body)
	}
	var sent struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal([]byte(body), &sent); err != nil || len(sent.Tools) != 2 {
		t.Fatalf("tools on the wire: %v %s", err, body)
	}
	assertJSONEqual(t, "tool without a schema", sent.Tools[1], `{"type":"function","function":{"name":"noargs","description":"takes nothing"}}`)
}

func TestNewClientRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ClientConfig
		wantErr string
	}{
		{"empty base URL", ClientConfig{}, "baseURL is empty"},
		{"no scheme", ClientConfig{BaseURL: "llm.internal:8000/v1"}, "not supported"},
		{"ftp", ClientConfig{BaseURL: "ftp://llm/v1"}, `scheme "ftp" is not supported`},
		{"no host", ClientConfig{BaseURL: "http:///v1"}, "baseURL has no host"},
		{"negative timeout", ClientConfig{BaseURL: "http://llm/v1", RequestTimeout: -time.Second}, "must not be negative"},
		{"negative attempts", ClientConfig{BaseURL: "http://llm/v1", MaxAttempts: -1}, "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewClient(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
