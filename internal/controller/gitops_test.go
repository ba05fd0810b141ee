package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/argocd"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
	"github.com/toolgate/toolgate/internal/transcript"
)

// What Argo CD puts on the objects it syncs from git (annotation tracking, with the
// instance label kept for other tools: the annotation+label method).
const (
	argoTrackingAnnotation = "argocd.argoproj.io/tracking-id"
	argoInstanceLabel      = "app.kubernetes.io/instance"
	argoAppName            = "toolgate-team-a"
	// argoFieldManager is the field manager the tests write the task's spec with, as
	// Argo CD's sync would, so that managedFields tell who wrote what.
	argoFieldManager = "argocd-controller"
)

// syncedTask creates an AgentTask the way an Argo CD sync does: with the tracking
// annotation, the instance label and Argo CD's field manager. It waits until the
// workspace is ready, like p.task.
func (p *pipelineEnv) syncedTask(name string, mode v1.TaskMode, mutate ...func(*v1.AgentTask)) *v1.AgentTask {
	p.t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   p.ns,
			Name:        name,
			Labels:      map[string]string{argoInstanceLabel: argoAppName},
			Annotations: map[string]string{argoTrackingAnnotation: fmt.Sprintf("%s:toolgate.dev/AgentTask:%s/%s", argoAppName, p.ns, name)},
		},
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
	if err := env.Client.Create(p.t.Context(), task, client.FieldOwner(argoFieldManager)); err != nil {
		p.t.Fatalf("creating task: %v", err)
	}
	p.eventually("task workspace ready", func() (bool, string) {
		got := p.getTask(name)
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionReady), fmt.Sprintf("%+v", got.Status.Conditions)
	})
	return p.getTask(name)
}

// patchTaskSpec changes the task's spec with Argo CD's field manager (a sync of a new
// commit, or an Argo CD action).
func (p *pipelineEnv) patchTaskSpec(name string, spec map[string]any) {
	p.t.Helper()
	body, _ := json.Marshal(map[string]any{"spec": spec})
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}}
	if err := env.Client.Patch(context.Background(), task, client.RawPatch("application/merge-patch+json", body), client.FieldOwner(argoFieldManager)); err != nil {
		p.t.Fatalf("patching task spec: %v", err)
	}
}

var argoCustomizations *argocd.Customizations

// health runs the shipped Argo CD health check of kind on obj.
func health(t *testing.T, kind string, obj client.Object) argocd.HealthStatus {
	t.Helper()
	if argoCustomizations == nil {
		c, err := argocd.Load(filepath.Join(testenv.RepoRoot(), "config", "argocd"))
		if err != nil {
			t.Fatalf("loading config/argocd: %v", err)
		}
		argoCustomizations = c
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := argocd.Health(argoCustomizations.Health[kind], u)
	if err != nil {
		t.Fatalf("health check of %s %s: %v", kind, obj.GetName(), err)
	}
	return hs
}

// waitHealth waits until the object's Argo CD health is status with a message that
// starts with prefix, re-reading the object each time, and returns the object.
func waitHealth[T client.Object](p *pipelineEnv, kind string, obj T, status, prefix string) T {
	p.t.Helper()
	p.eventually(fmt.Sprintf("%s %s health %s %q", kind, obj.GetName(), status, prefix), func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: obj.GetNamespace(), Name: obj.GetName()}, obj); err != nil {
			return false, err.Error()
		}
		hs := health(p.t, kind, obj)
		return hs.Status == status && strings.HasPrefix(hs.Message, prefix), fmt.Sprintf("%+v", hs)
	})
	return obj
}

func intentRef(p *pipelineEnv, name string) *v1.ToolIntent {
	return &v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}}
}

func approvalRef(p *pipelineEnv, name string) *v1.Approval {
	return &v1.Approval{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}}
}

func taskRef(p *pipelineEnv, name string) *v1.AgentTask {
	return &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}}
}

// A task synced by Argo CD goes through a whole pipeline run: an allowed read, an
// asked write that a person approves, then its owner marks it done. At every step the
// shipped health checks say what the controller's status says; the controller's
// children carry neither Argo CD's tracking annotation nor its instance label (or Argo
// CD would take them for synced resources and prune them) and each is owned; and the
// controller never writes the task's spec, so generation and spec stay as synced.
func TestGitOpsSyncedTaskThroughThePipeline(t *testing.T) {
	// Spent Jobs are kept for the whole test: it counts both calls' Jobs at the end.
	p := startPipeline(t, func(o *Options) { o.SpentJobTTL = time.Hour })
	synced := p.syncedTask("app", v1.ModeEdit)
	waitHealth(p, "AgentTask", taskRef(p, "app"), argocd.HealthProgressing, "Running: turn 0, 0 of 0 intents in flight")

	// An allowed read runs and succeeds.
	p.propose("app", 0, 0, v1.ToolReadFile, `{"path":"README.md"}`)
	waitHealth(p, "ToolIntent", intentRef(p, "app-t0-0"), argocd.HealthProgressing, "Execution app-t0-0 runs")
	p.runJob("app-t0-0", protocol.Result{ExitCode: 0, ContentSHA256: strings.Repeat("a", 64)}, "     1\t# app\n")
	waitHealth(p, "ToolIntent", intentRef(p, "app-t0-0"), argocd.HealthHealthy, "Succeeded (exit code 0): Execution app-t0-0 finished: Succeeded")

	// A write in Edit mode asks a person: task, intent and approval are Suspended.
	p.propose("app", 1, 0, v1.ToolBash, `{"command":"touch notes.txt"}`)
	waitHealth(p, "AgentTask", taskRef(p, "app"), argocd.HealthSuspended, "IntentsAwaitingApproval: waiting for a human decision on [app-t1-0]")
	waitHealth(p, "ToolIntent", intentRef(p, "app-t1-0"), argocd.HealthSuspended, "waiting for a decision on Approval app-t1-0 until ")
	a := waitHealth(p, "Approval", approvalRef(p, "app-t1-0"), argocd.HealthSuspended, "waiting for a decision by anyone with the approve verb until "+p.approval("app-t1-0").Spec.ExpiresAt.UTC().Format(time.RFC3339))
	if a.Status.State != v1.ApprovalStatePending {
		t.Errorf("approval state %q while Suspended", a.Status.State)
	}

	p.decide("app-t1-0", v1.DecisionApproved, "alice", "")
	p.runJob("app-t1-0", protocol.Result{ExitCode: 0}, "")
	waitHealth(p, "Approval", approvalRef(p, "app-t1-0"), argocd.HealthHealthy, "Consumed: approved by alice (used by Execution app-t1-0)")
	waitHealth(p, "ToolIntent", intentRef(p, "app-t1-0"), argocd.HealthHealthy, "Succeeded (exit code 0)")
	task := waitHealth(p, "AgentTask", taskRef(p, "app"), argocd.HealthProgressing, "Running: turn 1, 0 of 2 intents in flight")

	// The full run changed the task's status only.
	if task.Generation != synced.Generation || !reflect.DeepEqual(task.Spec, synced.Spec) {
		t.Errorf("the pipeline changed the task: generation %d -> %d, spec\n%+v\n->\n%+v", synced.Generation, task.Generation, synced.Spec, task.Spec)
	}
	if !reflect.DeepEqual(task.Labels, synced.Labels) || !reflect.DeepEqual(task.Annotations, synced.Annotations) {
		t.Errorf("the pipeline changed the task's labels or annotations: %v %v", task.Labels, task.Annotations)
	}
	if task.Status.ObservedGeneration != task.Generation {
		t.Errorf("status.observedGeneration %d, generation %d", task.Status.ObservedGeneration, task.Generation)
	}

	assertChildrenUntracked(t, p, task, map[client.ObjectList]int{
		&corev1.PersistentVolumeClaimList{}: 1, &v1.ApprovalList{}: 1, &v1.ExecutionList{}: 2,
		// Both calls run behind the task's one NetworkPolicy for their walls.
		&batchv1.JobList{}: 2, &networkingv1.NetworkPolicyList{}: 1,
	})

	// The owner marks it done in git; Argo CD syncs spec.lifecycle.
	p.patchTaskSpec("app", map[string]any{"lifecycle": "Done"})
	task = waitHealth(p, "AgentTask", taskRef(p, "app"), argocd.HealthHealthy, "MarkedDone: the task's owner marked it done (spec.lifecycle Done) and no intent is in flight")
	want := synced.Spec.DeepCopy()
	want.Lifecycle = v1.LifecycleDone
	if task.Generation != synced.Generation+1 || !reflect.DeepEqual(task.Spec, *want) {
		t.Errorf("after the sync of spec.lifecycle: generation %d (want %d), spec %+v", task.Generation, synced.Generation+1, task.Spec)
	}
	assertOnlyArgoWritesSpec(t, task)
}

// assertChildrenUntracked checks every object of the listed kinds in the test's
// namespace (all created by the controller for the task), with at least the given
// number of each.
func assertChildrenUntracked(t *testing.T, p *pipelineEnv, task *v1.AgentTask, lists map[client.ObjectList]int) {
	t.Helper()
	ctx := context.Background()
	var children []client.Object
	collect := func(list client.ObjectList, min int) {
		if err := env.Client.List(ctx, list, client.InNamespace(p.ns)); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) < min {
			t.Errorf("%T: %d objects, want at least %d", list, len(items), min)
		}
		for _, o := range items {
			children = append(children, o.(client.Object))
		}
	}
	for list, min := range lists {
		collect(list, min)
	}
	for _, o := range children {
		what := fmt.Sprintf("%T %s", o, o.GetName())
		assertNoArgoMetadata(t, what, o.GetLabels(), o.GetAnnotations())
		owners := 0
		for _, ref := range o.GetOwnerReferences() {
			if ref.Controller != nil && *ref.Controller {
				owners++
			}
		}
		want := 1
		if _, ok := o.(*networkingv1.NetworkPolicy); ok {
			// A call's fence is the namespace's for its walls, owned by nothing: no
			// deletion of one task removes the fence of another's running pod.
			want = 0
		}
		if owners != want {
			t.Errorf("%s has %d controller owner references, want %d: %+v", what, owners, want, o.GetOwnerReferences())
		}
		if job, ok := o.(*batchv1.Job); ok {
			// The Job controller copies the pod template's metadata to the pod.
			assertNoArgoMetadata(t, what+" pod template", job.Spec.Template.Labels, job.Spec.Template.Annotations)
		}
	}
	// The workspace claim is owned by the task itself.
	pvc := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: task.Status.WorkspaceClaimName}, pvc); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(pvc); ref == nil || ref.UID != task.UID || ref.Kind != "AgentTask" {
		t.Errorf("workspace claim owner = %+v, want the task", ref)
	}
}

func assertNoArgoMetadata(t *testing.T, what string, labels, annotations map[string]string) {
	t.Helper()
	for k := range annotations {
		if strings.HasPrefix(k, "argocd.argoproj.io/") {
			t.Errorf("%s carries Argo CD's annotation %s", what, k)
		}
	}
	if _, ok := labels[argoInstanceLabel]; ok {
		t.Errorf("%s carries Argo CD's instance label %s", what, argoInstanceLabel)
	}
}

// assertOnlyArgoWritesSpec reads the task's managedFields: only Argo CD's field
// manager owns spec fields, and every other manager (the controller) wrote the status
// subresource only.
func assertOnlyArgoWritesSpec(t *testing.T, task *v1.AgentTask) {
	t.Helper()
	sawArgoSpec, sawStatus := false, false
	for _, mf := range task.ManagedFields {
		var fields map[string]any
		if mf.FieldsV1 != nil {
			if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
				t.Fatal(err)
			}
		}
		_, hasSpec := fields["f:spec"]
		switch {
		case mf.Manager == argoFieldManager:
			sawArgoSpec = sawArgoSpec || hasSpec
		case mf.Subresource == "status":
			sawStatus = true
			if hasSpec {
				t.Errorf("manager %s owns spec fields through the status subresource", mf.Manager)
			}
		default:
			t.Errorf("manager %s (operation %s, subresource %q) wrote the task's main resource: %s", mf.Manager, mf.Operation, mf.Subresource, mf.FieldsV1.GetRawString())
		}
	}
	if !sawArgoSpec || !sawStatus {
		t.Errorf("managedFields lack Argo CD's spec or the controller's status: %+v", task.ManagedFields)
	}
}

// Every way an intent or a task can end, as Argo CD shows it: a refusal (denied by
// policy, invalid, denied or expired approval) is the system working and stays
// Healthy; a tool that ran and failed is Degraded; an expired approval is Degraded;
// a cancelled task is Degraded and stays so: a later sync (self-heal) that sets
// spec.lifecycle back to Active is refused by the API server.
func TestGitOpsHealthOfEveryEnding(t *testing.T) {
	p := startPipeline(t)
	p.syncedTask("c", v1.ModeEdit, func(task *v1.AgentTask) { task.Spec.Budgets.ApprovalTTLSeconds = 60 })
	p.policy("guard", v1.PolicyRule{
		Name: "no-deletes", Action: v1.RuleDeny, Reason: "deleting files is not allowed here",
		Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryDelete}},
	})

	p.propose("c", 0, 0, v1.ToolBash, `{"command":"rm -rf build"}`)
	waitHealth(p, "ToolIntent", intentRef(p, "c-t0-0"), argocd.HealthHealthy, "Denied, nothing was executed: Deny by ToolPolicy/guard/no-deletes")
	p.propose("c", 0, 1, v1.ToolReadFile, `{"file":"README.md"}`)
	waitHealth(p, "ToolIntent", intentRef(p, "c-t0-1"), argocd.HealthHealthy, "ValidationFailed, nothing was executed: ")

	p.propose("c", 1, 0, v1.ToolBash, `{"command":"touch a.txt"}`)
	p.approval("c-t1-0")
	p.condition("c-t1-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)
	p.decide("c-t1-0", v1.DecisionDenied, "bob", "not now")
	waitHealth(p, "Approval", approvalRef(p, "c-t1-0"), argocd.HealthHealthy, "Denied by bob: not now")
	waitHealth(p, "ToolIntent", intentRef(p, "c-t1-0"), argocd.HealthHealthy, "ApprovalDenied, nothing was executed: Approval c-t1-0 was denied by bob. Their comment: not now")

	p.propose("c", 2, 0, v1.ToolBash, `{"command":"touch b.txt"}`)
	expiresAt := p.approval("c-t2-0").Spec.ExpiresAt.UTC().Format(time.RFC3339)
	p.condition("c-t2-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)
	p.clock.Advance(2 * time.Minute)
	touch(t, &v1.Approval{}, p.ns, "c-t2-0")
	waitHealth(p, "ToolIntent", intentRef(p, "c-t2-0"), argocd.HealthHealthy, "ApprovalExpired, nothing was executed: Approval c-t2-0 expired at "+expiresAt)
	waitHealth(p, "Approval", approvalRef(p, "c-t2-0"), argocd.HealthDegraded, "Expired: nobody decided before "+expiresAt+"; the intent was not executed")

	p.propose("c", 3, 0, v1.ToolReadFile, `{"path":"missing.txt"}`)
	p.runJob("c-t3-0", protocol.Result{ExitCode: 1}, "no such file\n")
	waitHealth(p, "ToolIntent", intentRef(p, "c-t3-0"), argocd.HealthDegraded, "Failed (exit code 1): Execution c-t3-0 finished: Failed")
	waitHealth(p, "AgentTask", taskRef(p, "c"), argocd.HealthProgressing, "Running: turn 3, 0 of 5 intents in flight")

	// Cancelled with the Argo CD action (or a commit); self-heal cannot set it back.
	p.patchTaskSpec("c", map[string]any{"lifecycle": "Cancelled"})
	const cancelled = "Cancelled: the task was cancelled by its owner (spec.lifecycle Cancelled)"
	waitHealth(p, "AgentTask", taskRef(p, "c"), argocd.HealthDegraded, cancelled)
	revert := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"lifecycle":"Active"}}`))
	if err := env.Client.Patch(context.Background(), p.getTask("c"), revert, client.FieldOwner(argoFieldManager)); err == nil || !strings.Contains(err.Error(), "spec.lifecycle cannot go back") {
		t.Errorf("self-heal setting spec.lifecycle back to Active: err = %v", err)
	}
	if hs := health(t, "AgentTask", p.getTask("c")); hs.Status != argocd.HealthDegraded || hs.Message != cancelled {
		t.Errorf("after self-heal tried to revert spec.lifecycle: %+v", hs)
	}
}

// A task whose workspace does not exist yet is Progressing with the controller's
// reason, not Healthy and not Degraded.
func TestGitOpsHealthOfPendingWorkspace(t *testing.T) {
	p := startPipeline(t)
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "w"},
		Spec: v1.AgentTaskSpec{
			Goal:      "read the code",
			Workspace: v1.WorkspaceSpec{ExistingClaim: "checkout"},
			Agent:     v1.AgentSpec{External: externalAgent()},
		},
	}
	if err := env.Client.Create(t.Context(), task, client.FieldOwner(argoFieldManager)); err != nil {
		t.Fatal(err)
	}
	waitHealth(p, "AgentTask", taskRef(p, "w"), argocd.HealthProgressing,
		fmt.Sprintf(`WorkspacePending: PersistentVolumeClaim "checkout" named by spec.workspace.existingClaim does not exist in namespace %s`, p.ns))
}

// Policies synced from git: one that compiles is Healthy, one whose example fails is
// Degraded with the controller's message naming the rule. The ClusterToolPolicy is
// harmless to other tests (an Audit rule only records).
func TestGitOpsHealthOfPolicies(t *testing.T) {
	p := startPipeline(t)
	p.policy("good", v1.PolicyRule{
		Name: "tests", Action: v1.RuleAllow,
		Match:    v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryTest}},
		Examples: v1.RuleExamples{Match: []string{"go test ./..."}},
	})
	p.policy("bad", v1.PolicyRule{
		Name: "tests", Action: v1.RuleAllow,
		Match:    v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryTest}},
		Examples: v1.RuleExamples{Match: []string{"rm -rf build"}},
	})
	waitHealth(p, "ToolPolicy", &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "good"}}, argocd.HealthHealthy, "Compiled: 1 rules compiled and every example passed")
	waitHealth(p, "ToolPolicy", &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "bad"}}, argocd.HealthDegraded, "Invalid: ")
	bad := &v1.ToolPolicy{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "bad"}, bad); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "health of an invalid policy", health(t, "ToolPolicy", bad).Message, `rule "tests"`, "rm -rf build")

	cluster := &v1.ClusterToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: p.ns + "-audit"},
		Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
			Name: "record-network", Action: v1.RuleAudit,
			Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryNetwork}},
		}}},
	}
	if err := env.Client.Create(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cluster) })
	waitHealth(p, "ClusterToolPolicy", &v1.ClusterToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: cluster.Name}}, argocd.HealthHealthy, "Compiled: 1 rules compiled")
}

// A model task synced by Argo CD: the intents the controller creates for it and the
// ConfigMaps recording its turns carry no Argo CD metadata and are owned by the task,
// so Argo CD shows them under it and never prunes them; the finished task is Healthy
// with the condition's reason.
func TestGitOpsModelTaskChildren(t *testing.T) {
	p := newLoopEnv(t)
	server := fixtures.NewChatServer(t,
		toolCalls("reading the readme first", 10, chatCall{"call-1", "read_file", `{"path":"README.md"}`}),
		answer("The README says to run make test.", 5),
	)
	p.start()
	p.modelTask("m", v1.ModeReadOnly, server, func(task *v1.AgentTask) {
		task.Labels = map[string]string{argoInstanceLabel: argoAppName}
		task.Annotations = map[string]string{argoTrackingAnnotation: fmt.Sprintf("%s:toolgate.dev/AgentTask:%s/m", argoAppName, p.ns)}
	})
	intent := transcript.ModelIntentName("m", 0, 0)
	p.runJob(intent, protocol.Result{ExitCode: 0, ContentSHA256: strings.Repeat("b", 64)}, "     1\trun make test\n")
	task := p.finished("m", v1.ConditionSucceeded, v1.ReasonCompleted)
	if hs := health(t, "AgentTask", task); hs.Status != argocd.HealthHealthy || !strings.HasPrefix(hs.Message, "Completed: ") {
		t.Errorf("health of the finished model task: %+v", hs)
	}
	waitHealth(p.pipelineEnv, "ToolIntent", intentRef(p.pipelineEnv, intent), argocd.HealthHealthy, "Succeeded (exit code 0)")

	assertChildrenUntracked(t, p.pipelineEnv, task, map[client.ObjectList]int{
		&v1.ToolIntentList{}: 1, &v1.ExecutionList{}: 1, &batchv1.JobList{}: 1, &corev1.PersistentVolumeClaimList{}: 1,
	})
	intents := &v1.ToolIntentList{}
	if err := env.Client.List(t.Context(), intents, client.InNamespace(p.ns)); err != nil {
		t.Fatal(err)
	}
	for _, in := range intents.Items {
		if ref := metav1.GetControllerOf(&in); ref == nil || ref.UID != task.UID {
			t.Errorf("intent %s is not owned by its task: %+v", in.Name, in.OwnerReferences)
		}
	}
	records := &corev1.ConfigMapList{}
	if err := env.Client.List(t.Context(), records, client.InNamespace(p.ns)); err != nil {
		t.Fatal(err)
	}
	turns := 0
	for _, cm := range records.Items {
		if cm.Name == "kube-root-ca.crt" {
			continue
		}
		turns++
		assertNoArgoMetadata(t, "turn record "+cm.Name, cm.Labels, cm.Annotations)
		if ref := metav1.GetControllerOf(&cm); ref == nil || ref.UID != task.UID {
			t.Errorf("turn record %s is not owned by its task: %+v", cm.Name, cm.OwnerReferences)
		}
	}
	if turns == 0 {
		t.Error("no turn record ConfigMaps found")
	}
}
