package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// podLogs stands in for the pods/log subresource (envtest runs no kubelet): the test
// says what each pod's log holds when it completes the pod by hand.
type podLogs struct {
	mu   sync.Mutex
	text map[string]string
}

func (l *podLogs) set(pod, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.text == nil {
		l.text = map[string]string{}
	}
	l.text[pod] = text
}

func (l *podLogs) ReadLog(_ context.Context, _, pod string, opts corev1.PodLogOptions) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := []byte(l.text[pod])
	if opts.LimitBytes != nil && int64(len(b)) > *opts.LimitBytes {
		b = b[:*opts.LimitBytes]
	}
	return b, nil
}

// pipelineEnv is the whole controller (every reconciler) against the shared control
// plane, with the kubelet's part played by the test.
type pipelineEnv struct {
	t *testing.T
	// mgr is the pipeline's manager; stop stops it before the test ends.
	mgr   ctrl.Manager
	stop  func()
	ns    string
	logs  *podLogs
	clock *fixtures.Clock
}

// startPipeline starts every reconciler with testOptions, changed by tune.
func startPipeline(t *testing.T, tune ...func(*Options)) *pipelineEnv {
	t.Helper()
	return startPipelineIn(t, env.Namespace(t), tune...)
}

// startPipelineIn is startPipeline on an existing namespace: a controller started
// again where another one ran.
func startPipelineIn(t *testing.T, ns string, tune ...func(*Options)) *pipelineEnv {
	t.Helper()
	p := &pipelineEnv{t: t, ns: ns, logs: &podLogs{}, clock: &fixtures.Clock{}}
	tuned := func(opts Options) Options {
		opts.LogReader = p.logs
		for _, f := range tune {
			f(&opts)
		}
		return opts
	}
	withClock := func(setup func(ctrl.Manager, Options) error) func(ctrl.Manager, Options) error {
		return func(mgr ctrl.Manager, opts Options) error {
			opts = tuned(opts)
			opts.Now = p.clock.Now
			return setup(mgr, opts)
		}
	}
	p.mgr, p.stop = startManagerIn(t, ns,
		setupIndexes,
		withClock(setupAgentTask),
		withClock(setupToolIntent),
		withClock(setupApproval),
		setupPolicies,
		// The archivers start only when a test gives an archive (Options.Archive).
		func(mgr ctrl.Manager, opts Options) error { return setupArchive(mgr, tuned(opts)) },
		func(mgr ctrl.Manager, opts Options) error {
			r, err := newExecutionReconciler(mgr, tuned(opts))
			if err != nil {
				return err
			}
			r.Logs = p.logs
			return r.SetupWithManager(mgr)
		},
	)
	return p
}

// testProposer is who the tests' external agent proposes as (p.propose), and the one
// proposer of the tasks they create (externalAgent).
const testProposer = "agent-alice"

// externalAgent is the agent of the tests' external tasks: testProposer proposes.
func externalAgent() *v1.ExternalAgent {
	return &v1.ExternalAgent{Proposers: v1.Proposers{Users: []string{testProposer}}}
}

// task creates an external-agent AgentTask with an owned workspace claim.
func (p *pipelineEnv) task(name string, mode v1.TaskMode, mutate ...func(*v1.AgentTask)) *v1.AgentTask {
	p.t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal:      "make the failing test pass",
			Mode:      mode,
			Workspace: v1.WorkspaceSpec{VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")}},
			Agent:     v1.AgentSpec{External: externalAgent()},
		},
	}
	for _, m := range mutate {
		m(task)
	}
	if err := env.Client.Create(p.t.Context(), task); err != nil {
		p.t.Fatalf("creating task: %v", err)
	}
	p.eventually("task workspace ready", func() (bool, string) {
		got := p.getTask(name)
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionReady), fmt.Sprintf("%+v", got.Status.Conditions)
	})
	return task
}

func (p *pipelineEnv) getTask(name string) *v1.AgentTask {
	p.t.Helper()
	task := &v1.AgentTask{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, task); err != nil {
		p.t.Fatalf("getting task: %v", err)
	}
	return task
}

// seenByController waits until the controller's cache holds the task as ok wants it:
// a test that acts right after the API server shows a change would otherwise race
// the controller's watch of it.
func (p *pipelineEnv) seenByController(name, what string, ok func(*v1.AgentTask) bool) {
	p.t.Helper()
	p.eventually("the controller sees task "+name+" "+what, func() (bool, string) {
		task := &v1.AgentTask{}
		err := p.mgr.GetClient().Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, task)
		return err == nil && ok(task), fmt.Sprint(err)
	})
}

// policy creates a ToolPolicy in the test namespace.
func (p *pipelineEnv) policy(name string, rules ...v1.PolicyRule) *v1.ToolPolicy {
	p.t.Helper()
	pol := &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}, Spec: v1.ToolPolicySpec{Rules: rules}}
	if err := env.Client.Create(p.t.Context(), pol); err != nil {
		p.t.Fatalf("creating policy: %v", err)
	}
	return pol
}

// propose creates a ToolIntent as an external agent would.
func (p *pipelineEnv) propose(task string, turn, index int32, tool v1.ToolName, input string) *v1.ToolIntent {
	p.t.Helper()
	return p.proposeAs(task, turn, index, tool, input, "proposed by the test")
}

// proposeAs creates a ToolIntent with the agent's own reason.
func (p *pipelineEnv) proposeAs(task string, turn, index int32, tool v1.ToolName, input, reason string) *v1.ToolIntent {
	p.t.Helper()
	intent := fixtures.ToolIntent(p.ns, task, turn, index, tool, input, testProposer)
	intent.Spec.Reason, intent.Spec.ProposedBy = reason, v1.ProposedBy{Provider: "external"}
	if err := env.Client.Create(p.t.Context(), intent); err != nil {
		p.t.Fatalf("creating intent: %v", err)
	}
	return intent
}

func (p *pipelineEnv) getIntent(name string) *v1.ToolIntent {
	p.t.Helper()
	intent := &v1.ToolIntent{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, intent); err != nil {
		p.t.Fatalf("getting intent: %v", err)
	}
	return intent
}

func (p *pipelineEnv) eventually(what string, cond func() (bool, string)) {
	p.t.Helper()
	eventually(p.t, what, cond)
}

// observed waits for the intent's observation.
func (p *pipelineEnv) observed(name string) *v1.ToolIntent {
	p.t.Helper()
	var intent *v1.ToolIntent
	p.eventually("observation of "+name, func() (bool, string) {
		intent = p.getIntent(name)
		return intent.Status.Observation != nil, fmt.Sprintf("%+v", intent.Status)
	})
	return intent
}

// condition waits until the intent has the condition with the status and reason.
func (p *pipelineEnv) condition(name, typ string, status metav1.ConditionStatus, reason string) *v1.ToolIntent {
	p.t.Helper()
	var intent *v1.ToolIntent
	p.eventually(fmt.Sprintf("%s %s=%s/%s", name, typ, status, reason), func() (bool, string) {
		intent = p.getIntent(name)
		c := meta.FindStatusCondition(intent.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason, fmt.Sprintf("%+v", intent.Status.Conditions)
	})
	return intent
}

func (p *pipelineEnv) approval(name string) *v1.Approval {
	p.t.Helper()
	a := &v1.Approval{}
	// Once its reconciler has recorded a state: what a person deciding it sees.
	p.eventually("approval "+name+" with a state", func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, a)
		return err == nil && a.Status.State != "", fmt.Sprint(err, a.Status.State)
	})
	return a
}

// decide appends by's vote to an Approval the way `kubectl patch --type json` does
// (add /spec/votes/-), once the Approval is there to be decided (a person sees it
// before voting).
func (p *pipelineEnv) decide(name string, decision v1.ApprovalDecision, by, comment string) {
	p.t.Helper()
	p.approval(name)
	body, _ := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/votes/-", "value": v1.ApprovalVote{User: by, Decision: decision, Comment: comment}}})
	a := &v1.Approval{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}}
	if err := env.Client.Patch(context.Background(), a, client.RawPatch("application/json-patch+json", body)); err != nil {
		p.t.Fatalf("voting on approval: %v", err)
	}
}

// runJob plays the kubelet for an Execution's Job: it creates the Job's pod and
// finishes it with the runner's result in the termination message and the output as
// the container log.
func (p *pipelineEnv) runJob(execName string, res protocol.Result, output string) {
	p.t.Helper()
	job := &batchv1.Job{}
	p.eventually("Job "+execName, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: execName}, job)
		return err == nil, fmt.Sprint(err)
	})
	pod := createJobPod(p.t, job)
	res.StdoutBytes = int64(len(output))
	res.OutputSHA256 = sha256Hex(output)
	res.InvocationSHA256 = testenv.InvocationSHA256(pod)
	msg, err := json.Marshal(res)
	if err != nil {
		p.t.Fatal(err)
	}
	p.logs.set(pod.Name, output)
	phase := corev1.PodSucceeded
	if res.ExitCode != 0 {
		phase = corev1.PodFailed
	}
	// The container exits as the runner does after writing res; the tool's own exit
	// code is only in res (see protocol.ProcessExitCode).
	setPodStatus(p.t, pod, phase, terminated(int32(protocol.ProcessExitCode(res)), string(msg)))
}

func (p *pipelineEnv) executionExists(name string) bool {
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, &v1.Execution{})
	if err != nil && !apierrors.IsNotFound(err) {
		p.t.Fatal(err)
	}
	return err == nil
}

func (p *pipelineEnv) countExecutions() int {
	list := &v1.ExecutionList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(p.ns)); err != nil {
		p.t.Fatal(err)
	}
	return len(list.Items)
}

// intentEvents lists the reasons of the events about an intent, in order.
func (p *pipelineEnv) intentEvents(name string) []string {
	p.t.Helper()
	list := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(p.ns)); err != nil {
		p.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "ToolIntent" && e.Regarding.Name == name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// waitEvents waits until the intent has events with every reason.
func (p *pipelineEnv) waitEvents(name string, reasons ...string) {
	p.t.Helper()
	p.eventually("events of "+name, func() (bool, string) {
		have := strings.Join(p.intentEvents(name), ",")
		for _, r := range reasons {
			if !strings.Contains(","+have+",", ","+r+",") {
				return false, have
			}
		}
		return true, have
	})
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s: missing %q in:\n%s", what, sub, s)
		}
	}
}

func mustNotContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			t.Errorf("%s: must not contain %q:\n%s", what, sub, s)
		}
	}
}
