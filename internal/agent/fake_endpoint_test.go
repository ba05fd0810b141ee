package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"
)

// reply is one scripted answer of the fake endpoint.
type reply struct {
	status int
	header map[string]string
	body   string
	// hang blocks until the client gives up on the request.
	hang bool
	// dropConnection closes the connection without any HTTP answer.
	dropConnection bool
}

// received is one request as the fake endpoint saw it.
type received struct {
	method, path string
	header       http.Header
	body         []byte
}

// fakeEndpoint is an in-process server speaking the Chat Completions wire format,
// answering from a script, one reply per request, and recording every request.
type fakeEndpoint struct {
	t      *testing.T
	server *httptest.Server

	mu       sync.Mutex
	script   []reply
	requests []received
}

func newFakeEndpoint(t *testing.T, script ...reply) *fakeEndpoint {
	t.Helper()
	f := &fakeEndpoint{t: t, script: script}
	f.server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.server.Close)
	return f
}

// baseURL is the API root the client is configured with.
func (f *fakeEndpoint) baseURL() string { return f.server.URL + "/v1" }

func (f *fakeEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, received{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body})
	if len(f.script) == 0 {
		f.mu.Unlock()
		f.t.Errorf("fake endpoint: unexpected request %d to %s", len(f.requests), r.URL.Path)
		http.Error(w, `{"error":{"message":"unexpected request"}}`, http.StatusTeapot)
		return
	}
	next := f.script[0]
	f.script = f.script[1:]
	f.mu.Unlock()

	switch {
	case next.hang:
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
			f.t.Errorf("fake endpoint: the client never gave up on a hanging request")
		}
		return
	case next.dropConnection:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.t.Errorf("fake endpoint: hijack: %v", err)
			return
		}
		_ = conn.Close()
		return
	}
	for k, v := range next.header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(next.status)
	_, _ = io.WriteString(w, next.body)
}

// received returns the requests seen so far.
func (f *fakeEndpoint) received() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.requests...)
}

// unserved reports how many scripted replies were never used.
func (f *fakeEndpoint) unserved() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.script)
}

// sleepRecorder is an injected Sleep: it records each wait and returns at once
// (or with the context's error if it already ended).
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, d)
	return ctx.Err()
}

func (s *sleepRecorder) recorded() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// assertJSONEqual compares two JSON documents by value (key order and spacing do
// not matter, everything else does).
func assertJSONEqual(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: the expected value is not JSON: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s differs.\n got: %s\nwant: %s", what, indentJSON(got), indentJSON([]byte(want)))
	}
}

func indentJSON(data []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, data, "      ", "  "); err != nil {
		return string(data)
	}
	return out.String()
}
