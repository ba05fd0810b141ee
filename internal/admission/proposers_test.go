package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/transcript"
)

// Attacks on who may propose into a task, run against the real controller: it runs
// as its deployed service account with the ClusterRole of config/rbac/role.yaml, the
// admission policies of config/admission are enforced, and every proposer is a user
// with its own client certificate and only the roles a cluster would give it.

// The task the attacks aim at belongs to alice: only she (or whom she names)
// proposes into it. Its mode allows read-only calls without asking, so an intent
// that got past validation would run at once.
const victimTask = "fix-tests"

// The images the controller started by startController puts in Jobs. Nothing pulls
// them: envtest runs no kubelet.
const (
	runnerImage  = "example.test/toolgate/runner:test"
	sandboxImage = "example.test/toolgate/workspace:test"
)

// managerRoleOnce installs the controller's ClusterRole and binds it to the
// controller's service account, once for the package.
var managerRoleOnce sync.Once

// startController runs every toolgate reconciler as the controller's service
// account, watching only ns (so it leaves other tests' objects alone), until the
// test ends. The cache holds what the deployed manager's does (controller.
// CacheOptions: only toolgate's own Jobs, Pods and NetworkPolicies, only labelled
// Secrets). with changes the options, for example the clock.
func startController(t *testing.T, ns string, with ...func(*controller.Options)) {
	t.Helper()
	managerRoleOnce.Do(func() {
		role := &rbacv1.ClusterRole{}
		if err := readYAML(filepath.Join("config", "rbac", "role.yaml"), role); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: controllerUser}},
		}
		for _, obj := range []client.Object{role, binding} {
			if err := env.Client.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("installing the controller's RBAC: %v", err)
			}
		}
	})
	waitAllowed(t, ns, controllerUser, nil, "list", "toolintents")
	cacheOpts := controller.CacheOptions()
	cacheOpts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(configs[controllerUser], ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	opts := controller.Options{
		RunnerImage:         runnerImage,
		DefaultSandboxImage: sandboxImage,
		ControllerIdentity:  controllerUser,
	}
	for _, w := range with {
		w(&opts)
	}
	if err := controller.SetupWithManager(mgr, opts); err != nil {
		t.Fatalf("setting up the controller: %v", err)
	}
	testenv.RunManager(t, mgr)
}

// proposersNamespace is setupNamespace plus a workspace claim, the agent role for
// the extra users the attacks act as, and a running controller.
func proposersNamespace(t *testing.T, agents ...rbacv1.Subject) string {
	t.Helper()
	ns := setupNamespace(t)
	createClaim(t, ns, "ws")
	if len(agents) > 0 {
		if err := grant(t.Context(), ns, roleNames["agent"], agents...); err != nil {
			t.Fatal(err)
		}
		for _, a := range agents {
			if a.Kind == rbacv1.UserKind {
				waitAllowed(t, ns, a.Name, nil, "create", "toolintents")
			}
		}
	}
	startController(t, ns)
	return ns
}

// createTask creates a task as its owner (the admin) on the workspace claim.
func createTask(t *testing.T, ns, name string, agent v1.AgentSpec) *v1.AgentTask {
	t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal:      "make the tests pass",
			Mode:      v1.ModeEdit,
			Workspace: v1.WorkspaceSpec{ExistingClaim: "ws"},
			Agent:     agent,
		},
	}
	if err := env.Client.Create(t.Context(), task); err != nil {
		t.Fatalf("creating task %s: %v", name, err)
	}
	return task
}

func external(p v1.Proposers) v1.AgentSpec {
	return v1.AgentSpec{External: &v1.ExternalAgent{Description: "alice's coding agent", Proposers: p}}
}

// propose creates, as user, a read-only bash call for the task: one the task's mode
// allows without asking.
func propose(t *testing.T, c client.Client, ns, name, task, requestedBy string, groups ...string) *v1.ToolIntent {
	t.Helper()
	intent := toolIntent(ns, name, requestedBy)
	intent.Spec.TaskRef.Name = task
	intent.Spec.RequestedByGroups = groups
	if err := c.Create(t.Context(), intent); err != nil {
		t.Fatalf("creating intent %s as %s: %v", name, requestedBy, err)
	}
	return intent
}

// waitFor polls the intent until cond holds, and returns it.
func waitFor(t *testing.T, intent *v1.ToolIntent, what string, cond func(*v1.ToolIntent) bool) *v1.ToolIntent {
	t.Helper()
	got := &v1.ToolIntent{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(intent), got); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cond(got), nil
	})
	if err != nil {
		t.Fatalf("intent %s: %s never happened; status %+v", intent.Name, what, got.Status)
	}
	return got
}

// wantRefusedByValidation waits for the intent's observation and checks that it is
// ValidationFailed with want in its summary, that nothing was executed, and that no
// Execution and no Job exist for it.
func wantRefusedByValidation(t *testing.T, intent *v1.ToolIntent, want string) *v1.ToolIntent {
	t.Helper()
	got := waitFor(t, intent, "an observation", func(i *v1.ToolIntent) bool { return i.Status.Observation != nil })
	obs := got.Status.Observation
	if obs.Outcome != v1.OutcomeValidationFailed || obs.Executed {
		t.Fatalf("intent %s: outcome %s, executed %t; want ValidationFailed with nothing executed (%s)", got.Name, obs.Outcome, obs.Executed, obs.Summary)
	}
	if !strings.Contains(obs.Summary, want) {
		t.Fatalf("intent %s: observation %q\nwant it to contain %q", got.Name, obs.Summary, want)
	}
	if got.Status.Decision != nil || got.Status.ExecutionName != "" {
		t.Fatalf("intent %s was refused but decided or executed: %+v", got.Name, got.Status)
	}
	wantNothingRan(t, got)
	return got
}

// wantNothingRan checks that no Execution and no Job exist for the intent.
func wantNothingRan(t *testing.T, intent *v1.ToolIntent) {
	t.Helper()
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: intent.Namespace, Name: pipeline.ExecutionName(intent)}, &v1.Execution{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("intent %s: Execution lookup answered %v; want NotFound", intent.Name, err)
	}
	var jobs batchv1.JobList
	if err := env.Client.List(t.Context(), &jobs, client.InNamespace(intent.Namespace), client.MatchingLabels{v1.LabelIntent: intent.Name}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) > 0 {
		t.Fatalf("intent %s was refused but Job %s exists", intent.Name, jobs.Items[0].Name)
	}
}

// wantRuns waits until the intent, allowed by the task's mode, has its Execution and
// the Execution its Job: the proposer got through.
func wantRuns(t *testing.T, intent *v1.ToolIntent) {
	t.Helper()
	got := waitFor(t, intent, "an Execution", func(i *v1.ToolIntent) bool {
		return i.Status.ExecutionName != "" || i.Status.Observation != nil
	})
	if got.Status.ExecutionName == "" {
		t.Fatalf("intent %s of a proposer did not run: %+v", got.Name, got.Status.Observation)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var jobs batchv1.JobList
		if err := env.Client.List(ctx, &jobs, client.InNamespace(got.Namespace), client.MatchingLabels{v1.LabelIntent: got.Name}); err != nil {
			return false, err
		}
		return len(jobs.Items) > 0, nil
	})
	if err != nil {
		t.Fatalf("intent %s has Execution %s but no Job: %v", got.Name, got.Status.ExecutionName, err)
	}
}

// (a) A user bound only to toolgate-agent, who is not among a task's proposers,
// proposes into it: validation refuses, naming who may propose, and nothing runs.
// The same user's intent for a task that names it runs, so the refusal is the rule,
// not a broken setup.
func TestAgentWhoIsNotAProposerCannotProposeIntoAnothersTask(t *testing.T) {
	ns := proposersNamespace(t)
	createTask(t, ns, victimTask, external(v1.Proposers{Users: []string{alice}, Groups: []string{"team-a"}, ServiceAccounts: []v1.ServiceAccountReference{{Namespace: ns, Name: "coding-agent"}}}))
	createTask(t, ns, "agents-own", external(v1.Proposers{Users: []string{agentUser}}))

	attack := propose(t, clients[agentUser], ns, "into-alices-task", victimTask, agentUser)
	got := wantRefusedByValidation(t, attack, fmt.Sprintf(
		"spec.requestedBy: agent-bot may not propose calls for AgentTask fix-tests; its proposers are users alice; groups team-a; service accounts %s/coding-agent", ns))
	// The refused intent still belongs to the external task (adopted), so deleting the
	// task removes it; ownership gave it nothing.
	if !metav1.IsControlledBy(got, getTask(t, ns, victimTask)) {
		t.Errorf("the refused intent of an external task was not adopted: %+v", got.OwnerReferences)
	}

	wantRuns(t, propose(t, clients[agentUser], ns, "into-its-own-task", "agents-own", agentUser))
}

// (b, e) The same user proposes into a model task, once plainly and once naming the
// task as its controller owner itself: both are refused, the plain one is not
// adopted, and nothing runs. The model's own call, created by the agent loop as the
// controller, runs.
func TestNobodyButTheAgentLoopProposesIntoAModelTask(t *testing.T) {
	ns := proposersNamespace(t)
	model := fakeModel(t)
	task := createTask(t, ns, victimTask, v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: model.URL + "/v1", Model: "test-model"}})
	const modelOnly = "only toolgate's agent loop proposes calls for a model task"

	plain := propose(t, clients[agentUser], ns, "into-the-model-task", victimTask, agentUser)
	got := wantRefusedByValidation(t, plain, "spec.requestedBy: agent-bot may not propose calls for AgentTask fix-tests: its agent is a model (spec.agent.model), and "+modelOnly)
	if owner := metav1.GetControllerOf(got); owner != nil {
		t.Fatalf("the attacker's intent for a model task was adopted: controller owner %+v", owner)
	}

	task = getTask(t, ns, task.Name)
	forged := toolIntent(ns, "owned-by-the-model-task", agentUser)
	forged.Spec.TaskRef.Name = victimTask
	forged.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}
	if err := clients[agentUser].Create(t.Context(), forged); err != nil {
		t.Fatalf("creating the forged intent: %v", err)
	}
	wantRefusedByValidation(t, forged, modelOnly)

	// The model proposed one call; the loop created its intent, which runs.
	wantRuns(t, &v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: transcript.ModelIntentName(victimTask, 0, 0)}})
}

// (c) A task names a group: a member proposes by claiming it; the same member
// without the claim is refused by validation; someone claiming a group they are not
// in is refused by the API server.
func TestAProposerByGroupMustClaimAGroupOfTheirOwn(t *testing.T) {
	ns := proposersNamespace(t, rbacv1.Subject{Kind: rbacv1.UserKind, Name: carol}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: bob})
	createTask(t, ns, victimTask, external(v1.Proposers{Groups: []string{sreGroup}}))

	wantRuns(t, propose(t, clients[carol], ns, "carol-as-sre", victimTask, carol, sreGroup))

	unclaimed := propose(t, clients[carol], ns, "carol-without-claim", victimTask, carol)
	wantRefusedByValidation(t, unclaimed, "spec.requestedBy: carol may not propose calls for AgentTask fix-tests; its proposers are groups sre (the task's owner adds you to spec.agent.external.proposers; a group counts only when the intent claims it in spec.requestedByGroups)")

	claimed := toolIntent(ns, "bob-as-sre", bob)
	claimed.Spec.TaskRef.Name = victimTask
	claimed.Spec.RequestedByGroups = []string{sreGroup}
	wantRefused(t, clients[bob].Create(t.Context(), claimed), "spec.requestedByGroups: sre is not one of your groups (you are in system:authenticated); claim only groups you are in, or leave the field out.")
	wantNothingRan(t, claimed)
}

// (d) A task names a service account as namespace/name: the agent running as it
// proposes. Its user is what the API server authenticates a service account as.
// Another service account of the namespace with the same role is refused.
func TestAServiceAccountProposer(t *testing.T) {
	ns := proposersNamespace(t)
	sa := serviceAccountClient(t, ns, "coding-agent")
	other := serviceAccountClient(t, ns, "other-agent")
	createTask(t, ns, victimTask, external(v1.Proposers{ServiceAccounts: []v1.ServiceAccountReference{{Namespace: ns, Name: "coding-agent"}}}))

	wantRuns(t, propose(t, sa, ns, "by-the-agent", victimTask, "system:serviceaccount:"+ns+":coding-agent"))
	wantRefusedByValidation(t, propose(t, other, ns, "by-another-agent", victimTask, "system:serviceaccount:"+ns+":other-agent"),
		fmt.Sprintf("spec.requestedBy: system:serviceaccount:%s:other-agent may not propose calls for AgentTask fix-tests; its proposers are service accounts %s/coding-agent", ns, ns))
}

// serviceAccountClient creates a ServiceAccount bound to toolgate-agent and returns
// a client authenticated as its user (with the groups the API server gives service
// accounts), the way a pod of the agent would reach the API server.
func serviceAccountClient(t *testing.T, ns, name string) client.Client {
	t.Helper()
	if err := env.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-agent", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleNames["agent"]},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	})
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":" + name
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
	authn, err := env.AddUser(envtest.User{Name: user, Groups: groups}, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(authn.Config(), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, ns, user, groups, "create", "toolintents")
	return c
}

func getTask(t *testing.T, ns, name string) *v1.AgentTask {
	t.Helper()
	task := &v1.AgentTask{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, task); err != nil {
		t.Fatal(err)
	}
	return task
}

// fakeModel is an OpenAI-compatible endpoint whose model proposes one read-only
// call in its first turn and is unavailable afterwards (the call never finishes in
// envtest, so the loop does not ask again).
func fakeModel(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	turns := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/v1/chat/completions" || turns > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"no more turns in this test","type":"test_error"}}`))
			return
		}
		turns++
		calls := []map[string]any{{"id": "call-0", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"ls"}`}}}
		body, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": "test-model",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{"role": "assistant", "content": "Look around first.", "tool_calls": calls}}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}
