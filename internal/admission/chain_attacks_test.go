package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// Attacks on the authorization chain around an approval (issue 14, holes 2 to 10),
// each played by the people who would play it in a cluster: the agent proposes with
// its own certificate (toolgate-agent), alice approves with hers
// (toolgate-approver), the task's owner olive edits the task with hers
// (toolgate-editor), paula adds ClusterToolPolicies (toolgate-admin), victor reads
// (toolgate-viewer). The controller runs as its service account with its deployed
// ClusterRole, behind the admission policies. What only an admin can do (create an
// Execution, plant objects under a call's name) is first shown refused to the users
// who would try it, then done as the admin, standing for a compromised path past
// admission. envtest runs no kubelet: the admin plays it, writing pod status, and a
// fake kubelet (a Node whose address is a local HTTPS server) serves the tool
// container's log to the API server, so the controller reads it through pods/log
// as it does in a cluster.

// The workspace claims of attackNamespace: the task's own, and another one its owner
// might switch the task to.
const (
	taskClaim  = "ws"
	otherClaim = "other-ws"
)

// attackNamespace is setupNamespace plus the two workspace claims and the controller,
// started with with applied to its options.
func attackNamespace(t *testing.T, with ...func(*controller.Options)) string {
	t.Helper()
	ns := setupNamespace(t)
	createClaim(t, ns, taskClaim)
	createClaim(t, ns, otherClaim)
	startController(t, ns, with...)
	return ns
}

func createClaim(t *testing.T, ns, name string) {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := env.Client.Create(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
}

// ownerTask creates, as the task owner olive, an external task on the claim ws whose
// one proposer is the agent.
func ownerTask(t *testing.T, ns, name string, mode v1.TaskMode, mutate ...func(*v1.AgentTask)) *v1.AgentTask {
	t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal:      "make the tests pass",
			Mode:      mode,
			Workspace: v1.WorkspaceSpec{ExistingClaim: taskClaim},
			Agent:     external(v1.Proposers{Users: []string{agentUser}}),
		},
	}
	for _, m := range mutate {
		m(task)
	}
	if err := clients[ownerUser].Create(t.Context(), task); err != nil {
		t.Fatalf("%s creating task %s: %v", ownerUser, name, err)
	}
	return task
}

// proposeBash creates, as the agent, a bash call for the task in the given turn
// (calls of one turn are siblings: an allowed one waits for an asked one).
func proposeBash(t *testing.T, ns, name, task string, turn int32, command string, mutate ...func(*v1.ToolIntent)) *v1.ToolIntent {
	t.Helper()
	input, err := json.Marshal(map[string]string{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	intent := toolIntent(ns, name, agentUser)
	intent.Spec.TaskRef.Name = task
	intent.Spec.Turn = turn
	intent.Spec.Input = runtime.RawExtension{Raw: input}
	for _, m := range mutate {
		m(intent)
	}
	if err := clients[agentUser].Create(t.Context(), intent); err != nil {
		t.Fatalf("%s proposing %s: %v", agentUser, name, err)
	}
	return intent
}

// approvalOf waits until the intent asks, and returns its Approval as alice reads it
// (kubectl describe approval).
func approvalOf(t *testing.T, intent *v1.ToolIntent) *v1.Approval {
	t.Helper()
	got := waitFor(t, intent, "an Approval", func(i *v1.ToolIntent) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, v1.ConditionApproved)
		return i.Status.ApprovalName != "" && c != nil && c.Reason == v1.ReasonApprovalPending
	})
	a := &v1.Approval{}
	if err := clients[alice].Get(t.Context(), client.ObjectKey{Namespace: got.Namespace, Name: got.Status.ApprovalName}, a); err != nil {
		t.Fatalf("%s reading Approval %s: %v", alice, got.Status.ApprovalName, err)
	}
	return a
}

// approveAs decides the Approval as user, signing with the user's own name.
func approveAs(t *testing.T, user string, a *v1.Approval) {
	t.Helper()
	if err := decide(t.Context(), clients[user], a, v1.DecisionApproved, user); err != nil {
		t.Fatalf("%s approving %s: %v", user, a.Name, err)
	}
}

// patchTask sends a merge patch of the task's spec as user (kubectl patch agenttask).
func patchTask(t *testing.T, user, ns, name string, spec map[string]any) {
	t.Helper()
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := mergePatch(t.Context(), clients[user], task, map[string]any{"spec": spec}); err != nil {
		t.Fatalf("%s patching task %s: %v", user, name, err)
	}
}

// observed waits for the intent's observation and checks its outcome, whether
// anything was executed, and that its summary says each of want. A call that must
// not run fails as soon as its Execution runs (has a Job), and when its observation
// still names an Execution. (An intent names its Execution before creating it, so a
// name alone, ExecutionRequested, is no run: the create may still find the name
// taken by an object that is not the intent's, and clear it.)
func observed(t *testing.T, intent *v1.ToolIntent, outcome v1.Outcome, executed bool, want ...string) *v1.ToolIntent {
	t.Helper()
	runs := func(i *v1.ToolIntent) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, v1.ConditionExecuted)
		return c != nil && c.Reason == v1.ReasonExecutionCreated
	}
	got := waitFor(t, intent, "an observation", func(i *v1.ToolIntent) bool {
		return i.Status.Observation != nil || (!executed && runs(i))
	})
	if !executed && (runs(got) || got.Status.ExecutionName != "") {
		t.Fatalf("intent %s runs as Execution %s; want it to end %s with nothing executed (conditions %+v)", got.Name, got.Status.ExecutionName, outcome, got.Status.Conditions)
	}
	obs := got.Status.Observation
	if obs.Outcome != outcome || obs.Executed != executed {
		t.Fatalf("intent %s: outcome %s, executed %t; want %s, executed %t (%s)", got.Name, obs.Outcome, obs.Executed, outcome, executed, obs.Summary)
	}
	for _, w := range want {
		if !strings.Contains(obs.Summary, w) {
			t.Errorf("intent %s: observation %q\nwant it to say %q", got.Name, obs.Summary, w)
		}
	}
	return got
}

// waitJob waits for the Job of the Execution name.
func waitJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("no Job %s: %v", name, err)
	}
	return job
}

// jobsOf lists the Jobs whose pods belong to the Execution name.
func jobsOf(t *testing.T, ns, name string) []batchv1.Job {
	t.Helper()
	var jobs batchv1.JobList
	if err := env.Client.List(t.Context(), &jobs, client.InNamespace(ns), client.MatchingLabels{v1.LabelExecution: name}); err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// waitExecution polls the Execution as user until cond holds, and returns it.
func waitExecution(t *testing.T, user, ns, name, what string, cond func(*v1.Execution) bool) *v1.Execution {
	t.Helper()
	got := &v1.Execution{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := clients[user].Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cond(got), nil
	})
	if err != nil {
		t.Fatalf("Execution %s: %s never happened; status %+v", name, what, got.Status)
	}
	return got
}

// wantExecutionRefused waits until the Execution failed as an Exception saying want,
// with no Job and no pod recorded, no Job of its own (one it controls) existing, and
// a Warning event of reason about it.
func wantExecutionRefused(t *testing.T, ns, name, reason, want string) *v1.Execution {
	t.Helper()
	got := waitExecution(t, viewerUser, ns, name, "a refusal", func(e *v1.Execution) bool {
		return e.Status.Phase == v1.ExecutionFailed || e.Status.JobName != ""
	})
	if got.Status.ErrorKind != v1.ErrorException || !strings.Contains(got.Status.Message, want) {
		t.Errorf("Execution %s: %s %q; want an Exception saying %q", name, got.Status.ErrorKind, got.Status.Message, want)
	}
	if got.Status.JobName != "" || got.Status.PodName != "" || got.Status.Output != "" {
		t.Errorf("Execution %s was refused but records a Job, pod or output: %+v", name, got.Status)
	}
	for _, job := range jobsOf(t, ns, name) {
		if metav1.IsControlledBy(&job, got) {
			t.Errorf("Execution %s was refused but its Job %s exists", name, job.Name)
		}
	}
	waitEvent(t, ns, "Execution", name, reason, corev1.EventTypeWarning)
	return got
}

// waitEvent waits for an event of reason and type about the object.
func waitEvent(t *testing.T, ns, kind, name, reason, typ string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var list eventsv1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range list.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name {
				seen = append(seen, e.Type+" "+e.Reason)
				if e.Reason == reason && e.Type == typ {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s %s event about %s %s; its events: %v", typ, reason, kind, name, seen)
	}
}

// noExecution asserts that the intent got no Execution by the moment it was
// observed: the reconcile that writes a call's observation without running it is
// the one that would have created its Execution, and an observed call is final.
func noExecution(t *testing.T, intent *v1.ToolIntent) {
	t.Helper()
	key := client.ObjectKeyFromObject(intent)
	name := pipeline.ExecutionName(intent)
	testenv.Absent(t, 30*time.Second, "the observation of "+intent.Name, func() (bool, string) {
		got := &v1.ToolIntent{}
		if err := env.Client.Get(t.Context(), key, got); err != nil {
			return false, err.Error()
		}
		return got.Status.Observation != nil, fmt.Sprintf("%+v", got.Status.Conditions)
	}, "Execution "+name, func() bool {
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: intent.Namespace, Name: name}, &v1.Execution{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	})
}

// fakeKubelet serves the tool containers' logs to the API server, which proxies
// pods/log to the kubelet of the pod's node; it does not check the kubelet's
// certificate unless told a CA (--kubelet-certificate-authority), and envtest sets
// none. The test plays the rest of the kubelet's part by writing pod status.
type fakeKubelet struct {
	node string
	mu   sync.Mutex
	logs map[string]string // by namespace/pod
}

var (
	kubeletOnce sync.Once
	kubelet     *fakeKubelet
	kubeletErr  error
)

// theKubelet starts the fake kubelet and its Node once for the package.
func theKubelet(t *testing.T) *fakeKubelet {
	t.Helper()
	kubeletOnce.Do(func() {
		k := &fakeKubelet{node: "toolgate-test-node", logs: map[string]string{}}
		// The process ends with the package's tests; the server goes with it.
		srv := httptest.NewTLSServer(http.HandlerFunc(k.serveLog))
		_, portText, err := net.SplitHostPort(srv.Listener.Addr().String())
		if err != nil {
			kubeletErr = err
			return
		}
		port, err := strconv.Atoi(portText)
		if err != nil {
			kubeletErr = err
			return
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node}}
		if err := env.Client.Create(context.Background(), node); err != nil {
			kubeletErr = err
			return
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
		kubeletErr = env.Client.Status().Update(context.Background(), node)
		kubelet = k
	})
	if kubeletErr != nil {
		t.Fatalf("starting the fake kubelet: %v", kubeletErr)
	}
	return kubelet
}

// serveLog answers /containerLogs/NAMESPACE/POD/CONTAINER with the pod's log, cut to
// limitBytes.
func (k *fakeKubelet) serveLog(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 || parts[2] != executor.ToolContainerName {
		http.NotFound(w, r)
		return
	}
	k.mu.Lock()
	text := k.logs[parts[0]+"/"+parts[1]]
	k.mu.Unlock()
	if limit, err := strconv.Atoi(r.URL.Query().Get("limitBytes")); err == nil && limit < len(text) {
		text = text[:limit]
	}
	_, _ = w.Write([]byte(text))
}

// startPod creates the pod the Job controller would create for job, on the fake
// kubelet's node, and reports its tool container running.
func (k *fakeKubelet) startPod(t *testing.T, job *batchv1.Job) *corev1.Pod {
	t.Helper()
	pod := testenv.JobPod(job, "-pod")
	pod.Spec.NodeName = k.node
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatalf("creating the pod of Job %s: %v", job.Name, err)
	}
	k.report(t, pod, corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Truncate(time.Second))}})
	return pod
}

// finish reports the tool container exited with exitCode, leaving message in its
// termination message and log as its log.
func (k *fakeKubelet) finish(t *testing.T, pod *corev1.Pod, exitCode int32, message, log string) {
	t.Helper()
	k.mu.Lock()
	k.logs[pod.Namespace+"/"+pod.Name] = log
	k.mu.Unlock()
	phase := corev1.PodSucceeded
	if exitCode != 0 {
		phase = corev1.PodFailed
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	k.report(t, pod, phase, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: exitCode, Reason: "Completed", Message: message,
		StartedAt: metav1.NewTime(now.Add(-time.Second)), FinishedAt: now,
	}})
}

// report writes the pod's status as the kubelet would: the runner's install
// container done, the tool container in state.
func (k *fakeKubelet) report(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase, state corev1.ContainerState) {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	started := metav1.NewTime(time.Now().Add(-2 * time.Second).Truncate(time.Second))
	imageOf := func(name string) string {
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			if c.Name == name {
				return c.Image
			}
		}
		return ""
	}
	pod.Status.Phase = phase
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name: executor.InstallContainerName, Image: imageOf(executor.InstallContainerName), ImageID: "runner@sha256:1",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: started}},
	}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: executor.ToolContainerName, Image: imageOf(executor.ToolContainerName), ImageID: "workspace@sha256:1",
		State: state, Started: ptr.To(state.Running != nil),
	}}
	if err := env.Client.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("reporting pod %s: %v", pod.Name, err)
	}
}

// runnerResult is the termination message the runner of pod writes for res and the
// log it counted.
func runnerResult(pod *corev1.Pod, res protocol.Result, log string) string {
	res.InvocationSHA256 = testenv.InvocationSHA256(pod)
	sum := sha256.Sum256([]byte(log))
	res.StdoutBytes = int64(len(log))
	res.OutputSHA256 = hex.EncodeToString(sum[:])
	return string(protocol.EncodeResult(res))
}

// succeed plays the kubelet for a call that ran and printed log.
func succeed(t *testing.T, ns, execName, log string) {
	t.Helper()
	k := theKubelet(t)
	pod := k.startPod(t, waitJob(t, ns, execName))
	k.finish(t, pod, 0, runnerResult(pod, protocol.Result{ExitCode: 0}, log), log)
}

// Hole 2: an approval covers where the call runs. The task's owner, olive, moves the
// task after alice was asked (another image, egress to everywhere; another workspace
// claim is refused by the CRD); the call alice approves runs where her Approval said: the Job has the
// decided image and claim and its NetworkPolicy denies all egress. Then olive deletes
// the task and creates another under its name while a second approval waits; alice's
// approval of the first task's call never runs in the second. Guards the decision's
// sandbox record (status.decision.sandbox, the Execution built from it alone) and
// the task UID in it: without them the Job is built from the task as it is now.
func TestTheTaskOwnerCannotMoveAnApprovedCall(t *testing.T) {
	ns := attackNamespace(t)
	task := ownerTask(t, ns, victimTask, v1.ModeEdit)
	build := proposeBash(t, ns, "build", victimTask, 0, "make build-release")
	a := approvalOf(t, build)
	shown := a.Spec.Request.Sandbox
	if shown == nil || shown.Profile.Image != sandboxImage || shown.Profile.WorkspaceClaimName != taskClaim ||
		shown.Profile.Network.Mode != v1.NetworkNone || shown.TaskUID != string(getTask(t, ns, task.Name).UID) {
		t.Fatalf("the Approval does not show alice where the call runs: %+v", shown)
	}

	// The claim is fixed when the task is created (a CRD rule); the sandbox is not.
	err := mergePatch(t.Context(), clients[ownerUser], task, map[string]any{"spec": map[string]any{"workspace": map[string]any{"existingClaim": otherClaim}}})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.workspace.existingClaim and spec.workspace.volumeClaim are immutable") {
		t.Fatalf("%s moving the task to another claim: %v", ownerUser, err)
	}
	patchTask(t, ownerUser, ns, victimTask, map[string]any{
		"sandbox": map[string]any{
			"image":   "evil.example/exfiltrate:latest",
			"network": map[string]any{"mode": "AllowList", "egress": []any{map[string]any{"cidr": "0.0.0.0/0"}}},
		},
	})
	if moved := getTask(t, ns, victimTask); moved.Spec.Sandbox.Image != "evil.example/exfiltrate:latest" || moved.Spec.Sandbox.Network.Mode != v1.NetworkAllowList {
		t.Fatalf("olive's change did not take: %+v", moved.Spec)
	}
	approveAs(t, alice, a)

	job := waitJob(t, ns, pipeline.ExecutionName(build))
	var images, claims []string
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == executor.ToolContainerName {
			images = append(images, c.Image)
		}
	}
	for _, vol := range job.Spec.Template.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil {
			claims = append(claims, vol.PersistentVolumeClaim.ClaimName)
		}
	}
	if len(images) != 1 || images[0] != sandboxImage || len(claims) != 1 || claims[0] != taskClaim {
		t.Errorf("the approved call runs in images %v on claims %v; alice approved %s on %s", images, claims, sandboxImage, taskClaim)
	}
	exec := &v1.Execution{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: job.Name}, exec); err != nil {
		t.Fatalf("the approved call's Execution: %v", err)
	}
	policy := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: executor.NetworkPolicyName(exec)}, policy); err != nil {
		t.Fatalf("the approved call's NetworkPolicy: %v", err)
	}
	if policy.Spec.PodSelector.MatchLabels[v1.LabelNetwork] != job.Spec.Template.Labels[v1.LabelNetwork] {
		t.Errorf("the approved call's pod (labels %v) is not behind NetworkPolicy %s (selector %v)", job.Spec.Template.Labels, policy.Name, policy.Spec.PodSelector.MatchLabels)
	}
	if len(policy.Spec.Egress) != 0 {
		t.Errorf("the approved call may reach %+v; its Approval said no network", policy.Spec.Egress)
	}
	succeed(t, ns, job.Name, "built\n")
	observed(t, build, v1.OutcomeSucceeded, true, "built")

	// The same call again, asked for the task as olive changed it; then the task is
	// replaced by another of the same name before alice decides.
	again := proposeBash(t, ns, "build-again", victimTask, 1, "make build-release")
	second := approvalOf(t, again)
	if s := second.Spec.Request.Sandbox; s == nil || s.Profile.Image != "evil.example/exfiltrate:latest" || s.Profile.Network.Mode != v1.NetworkAllowList {
		t.Errorf("a call decided after olive's change is not shown in the task as changed: %+v", s)
	}
	oldUID := getTask(t, ns, victimTask).UID
	if err := clients[ownerUser].Delete(t.Context(), &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victimTask}}); err != nil {
		t.Fatalf("%s deleting the task: %v", ownerUser, err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: victimTask}, &v1.AgentTask{})), nil
	})
	if err != nil {
		t.Fatal("the deleted task never went")
	}
	ownerTask(t, ns, victimTask, v1.ModeAuto, func(task *v1.AgentTask) { task.Spec.Goal = "something else" })
	approveAs(t, alice, second)
	observed(t, again, v1.OutcomeAborted, false, "deleted and created again", string(oldUID))
	noExecution(t, again)
}

// Hole 3: paula, the policy admin, adds an emergency ClusterToolPolicy Deny while one
// call of a turn waits for alice and its allowed sibling is held for it (olive, the
// task's owner, may not add one). When alice approves, both calls are decided again:
// both end Denied naming paula's policy, nothing runs, and the approval is
// Superseded. Guards the last-moment re-check before an approval is used and before
// a held Allow's Execution is created: without it both calls run.
func TestAnEmergencyDenyStopsCallsThatWait(t *testing.T) {
	ns := attackNamespace(t)
	ownerTask(t, ns, victimTask, v1.ModeAuto)
	tests := proposeBash(t, ns, "tests", victimTask, 0, "go test ./...")
	fetch := proposeBash(t, ns, "fetch", victimTask, 0, "curl https://example.com", func(i *v1.ToolIntent) { i.Spec.Index = 1 })
	a := approvalOf(t, fetch)
	held := waitFor(t, tests, "held for its sibling", func(i *v1.ToolIntent) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, v1.ConditionExecuted)
		return c != nil && c.Reason == v1.ReasonWaitingForSiblings
	})
	if d := held.Status.Decision; d == nil || d.Action != v1.DecisionAllow {
		t.Fatalf("the sibling was not allowed and held: %+v", held.Status)
	}

	freeze := &v1.ClusterToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-freeze"},
		Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
			Name: "change-freeze", Action: v1.RuleDeny, Reason: "change freeze: nothing leaves or runs",
			Match: v1.RuleMatch{Commands: []v1.CommandPattern{words(t, "go", "test"), words(t, "curl")}},
		}}},
	}
	wantRefused(t, clients[ownerUser].Create(t.Context(), freeze.DeepCopy()), `User "olive" cannot create resource "clustertoolpolicies"`)
	if err := clients[policyAdmin].Create(t.Context(), freeze); err != nil {
		t.Fatalf("%s adding the emergency policy: %v", policyAdmin, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), freeze) })
	// The controller compiles it (and so has it in its cache) before alice decides.
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &v1.ClusterToolPolicy{}
		if err := clients[policyAdmin].Get(ctx, client.ObjectKeyFromObject(freeze), got); err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("the controller never compiled the emergency policy: %v", err)
	}
	approveAs(t, alice, a)

	rule := "ClusterToolPolicy/" + freeze.Name + "/change-freeze"
	denied := observed(t, fetch, v1.OutcomeDenied, false, rule, "change freeze")
	if c := meta.FindStatusCondition(denied.Status.Conditions, v1.ConditionDecided); c == nil || c.Reason != v1.ReasonRedecided {
		t.Errorf("the asked call's Decided condition: %+v; want reason %s", c, v1.ReasonRedecided)
	}
	observed(t, tests, v1.OutcomeDenied, false, rule, "was Allow by ModeDefault/Auto")
	noExecution(t, fetch)
	wantNothingRan(t, fetch)
	wantNothingRan(t, tests)
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &v1.Approval{}
		if err := clients[alice].Get(ctx, client.ObjectKeyFromObject(a), got); err != nil {
			return false, err
		}
		return got.Status.State == v1.ApprovalStateSuperseded, nil
	})
	if err != nil {
		t.Errorf("alice's approval was not retired: %+v", getApproval(t, a).Status)
	}
}

// words builds a command pattern: the words argv starts with.
func words(t *testing.T, prefix ...string) v1.CommandPattern {
	t.Helper()
	return v1.CommandPattern{Prefix: prefix}
}

// Hole 4: alice approves after the Approval's expiresAt (by the controller's clock;
// the API server has no clock and accepts her decision). The call ends
// ApprovalExpired, nothing runs, the Approval is Expired. Guards "expiry first" in
// judging an approval: without it the late approval is honoured and the call runs.
func TestAnApprovalDecidedAfterItExpiredIsNotHonoured(t *testing.T) {
	clock := &fixtures.Clock{}
	ns := attackNamespace(t, func(o *controller.Options) { o.Now = clock.Now })
	ownerTask(t, ns, victimTask, v1.ModeEdit)
	build := proposeBash(t, ns, "build", victimTask, 0, "make build-release")
	a := approvalOf(t, build)

	// The approval's hour passes without a decision; nothing wakes the controller
	// until alice decides.
	clock.Advance(a.Spec.ExpiresAt.Sub(clock.Now()) + time.Minute)
	approveAs(t, alice, a)

	observed(t, build, v1.OutcomeApprovalExpired, false, "expired at "+a.Spec.ExpiresAt.UTC().Format(time.RFC3339))
	noExecution(t, build)
	wantNothingRan(t, build)
	if got := getApproval(t, a); got.Status.State != v1.ApprovalStateExpired {
		t.Errorf("the late approval's state is %s: %+v", got.Status.State, got.Status)
	}
	waitEvent(t, ns, "ToolIntent", build.Name, toolintent.EventApprovalExpired, corev1.EventTypeWarning)
}

// forgedExecution is the Execution someone past admission would create to run the
// intent's call without waiting for alice: the intent's own call, tool, input,
// decided sandbox and fingerprint, owned by the intent, named name.
func forgedExecution(t *testing.T, intent *v1.ToolIntent, name string) *v1.Execution {
	t.Helper()
	d := intent.Status.Decision
	if d == nil || d.Sandbox == nil || intent.Status.Validation == nil {
		t.Fatalf("intent %s has no recorded decision to forge from: %+v", intent.Name, intent.Status)
	}
	exec := &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Namespace: intent.Namespace, Name: name},
		Spec: v1.ExecutionSpec{
			IntentRef: v1.LocalObjectReference{Name: intent.Name}, TaskRef: intent.Spec.TaskRef,
			Tool: intent.Spec.Tool, Input: *intent.Spec.Input.DeepCopy(),
			TimeoutSeconds: intent.Status.Validation.TimeoutSeconds, MaxOutputBytes: d.Sandbox.MaxOutputBytes,
			Sandbox: d.Sandbox.Profile, Walls: d.Walls.DeepCopy(), Fingerprint: d.Fingerprint,
			ApprovalRef: v1.LocalObjectReferenceTo(intent.Status.ApprovalName),
		},
	}
	if err := controllerutil.SetControllerReference(intent, exec, env.Scheme); err != nil {
		t.Fatal(err)
	}
	return exec
}

// Hole 5: nobody but the controller starts a call by creating its Execution. While
// the agent's call waits for alice, the agent and olive are refused by RBAC and pat,
// who holds a role that may create Executions, by admission. The admin creates two
// (a compromised path past admission): one owned by the waiting intent and naming
// its pending Approval, one owned by nothing. Both fail ChainBroken before a Job
// exists. The call itself still runs once alice approves. Guards the chain check of
// the Execution reconciler: without it either forged Execution gets a Job.
func TestOnlyTheIntentsOwnExecutionRuns(t *testing.T) {
	ns := attackNamespace(t)
	ownerTask(t, ns, victimTask, v1.ModeEdit)
	build := proposeBash(t, ns, "build", victimTask, 0, "make build-release")
	a := approvalOf(t, build)
	waiting := waitFor(t, build, "its decision", func(i *v1.ToolIntent) bool { return i.Status.Decision != nil })

	forged := forgedExecution(t, waiting, "build-now")
	wantRefused(t, clients[agentUser].Create(t.Context(), forged.DeepCopy()), `User "agent-bot" cannot create resource "executions"`)
	wantRefused(t, clients[ownerUser].Create(t.Context(), forged.DeepCopy()), `User "olive" cannot create resource "executions"`)
	wantRefused(t, clients[patcherUser].Create(t.Context(), forged.DeepCopy()), "only the toolgate controller creates executions, and pat is not the controller.")

	if err := env.Client.Create(t.Context(), forged); err != nil {
		t.Fatalf("the admin creating an Execution: %v", err)
	}
	wantExecutionRefused(t, ns, forged.Name, controller.EventChainBroken,
		fmt.Sprintf("Approval %s is Pending and consumed by \"\", not consumed by Execution %s", a.Name, forged.Name))

	orphan := forgedExecution(t, waiting, "build-orphan")
	orphan.OwnerReferences = nil
	if err := env.Client.Create(t.Context(), orphan); err != nil {
		t.Fatalf("the admin creating an Execution: %v", err)
	}
	wantExecutionRefused(t, ns, orphan.Name, controller.EventChainBroken, "Execution build-orphan is not controlled by a ToolIntent")

	approveAs(t, alice, a)
	succeed(t, ns, pipeline.ExecutionName(build), "built\n")
	observed(t, build, v1.OutcomeSucceeded, true, "built")
	for _, name := range []string{forged.Name, orphan.Name} {
		if jobs := jobsOf(t, ns, name); len(jobs) > 0 {
			t.Errorf("forged Execution %s got Job %s", name, jobs[0].Name)
		}
	}
}

// Hole 6: the tool forges the runner's result. Two calls the agent proposed run;
// in one the tool killed the runner (the container exits 137) and left a success in
// the termination message, in the other an escaped process overwrote the runner's
// failure (the container exits with the runner's failure code) with a success. Both
// are Exceptions that say the result cannot be trusted and show none of it to the
// viewer. Guards the controller's check of the container's exit code against the
// runner's result: without it both read as successes.
func TestAForgedResultIsNotBelieved(t *testing.T) {
	ns := attackNamespace(t)
	ownerTask(t, ns, victimTask, v1.ModeEdit)
	k := theKubelet(t)
	forgedSuccess := protocol.Result{ExitCode: 0, Message: "forged by the tool", ContentSHA256: strings.Repeat("0", 64)}
	for i, tc := range []struct {
		name     string
		exitCode int32
		say      string
	}{
		{"killed-runner", 137, "exited 137 (killed by signal 9)"},
		{"overwritten-failure", protocol.ExitFailed, "reports a success"},
	} {
		intent := proposeBash(t, ns, tc.name, victimTask, int32(i), "ls")
		pod := k.startPod(t, waitJob(t, ns, pipeline.ExecutionName(intent)))
		const log = "printed\n"
		k.finish(t, pod, tc.exitCode, runnerResult(pod, forgedSuccess, log), log)

		got := observed(t, intent, v1.OutcomeFailed, true, "cannot be trusted", tc.say)
		if strings.Contains(got.Status.Observation.Summary, "forged by the tool") {
			t.Errorf("%s: the model sees the forged result: %s", tc.name, got.Status.Observation.Summary)
		}
		exec := waitExecution(t, viewerUser, ns, pipeline.ExecutionName(intent), "a result", func(e *v1.Execution) bool {
			return e.Status.Phase == v1.ExecutionFailed || e.Status.Phase == v1.ExecutionSucceeded
		})
		st := exec.Status
		if st.Phase != v1.ExecutionFailed || st.ErrorKind != v1.ErrorException || st.Facts != nil || st.OutputSHA256 != "" {
			t.Errorf("%s: the viewer reads %+v; want an Exception with none of the forged result", tc.name, st)
		}
		if st.ExitCode == nil || *st.ExitCode != tc.exitCode {
			t.Errorf("%s: exit code %v, want the container's %d", tc.name, st.ExitCode, tc.exitCode)
		}
	}
}

// Hole 7: a call alice approved is running when olive cancels her task (the agent,
// who may only read tasks, cannot). The controller deletes the call's Job in the
// foreground, so its pod and the tool go, and the call ends Aborted, executed.
// Guards the task's stopping of running calls: without it the Job is left to run.
func TestCancellingATaskStopsItsRunningApprovedCall(t *testing.T) {
	ns := attackNamespace(t)
	ownerTask(t, ns, victimTask, v1.ModeEdit)
	build := proposeBash(t, ns, "build", victimTask, 0, "make build-release")
	approveAs(t, alice, approvalOf(t, build))
	job := waitJob(t, ns, pipeline.ExecutionName(build))
	// envtest runs no garbage collector, so a foreground deletion never completes:
	// drop its finalizer at the end.
	t.Cleanup(func() {
		got := &batchv1.Job{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(job), got); err == nil &&
			controllerutil.RemoveFinalizer(got, metav1.FinalizerDeleteDependents) {
			_ = env.Client.Update(context.Background(), got)
		}
	})
	theKubelet(t).startPod(t, job)
	waitExecution(t, viewerUser, ns, job.Name, "running", func(e *v1.Execution) bool { return e.Status.Phase == v1.ExecutionRunning })

	cancel := map[string]any{"spec": map[string]any{"lifecycle": "Cancelled"}}
	wantRefused(t, mergePatch(t.Context(), clients[agentUser], &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victimTask}}, cancel),
		`User "agent-bot" cannot patch resource "agenttasks"`)
	patchTask(t, ownerUser, ns, victimTask, map[string]any{"lifecycle": "Cancelled"})

	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &batchv1.Job{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
			return false, err
		}
		return got.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(got, metav1.FinalizerDeleteDependents), nil
	})
	if err != nil {
		t.Fatalf("the running call's Job was not deleted in the foreground: %v", err)
	}
	exec := waitExecution(t, viewerUser, ns, job.Name, "Aborted", func(e *v1.Execution) bool { return e.Status.Phase == v1.ExecutionFailed })
	if exec.Status.ErrorKind != v1.ErrorAborted {
		t.Errorf("the stopped call's Execution: %+v; want Aborted", exec.Status)
	}
	observed(t, build, v1.OutcomeAborted, true, "[aborted: the execution was stopped before it finished; it may have had effects]")
}

// Hole 8: objects planted under the names a call will use are not taken for its
// own. The users who would plant them are refused by the API server (olive may not
// create NetworkPolicies, the agent no Executions or Approvals, pat no Approval or
// Execution at all, by admission). The admin plants, before the agent proposes:
// a NetworkPolicy selecting nothing under the name of a call's Execution, a Job with
// a forged success under another's, an Execution with another image under a third
// intent's name, and an Approval under a fourth's for the very call it will be, which
// alice approved. Each call
// fails closed naming the object in the way, and no Job of ours runs. Guards the
// ownership check (controller by UID, expected spec) on every object found by name:
// without it the planted deny-all, Job, Execution or approval is used.
func TestObjectsPlantedUnderACallsNameAreNotItsOwn(t *testing.T) {
	ns := attackNamespace(t)
	ownerTask(t, ns, victimTask, v1.ModeEdit)
	// The decoy takes the name of the namespace's NetworkPolicy for calls without
	// network (the read-only calls below run behind it).
	noNetwork := &v1.Execution{Spec: v1.ExecutionSpec{TaskRef: v1.LocalObjectReference{Name: victimTask}, Sandbox: v1.SandboxProfile{Network: v1.NetworkSpec{Mode: v1.NetworkNone}}}}
	decoyName := executor.NetworkPolicyName(noNetwork)
	decoy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: decoyName},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"selects": "nothing"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	planted := &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read"},
		Spec: v1.ExecutionSpec{
			IntentRef: v1.LocalObjectReference{Name: "read"}, TaskRef: v1.LocalObjectReference{Name: victimTask},
			Tool: v1.ToolBash, Input: runtime.RawExtension{Raw: []byte(`{"command":"cat notes.txt"}`)},
			TimeoutSeconds: 60, MaxOutputBytes: 1024,
			Sandbox: v1.SandboxProfile{Image: "evil.example/exfiltrate:latest", WorkspaceClaimName: taskClaim},
		},
	}
	byHand := fixtures.PendingApproval(ns, "push", agentUser, nil)
	byHand.Spec.TaskRef.Name = victimTask
	wantRefused(t, clients[ownerUser].Create(t.Context(), decoy.DeepCopy()), `User "olive" cannot create resource "networkpolicies"`)
	wantRefused(t, clients[agentUser].Create(t.Context(), planted.DeepCopy()), `User "agent-bot" cannot create resource "executions"`)
	wantRefused(t, clients[agentUser].Create(t.Context(), byHand.DeepCopy()), `User "agent-bot" cannot create resource "approvals"`)
	wantRefused(t, clients[patcherUser].Create(t.Context(), planted.DeepCopy()), "only the toolgate controller creates executions, and pat is not the controller.")
	wantRefused(t, clients[patcherUser].Create(t.Context(), byHand.DeepCopy()), "only the toolgate controller creates approvals, and pat is not the controller.")

	// The admin plants them.
	for _, obj := range []client.Object{decoy, planted} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatalf("planting %T %s: %v", obj, obj.GetName(), err)
		}
	}
	foreign := foreignJob(t, ns, "list")

	look := proposeBash(t, ns, "look", victimTask, 0, "ls")
	wantExecutionRefused(t, ns, pipeline.ExecutionName(look), toolintent.EventObjectInTheWay,
		"NetworkPolicy "+decoyName+" in namespace "+ns+" is not the one toolgate makes for these network walls")
	// With the decoy gone, the next call's own NetworkPolicy is made, and what is in
	// its way is the planted Job.
	if err := env.Client.Delete(t.Context(), decoy); err != nil {
		t.Fatal(err)
	}

	list := proposeBash(t, ns, "list", victimTask, 1, "ls -la")
	done := wantExecutionRefused(t, ns, pipeline.ExecutionName(list), toolintent.EventObjectInTheWay,
		"a Job named list already exists in namespace "+ns+" and is not this Execution's")
	if done.Status.ExitCode != nil || done.Status.Sandbox != nil {
		t.Errorf("the foreign Job's pod was read as the call's result: %+v", done.Status)
	}
	if jobs := jobsOf(t, ns, "list"); len(jobs) != 1 || jobs[0].UID != foreign.UID {
		t.Errorf("Jobs of list: %d, want only the planted one", len(jobs))
	}

	read := proposeBash(t, ns, "read", victimTask, 2, "cat notes.txt")
	got := observed(t, read, v1.OutcomeFailed, false, "Execution read is not controlled by this ToolIntent", "nothing was executed")
	if got.Status.ExecutionName != "" {
		t.Errorf("the intent took the planted Execution for its own: executionName %q", got.Status.ExecutionName)
	}
	waitEvent(t, ns, "ToolIntent", read.Name, toolintent.EventObjectInTheWay, corev1.EventTypeWarning)
	// Planted before its intent existed, the Execution was refused on sight; had it
	// been seen after, it would be for having no owner. Either way it gets no Job.
	wantExecutionRefused(t, ns, planted.Name, controller.EventChainBroken, "only an intent's own Execution, created by the controller, runs")

	// The leftover Approval is the very call the agent will propose (a copy of the
	// Approval of the same call under another name, so its fingerprint matches),
	// Pending as admission requires of a new one, and alice approves it.
	first := approvalOf(t, proposeBash(t, ns, "push-first", victimTask, 3, "make build-release"))
	leftover := &v1.Approval{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "push"}, Spec: *first.Spec.DeepCopy()}
	leftover.Spec.IntentRef.Name = "push"
	if err := env.Client.Create(t.Context(), leftover); err != nil {
		t.Fatalf("planting Approval push: %v", err)
	}
	approveAs(t, alice, leftover)
	push := proposeBash(t, ns, "push", victimTask, 4, "make build-release")
	got = observed(t, push, v1.OutcomeFailed, false, "Approval push is not controlled by this ToolIntent")
	if strings.Contains(got.Status.Observation.Summary, "approved by") {
		t.Errorf("the planted approval counted: %s", got.Status.Observation.Summary)
	}
	wantNothingRan(t, push)
}

// foreignJob plants, as the admin, a Job under the name with the Execution label the
// controller finds pods by, and plays the kubelet for its pod: a success.
func foreignJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	labels := map[string]string{v1.LabelExecution: name}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: executor.ToolContainerName, Image: "evil.example/exfiltrate:latest"}},
				},
			},
		},
	}
	if err := env.Client.Create(t.Context(), job); err != nil {
		t.Fatalf("planting Job %s: %v", name, err)
	}
	k := theKubelet(t)
	const log = "forged\n"
	pod := k.startPod(t, job)
	k.finish(t, pod, 0, runnerResult(pod, protocol.Result{ExitCode: 0}, log), log)
	return job
}

// Hole 9: what alice is shown is what runs, and what victor reads leaks no secret.
// The agent proposes a command that hides a command substitution behind a secret's
// name, and another whose reason carries terminal escapes and a bidirectional
// override. alice's Approval shows the substitution and escapes the control
// characters; the secret value is masked. The first call runs and prints a secret:
// victor, the viewer, reads the Execution's status.output and the intent's
// observation masked. Guards the display rules (masking never hides what runs;
// escapes) and the masking of status.output.
func TestTheApproverSeesWhatRunsAndTheViewerNoSecret(t *testing.T) {
	ns := attackNamespace(t)
	ownerTask(t, ns, victimTask, v1.ModeEdit)
	hidden := proposeBash(t, ns, "hidden", victimTask, 0, "touch password=$(cat /etc/shadow) token=hunter2secret")
	a := approvalOf(t, hidden)
	if !strings.Contains(a.Spec.Request.Input, "password=$(cat /etc/shadow)") || strings.Contains(a.Spec.Request.Input, "hunter2secret") {
		t.Errorf("alice is shown %q; want the substitution whole and the secret masked", a.Spec.Request.Input)
	}
	rewritten := proposeBash(t, ns, "rewritten", victimTask, 1, "touch x", func(i *v1.ToolIntent) { i.Spec.Reason = "tidy up\x1b[2K\r\u202eharmless" })
	b := approvalOf(t, rewritten)
	for _, bad := range []string{"\x1b", "\r", "\u202e"} {
		if strings.Contains(b.Spec.Request.ProposerReason, bad) {
			t.Errorf("alice's terminal is sent %q: %q", bad, b.Spec.Request.ProposerReason)
		}
	}
	if r := b.Spec.Request.ProposerReason; !strings.Contains(r, `\x1b[2K`) || !strings.Contains(r, `\u202e`) {
		t.Errorf("the escapes are not shown escaped: %q", r)
	}

	approveAs(t, alice, a)
	const log = "export API_TOKEN=abcdef123456\n\x1b[2Jdone\n"
	succeed(t, ns, pipeline.ExecutionName(hidden), log)
	exec := waitExecution(t, viewerUser, ns, pipeline.ExecutionName(hidden), "its output", func(e *v1.Execution) bool { return e.Status.Phase == v1.ExecutionSucceeded })
	if out := exec.Status.Output; strings.Contains(out, "abcdef123456") || strings.Contains(out, "\x1b") || !strings.Contains(out, `\x1b[2Jdone`) {
		t.Errorf("victor reads status.output %q; want the secret masked and the escape shown escaped", out)
	}
	// The Execution's phase is written before the intent's observation: wait for the
	// observation, then read it as victor.
	waitFor(t, hidden, "an observation", func(i *v1.ToolIntent) bool { return i.Status.Observation != nil })
	intent := &v1.ToolIntent{}
	if err := clients[viewerUser].Get(t.Context(), client.ObjectKeyFromObject(hidden), intent); err != nil {
		t.Fatal(err)
	}
	if obs := intent.Status.Observation; obs == nil || strings.Contains(obs.Summary, "abcdef123456") || !strings.Contains(obs.Summary, "done") {
		t.Errorf("victor reads the observation %+v; want it with the secret masked", obs)
	}
}

// finalAnswer is the final message the model endpoints answer with: a task that is
// sent it ends after one request.
var finalAnswer = fixtures.ChatReply{Status: http.StatusOK, Body: `{"id":"chatcmpl-test","object":"chat.completion","created":1,"model":"test-model",` +
	`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"done"}}],` +
	`"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`}

// authorizations are the Authorization headers of requests, in order.
func authorizations(requests []fixtures.ChatRequest) []string {
	out := []string{}
	for _, r := range requests {
		out = append(out, r.Authorization)
	}
	return out
}

// Hole 10: olive, who may create AgentTasks but not read Secrets, has the controller
// send a Secret of the namespace as a bearer token: once naming the admin's deploy
// token (not labelled as a model credential) with an allowed endpoint, once naming
// the namespace's model key with an endpoint of her own. Neither is sent: the tasks
// wait CredentialsNotAllowed and EndpointNotAllowed, and neither endpoint gets a
// request. The model key with the allowed endpoint is sent, so the refusals are the
// rules. Guards the credentials label and the --model-endpoints allow-list: without
// them the deploy token reaches the endpoint, and the model key olive's host.
func TestATaskOwnerCannotSendAnotherSecretAnywhere(t *testing.T) {
	allowed := fixtures.NewChatServer(t, finalAnswer)
	hers := fixtures.NewChatServer(t)
	ns := attackNamespace(t, func(o *controller.Options) { o.ModelEndpoints = agent.MustParseEndpoints(allowed.URL() + "/v1") })
	const deployToken, modelKey = "deploy-token-value", "model-key-value"
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deploy-token"}, Data: map[string][]byte{"token": []byte(deployToken)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "model-key", Labels: map[string]string{v1.LabelModelCredentials: v1.ModelCredentialsValue}},
			Data: map[string][]byte{"apiKey": []byte(modelKey)}},
	}
	for _, s := range secrets {
		if err := env.Client.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	wantRefused(t, clients[ownerUser].Get(t.Context(), client.ObjectKeyFromObject(secrets[0]), &corev1.Secret{}), `User "olive" cannot get resource "secrets"`)

	modelTask := func(name, baseURL, secret, key string) {
		t.Helper()
		task := &v1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.AgentTaskSpec{
				Goal: "say done", Mode: v1.ModeReadOnly, Workspace: v1.WorkspaceSpec{ExistingClaim: taskClaim},
				Agent: v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: baseURL, Model: "test-model", APIKeySecretRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
				}}},
			},
		}
		if err := clients[ownerUser].Create(t.Context(), task); err != nil {
			t.Fatalf("%s creating task %s: %v", ownerUser, name, err)
		}
	}
	waiting := func(name, reason string, want ...string) {
		t.Helper()
		var c *metav1.Condition
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			task := &v1.AgentTask{}
			if err := clients[ownerUser].Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, task); err != nil {
				return false, err
			}
			c = meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason, nil
		})
		if err != nil {
			t.Fatalf("task %s does not wait with %s: %+v", name, reason, c)
		}
		for _, w := range want {
			if !strings.Contains(c.Message, w) {
				t.Errorf("task %s: %q does not say %q", name, c.Message, w)
			}
		}
		if strings.Contains(c.Message, deployToken) || strings.Contains(c.Message, modelKey) {
			t.Errorf("task %s: the condition shows a secret: %q", name, c.Message)
		}
	}

	modelTask("steal-token", allowed.URL()+"/v1", "deploy-token", "token")
	modelTask("send-key-home", hers.URL()+"/v1", "model-key", "apiKey")
	waiting("steal-token", controller.ReasonCredentialsNotAllowed, `Secret "deploy-token"`, v1.LabelModelCredentials+"=true")
	waiting("send-key-home", controller.ReasonEndpointNotAllowed, hers.URL(), "--model-endpoints")

	modelTask("honest", allowed.URL()+"/v1", "model-key", "apiKey")
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(allowed.Received()) > 0, nil
	})
	if err != nil {
		t.Fatal("the honest task never reached its allowed endpoint")
	}
	// The refused tasks wait: the reconciles that would have sent their requests
	// wrote why they did not. The honest task's one request ends it.
	testenv.Absent(t, 30*time.Second, "the honest task succeeded", func() (bool, string) {
		task := &v1.AgentTask{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "honest"}, task); err != nil {
			return false, err.Error()
		}
		return task.Status.Phase == v1.TaskSucceeded, string(task.Status.Phase)
	}, "a request of a refused task, or a second one", func() bool { return len(allowed.Received()) > 1 || len(hers.Received()) > 0 })
	if got := authorizations(allowed.Received()); len(got) != 1 || got[0] != "Bearer "+modelKey {
		t.Errorf("the allowed endpoint received %q; want only the model key, once", got)
	}
	if got := authorizations(hers.Received()); len(got) != 0 {
		t.Errorf("olive's endpoint received %q", got)
	}
}
