package reliability

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/testenv"
)

// env is the control plane shared by the package's tests; each works in its own
// namespace.
var env *testenv.Env

func TestMain(m *testing.M) {
	// The controller's log is kept for wantNoViolations (a recovered panic is a
	// broken promise too) and shown with -v.
	flag.Parse()
	var out io.Writer = &controllerLog
	if testing.Verbose() {
		out = io.MultiWriter(&controllerLog, os.Stderr)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(out)))
	os.Exit(testenv.Main(m, &env, nil))
}

// controllerLog holds everything the in-process managers logged.
var controllerLog syncBuffer

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// panics returns the log lines that report a panic.
func (b *syncBuffer) panics() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, line := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(line, "panic") {
			out = append(out, line)
		}
	}
	return out
}

// denyDeletes adds a policy that denies deleting commands.
func denyDeletes(t *testing.T, ns string) {
	t.Helper()
	err := env.Client.Create(t.Context(), &v1.ToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-deletes"},
		Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
			Name: "deny-deletes", Action: v1.RuleDeny, Reason: "deleting is never allowed",
			Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryDelete}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Images named in the Jobs; nothing pulls them (envtest runs no kubelet).
const (
	testRunnerImage  = "example.test/toolgate/runner:test"
	testSandboxImage = "example.test/toolgate/workspace:test"
)

// testProposer proposes every intent of the package's tasks.
const testProposer = "agent-alice"

// newTask creates an external task in ns on a claim of its own, open to
// testProposer, in the given mode.
func newTask(t *testing.T, ns, name string, mode v1.TaskMode) *v1.AgentTask {
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
	if err := env.Client.Create(t.Context(), task); err != nil {
		t.Fatalf("creating task %s: %v", name, err)
	}
	return task
}

// kubelet plays the kubelet and the Job controller in one namespace (envtest runs
// neither): each Job gets a pod, which finishes at once with the runner's result
// (exit code 0, empty output) in its termination message. pods/log is not served,
// so the Executions record that the log could not be read; the result stands.
type kubelet struct {
	mu   sync.Mutex
	done map[string]bool // Job UID -> its pod finished
}

// playKubelet runs the kubelet until the test ends.
func playKubelet(t *testing.T, ns string) {
	t.Helper()
	k := &kubelet{done: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			k.pass(ctx, ns)
			return false, nil
		})
	}()
}

func (k *kubelet) pass(ctx context.Context, ns string) {
	var jobs batchv1.JobList
	if err := env.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		k.mu.Lock()
		done := k.done[string(job.UID)]
		k.mu.Unlock()
		if done || !job.DeletionTimestamp.IsZero() {
			continue
		}
		if err := testenv.FinishJobPod(ctx, env.Client, job, testRunnerImage, testSandboxImage); err == nil {
			k.mu.Lock()
			k.done[string(job.UID)] = true
			k.mu.Unlock()
		}
	}
}

// record starts a Recorder on ns for the test.
func record(t *testing.T, ns string) *Recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := StartRecorder(ctx, env.Config, ns)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitObserved waits until the recorder has seen want intents, all observed.
func waitObserved(t *testing.T, r *Recorder, want int, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		n, observed := r.Count()
		return n >= want && observed == n, nil
	})
	if err != nil {
		n, observed := r.Count()
		t.Fatalf("%d of %d intents observed (want %d), violations so far: %v", observed, n, want, r.Check())
	}
}

// wantNoViolations fails the test with every broken promise.
func wantNoViolations(t *testing.T, r *Recorder) {
	t.Helper()
	for _, x := range r.Check() {
		t.Errorf("violation: %s", x)
	}
	for _, line := range controllerLog.panics() {
		t.Errorf("the controller panicked: %s", line)
	}
}

// spentJobTTL is short here, so that spent Jobs are reaped while the faults go on:
// a lagging cache that made a reaped call's Job again would run it twice, which the
// History catches (at most one Job per intent, ever).
const spentJobTTL = 200 * time.Millisecond

// startManager runs every toolgate reconciler in this process against cfg, with the
// cache cmd/manager runs with (its selectors and trimmed objects) watching only ns,
// until ctx ends or the test ends. Leader election is off: split-brain tests start
// two.
func startManager(t *testing.T, ctx context.Context, cfg *rest.Config, ns string) {
	t.Helper()
	cacheOpts := controller.CacheOptions()
	cacheOpts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	opts := controller.Options{RunnerImage: testRunnerImage, DefaultSandboxImage: testSandboxImage, SpentJobTTL: spentJobTTL}
	if err := controller.SetupWithManager(mgr, opts); err != nil {
		t.Fatalf("setting up the controller: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager exited with an error: %v", err)
		}
	})
}
