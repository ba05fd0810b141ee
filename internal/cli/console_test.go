package cli

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/console"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// The console's tests drive Debian's Chromium, headless, against consoles started
// as alice and bob on envtest, with the admission policies installed: what they
// see and do is what a person sees and does. Without chromium they skip, unless
// TOOLGATE_REQUIRE_BROWSER is set (make test sets it: CI never skips silently).
// With TOOLGATE_SCREENSHOTS=DIR they also save the pages docs/approvals.md shows
// (make console-screenshots).

// browser starts a headless Chromium for the test and returns a tab, which ends
// (and the browser with it) when the test does.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("TOOLGATE_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium is not installed and TOOLGATE_REQUIRE_BROWSER is set: make browser-deps installs it")
		}
		t.Skip("chromium is not installed (make browser-deps installs it)")
	}
	// Chromium's own temporary files (which a killed browser leaves) go where the
	// test's cleanup removes them; chromedp removes the profile it makes.
	// (A short path: its socket's path must fit a sockaddr_un.)
	tmp, err := os.MkdirTemp("", "cr")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1100, 760),
		chromedp.Env("TMPDIR="+tmp))
	if os.Geteuid() == 0 {
		// Chromium refuses to start its sandbox as root (CI containers run as
		// root); the pages it loads here are the console's own, and the test's.
		opts = append(opts, chromedp.NoSandbox)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		_ = os.RemoveAll(tmp)
	})
	// The browser starts now, on the tab's own context: one started by an action's
	// shorter context would end with that action.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return tab
}

// consoleAs serves a console as user, on the namespace ns, as
// `kubectl toolgate console -n NS` with the user's kubeconfig would, until the test
// ends.
func consoleAs(t *testing.T, user, ns string) *console.Server {
	t.Helper()
	kubeconfig := kubeconfigs[user]
	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	o := &Options{Streams: genericiooptions.NewTestIOStreamsDiscard(), Flags: flags, Now: time.Now}
	srv, err := o.newConsole(0, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the console ended with %v", err)
		}
	})
	return srv
}

// do runs browser actions, waiting at most 30s, and fails the test with what was
// being done and the page the browser shows.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(wait, actions...); err != nil {
		at, _ := chromedp.Run(ctx, chromedp.Location())
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
		t.Fatalf("%s: %v\nthe browser shows %s:\n%s", what, err, at, body)
	}
}

// text is the text of the element sel selects.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

// screenshot saves the element sel selects as docs' NAME.png when
// TOOLGATE_SCREENSHOTS names a folder.
func screenshot(t *testing.T, ctx context.Context, name, sel string) {
	t.Helper()
	dir := os.Getenv("TOOLGATE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordEditToApprove records what the controller leaves for an edit_file call
// that asks a human: the task, the intent (decided Ask, behind walls, in a sandbox
// that may reach the cluster DNS) and its pending Approval, requested by
// requestedBy.
func recordEditToApprove(t *testing.T, ns, requestedBy string) *v1.Approval {
	t.Helper()
	task, _, _, _ := fixtureTask(ns)
	task.CreationTimestamp = metav1.Time{}
	record(t, task)
	const input = `{"path":"src/sum.js","oldText":"export function sum(a, b) {\n  return a - b;\n}\n","newText":"export function sum(a, b) {\n  return a + b;\n}\n"}`
	in := makeIntent(ns, "fix-tests-edit", 0, 0, v1.ToolEditFile, input).reason("the test expects a sum").
		valid().decided(v1.DecisionAsk, "ToolPolicy/team", "ask-edits", 3, "edits to src/ need a person", v1.CategoryWrite).
		approval("fix-tests-edit").obj()
	in.Spec.RequestedBy = requestedBy
	in.CreationTimestamp = metav1.Time{}
	record(t, &in)
	a := fixtures.PendingApproval(ns, "fix-tests-edit", requestedBy, &v1.Approvers{Users: []string{alice, bob}})
	r := &a.Spec.Request
	r.Tool, r.Input, r.Risk, r.Category = v1.ToolEditFile, input, v1.RiskMedium, v1.CategoryWrite
	r.PolicyRuleRef, r.Reason, r.ProposerReason = testRef("ToolPolicy/team", "ask-edits", 3), "edits to src/ need a person", "the test expects a sum"
	r.Walls = &v1.SandboxWalls{NoNetwork: true, Reason: "an edit needs no network"}
	r.Sandbox = &v1.DecidedSandbox{TaskUID: string(task.UID), TimeoutSeconds: 60, Profile: v1.SandboxProfile{
		Image: "node:22", WorkspaceClaimName: "src",
		Network: v1.NetworkSpec{Mode: v1.NetworkAllowList, ClusterDNS: true, Egress: []v1.EgressRule{{CIDR: "203.0.113.0/24", Ports: []int32{443}}}},
	}}
	record(t, a)
	return a
}

func storedApproval(t *testing.T, a *v1.Approval) *v1.Approval {
	t.Helper()
	got := &v1.Approval{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestConsoleApprovesAsTheUser: a pending approval appears on alice's open page
// without a reload; its page shows the edit as a diff, the walls, sandbox and
// network with the DNS warning, the fingerprint and the task's timeline; approving
// it records alice, the user whose credentials the console holds.
func TestConsoleApprovesAsTheUser(t *testing.T) {
	ns := testNamespace(t)
	srv := consoleAs(t, alice, ns)
	ctx := browser(t)

	do(t, ctx, "opening the console", chromedp.Navigate(srv.URL()), chromedp.WaitVisible(chromedp.CSS("#pending .empty")))
	// A mark on the page: a reload would wipe it.
	do(t, ctx, "marking the page", chromedp.Evaluate[chromedp.Void]("window.notReloaded = true"))
	a := recordEditToApprove(t, ns, agentUser)
	row := fmt.Sprintf(`#pending tr[data-name=%q]`, ns+"/"+a.Name)
	do(t, ctx, "waiting for the new approval to appear", chromedp.WaitVisible(chromedp.CSS(row)))
	if kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.notReloaded === true")); err != nil || !kept {
		t.Fatalf("the page was reloaded to show the approval (mark kept: %v, %v)", kept, err)
	}
	screenshot(t, ctx, "console-pending", "main")

	do(t, ctx, "opening the approval", chromedp.Click(chromedp.CSS(row+" a")), chromedp.WaitVisible(chromedp.CSS("#change")))
	request := text(t, ctx, "#request")
	for _, want := range []string{
		"Tool:           edit_file",
		"Runs behind:    no network (an edit needs no network)",
		"Sandbox:        image node:22, workspace claim src mounted read-write",
		"the cluster DNS (a name the call looks up can carry data out when the DNS server forwards it)",
		"Asked by:       ToolPolicy/team/ask-edits (generation 3)",
		"Fingerprint:    " + a.Spec.Fingerprint,
		"Requested by:   agent-bot",
	} {
		if !strings.Contains(request, want) {
			t.Errorf("the request lacks %q:\n%s", want, request)
		}
	}
	change := text(t, ctx, "#change")
	for _, want := range []string{"edit_file replaces the one occurrence of this text in src/sum.js", "-  return a - b;", "+  return a + b;"} {
		if !strings.Contains(change, want) {
			t.Errorf("the change lacks %q:\n%s", want, change)
		}
	}
	if cls, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#change .add")].map(e => e.textContent).join("|")`)); err != nil || !strings.Contains(cls, "+  return a + b;") {
		t.Errorf("the added line is not marked as added: %q, %v", cls, err)
	}
	if goal := text(t, ctx, "#task .goal"); goal != "Make the unit tests pass." {
		t.Errorf("the task's goal is %q", goal)
	}
	if tl := text(t, ctx, "#timeline"); !strings.Contains(tl, "fix-tests-edit") || !strings.Contains(tl, "edits to src/ need a person") {
		t.Errorf("the timeline lacks the call:\n%s", tl)
	}
	screenshot(t, ctx, "console-approval", "main")

	do(t, ctx, "approving", chromedp.SendKeys(chromedp.CSS("#comment"), "sum, not difference"), chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#notice")))
	if n := text(t, ctx, "#notice"); n != "Approval fix-tests-edit approved by alice: 1 of 1 approvals; voted: alice (Approved); approved." {
		t.Fatalf("after approving, the page says %q", n)
	}
	got := storedApproval(t, a)
	if len(got.Spec.Votes) != 1 || got.Spec.Votes[0] != (v1.ApprovalVote{User: alice, Decision: v1.DecisionApproved, Comment: "sum, not difference"}) {
		t.Fatalf("stored votes %+v; want alice's approval with her comment", got.Spec.Votes)
	}
	if closed := text(t, ctx, "#decide .closed"); !strings.Contains(closed, "already decided: Approved (1 of 1 approvals; voted: alice (Approved); approved)") {
		t.Errorf("the decided approval still offers a decision: %q", closed)
	}

	// Decided, it leaves the pending list, again without a reload.
	do(t, ctx, "going back to the list", chromedp.Navigate(srv.URL()), chromedp.WaitVisible(chromedp.CSS("#pending .empty")))
}

// TestConsoleShowsARefusalVerbatim: alice proposed the call herself, and the
// admission policy refuses her approval of it; the page shows the policy's words,
// and nothing is recorded.
func TestConsoleShowsARefusalVerbatim(t *testing.T) {
	ns := testNamespace(t)
	a := recordEditToApprove(t, ns, alice)
	srv := consoleAs(t, alice, ns)
	ctx := browser(t)

	u := strings.Replace(srv.URL(), "/?", "/approvals/"+ns+"/"+a.Name+"?", 1)
	do(t, ctx, "approving her own call", chromedp.Navigate(u), chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#refusal")))
	want := "refused by admission policy approval-decision.toolgate.dev: you requested this intent, and the requester never votes: other people must decide."
	if got := text(t, ctx, "#refusal pre"); got != want {
		t.Fatalf("the refusal shown is\n%q\nwant\n%q", got, want)
	}
	screenshot(t, ctx, "console-refusal", "#refusal")
	if got := storedApproval(t, a); len(got.Spec.Votes) != 0 {
		t.Fatalf("after the refusal the approval holds votes %+v", got.Spec.Votes)
	}

	// bob may decide it, and denies it in his own console.
	bobs := consoleAs(t, bob, ns)
	u = strings.Replace(bobs.URL(), "/?", "/approvals/"+ns+"/"+a.Name+"?", 1)
	do(t, ctx, "bob denying", chromedp.Navigate(u), chromedp.Click(chromedp.CSS("#deny")), chromedp.WaitVisible(chromedp.CSS("#notice")))
	if got := storedApproval(t, a); len(got.Spec.Votes) != 1 || got.Spec.Votes[0].User != bob || got.Spec.Votes[0].Decision != v1.DecisionDenied {
		t.Fatalf("bob's denial stored as %+v", got.Spec.Votes)
	}
}

// TestConsoleRefusesTheWeb: in a real browser, a request without the token, one
// to the console under another name (a rebound DNS name), and a form another site
// posts to it (even with the token) are refused, and nothing is decided.
func TestConsoleRefusesTheWeb(t *testing.T) {
	ns := testNamespace(t)
	a := recordEditToApprove(t, ns, agentUser)
	srv := consoleAs(t, alice, ns)
	ctx := browser(t)
	port := strings.TrimPrefix(srv.Addr().String(), "127.0.0.1:")

	status := func(what, u string) (int64, string) {
		t.Helper()
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return resp.Status, text(t, ctx, "body")
	}
	if code, body := status("without the token", "http://127.0.0.1:"+port+"/"); code != http.StatusForbidden || !strings.Contains(body, "carries no console token") {
		t.Fatalf("without the token: %d %q", code, body)
	}
	if code, body := status("with another token", "http://127.0.0.1:"+port+"/?token=0"+srv.Token()[1:]); code != http.StatusForbidden || !strings.Contains(body, "token is wrong") {
		t.Fatalf("with another token: %d %q", code, body)
	}
	// Chromium resolves every *.localhost name to the loopback address itself, as
	// a rebound name would resolve: the Host header gives it away.
	rebound := strings.Replace(srv.URL(), "127.0.0.1", "rebound.localhost", 1)
	if code, body := status("under another name", rebound); code != http.StatusForbidden || !strings.Contains(body, "Host header") || strings.Contains(body, a.Name) {
		t.Fatalf("under another name: %d %q", code, body)
	}

	// Another site (another origin: another port) posts a form to the console,
	// token and all, as a page that learned the token could.
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form id="f" method="post" action="http://127.0.0.1:%s/approvals/%s/%s"><input name="token" value="%s"><input name="decision" value="approve"></form>
<script>document.getElementById("f").submit()</script>`, port, ns, a.Name, srv.Token())
	}))
	defer attacker.Close()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(attacker.URL))
	if err != nil {
		t.Fatal(err)
	}
	// The navigation followed is the form's post.
	// The page navigates on its own (the form's post): each look may meet a page
	// between documents, so a failed look is only a reason to look again.
	var body string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		body, err = chromedp.Run(ctx, chromedp.Evaluate[string](`location.port === "`+port+`" && document.body ? document.body.innerText : ""`))
		return err == nil && body != "", nil
	})
	if err != nil {
		t.Fatalf("the cross-site post never reached the console: %v", err)
	}
	if !strings.Contains(body, "comes from another site") {
		t.Fatalf("the cross-site post was answered %q (first load %d)", body, resp.Status)
	}
	if got := storedApproval(t, a); len(got.Spec.Votes) != 0 {
		t.Fatalf("a cross-site form voted on the approval: %+v", got.Spec.Votes)
	}
}

// TestConsoleBrowsesTasks: the tasks page lists the tasks, and a task's page is its
// trace.
func TestConsoleBrowsesTasks(t *testing.T) {
	ns := testNamespace(t)
	recordEditToApprove(t, ns, agentUser)
	srv := consoleAs(t, bob, ns)
	ctx := browser(t)
	u := strings.Replace(srv.URL(), "/?", "/tasks?", 1)
	do(t, ctx, "opening the tasks", chromedp.Navigate(u), chromedp.Click(chromedp.CSS("tr.task a")), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	tl := text(t, ctx, "#timeline")
	code, want, errOut := kubectl(t, bob, ns, "", "trace", "fix-tests")
	if code != 0 {
		t.Fatalf("trace exited %d: %s", code, errOut)
	}
	if strings.TrimSpace(tl) != strings.TrimSpace(want) {
		t.Fatalf("the task's page is\n%s\nwant what trace prints:\n%s", tl, want)
	}
	screenshot(t, ctx, "console-task", "main")
}

// consoleRequest talks to a console as its own page does: a read with the token in
// its URL, a form with the token in its body and the console's Origin.
func consoleRequest(t *testing.T, srv *console.Server, method, path string, form url.Values) (int, string) {
	t.Helper()
	base := "http://" + srv.Addr().String()
	var body io.Reader
	if form != nil {
		form.Set("token", srv.Token())
		body = strings.NewReader(form.Encode())
	} else {
		path += "?token=" + srv.Token()
	}
	r, err := http.NewRequestWithContext(t.Context(), method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", base)
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
	return resp.StatusCode, html.UnescapeString(string(b))
}

// TestConsoleShowsWhatAPushPushes: a git_push's page shows the push's record, its
// diff and tree; a push whose record is of another tree is shown with why, offers
// no Approve, and an approve posted anyway is refused, as approve refuses it.
func TestConsoleShowsWhatAPushPushes(t *testing.T) {
	ns := testNamespace(t)
	pendingPush(t, ns, pushedTree)
	srv := consoleAs(t, alice, ns)
	code, page := consoleRequest(t, srv, "GET", "/approvals/"+ns+"/fix-git-push", nil)
	for _, want := range []string{"Pushes:         tree " + pushedTree + " on " + pushBase, "The change it pushes (ConfigMap fix-git-push):", "+echo pwned", `id="approve">Approve`} {
		if !strings.Contains(page, want) {
			t.Errorf("the push's page (%d) lacks %q:\n%s", code, want, page)
		}
	}
	if strings.Contains(page, "harmless") {
		t.Errorf("the push's page shows a later read of the workspace:\n%s", page)
	}

	other := testNamespace(t)
	pendingPush(t, other, harmlessTree)
	srv = consoleAs(t, alice, other)
	why := "not approved: ConfigMap fix-git-push records tree " + harmlessTree + " on " + pushBase + ", but ToolIntent fix-git-push pushes tree " + pushedTree
	_, page = consoleRequest(t, srv, "GET", "/approvals/"+other+"/fix-git-push", nil)
	if !strings.Contains(page, why) || !strings.Contains(page, `id="approve" disabled`) {
		t.Fatalf("the page of a push whose record is another tree does not say so, or offers Approve:\n%s", page)
	}
	code, page = consoleRequest(t, srv, "POST", "/approvals/"+other+"/fix-git-push", url.Values{"decision": {"approve"}})
	if code != http.StatusConflict || !strings.Contains(page, why) {
		t.Fatalf("approving it anyway: %d\n%s", code, page)
	}
	a := &v1.Approval{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "fix-git-push"}}
	if got := storedApproval(t, a); len(got.Spec.Votes) != 0 {
		t.Fatalf("after the refusal the push holds votes %+v", got.Spec.Votes)
	}
}

// TestConsoleVotesOnlyOnTheApprovalItShowed: bob reads an approval's page; before he
// decides, it is deleted and asked again under the same name for another call. His
// form, posted then, records nothing and says why; the page of the new approval
// records his vote.
func TestConsoleVotesOnlyOnTheApprovalItShowed(t *testing.T) {
	ns := testNamespace(t)
	a := recordEditToApprove(t, ns, alice)
	srv := consoleAs(t, bob, ns)
	path := "/approvals/" + ns + "/" + a.Name
	shownOn := func() string {
		t.Helper()
		_, page := consoleRequest(t, srv, "GET", path, nil)
		m := regexp.MustCompile(`name="shown" value="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the approval's page carries no shown field:\n%s", page)
		}
		return m[1]
	}
	read := shownOn()

	again := storedApproval(t, a)
	if err := env.Client.Delete(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	again.ObjectMeta = metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Name}
	again.Spec.Fingerprint = strings.Repeat("b", 64)
	record(t, again)

	code, page := consoleRequest(t, srv, "POST", path, url.Values{"decision": {"approve"}, "shown": {read}})
	if code != http.StatusConflict || !strings.Contains(page, "is not the one your page showed") {
		t.Fatalf("approving what the page no longer shows: %d\n%s", code, page)
	}
	if got := storedApproval(t, a); len(got.Spec.Votes) != 0 {
		t.Fatalf("a vote was recorded on an approval bob never read: %+v", got.Spec.Votes)
	}
	code, page = consoleRequest(t, srv, "POST", path, url.Values{"decision": {"approve"}, "shown": {shownOn()}})
	if got := storedApproval(t, a); code != http.StatusOK || len(got.Spec.Votes) != 1 || got.Spec.Votes[0].User != bob {
		t.Fatalf("bob's approval of the page he read: %d, votes %+v\n%s", code, got.Spec.Votes, page)
	}
}
