package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ErrorKind says what went wrong with a model call.
type ErrorKind string

const (
	// ErrorKindInvalidRequest: the request could not be built (no model name, a tool
	// schema that is not a JSON object, a message with an unknown role). Nothing was
	// sent; fix the caller.
	ErrorKindInvalidRequest ErrorKind = "InvalidRequest"
	// ErrorKindStatus: the endpoint answered with an HTTP error status.
	ErrorKindStatus ErrorKind = "Status"
	// ErrorKindTimeout: an attempt ran longer than the request timeout.
	ErrorKindTimeout ErrorKind = "Timeout"
	// ErrorKindTransport: no HTTP answer at all (connection refused or reset, DNS, TLS).
	ErrorKindTransport ErrorKind = "Transport"
	// ErrorKindCanceled: the caller's context ended before the call finished.
	ErrorKindCanceled ErrorKind = "Canceled"
	// ErrorKindInvalidResponse: the endpoint answered 2xx with something toolgate
	// cannot use (unparsable JSON, no choices, a tool call that is not a function).
	ErrorKindInvalidResponse ErrorKind = "InvalidResponse"
)

// ModelError is the error every [Client.Complete] failure returns. Its text and
// fields never contain the API key, an Authorization header or other recognizable
// secrets: everything that comes from the provider or the transport is masked.
type ModelError struct {
	// Kind classifies the failure.
	Kind ErrorKind
	// StatusCode is the HTTP status of the last answer; 0 when there was none.
	StatusCode int
	// Message is the provider's error message (or the transport's), secrets masked.
	Message string
	// ProviderType and ProviderCode are the provider's error type and code when it
	// sent them (for example "invalid_request_error", "rate_limit_exceeded").
	ProviderType string
	ProviderCode string
	// Attempts is how many HTTP requests were made, retries included.
	Attempts int
	// RetryAfter is the wait the provider asked for in its last answer, if any. A
	// caller that gives up on a rate limit can requeue after it.
	RetryAfter time.Duration
	// cause lets errors.Is find context.DeadlineExceeded or context.Canceled.
	cause error
}

// Error says what failed, with the status and the provider's message.
func (e *ModelError) Error() string {
	var b strings.Builder
	switch e.Kind {
	case ErrorKindStatus:
		fmt.Fprintf(&b, "model endpoint answered HTTP %d", e.StatusCode)
		if text := http.StatusText(e.StatusCode); text != "" {
			fmt.Fprintf(&b, " %s", text)
		}
	case ErrorKindTimeout:
		b.WriteString("model request timed out")
	case ErrorKindTransport:
		b.WriteString("model endpoint unreachable")
	case ErrorKindCanceled:
		b.WriteString("model request canceled")
	case ErrorKindInvalidResponse:
		b.WriteString("model endpoint sent an unusable response")
	case ErrorKindInvalidRequest:
		b.WriteString("invalid model request")
	default:
		b.WriteString("model request failed")
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if e.ProviderType != "" || e.ProviderCode != "" {
		fmt.Fprintf(&b, " [%s]", strings.Trim(e.ProviderType+"/"+e.ProviderCode, "/"))
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

// Unwrap exposes context.DeadlineExceeded for timeouts and the context's error for
// cancellations, and nothing else: the underlying transport error may carry the
// request URL unmasked.
func (e *ModelError) Unwrap() error { return e.cause }

// Temporary reports whether the same request may succeed later: rate limits, server
// errors, timeouts and unreachable endpoints. Invalid requests, authentication and
// other client errors will fail again until something is changed.
func (e *ModelError) Temporary() bool {
	switch e.Kind {
	case ErrorKindTimeout, ErrorKindTransport:
		return true
	case ErrorKindStatus:
		return retryableStatus(e.StatusCode)
	}
	return false
}

// retryableStatus: rate limits and server-side failures are worth another attempt.
func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500
}

// canceledError reports that the caller's context ended.
func canceledError(ctx context.Context, attempts int) *ModelError {
	return &ModelError{Kind: ErrorKindCanceled, Message: ctx.Err().Error(), Attempts: attempts, cause: ctx.Err()}
}
