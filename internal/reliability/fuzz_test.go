package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

const (
	fuzzSeedEnv    = "TOOLGATE_FUZZ_SEED"
	fuzzIntentsEnv = "TOOLGATE_FUZZ_INTENTS"
	longRunEnv     = "TOOLGATE_RELIABILITY_LONG"
	// fuzzShortRun keeps make test quick; the long run is the thousand.
	fuzzShortRun = 200
	fuzzLongRun  = 1000
)

// fuzzIntentCount is how many intents this run proposes.
func fuzzIntentCount(t *testing.T) int {
	t.Helper()
	if s := os.Getenv(fuzzIntentsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q is not a positive number", fuzzIntentsEnv, s)
		}
		return n
	}
	if os.Getenv(longRunEnv) == "1" {
		return fuzzLongRun
	}
	return fuzzShortRun
}

// fuzzer draws everything of one run from one seeded source. Goroutines share it
// under mu; the order in which they draw depends on timing, so a seed replays the
// same generators, not always the same interleaving.
type fuzzer struct {
	mu  sync.Mutex
	rnd *rand.Rand
}

func (f *fuzzer) intN(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.IntN(n)
}

func (f *fuzzer) chance(p float64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.Float64() < p
}

func pick[T any](f *fuzzer, xs ...T) T { return xs[f.intN(len(xs))] }

// fuzzTask is a task of the run: its mode, whether its budgets are the defaults
// (so they may end it), and whether it is cancelled during the run.
type fuzzTask struct {
	name     string
	mode     v1.TaskMode
	defaults bool
	cancel   bool
}

// TestFuzzedIntentsKeepEveryPromise proposes generated intents to the real
// controller on envtest: random tools (unknown ones too), inputs valid, malformed,
// huge and full of odd unicode, random turns and indexes (duplicates in a turn),
// tasks in each mode (some cancelled, one on default budgets that may run out, one
// that does not exist), while policies are created, changed and deleted under them
// and a person approves, denies or leaves approvals to expire. Every intent the
// API server accepts must end observed, every one it refuses must be refused with
// a reason, and the promises must hold.
func TestFuzzedIntentsKeepEveryPromise(t *testing.T) {
	ns := env.Namespace(t)
	seed := seedFrom(t, fuzzSeedEnv)
	f := &fuzzer{rnd: rand.New(rand.NewPCG(seed, ^seed))}
	n := fuzzIntentCount(t)
	t.Logf("%d intents", n)

	r := record(t, ns)
	playKubelet(t, ns)
	startManager(t, context.Background(), env.Config, ns)

	tasks := []fuzzTask{
		{name: "fz-readonly", mode: v1.ModeReadOnly},
		{name: "fz-edit", mode: v1.ModeEdit},
		{name: "fz-auto", mode: v1.ModeAuto},
		{name: "fz-edit-cancelled", mode: v1.ModeEdit, cancel: true},
		{name: "fz-auto-cancelled", mode: v1.ModeAuto, cancel: true},
		{name: "fz-auto-defaults", mode: v1.ModeAuto, defaults: true},
	}
	for _, ft := range tasks {
		ttl := int32(10 + f.intN(11)) // the minimum TTL and a little more: undecided asks expire within the run
		newTaskWith(t, ns, ft.name, ft.mode, func(b *v1.Budgets) {
			b.ApprovalTTLSeconds = ttl
			if !ft.defaults {
				b.MaxIntents, b.MaxApprovalRequests, b.MaxConsecutiveRefusals = 10000, 1000, 1000
			}
		})
	}

	ctx, stop := context.WithCancel(t.Context())
	var churn sync.WaitGroup
	// However the test ends (a Fatal included), the churn stops before it does: a
	// goroutine logging after its test has ended panics the whole package.
	defer func() { stop(); churn.Wait() }()
	churn.Add(1)
	go func() { defer churn.Done(); churnPolicies(ctx, t, f, ns) }()
	decideAll(t, ns, fuzzDecider(f))

	// Cancellations fall at random points of the proposing.
	cancelAt := map[int]string{}
	for _, ft := range tasks {
		if ft.cancel {
			cancelAt[f.intN(n)] = ft.name
		}
	}
	poster, err := newRawPoster(ns)
	if err != nil {
		t.Fatal(err)
	}
	// The tasks that run to the end get most of the calls; the others end (cancelled,
	// out of budget) and refuse theirs from then on.
	names := make([]string, 0, 3*len(tasks)+1)
	for _, ft := range tasks {
		names = append(names, ft.name)
		if !ft.cancel && !ft.defaults {
			names = append(names, ft.name, ft.name)
		}
	}
	names = append(names, "fz-ghost") // no such task
	accepted := 0
	sizeLimit := ""
	refused := map[string]int{}    // by the kind of input, what the API server refused
	acceptedBy := map[string]int{} // what it took, by the kind of input
	for i := range n {
		if task, ok := cancelAt[i]; ok {
			cancelTask(t, ns, task)
			t.Logf("cancelled %s after %d intents", task, i)
		}
		spec, kind := f.intentSpec(pick(f, names...))
		code, msg, err := poster.post(t.Context(), fmt.Sprintf("fz-%d", i), spec)
		if err != nil {
			t.Fatalf("proposing intent %d: %v", i, err)
		}
		if code == http.StatusCreated {
			accepted++
			acceptedBy[strings.SplitN(kind, ", ", 2)[0]]++
		} else {
			refused[strconv.Itoa(code)+" "+refusalField(msg)]++
			switch {
			case code >= 500 && strings.Contains(msg, "larger than max"):
				// The API server's own limit: what it hands etcd is over the gRPC
				// message size, and it says so with a 500. Nothing of toolgate ran.
				sizeLimit = msg
			case code >= 500 || strings.TrimSpace(msg) == "":
				t.Errorf("intent %d (%s) refused without a clear reason: HTTP %d %q", i, kind, code, msg)
			}
		}
		if f.chance(0.1) {
			time.Sleep(time.Duration(f.intN(100)) * time.Millisecond)
		}
	}
	t.Logf("the API server took %d of %d intents; took by kind: %v", accepted, n, sortedCounts(acceptedBy))
	t.Logf("refused by the API server (%d), by HTTP code and field: %v", n-accepted, sortedCounts(refused))
	if sizeLimit != "" {
		t.Logf("the API server refuses what is over etcd's message size with HTTP 500: %s", sizeLimit)
	}

	// Everything the API server took ends observed: refused, run, aborted with its
	// cancelled task, or expired after its TTL (at most 20 s after its Approval).
	waitObserved(t, r, accepted, 10*time.Minute)
	stop()
	churn.Wait()
	wantConverged(t, ns, 5*time.Second, 2*time.Minute)
	wantClearRefusals(t, ns)
	wantNoViolations(t, r)
}

// intentSpec draws an intent's spec as raw JSON (so that anything can be said,
// also what a typed client would refuse to send) and names the kind of input.
func (f *fuzzer) intentSpec(task string) (spec []byte, kind string) {
	tool := pick(f, "bash", "bash", "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list_dir",
		"rm_everything", "read_file2", "Bash", "", strings.Repeat("t", 64), "bash\u202e")
	input, kind := f.input(tool)
	if _, known := knownTools[tool]; !known {
		kind += ", unknown tool " + strconv.Quote(tool)
	}
	turn := f.intN(12)
	index := f.intN(4)
	switch f.intN(20) {
	case 0:
		turn, kind = -1, kind+", negative turn" // the schema's minimum is 0
	case 1:
		turn, kind = 1<<31-1, kind+", last turn"
	case 2:
		index, kind = 1<<20, kind+", huge index"
	}
	requestedBy := testProposer
	switch f.intN(25) {
	case 0:
		requestedBy, kind = "mallory", kind+", not a proposer"
	case 1:
		requestedBy, kind = "", kind+", no requester"
	}
	head, _ := json.Marshal(map[string]any{"taskRef": map[string]string{"name": task}, "turn": turn, "index": index, "tool": tool, "requestedBy": requestedBy})
	// The input goes in verbatim: it may not be JSON at all.
	spec = append(head[:len(head)-1], []byte(`,"input":`)...)
	spec = append(spec, input...)
	spec = append(spec, '}')
	return spec, kind
}

var knownTools = map[string]bool{"bash": true, "read_file": true, "write_file": true, "edit_file": true, "glob": true, "grep": true, "list_dir": true}

// odd strings: direction overrides, zero widths, an escaped NUL, a lone surrogate
// (JSON allows the escape), combining marks, emoji, control characters.
var oddStrings = []string{
	"\u202eexe.txt", "a\u200bb", `\u0000`, `\ud800`, "e\u0301\u0301\u0301", "🙂🙃", `\t\r\n\u001b[31m`,
	"..\u2215..\u2215etc", "\ufeffbom", "\u2066isolate\u2069",
}

// input draws a tool input and names its kind.
func (f *fuzzer) input(tool string) ([]byte, string) {
	switch f.intN(14) {
	case 0:
		return []byte(pick(f, `{"command":`, `not json`, `{"command":"ls"`, `{command:"ls"}`, `{"command":"ls"}}`)), "invalid JSON"
	case 1:
		return []byte(pick(f, `[1,2]`, `"ls"`, `42`, `null`, `true`)), "not an object"
	case 2:
		return []byte(pick(f, `{}`, `{"command":""}`, `{"command":7}`, `{"path":null}`, `{"command":"ls","extra":1}`, `{"limit":-1,"path":"a"}`, `{"timeoutMs":0,"command":"ls"}`)), "schema-invalid"
	case 3:
		return []byte(`{"command":"ls","command":"rm -rf /"}`), "duplicate key"
	case 4:
		// Written into the JSON text as they are: the escapes stay escapes.
		s := pick(f, oddStrings...)
		switch tool {
		case "read_file", "list_dir":
			return []byte(`{"path":"` + s + `"}`), "odd unicode"
		case "write_file":
			return []byte(`{"path":"odd.txt","content":"` + s + `"}`), "odd unicode"
		case "glob", "grep":
			return []byte(`{"pattern":"` + s + `"}`), "odd unicode"
		}
		return []byte(`{"command":"echo ` + s + `"}`), "odd unicode"
	case 5:
		// Raw bytes that are not UTF-8 inside a JSON string.
		return []byte("{\"command\":\"echo \xff\xfe\xc3\x28\",\"path\":\"a\xffb\"}"), "invalid UTF-8"
	case 6:
		return f.huge(tool)
	case 7:
		depth := pick(f, 50, 1000, 20000)
		return []byte(`{"command":"ls","n":` + strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth) + "}"), "deeply nested (" + strconv.Itoa(depth) + ")"
	}
	return f.validInput(tool), "well-formed"
}

// validInput is an input the tool's schema takes (for a known tool), of every
// category the classifier knows.
func (f *fuzzer) validInput(tool string) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	path := pick(f, "README.md", "README.md", "src/main.go", "src/main.go", "docs/a.md", "../outside", "/etc/passwd", "a/b/../../c", "dir/", "x\u202ey.txt")
	switch tool {
	case "read_file":
		return []byte(fmt.Sprintf(`{"path":%s,"offset":%d,"limit":%d}`, q(path), 1+f.intN(10), 1+f.intN(100)))
	case "write_file":
		return []byte(fmt.Sprintf(`{"path":%s,"content":%s}`, q(path), q(pick(f, "", "hello\n", "\u0000x", "line\r\n"))))
	case "edit_file":
		return []byte(fmt.Sprintf(`{"path":%s,"oldText":"a","newText":"b"}`, q(path)))
	case "glob":
		return []byte(fmt.Sprintf(`{"pattern":%s}`, q(pick(f, "**/*.go", "*", "[", "{a,b}"))))
	case "grep":
		return []byte(fmt.Sprintf(`{"pattern":%s,"maxResults":%d}`, q(pick(f, "TODO", "(", "a{1000}", `\bfoo\b`)), 1+f.intN(100)))
	case "list_dir":
		return []byte(pick(f, `{}`, fmt.Sprintf(`{"path":%s}`, q(path))))
	}
	cmd := pick(f, "ls -la", "cat README.md", "go test ./...", "make build", "touch new.txt", "echo hi > out.txt",
		"rm -rf build", "rm -rf /", "git push --force", "git status", "curl https://example.com", "sudo ls",
		"npm install", "ls && rm -rf build", "ls | grep x", "$(rm -rf /)", "ls; curl evil", "cat <<EOF\nx\nEOF",
		"unknowncmd --flag", "eval \"$X\"", "ls `rm x`", "true", "pwd")
	return []byte(fmt.Sprintf(`{"command":%s,"timeoutMs":%d}`, q(cmd), 1+f.intN(86400000)))
}

// huge inputs near and over the limits: the tool schemas' (16 KiB commands, 1 MiB
// contents) and the API server's (a stored object of about 1.5 MiB).
func (f *fuzzer) huge(tool string) ([]byte, string) {
	switch f.intN(5) {
	case 0:
		return []byte(`{"command":"echo ` + strings.Repeat("a", 16384-5) + `"}`), "huge: command at the schema's maximum"
	case 1:
		return []byte(`{"command":"echo ` + strings.Repeat("a", 16384) + `"}`), "huge: command over the schema's maximum"
	case 2:
		return []byte(`{"path":"big","content":"` + strings.Repeat("é", 1<<19) + `"}`), "huge: 1 MiB content (512 Ki runes)"
	case 3:
		return []byte(`{"path":"big","content":"` + strings.Repeat("b", 1<<20+1) + `"}`), "huge: content over the schema's maximum"
	}
	_ = tool
	return []byte(`{"path":"big","content":"` + strings.Repeat("c", 2<<20) + `"}`), "huge: 2 MiB, over what the API server stores"
}

// rawPoster creates ToolIntents from raw JSON as the admin, straight to the API
// server, so that what it refuses can be seen and counted.
type rawPoster struct {
	client *http.Client
	url    string
}

func newRawPoster(ns string) (*rawPoster, error) {
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return nil, err
	}
	return &rawPoster{client: hc, url: strings.TrimSuffix(env.Config.Host, "/") + "/apis/toolgate.dev/v1alpha1/namespaces/" + ns + "/toolintents"}, nil
}

// post creates the intent and returns the HTTP code and, for a refusal, the API
// server's message.
func (p *rawPoster) post(ctx context.Context, name string, spec []byte) (int, string, error) {
	var body bytes.Buffer
	fmt.Fprintf(&body, `{"apiVersion":"toolgate.dev/v1alpha1","kind":"ToolIntent","metadata":{"name":%q},"spec":`, name)
	body.Write(spec)
	body.WriteByte('}')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, &body)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusCreated {
		return resp.StatusCode, "", nil
	}
	var st metav1.Status
	if json.Unmarshal(data, &st) == nil && st.Message != "" {
		return resp.StatusCode, st.Message, nil
	}
	return resp.StatusCode, string(data), nil
}

func cancelTask(t *testing.T, ns, name string) {
	t.Helper()
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.Client.Patch(t.Context(), task, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"lifecycle":"Cancelled"}}`))); err != nil {
		t.Fatalf("cancelling %s: %v", name, err)
	}
}

// fuzzDecider decides each Approval once, at random: approved or denied by one of
// several people, or left to expire. (Who may decide is the admission policies'
// business, not installed here.)
func fuzzDecider(f *fuzzer) func(*v1.Approval) (v1.ApprovalDecision, string) {
	var mu sync.Mutex
	fate := map[string]v1.ApprovalDecision{}
	return func(a *v1.Approval) (v1.ApprovalDecision, string) {
		mu.Lock()
		defer mu.Unlock()
		d, ok := fate[string(a.UID)]
		if !ok {
			d = pick(f, v1.DecisionApproved, v1.DecisionApproved, v1.DecisionDenied, "")
			fate[string(a.UID)] = d
		}
		return d, pick(f, "bob", "carol", "dave")
	}
}

// churnPolicies creates, changes and deletes the namespace's ToolPolicies at random
// until ctx ends: rules of every action and enforcement, matching tools,
// categories, commands, paths and CEL, some broken (a malformed pattern or CEL:
// the policy is not Ready).
func churnPolicies(ctx context.Context, t *testing.T, f *fuzzer, ns string) {
	ops := map[string]int{}
	defer func() { t.Logf("policy changes: %v", sortedCounts(ops)) }()
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(100+f.intN(500))*time.Millisecond)
		name := fmt.Sprintf("fz-policy-%d", f.intN(4))
		p := &v1.ToolPolicy{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)
		switch {
		case err != nil:
			p = &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ToolPolicySpec{Rules: f.rules()}}
			if env.Client.Create(ctx, p) == nil {
				ops["create"]++
			}
		case f.chance(0.3):
			if env.Client.Delete(ctx, p) == nil {
				ops["delete"]++
			}
		default:
			p.Spec.Rules = f.rules()
			if env.Client.Update(ctx, p) == nil {
				ops["update"]++
			}
		}
	}
}

func (f *fuzzer) rules() []v1.PolicyRule {
	var out []v1.PolicyRule
	for i := range 1 + f.intN(4) {
		rule := v1.PolicyRule{
			Name:   fmt.Sprintf("r%d", i),
			Action: pick(f, v1.RuleAllow, v1.RuleAsk, v1.RuleDeny, v1.RuleAudit),
			Reason: pick(f, "fuzz", "\u202edesrever", strings.Repeat("why ", 100)),
		}
		if f.chance(0.2) {
			rule.Enforcement = v1.EnforcementDryRun
		}
		if f.chance(0.2) {
			rule.Approvers = v1.Approvers{Users: []string{pick(f, "carol", "erin")}}
		}
		switch f.intN(7) {
		case 0:
			rule.Match.Tools = []v1.ToolName{pick(f, v1.ToolBash, v1.ToolWriteFile, v1.ToolReadFile, v1.ToolEditFile)}
		case 1:
			rule.Match.Categories = []v1.CommandCategory{pick(f, v1.CategoryDelete, v1.CategoryWrite, v1.CategoryNetwork, v1.CategoryTest, v1.CategoryUnknown, v1.CategoryReadOnly)}
		case 2:
			rule.Match.Commands = []v1.CommandPattern{{Prefix: []string{"git", "push"}}, {Prefix: []string{"git", "reset"}}}
		case 3:
			rule.Match.Commands = []v1.CommandPattern{{Prefix: []string{"git", "push"}}}
			rule.Examples.Match = []string{"git status"} // broken: the example does not match
		case 4:
			rule.Match.Paths = []string{pick(f, "**/*.md", "src/**", "big")}
		case 5:
			rule.Match.CEL = pick(f, `intent.tool == "bash"`, `intent.tool ==`, `size(intent.parts) > 1`) // the middle one is broken
		}
		out = append(out, rule)
	}
	return out
}

// wantClearRefusals fails for an intent refused by the controller (validation or
// a policy) whose observation does not say why.
func wantClearRefusals(t *testing.T, ns string) {
	t.Helper()
	var list v1.ToolIntentList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	outcomes, reasons := map[string]int{}, map[string]int{}
	for _, in := range list.Items {
		obs := in.Status.Observation
		if obs == nil {
			continue
		}
		outcomes[string(obs.Outcome)]++
		if obs.Outcome == v1.OutcomeValidationFailed {
			// The summary lists the errors as "- path: what"; counted by path.
			for _, line := range strings.Split(obs.Summary, "\n") {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok {
					if i := strings.Index(rest, ":"); i > 0 {
						rest = rest[:i]
					}
					reasons[rest]++
				}
			}
		}
		if !obs.Executed && strings.TrimSpace(obs.Summary) == "" {
			t.Errorf("ToolIntent %s ended %s without saying why", in.Name, obs.Outcome)
		}
	}
	t.Logf("outcomes: %v", sortedCounts(outcomes))
	t.Logf("validation errors by the path they name: %v", sortedCounts(reasons))
}

// refusalField is what an API server refusal is about: the first field a 422 names,
// or the start of any other message.
func refusalField(msg string) string {
	if _, rest, ok := strings.Cut(msg, " is invalid: "); ok {
		if i := strings.Index(rest, ":"); i > 0 {
			return rest[:i]
		}
	}
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return msg
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
