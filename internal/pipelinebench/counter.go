//go:build pipelinebench

package pipelinebench

import (
	"net/http"
	"sort"
	"strings"
	"sync"
)

// apiCall is one request the counted client made, in the order its response came.
type apiCall struct {
	write    bool
	key      string // "POST jobs", "PUT toolintents/status"
	resource string
}

// callCounter is a client-side round tripper that records every request the
// controller makes: writes (POST, PUT, PATCH, DELETE) by method and resource, and
// reads (GET, LIST; watches excluded) as a total.
type callCounter struct {
	mu    sync.Mutex
	calls []apiCall
	reads int
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap is a rest.Config WrapTransport.
func (c *callCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		c.record(req)
		return resp, err
	})
}

func (c *callCounter) record(req *http.Request) {
	res := resourceOf(req.URL.Path)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		c.calls = append(c.calls, apiCall{write: true, key: req.Method + " " + res, resource: res})
	default:
		if req.URL.Query().Get("watch") != "true" {
			c.reads++
		}
	}
}

// mark returns a position in the record.
func (c *callCounter) mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// writesUntilJob returns the writes recorded from position from up to and including
// the first Job create after it, by key, and whether a Job create was found.
func (c *callCounter) writesUntilJob(from int) (map[string]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, call := range c.calls[from:] {
		if !call.write {
			continue
		}
		out[call.key]++
		if call.key == "POST jobs" {
			return out, true
		}
	}
	return out, false
}

// writesBetween returns the writes recorded from position from up to position to,
// by key.
func (c *callCounter) writesBetween(from, to int) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, call := range c.calls[from:to] {
		if call.write {
			out[call.key]++
		}
	}
	return out
}

// readCount returns the reads recorded so far.
func (c *callCounter) readCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// resourceOf turns an API path into its resource, with the subresource when there
// is one: /apis/toolgate.dev/v1alpha1/namespaces/ns/toolintents/x/status is
// "toolintents/status".
func resourceOf(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	for i := range seg {
		if seg[i] == "namespaces" && len(seg) > i+2 {
			rest = seg[i+2:]
			break
		}
	}
	if rest == nil {
		switch {
		case len(seg) > 2 && seg[0] == "api":
			rest = seg[2:]
		case len(seg) > 3 && seg[0] == "apis":
			rest = seg[3:]
		default:
			return path
		}
	}
	if len(rest) >= 3 {
		return rest[0] + "/" + rest[2]
	}
	return rest[0]
}

// sortedKeys returns m's keys, the largest count first.
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}
