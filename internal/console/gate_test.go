package console

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// staticBackend answers with fixed pages and records the decisions it is asked
// for: what these tests check is the gate in front of it, not the cluster behind.
type staticBackend struct {
	mu      sync.Mutex
	decided []string
}

func (b *staticBackend) Pending(context.Context) ([]ApprovalRow, error) {
	return []ApprovalRow{{Namespace: "team-a", Name: "fix-tests-build", Tool: "bash"}}, nil
}

func (b *staticBackend) Approval(_ context.Context, ns, name string) (ApprovalPage, error) {
	return ApprovalPage{Namespace: ns, Name: name, Request: "Approval " + ns + "/" + name}, nil
}

func (b *staticBackend) Decide(_ context.Context, ns, name, _ string, approve bool, comment string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.decided = append(b.decided, fmt.Sprintf("%s/%s approve=%v %q", ns, name, approve, comment))
	return "recorded", nil
}

func (b *staticBackend) decisions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.decided...)
}

func (b *staticBackend) Tasks(context.Context) ([]TaskRow, error) { return nil, nil }

func (b *staticBackend) Task(_ context.Context, ns, name string) (TaskPage, error) {
	return TaskPage{Namespace: ns, Name: name}, nil
}

func (b *staticBackend) WatchApprovals(ctx context.Context, _ func()) error {
	<-ctx.Done()
	return ctx.Err()
}

// startServer serves a console on a real loopback listener until the test ends.
func startServer(t *testing.T) (*Server, *staticBackend) {
	t.Helper()
	b := &staticBackend{}
	srv, err := New(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, b
}

func TestRefusal(t *testing.T) {
	const token, port = "the-token", 8765
	own := "http://127.0.0.1:8765"
	form := func(v url.Values) io.Reader { return strings.NewReader(v.Encode()) }
	tests := []struct {
		name    string
		method  string
		target  string
		host    string
		headers map[string]string
		body    io.Reader
		// want is a piece of the refusal, "" when the request passes.
		want string
	}{
		{name: "token in the query", method: "GET", target: "/?token=the-token", host: "127.0.0.1:8765"},
		{name: "localhost by name", method: "GET", target: "/?token=the-token", host: "localhost:8765"},
		{name: "token in the header", method: "GET", target: "/", host: "127.0.0.1:8765", headers: map[string]string{TokenHeader: token}},
		{name: "own origin", method: "GET", target: "/?token=the-token", host: "127.0.0.1:8765", headers: map[string]string{"Origin": own}},
		{name: "no token", method: "GET", target: "/", host: "127.0.0.1:8765", want: "carries no console token"},
		{name: "wrong token", method: "GET", target: "/?token=the-tokeN", host: "127.0.0.1:8765", want: "token is wrong"},
		{name: "a token's prefix", method: "GET", target: "/?token=the-", host: "127.0.0.1:8765", want: "token is wrong"},
		{name: "rebound name", method: "GET", target: "/?token=the-token", host: "attacker.example:8765", want: `Host header "attacker.example:8765"`},
		{name: "another port", method: "GET", target: "/?token=the-token", host: "127.0.0.1:8766", want: "is not the console's address"},
		{name: "no port", method: "GET", target: "/?token=the-token", host: "127.0.0.1", want: "is not the console's address"},
		{name: "foreign origin", method: "GET", target: "/?token=the-token", host: "127.0.0.1:8765", headers: map[string]string{"Origin": "http://attacker.example"}, want: `Origin "http://attacker.example"`},
		{name: "origin on another port", method: "GET", target: "/?token=the-token", host: "127.0.0.1:8765", headers: map[string]string{"Origin": "http://127.0.0.1:9999"}, want: "another site"},
		{name: "null origin", method: "GET", target: "/?token=the-token", host: "127.0.0.1:8765", headers: map[string]string{"Origin": "null"}, want: "another site"},
		{name: "cross-site fetch", method: "GET", target: "/?token=the-token", host: "127.0.0.1:8765", headers: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: "Sec-Fetch-Site"},
		{name: "post with the token in the form", method: "POST", target: "/approvals/a/b", host: "127.0.0.1:8765",
			headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": own}, body: form(url.Values{"token": {token}})},
		{name: "post with the token in the header", method: "POST", target: "/approvals/a/b", host: "127.0.0.1:8765", headers: map[string]string{TokenHeader: token}},
		{name: "post with the token in the URL only", method: "POST", target: "/approvals/a/b?token=the-token", host: "127.0.0.1:8765",
			headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: form(url.Values{"decision": {"approve"}}), want: "carries no console token"},
		{name: "post with a cookie only", method: "POST", target: "/approvals/a/b", host: "127.0.0.1:8765",
			headers: map[string]string{"Cookie": "token=the-token"}, want: "carries no console token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(tt.method, tt.target, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			r.Host = tt.host
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			got := Refusal(r, token, port)
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Fatalf("Refusal = %q; want it to contain %q", got, tt.want)
			}
		})
	}
}

// send makes one request to the server, as a browser or another program would.
func send(t *testing.T, srv *Server, method, target string, headers map[string]string, body string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(method, "http://"+srv.Addr().String()+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Errorf("%s %s answered with %s: the console sends no CORS header", method, target, k)
		}
	}
	return resp.StatusCode, string(b)
}

// TestServerRefusesWhatTheGateRefuses talks to a real console: what the gate
// refuses gets 403 and nothing of the page, and a refused write reaches no decision.
func TestServerRefusesWhatTheGateRefuses(t *testing.T) {
	srv, b := startServer(t)
	tok := "?token=" + srv.Token()
	port := srv.Addr().(*net.TCPAddr).Port
	own := fmt.Sprintf("http://127.0.0.1:%d", port)
	formType := "application/x-www-form-urlencoded"

	code, body := send(t, srv, "GET", "/"+tok, nil, "")
	if code != http.StatusOK || !strings.Contains(body, "team-a/fix-tests-build") {
		t.Fatalf("GET / with the token: %d\n%s", code, body)
	}
	for _, tt := range []struct {
		name, method, target string
		headers              map[string]string
		body                 string
	}{
		{name: "no token", method: "GET", target: "/"},
		{name: "wrong token", method: "GET", target: "/?token=" + strings.Repeat("0", 64)},
		{name: "foreign origin", method: "GET", target: "/" + tok, headers: map[string]string{"Origin": "http://attacker.example"}},
		{name: "rebound host", method: "GET", target: "/" + tok, headers: map[string]string{"Host": fmt.Sprintf("attacker.example:%d", port)}},
		{name: "event stream without the token", method: "GET", target: "/events"},
		{name: "script without the token", method: "GET", target: "/static/console.js"},
		{name: "preflight from another site", method: "OPTIONS", target: "/approvals/team-a/fix-tests-build" + tok,
			headers: map[string]string{"Origin": "http://attacker.example", "Access-Control-Request-Method": "POST"}},
		{name: "cross-site form post", method: "POST", target: "/approvals/team-a/fix-tests-build",
			headers: map[string]string{"Content-Type": formType, "Origin": "http://attacker.example"}, body: "decision=approve&token=" + srv.Token()},
		{name: "form post with the token in the URL only", method: "POST", target: "/approvals/team-a/fix-tests-build" + tok,
			headers: map[string]string{"Content-Type": formType, "Origin": own}, body: "decision=approve"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := send(t, srv, tt.method, tt.target, tt.headers, tt.body)
			if code != http.StatusForbidden || !strings.HasPrefix(body, "refused: ") || strings.Contains(body, "fix-tests-build") {
				t.Fatalf("answered %d:\n%s", code, body)
			}
		})
	}
	if got := b.decisions(); len(got) != 0 {
		t.Fatalf("refused posts reached the backend: %v", got)
	}

	// The console's own form passes. An OPTIONS with the token passes the gate and
	// is not served: there is no preflight to answer, and no CORS header either.
	code, body = send(t, srv, "POST", "/approvals/team-a/fix-tests-build", map[string]string{"Content-Type": formType, "Origin": own},
		"decision=deny&comment=not+now&token="+srv.Token())
	if code != http.StatusOK || !strings.Contains(body, "recorded") {
		t.Fatalf("the console's own form: %d\n%s", code, body)
	}
	if got := b.decisions(); len(got) != 1 || got[0] != `team-a/fix-tests-build approve=false "not now"` {
		t.Fatalf("decisions: %v", got)
	}
	code, _ = send(t, srv, "OPTIONS", "/", map[string]string{"Origin": own, TokenHeader: srv.Token()}, "")
	if code != http.StatusMethodNotAllowed {
		t.Fatalf("OPTIONS from the console's own origin: %d; want 405", code)
	}
	code, _ = send(t, srv, "POST", "/approvals/team-a/fix-tests-build", map[string]string{"Content-Type": formType, "Origin": own}, "decision=maybe&token="+srv.Token())
	if code != http.StatusBadRequest {
		t.Fatalf("a decision that is neither approve nor deny: %d; want 400", code)
	}
}

// TestListensOnLoopbackOnly: the listener is bound to 127.0.0.1, and the machine's
// other addresses do not answer on the console's port.
func TestListensOnLoopbackOnly(t *testing.T) {
	srv, _ := startServer(t)
	addr := srv.Addr().(*net.TCPAddr)
	if !addr.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("listening on %s; want 127.0.0.1", addr)
	}
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	tried := 0
	for _, a := range ifaces {
		ipnet, ok := a.(*net.IPNet)
		if !ok || ipnet.IP.IsLoopback() || ipnet.IP.IsLinkLocalUnicast() {
			continue
		}
		tried++
		conn, err := net.Dial("tcp", net.JoinHostPort(ipnet.IP.String(), fmt.Sprint(addr.Port)))
		if err == nil {
			_ = conn.Close()
			t.Errorf("the console answers on %s, which is not loopback", ipnet.IP)
		}
	}
	t.Logf("tried %d non-loopback addresses", tried)
}

// TestPostsNeedTheirBodyBounded: a form bigger than the console reads is refused
// before it is parsed.
func TestPostsNeedTheirBodyBounded(t *testing.T) {
	srv, b := startServer(t)
	own := fmt.Sprintf("http://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)
	big := "decision=approve&comment=" + strings.Repeat("x", maxBody) + "&token=" + srv.Token()
	code, _ := send(t, srv, "POST", "/approvals/team-a/fix-tests-build", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": own}, big)
	if code == http.StatusOK || len(b.decisions()) != 0 {
		t.Fatalf("a %d-byte form was read: %d, decisions %v", len(big), code, b.decisions())
	}
}
