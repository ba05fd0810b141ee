package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/toolgate/toolgate/internal/mask"
)

// Defaults for a zero [ClientConfig] field.
const (
	DefaultRequestTimeout = 120 * time.Second
	DefaultMaxAttempts    = 4
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
)

// maxErrorBodyBytes bounds how much of an error answer is read to find the message.
const maxErrorBodyBytes = 64 << 10

// maxErrorMessageBytes bounds the provider message kept in a ModelError.
const maxErrorMessageBytes = 1024

// ClientConfig configures a [Client]. Only BaseURL is required.
type ClientConfig struct {
	// BaseURL is the endpoint's API root, the part before /chat/completions, for
	// example https://api.openai.com/v1, http://vllm:8000/v1, http://ollama:11434/v1.
	BaseURL string
	// APIKey is sent as a bearer token. Empty sends no Authorization header, for
	// endpoints that need none. The environment is never consulted.
	APIKey string
	// RequestTimeout bounds one attempt. Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxAttempts bounds the HTTP requests of one Complete call, the first included.
	// Default DefaultMaxAttempts; 1 disables retries.
	MaxAttempts int
	// InitialBackoff is the wait before the first retry; it doubles with each retry
	// up to MaxBackoff. Default DefaultInitialBackoff.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between attempts. A Retry-After longer than this ends
	// the retries at once: the error carries RetryAfter so the caller can requeue
	// instead of blocking. Default DefaultMaxBackoff.
	MaxBackoff time.Duration
	// HTTPClient sends the requests. Default: a new http.Client on the default
	// transport. Its own Timeout, if any, applies on top of RequestTimeout.
	HTTPClient *http.Client
	// Sleep waits between attempts; it must return early with an error when ctx ends.
	// Default: a timer. Tests inject one that records the waits and returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock used to read a Retry-After given as an HTTP date.
	// Default time.Now.
	Now func() time.Time
}

// Client is a [Model] for OpenAI-compatible Chat Completions endpoints (OpenAI,
// vLLM, llama.cpp's server, Ollama), built on the official openai-go SDK. The SDK's
// own retries are off: Client retries 429 and 5xx answers and failed connections
// with exponential backoff, honouring Retry-After, through the injected Sleep.
// Timeouts are not retried: a model that did not answer within RequestTimeout is
// reported so the caller decides. A Client is safe for concurrent use.
type Client struct {
	cfg  ClientConfig
	chat openai.ChatCompletionService
}

var _ Model = (*Client)(nil)

// NewClient checks cfg, fills in the defaults and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	switch {
	case cfg.BaseURL == "":
		return nil, errors.New("agent: baseURL is empty: set the endpoint's API root, for example https://api.openai.com/v1")
	case err != nil:
		return nil, fmt.Errorf("agent: baseURL is not a URL: %s", mask.Secrets(err.Error(), cfg.APIKey))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("agent: baseURL scheme %q is not supported: use http or https", u.Scheme)
	case u.Host == "":
		return nil, errors.New("agent: baseURL has no host")
	case cfg.RequestTimeout < 0, cfg.MaxAttempts < 0, cfg.InitialBackoff < 0, cfg.MaxBackoff < 0:
		return nil, errors.New("agent: requestTimeout, maxAttempts, initialBackoff and maxBackoff must not be negative (zero means the default)")
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.InitialBackoff == 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepContext
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	// The service, unlike openai.NewClient, reads no OPENAI_* environment variables:
	// a controller must send exactly the key of the task it works for.
	return &Client{cfg: cfg, chat: openai.NewChatCompletionService(opts...)}, nil
}

// Complete sends req and returns the model's reply. Every error is a *ModelError.
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	params, err := chatParams(req)
	if err != nil {
		return Response{}, &ModelError{Kind: ErrorKindInvalidRequest, Message: err.Error()}
	}
	for attempt := 1; ; attempt++ {
		resp, merr := c.attempt(ctx, params)
		if merr == nil {
			return resp, nil
		}
		merr.Attempts = attempt
		if !c.retryable(merr) || attempt >= c.cfg.MaxAttempts {
			return Response{}, merr
		}
		wait := c.backoff(attempt)
		if merr.RetryAfter > 0 {
			if merr.RetryAfter > c.cfg.MaxBackoff {
				return Response{}, merr
			}
			wait = merr.RetryAfter
		}
		if err := c.cfg.Sleep(ctx, wait); err != nil {
			return Response{}, canceledError(ctx, attempt)
		}
	}
}

// retryable: rate limits, server errors and failed connections get another attempt.
func (c *Client) retryable(e *ModelError) bool {
	switch e.Kind {
	case ErrorKindStatus:
		return retryableStatus(e.StatusCode)
	case ErrorKindTransport:
		return true
	}
	return false
}

// backoff is the wait after the given failed attempt: InitialBackoff doubled per
// retry, capped at MaxBackoff.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.InitialBackoff
	for i := 1; i < attempt && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxBackoff)
}

// attempt makes one HTTP request within RequestTimeout.
func (c *Client) attempt(ctx context.Context, params openai.ChatCompletionNewParams) (Response, *ModelError) {
	attemptCtx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	var httpResp *http.Response
	completion, err := c.chat.New(attemptCtx, params, option.WithResponseInto(&httpResp))
	switch {
	case err == nil:
		return fromCompletion(completion)
	case ctx.Err() != nil:
		return Response{}, canceledError(ctx, 0)
	case errors.Is(attemptCtx.Err(), context.DeadlineExceeded):
		return Response{}, &ModelError{
			Kind:    ErrorKindTimeout,
			Message: fmt.Sprintf("no answer within %s", c.cfg.RequestTimeout),
			cause:   context.DeadlineExceeded,
		}
	case httpResp != nil && httpResp.StatusCode >= 400:
		return Response{}, c.statusError(httpResp)
	case httpResp != nil:
		return Response{}, &ModelError{
			Kind:       ErrorKindInvalidResponse,
			StatusCode: httpResp.StatusCode,
			Message:    c.mask(err.Error()),
		}
	default:
		return Response{}, &ModelError{Kind: ErrorKindTransport, Message: c.mask(err.Error())}
	}
}

// mask removes the configured key and any recognizable secret from s.
func (c *Client) mask(s string) string { return mask.Secrets(s, c.cfg.APIKey) }

// statusError reads the provider's message and Retry-After from an error answer.
func (c *Client) statusError(resp *http.Response) *ModelError {
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		_ = resp.Body.Close()
	}
	msg, typ, code := providerMessage(body)
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &ModelError{
		Kind:         ErrorKindStatus,
		StatusCode:   resp.StatusCode,
		Message:      c.mask(truncateUTF8(msg, maxErrorMessageBytes)),
		ProviderType: c.mask(truncateUTF8(typ, 128)),
		ProviderCode: c.mask(truncateUTF8(code, 128)),
		RetryAfter:   retryAfter(resp.Header, c.cfg.Now()),
	}
}

// providerMessage finds the error message in the body shapes OpenAI-compatible
// servers use: {"error":{"message":...}} (OpenAI, llama.cpp, vLLM, Ollama's /v1),
// {"error":"..."}, {"message":...} (older vLLM) and {"detail":"..."}. Anything else
// is returned as text.
func providerMessage(body []byte) (msg, typ, code string) {
	var envelope struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Type    json.RawMessage `json:"type"`
		Code    json.RawMessage `json:"code"`
		Detail  json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		return strings.TrimSpace(string(body)), "", ""
	}
	var nested struct {
		Message json.RawMessage `json:"message"`
		Type    json.RawMessage `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if len(envelope.Error) > 0 && json.Unmarshal(envelope.Error, &nested) == nil && len(nested.Message) > 0 {
		return jsonText(nested.Message), jsonText(nested.Type), jsonText(nested.Code)
	}
	for _, candidate := range []json.RawMessage{envelope.Error, envelope.Message, envelope.Detail} {
		if text := jsonText(candidate); text != "" {
			return text, jsonText(envelope.Type), jsonText(envelope.Code)
		}
	}
	return strings.TrimSpace(string(body)), "", ""
}

// jsonText renders a JSON string without quotes and any other value as JSON.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// retryAfter reads Retry-After-Ms (milliseconds, sent by OpenAI) or Retry-After
// (seconds or an HTTP date). It returns 0 when neither is usable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs > 0 {
			return time.Duration(secs * float64(time.Second))
		}
		return 0
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// chatParams converts a Request into the SDK's parameters.
func chatParams(req Request) (openai.ChatCompletionNewParams, error) {
	if req.Model == "" {
		return openai.ChatCompletionNewParams{}, errors.New("request.model is empty: set the model name the endpoint serves")
	}
	if len(req.Messages) == 0 {
		return openai.ChatCompletionNewParams{}, errors.New("request.messages is empty: build the conversation with BuildMessages")
	}
	params := openai.ChatCompletionNewParams{Model: req.Model}
	for i, m := range req.Messages {
		msg, err := messageParam(m)
		if err != nil {
			return openai.ChatCompletionNewParams{}, fmt.Errorf("request.messages[%d]: %w", i, err)
		}
		params.Messages = append(params.Messages, msg)
	}
	seen := map[string]bool{}
	for i, t := range req.Tools {
		if t.Name == "" {
			return openai.ChatCompletionNewParams{}, fmt.Errorf("request.tools[%d].name is empty", i)
		}
		if seen[t.Name] {
			return openai.ChatCompletionNewParams{}, fmt.Errorf("request.tools[%d]: tool %q is offered twice", i, t.Name)
		}
		seen[t.Name] = true
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		if t.Schema != "" {
			schema, err := schemaObject(t.Schema)
			if err != nil {
				return openai.ChatCompletionNewParams{}, fmt.Errorf("request.tools[%d] (%s).schema: %w", i, t.Name, err)
			}
			fn.Parameters = schema
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return params, nil
}

// schemaObject parses a JSON Schema that must be an object. Each top-level value is
// kept as raw JSON so that the schema reaches the wire exactly as written (numbers
// included).
func schemaObject(schema string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(schema))
	var members map[string]json.RawMessage
	if err := dec.Decode(&members); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if members == nil {
		return nil, errors.New("not a JSON object: null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON object")
	}
	obj := make(map[string]any, len(members))
	for k, v := range members {
		obj[k] = v
	}
	return obj, nil
}

// messageParam converts one Message into the SDK's union.
func messageParam(m Message) (openai.ChatCompletionMessageParamUnion, error) {
	if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("role %q cannot carry tool calls; only assistant messages do", m.Role)
	}
	switch m.Role {
	case RoleSystem:
		return openai.SystemMessage(m.Content), nil
	case RoleUser:
		return openai.UserMessage(m.Content), nil
	case RoleTool:
		if m.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, errors.New("tool message has no toolCallID")
		}
		return openai.ToolMessage(m.Content, m.ToolCallID), nil
	case RoleAssistant:
		var a openai.ChatCompletionAssistantMessageParam
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(m.Content)
		}
		for _, tc := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: tc.Arguments,
					},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q: use system, user, assistant or tool", m.Role)
	}
}

// fromCompletion converts the SDK's answer into a Response.
func fromCompletion(cc *openai.ChatCompletion) (Response, *ModelError) {
	if cc == nil || len(cc.Choices) == 0 {
		return Response{}, &ModelError{Kind: ErrorKindInvalidResponse, StatusCode: http.StatusOK, Message: "the answer has no choices"}
	}
	choice := cc.Choices[0]
	resp := Response{
		Model:        cc.Model,
		Text:         choice.Message.Content,
		Refusal:      choice.Message.Refusal,
		FinishReason: choice.FinishReason,
		Usage: Usage{
			PromptTokens:     cc.Usage.PromptTokens,
			CompletionTokens: cc.Usage.CompletionTokens,
			TotalTokens:      cc.Usage.TotalTokens,
		},
	}
	for i, tc := range choice.Message.ToolCalls {
		// Some servers omit "type"; only the function form is ever offered.
		if tc.Type != "" && tc.Type != "function" {
			return Response{}, &ModelError{
				Kind:       ErrorKindInvalidResponse,
				StatusCode: http.StatusOK,
				Message:    fmt.Sprintf("tool call %d has type %q; only function tools are offered", i, truncateUTF8(tc.Type, 64)),
			}
		}
		id := tc.ID
		if id == "" {
			// A few local servers send no id; the conversation needs one to pair the
			// call with its observation, and it only has to be unique within the turn.
			id = fmt.Sprintf("call_%d", i)
		}
		resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: id, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return resp, nil
}

// truncateUTF8 cuts s to at most n bytes on a rune boundary and says so.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(truncated)"
}

// sleepContext waits d or until ctx ends.
func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
