package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// The faults the flaky API server injects. Each is something a real API server, or
// the network in front of it, does to a controller now and then.
const (
	faultDelay       = "delay"            // answered late (up to 1.5 s), but answered
	faultTimeout     = "timeout"          // held 1 to 3 s, then 504 with reason Timeout; the request never reached the API server
	faultConflict    = "409-conflict"     // a write refused as a conflict, unsent
	faultTooMany     = "429-too-many"     // refused with Retry-After: 1, unsent
	faultServerError = "500"              // an internal error, unsent
	faultDropBefore  = "drop-before"      // the connection closed before the request was sent on
	faultLostReply   = "lost-reply"       // the request was done by the API server, its reply dropped: the write happened, the client does not know
	faultWatchCut    = "watch-cut-early"  // a watch stream cut 1 to 8 s after it began
	faultsNone       = "passed-untouched" // counted for the share
)

const (
	// flakySeedEnv replays a run's draws.
	flakySeedEnv = "TOOLGATE_FLAKY_SEED"
	// flakyShareOfHits of the manager's requests other than watches meet a fault:
	// enough that every kind is met in a run, few enough that work gets done.
	flakyShareOfHits = 0.15
)

// flakyProxy stands between a manager and the API server (plain HTTP on 127.0.0.1;
// it adds the admin's credentials on the way to the API server) and breaks a seeded
// share of the requests.
type flakyProxy struct {
	server *httptest.Server
	proxy  *httputil.ReverseProxy

	mu     sync.Mutex
	rnd    *rand.Rand
	counts map[string]int
	// off stops injecting (the proxy then only forwards).
	off bool
	// intercept, when set, sees each request first and answers it itself when it
	// returns true: a test's own fault at a chosen request.
	intercept func(http.ResponseWriter, *http.Request) bool
}

// startFlakyProxy starts the proxy in front of env's API server until the test ends.
func startFlakyProxy(t *testing.T, seed uint64) *flakyProxy {
	t.Helper()
	target, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), counts: map[string]int{}}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: transport,
		// Watches are streams: each event must reach the manager when it happens.
		FlushInterval: -1,
		// Cut watches and dropped replies are reported as copy errors; they are the
		// faults themselves, not news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.server.Close)
	return p
}

// config is a rest.Config for a manager behind the proxy: no TLS, no credentials.
func (p *flakyProxy) config() *rest.Config {
	return &rest.Config{Host: p.server.URL, QPS: env.Config.QPS, Burst: env.Config.Burst}
}

// pick draws the fault for one request.
func (p *flakyProxy) pick(r *http.Request) (kind string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.counts[kind]++ }()
	if p.off || discovery(r.URL.Path) {
		return faultsNone, 0
	}
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		// Every watch is cut early, after a random short time: the manager must
		// resume (or relist) and miss nothing.
		return faultWatchCut, time.Duration(1000+p.rnd.IntN(7000)) * time.Millisecond
	}
	if p.rnd.Float64() >= flakyShareOfHits {
		return faultsNone, 0
	}
	kinds := []string{faultDelay, faultTimeout, faultTooMany, faultServerError, faultDropBefore, faultLostReply}
	if r.Method == http.MethodPut || r.Method == http.MethodPatch {
		kinds = append(kinds, faultConflict, faultConflict)
	}
	kind = kinds[p.rnd.IntN(len(kinds))]
	switch kind {
	case faultDelay:
		d = time.Duration(p.rnd.IntN(1500)) * time.Millisecond
	case faultTimeout:
		d = time.Duration(1000+p.rnd.IntN(2000)) * time.Millisecond
	}
	return kind, d
}

// discovery requests (/api, /apis, /apis/GROUP, /apis/GROUP/VERSION, /version,
// /openapi) are let through: they are not the manager's reconcile traffic, and a
// manager whose start fails is not what this test is about.
func discovery(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch parts[0] {
	case "api":
		return len(parts) <= 2
	case "apis":
		return len(parts) <= 3
	}
	return true
}

func (p *flakyProxy) serve(w http.ResponseWriter, r *http.Request) {
	if p.intercept != nil && p.intercept(w, r) {
		return
	}
	kind, d := p.pick(r)
	switch kind {
	case faultsNone:
		p.proxy.ServeHTTP(w, r)
	case faultDelay:
		sleep(r.Context(), d)
		p.proxy.ServeHTTP(w, r)
	case faultWatchCut:
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		p.proxy.ServeHTTP(w, r.WithContext(ctx))
	case faultTimeout:
		sleep(r.Context(), d)
		writeStatus(w, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "the flaky proxy held the request and let it time out", "")
	case faultConflict:
		writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict, "the object has been modified; please apply your changes to the latest version and try again (injected by the flaky proxy)", "")
	case faultTooMany:
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "too many requests (injected by the flaky proxy)", "1")
	case faultServerError:
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error (injected by the flaky proxy)", "")
	case faultDropBefore:
		dropConnection(w)
	case faultLostReply:
		// The API server does the request; the manager never hears the reply.
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, r)
		dropConnection(w)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// writeStatus answers as the API server does: a metav1.Status of that reason.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg, retryAfter string) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
		secs, _ := strconv.Atoi(retryAfter)
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(secs)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&st)
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// report says how many requests met each fault.
func (p *flakyProxy) report() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var kinds []string
	total := 0
	for k, n := range p.counts {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests:", total)
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, p.counts[k])
	}
	return b.String()
}

func (p *flakyProxy) faults() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k, c := range p.counts {
		if k != faultsNone {
			n += c
		}
	}
	return n
}

// seedFrom reads the seed to replay from the environment, or draws one.
func seedFrom(t *testing.T, name string) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv(name); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", name, s, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, name, seed)
	return seed
}

// TestFlakyAPIServerKeepsEveryPromise runs allowed, asked (approved and denied) and
// denied calls through a manager whose every request goes through the flaky proxy:
// delayed, timed out, refused with 409, 429 and 500, connections dropped before the
// request or after the API server did it, and every watch cut early. The promises
// must hold, every call must end observed, and the controller must come to rest.
// The concurrent requests reach the proxy in no fixed order, so a seed replays the
// same draws, not always the same request for each.
func TestFlakyAPIServerKeepsEveryPromise(t *testing.T) {
	ns := env.Namespace(t)
	seed := seedFrom(t, flakySeedEnv)
	proxy := startFlakyProxy(t, seed)
	r := record(t, ns)
	playKubelet(t, ns)
	startManager(t, context.Background(), proxy.config(), ns)
	// Under faults refusals can be observed before the calls allowed between them,
	// which the default budget of five refusals in a row counts as a stuck agent:
	// "flaky" has a budget that never ends it, so its calls go the whole pipeline;
	// "ending" has the defaults and may end (Failed, RefusalBudgetExhausted) while
	// its calls are in flight, the task ending under a call whose status write was
	// lost (this found the Execution left behind by an unrecorded decision).
	newTaskWith(t, ns, "flaky", v1.ModeEdit, func(b *v1.Budgets) { b.MaxConsecutiveRefusals = 1000 })
	newTask(t, ns, "ending", v1.ModeEdit)
	denyDeletes(t, ns)

	const perTask = 12
	calls := 0
	for _, task := range []string{"flaky", "ending"} {
		for i := range int32(perTask) {
			tool, input := v1.ToolBash, `{"command":"ls"}` // allowed: read-only
			switch i % 3 {
			case 1:
				tool, input = v1.ToolWriteFile, fmt.Sprintf(`{"path":"f%d","content":"x"}`, i) // the edit mode asks
			case 2:
				input = `{"command":"rm -rf build"}` // denied by the policy
			}
			if err := env.Client.Create(t.Context(), fixtures.ToolIntent(ns, task, i, 0, tool, input, testProposer)); err != nil {
				t.Fatal(err)
			}
			calls++
		}
	}
	// A person decides the asked ones as they come: every other one approved.
	decideAll(t, ns, func(a *v1.Approval) (v1.ApprovalDecision, string) {
		name := a.Spec.IntentRef.Name
		var turn int
		_, _ = fmt.Sscanf(name[strings.LastIndex(name, "-t")+2:], "%d", &turn)
		if turn%2 == 0 {
			return v1.DecisionDenied, "bob"
		}
		return v1.DecisionApproved, "bob"
	})
	waitObserved(t, r, calls, 3*time.Minute)
	wantConverged(t, ns, 5*time.Second, 2*time.Minute)
	t.Logf("faults injected into the manager's traffic (seed %d): %s", seed, proxy.report())
	if proxy.faults() == 0 {
		t.Error("the proxy injected no fault: the test tested nothing")
	}
	wantNoViolations(t, r)
}

// newTaskWith creates a task as newTask does, with budgets changed by change.
func newTaskWith(t *testing.T, ns, name string, mode v1.TaskMode, change func(*v1.Budgets)) *v1.AgentTask {
	t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal:      "reliability under faults",
			Mode:      mode,
			Workspace: v1.WorkspaceSpec{VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")}},
			Agent:     v1.AgentSpec{External: &v1.ExternalAgent{Proposers: v1.Proposers{Users: []string{testProposer}}}},
		},
	}
	change(&task.Spec.Budgets)
	if err := env.Client.Create(t.Context(), task); err != nil {
		t.Fatalf("creating task %s: %v", name, err)
	}
	return task
}

// decideAll decides every pending Approval of ns as decide says, until the test
// ends; decide returns an empty decision to leave one undecided.
func decideAll(t *testing.T, ns string, decide func(*v1.Approval) (v1.ApprovalDecision, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var list v1.ApprovalList
			if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false, nil //nolint:nilerr // tried again at the next tick
			}
			for i := range list.Items {
				a := &list.Items[i]
				if len(a.Spec.Votes) > 0 {
					continue
				}
				decision, who := decide(a)
				if decision == "" {
					continue
				}
				patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
				a.Spec.Votes = fixtures.Votes(decision, who, "")
				_ = env.Client.Patch(ctx, a, patch) // a conflict or a refusal: seen again next tick
			}
			return false, nil
		})
	}()
}

// wantConverged waits until no toolgate object of ns changes (resourceVersion) for
// quiet; a controller that keeps writing, a hot loop, never gets there within
// deadline. The test fails naming what kept changing.
func wantConverged(t *testing.T, ns string, quiet, deadline time.Duration) {
	t.Helper()
	last := map[string]string{}
	changes := map[string]int{}
	since := time.Now()
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, deadline, true, func(ctx context.Context) (bool, error) {
		now, err := toolgateVersions(ctx, ns)
		if err != nil {
			return false, nil //nolint:nilerr // a failed list is tried again
		}
		changed := len(now) != len(last)
		for k, rv := range now {
			if last[k] != rv {
				changed = true
				if last[k] != "" {
					changes[k]++
				}
			}
		}
		if changed {
			last, since = now, time.Now()
		}
		return time.Since(since) >= quiet, nil
	})
	if err != nil {
		t.Errorf("the controller did not come to rest (no toolgate object unchanged for %s within %s); changes seen: %v", quiet, deadline, changes)
	}
}

// toolgateVersions lists the resourceVersion of every toolgate object of ns.
func toolgateVersions(ctx context.Context, ns string) (map[string]string, error) {
	out := map[string]string{}
	lists := []client.ObjectList{&v1.AgentTaskList{}, &v1.ToolIntentList{}, &v1.ApprovalList{}, &v1.ExecutionList{}, &v1.ToolPolicyList{}}
	for _, l := range lists {
		if err := env.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		items, err := metaItems(l)
		if err != nil {
			return nil, err
		}
		for _, o := range items {
			out[fmt.Sprintf("%T/%s", l, o.GetName())] = o.GetResourceVersion()
		}
	}
	return out, nil
}

func metaItems(l client.ObjectList) ([]metav1.Object, error) {
	var out []metav1.Object
	switch l := l.(type) {
	case *v1.AgentTaskList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1.ToolIntentList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1.ApprovalList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1.ExecutionList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1.ToolPolicyList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unexpected list %T", l)
	}
	return out, nil
}
