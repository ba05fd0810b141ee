package console

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// changingBackend is a staticBackend whose pending list the test changes.
type changingBackend struct {
	staticBackend
	mu   sync.Mutex
	rows []ApprovalRow
}

func (b *changingBackend) Pending(context.Context) ([]ApprovalRow, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ApprovalRow(nil), b.rows...), nil
}

// TestEventsSendTheListAgainAfterAChange: the event stream sends the pending list
// at once, and again, rendered afresh, after the backend says an approval changed.
func TestEventsSendTheListAgainAfterAChange(t *testing.T) {
	b := &changingBackend{}
	srv, err := New(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+srv.Addr().String()+"/events?token="+srv.Token(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	// next reads one event's data.
	next := func() string {
		var data []string
		for lines.Scan() {
			line := lines.Text()
			if line == "" {
				return strings.Join(data, "\n")
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = append(data, d)
			}
		}
		t.Fatalf("the stream ended: %v", lines.Err())
		return ""
	}
	if first := next(); !strings.Contains(first, "No pending approvals.") {
		t.Fatalf("first event: %s", first)
	}
	b.mu.Lock()
	b.rows = []ApprovalRow{{Namespace: "team-a", Name: "fix-tests-<b>build</b>", Tool: "bash"}}
	b.mu.Unlock()
	srv.notify()
	second := next()
	if !strings.Contains(second, `data-name="team-a/fix-tests-&lt;b&gt;build&lt;/b&gt;"`) || strings.Contains(second, "<b>") {
		t.Fatalf("after the change, the event is (escaped?):\n%s", second)
	}
}
