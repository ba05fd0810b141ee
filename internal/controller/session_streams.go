package controller

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/toolgate/toolgate/internal/protocol"
)

// boundedBuffer keeps the first limit bytes written to it and drops the rest. It
// is locked: an exec cut at its deadline may return before its stream's copiers
// stop writing.
type boundedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Bytes is a copy of what was kept.
func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// startedWriter is a background job's stderr: its first line, when it is the
// runner's protocol.Started, reports the job's runner; the rest is the Result.
type startedWriter struct {
	mu      sync.Mutex
	line    []byte
	done    bool
	rest    boundedBuffer
	started func()
}

// flush keeps a first line that never ended (the runner failed before the job
// started, and sent only its Result) as the Result.
func (w *startedWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.done = true
		_, _ = w.rest.Write(w.line)
	}
}

func (w *startedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if !w.done {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(w.line)+len(p) > maxResultBytes {
				// No runner's line is this long: it is the Result.
				w.done = true
				_, _ = w.rest.Write(w.line)
				_, _ = w.rest.Write(p)
				return n, nil
			}
			w.line = append(w.line, p...)
			return n, nil
		}
		w.line, p = append(w.line, p[:i]...), p[i+1:]
		w.done = true
		var st protocol.Started
		if json.Unmarshal(w.line, &st) == nil && st.Started {
			w.started()
		} else {
			_, _ = w.rest.Write(append(w.line, '\n'))
		}
	}
	_, _ = w.rest.Write(p)
	return n, nil
}
