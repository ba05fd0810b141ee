package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/gitws/gittest"
)

// gitTask creates an external task whose workspace is cloned from url at revision,
// changed by mutate, without waiting for it to be Ready.
func (p *pipelineEnv) gitTask(name, url, revision, secret string, mutate ...func(*v1.AgentTask)) *v1.AgentTask {
	p.t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal: "Make the failing test pass.\n\ncalc.sh subtracts where the test expects a sum.",
			Mode: v1.ModeEdit,
			Workspace: v1.WorkspaceSpec{
				VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")},
				Git:         &v1.GitSource{URL: url, Revision: revision},
			},
			Agent: v1.AgentSpec{External: externalAgent()},
		},
	}
	if secret != "" {
		task.Spec.Workspace.Git.SecretRef = &v1.LocalObjectReference{Name: secret}
	}
	for _, m := range mutate {
		m(task)
	}
	if err := env.Client.Create(p.t.Context(), task); err != nil {
		p.t.Fatalf("creating task: %v", err)
	}
	return task
}

// gitSecret creates a credentials Secret for the test server, labelled when asked.
func (p *pipelineEnv) gitSecret(name string, s *gittest.Server, token string, labelled bool) *corev1.Secret {
	p.t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name},
		StringData: map[string]string{gitws.CredUsername: s.User, gitws.CredToken: token},
	}
	if labelled {
		secret.Labels = map[string]string{v1.LabelGitCredentials: "true"}
	}
	if err := env.Client.Create(p.t.Context(), secret); err != nil {
		p.t.Fatal(err)
	}
	return secret
}

// gitPod waits for the task's git pod of op that is not in done, and returns it.
func (p *pipelineEnv) gitPod(task, op string, done ...string) *corev1.Pod {
	p.t.Helper()
	var found *corev1.Pod
	p.eventually("a git "+op+" pod of "+task, func() (bool, string) {
		var pods corev1.PodList
		if err := env.Client.List(p.t.Context(), &pods, client.InNamespace(p.ns), client.MatchingLabels{v1.LabelGit: op, v1.LabelTask: task}); err != nil {
			return false, err.Error()
		}
		for i := range pods.Items {
			if !contains(done, pods.Items[i].Name) && pods.Items[i].DeletionTimestamp.IsZero() {
				found = &pods.Items[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items))
	})
	return found
}

// wantFencedToServer fails the test unless the NetworkPolicy that selects the git
// pod (by its network label) lets it reach the git server's address and port, and
// nothing else: no other address, port or DNS, and no ingress.
func (p *pipelineEnv) wantFencedToServer(what string, pod *corev1.Pod, server *gittest.Server) {
	p.t.Helper()
	key := pod.Labels[v1.LabelNetwork]
	if key == "" {
		p.t.Fatalf("%s has no network label %s: no NetworkPolicy of toolgate's selects it", what, v1.LabelNetwork)
	}
	policy := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(p.t.Context(), client.ObjectKey{Namespace: p.ns, Name: "toolgate-net-" + key}, policy); err != nil {
		p.t.Fatalf("no NetworkPolicy fences %s: %v", what, err)
	}
	u, err := url.Parse(server.URL)
	if err != nil {
		p.t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		p.t.Fatal(err)
	}
	want := []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: u.Hostname() + "/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(port)))}},
	}}
	selected, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	if err != nil || !selected.Matches(labels.Set(pod.Labels)) {
		p.t.Fatalf("NetworkPolicy %s does not select %s (%v): %+v", policy.Name, what, err, policy.Spec.PodSelector)
	}
	if !slices.Contains(policy.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(policy.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) ||
		len(policy.Spec.Ingress) != 0 || !equality.Semantic.DeepEqual(policy.Spec.Egress, want) {
		p.t.Fatalf("%s may reach more than the git server %s: NetworkPolicy %s has types %v, ingress %+v, egress %+v", what, server.URL, policy.Name,
			policy.Spec.PolicyTypes, policy.Spec.Ingress, policy.Spec.Egress)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// runGitPod plays the kubelet for a git pod: the real runner code (gitws.Run) on
// claim, a folder standing for the task's claim, with the Secret the pod mounts
// written where the kubelet would put it; the result goes into the pod's status and
// its stdout into the pod's log.
func (p *pipelineEnv) runGitPod(pod *corev1.Pod, claim string) gitws.Result {
	p.t.Helper()
	return p.runGitPodLogging(pod, claim, func(log string) string { return log })
}

// runGitPodLogging is runGitPod with the pod's log what logged makes of its stdout:
// a log that is not what the pod wrote.
func (p *pipelineEnv) runGitPodLogging(pod *corev1.Pod, claim string, logged func(string) string) gitws.Result {
	p.t.Helper()
	return p.runWorkspacePod(pod, gitws.Mounts{Claim: claim}, logged)
}

// runWorkspacePod is runGitPodLogging on the volumes of m (the claim, and for a
// copy the workspace copied from); the credentials are the Secret the pod mounts.
func (p *pipelineEnv) runWorkspacePod(pod *corev1.Pod, m gitws.Mounts, logged func(string) string) gitws.Result {
	p.t.Helper()
	var request string
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == gitws.RequestEnv {
			request = e.Value
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		secret := &corev1.Secret{}
		if err := env.Client.Get(p.t.Context(), client.ObjectKey{Namespace: p.ns, Name: v.Secret.SecretName}, secret); err != nil {
			p.t.Fatal(err)
		}
		m.Credentials = p.t.TempDir()
		for k, b := range secret.Data {
			if err := os.WriteFile(filepath.Join(m.Credentials, k), b, 0o400); err != nil {
				p.t.Fatal(err)
			}
		}
	}
	var out bytes.Buffer
	res := gitws.Run(context.Background(), []byte(request), m, &out)
	p.logs.set(pod.Name, logged(out.String()))
	code, phase := int32(0), corev1.PodSucceeded
	if res.Kind != "" {
		code, phase = 3, corev1.PodFailed
	}
	setPodStatus(p.t, pod, phase, terminated(code, string(res.Encode())))
	return res
}

func (p *pipelineEnv) readyReason(name string, want string) *v1.AgentTask {
	p.t.Helper()
	var task *v1.AgentTask
	p.eventually("task "+name+" Ready reason "+want, func() (bool, string) {
		task = p.getTask(name)
		c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady)
		return c != nil && c.Reason == want, fmt.Sprintf("%+v", c)
	})
	return task
}

func TestGitWorkspaceClonesAndCallsWaitForIt(t *testing.T) {
	p := startPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	task := p.gitTask("fix", repo.URL, "main", "git-creds")

	pod := p.gitPod("fix", gitws.OpClone)
	// The clone pod has a call's walls, mounts the Secret (no tool pod ever does)
	// and is fenced to the repository's host alone.
	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || !*spec.SecurityContext.RunAsNonRoot ||
		!*spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem {
		t.Fatalf("the clone pod lacks a call's walls: %+v", spec)
	}
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.UID != task.UID {
		t.Fatalf("the clone pod is not the task's: %+v", pod.OwnerReferences)
	}
	p.wantFencedToServer("the clone pod", pod, server)

	// A call proposed while the clone runs waits for it; it is not failed.
	intent := p.propose("fix", 0, 0, v1.ToolReadFile, `{"path":"calc.sh"}`)
	p.condition(intent.Name, v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonWaitingForWorkspace)
	if p.executionExists(intent.Name) {
		t.Fatal("a call ran before the workspace was cloned")
	}
	p.readyReason("fix", v1.ReasonWorkspaceCloning)

	claim := t.TempDir()
	if res := p.runGitPod(pod, claim); res.Kind != "" {
		t.Fatalf("clone failed: %+v", res)
	}
	got := p.readyReason("fix", v1.ReasonWorkspaceReady)
	if ws := got.Status.Workspace; ws == nil || ws.Commit != repo.Second || ws.Ref != "refs/heads/main" || ws.ClonedAt == nil {
		t.Fatalf("status.workspace %+v, want commit %s of main", ws, repo.Second)
	}
	if b, err := os.ReadFile(filepath.Join(claim, gitws.WorktreeDir, "calc.sh")); err != nil || string(b) != gittest.Files["calc.sh"] {
		t.Fatalf("the worktree's calc.sh: %q %v", b, err)
	}
	// The waiting call runs now, with only the worktree mounted at /workspace.
	p.eventually("the held call's Execution", func() (bool, string) { return p.executionExists(intent.Name), "" })
	exec := &v1.Execution{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: intent.Name}, exec); err != nil {
		t.Fatal(err)
	}
	if exec.Spec.Sandbox.WorkspaceSubPath != gitws.WorktreeDir {
		t.Fatalf("the call mounts subPath %q of the claim, want %q: the git directory would be in its reach", exec.Spec.Sandbox.WorkspaceSubPath, gitws.WorktreeDir)
	}
	job, err := executor.BuildJob(exec, testRunnerImage)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			t.Fatalf("a tool's Job mounts Secret %s", v.Secret.SecretName)
		}
	}

	// The URL cannot change under a cloned workspace.
	unchanged := got.DeepCopy()
	got.Spec.Workspace.Git.URL = repo.URL + "x"
	if err := env.Client.Patch(t.Context(), got, client.MergeFrom(unchanged)); err == nil || !strings.Contains(err.Error(), "spec.workspace.git.url is immutable") {
		t.Fatalf("changing the URL: %v", err)
	}
}

func TestGitWorkspaceFailuresSayWhich(t *testing.T) {
	// A clone that could not be made is looked at again every second here.
	p := startPipeline(t, func(o *Options) { o.GitRetry = time.Second })
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")

	t.Run("an unknown revision", func(t *testing.T) {
		p.gitSecret("creds-rev", server, server.Token, true)
		p.gitTask("rev", repo.URL, "no-such-branch", "creds-rev")
		p.runGitPod(p.gitPod("rev", gitws.OpClone), t.TempDir())
		task := p.readyReason("rev", v1.ReasonGitRevisionNotFound)
		mustContain(t, "Ready message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady).Message,
			`revision "no-such-branch" is not a branch, tag or commit`, "branches: feature, main")
		// Its calls wait; nothing fails them.
		intent := p.propose("rev", 0, 0, v1.ToolReadFile, `{"path":"calc.sh"}`)
		p.condition(intent.Name, v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonWaitingForWorkspace)
		if got := p.getIntent(intent.Name); got.Status.Observation != nil {
			t.Fatalf("a call of a task whose clone failed was ended: %+v", got.Status.Observation)
		}
	})

	t.Run("a refused credential, then the Secret fixed", func(t *testing.T) {
		secret := p.gitSecret("creds-bad", server, "wrong-token", true)
		p.gitTask("cred", repo.URL, "v1", "creds-bad")
		first := p.gitPod("cred", gitws.OpClone)
		p.runGitPod(first, t.TempDir())
		task := p.readyReason("cred", v1.ReasonGitCredentialsRefused)
		mustContain(t, "Ready message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady).Message, "asked for credentials", "tried again when the Secret changes")
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
			t.Fatal(err)
		}
		secret.Data[gitws.CredToken] = []byte(server.Token)
		if err := env.Client.Update(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
		second := p.gitPod("cred", gitws.OpClone, first.Name)
		p.runGitPod(second, t.TempDir())
		task = p.readyReason("cred", v1.ReasonWorkspaceReady)
		if task.Status.Workspace.Commit != repo.First || task.Status.Workspace.Ref != "refs/tags/v1" {
			t.Fatalf("status.workspace %+v, want the tag's commit %s", task.Status.Workspace, repo.First)
		}
	})

	t.Run("a Secret that is not labelled is never mounted, until it is", func(t *testing.T) {
		secret := p.gitSecret("creds-unlabelled", server, server.Token, false)
		p.gitTask("unlabelled", repo.URL, "main", "creds-unlabelled")
		task := p.readyReason("unlabelled", v1.ReasonGitCredentialsNotFound)
		mustContain(t, "Ready message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady).Message, "is not labelled toolgate.dev/git-credentials=true", "looked at again every 1s")
		p.absent(p.reconciledNow("agenttask", p.getTask("unlabelled")), "a clone pod for an unlabelled Secret", func() bool {
			var pods corev1.PodList
			_ = env.Client.List(t.Context(), &pods, client.InNamespace(p.ns), client.MatchingLabels{v1.LabelTask: "unlabelled"})
			return len(pods.Items) > 0
		})
		// Labelled by its owner, it is used on the next look: no watch needed.
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
			t.Fatal(err)
		}
		secret.Labels = map[string]string{v1.LabelGitCredentials: "true"}
		if err := env.Client.Update(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
		if pod := p.gitPod("unlabelled", gitws.OpClone); len(pod.Spec.Volumes) == 0 {
			t.Fatal("no volumes")
		}
	})

	t.Run("a URL toolgate does not clone", func(t *testing.T) {
		p.gitTask("file-url", "file:///etc", "", "")
		task := p.readyReason("file-url", v1.ReasonGitURLInvalid)
		mustContain(t, "Ready message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady).Message, `scheme "file"`)
	})

	t.Run("an unreachable host is tried again", func(t *testing.T) {
		p.gitTask("down", "http://127.0.0.1:1/calc.git", "", "")
		first := p.gitPod("down", gitws.OpClone)
		p.runGitPod(first, t.TempDir())
		// The pod goes and the clone is tried again, by a pod of the same name (the
		// same attempt: same Secret, same fence).
		p.eventually("the failed clone pod is replaced", func() (bool, string) {
			pod := &corev1.Pod{}
			err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(first), pod)
			return err == nil && pod.UID != first.UID, fmt.Sprint(err)
		})
		// The failed attempt is said on the task, though its condition moved on.
		p.taskEvent("down", EventWorkspaceNotCloned, "GitHostUnreachable: cloning http://127.0.0.1:1/calc.git at HEAD failed")
	})
}

// taskEvent waits for an event of reason on the task whose note holds note.
func (p *pipelineEnv) taskEvent(task, reason, note string) {
	p.t.Helper()
	p.eventually("a "+reason+" event on "+task, func() (bool, string) {
		var events eventsv1.EventList
		if err := env.Client.List(p.t.Context(), &events, client.InNamespace(p.ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Regarding.Name == task && e.Reason == reason {
				if strings.Contains(e.Note, note) {
					return true, ""
				}
				seen = append(seen, e.Note)
			}
		}
		return false, fmt.Sprint(seen)
	})
}

// changeRecord waits for the task's change ConfigMap to answer request.
func (p *pipelineEnv) changeRecord(task, request string) (*corev1.ConfigMap, gitws.Record) {
	p.t.Helper()
	cm := &corev1.ConfigMap{}
	p.eventually("the change record of "+task+" for "+request, func() (bool, string) {
		err := env.Client.Get(p.t.Context(), client.ObjectKey{Namespace: p.ns, Name: gitws.ChangeConfigMapName(task)}, cm)
		return err == nil && cm.Annotations[v1.AnnotationChangeRequest] == request, fmt.Sprint(err, cm.Annotations)
	})
	var rec gitws.Record
	if err := json.Unmarshal([]byte(cm.Data[gitws.RecordKey]), &rec); err != nil {
		p.t.Fatalf("the change record is not JSON: %v", err)
	}
	return cm, rec
}

func (p *pipelineEnv) askForChange(task, request string) {
	p.t.Helper()
	p.annotateTask(task, v1.AnnotationChangeRequest, request)
}

// annotateTask sets one annotation of the task with a merge patch.
func (p *pipelineEnv) annotateTask(task, key, value string) {
	p.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	obj := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: task}}
	if err := env.Client.Patch(p.t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		p.t.Fatal(err)
	}
}

// The change is read by a pod of its own (claim read-only, no network, no
// Secret), recorded only when the log is the diff the pod's result describes, and a
// ConfigMap of the record's name that the task does not control is never written.
func TestGitWorkspaceChangeIsRecorded(t *testing.T) {
	p := startPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	task := p.gitTask("fix", repo.URL, "main", "git-creds")
	claim := t.TempDir()
	p.runGitPod(p.gitPod("fix", gitws.OpClone), claim)
	p.readyReason("fix", v1.ReasonWorkspaceReady)

	worktree := filepath.Join(claim, gitws.WorktreeDir)
	fixed := strings.Replace(gittest.Files["calc.sh"], "-", "+", 1)
	for path, text := range map[string]string{"calc.sh": fixed, "NOTES.md": "added by the agent\n", ".toolgate/scratch": "not part of the change\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(worktree, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(worktree, path), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	p.askForChange("fix", "r1")
	pod := p.gitPod("fix", gitws.OpChange)
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			t.Fatalf("the change pod mounts Secret %s", v.Secret.SecretName)
		}
		if v.PersistentVolumeClaim != nil && !v.PersistentVolumeClaim.ReadOnly {
			t.Fatal("the change pod mounts the claim read-write")
		}
	}
	if pod.Labels[v1.LabelNetwork] != executor.NetworkKey(&v1.Execution{Spec: v1.ExecutionSpec{Sandbox: v1.SandboxProfile{Network: v1.NetworkSpec{Mode: v1.NetworkNone}}}}) {
		t.Fatalf("the change pod is not fenced from the network: %v", pod.Labels)
	}
	if res := p.runGitPod(pod, claim); res.Kind != "" {
		t.Fatalf("the change read failed: %+v", res)
	}
	cm, rec := p.changeRecord("fix", "r1")
	if owner := metav1.GetControllerOf(cm); owner == nil || owner.UID != task.UID {
		t.Fatalf("the change record is not the task's: %+v", cm.OwnerReferences)
	}
	diff := cm.Data[gitws.DiffKey]
	if !rec.Complete || rec.Base != repo.Second || rec.FileCount != 2 || !strings.Contains(diff, "+++ b/calc.sh") ||
		!strings.Contains(diff, "+added by the agent") || strings.Contains(diff, "scratch") {
		t.Fatalf("record %+v, diff:\n%s", rec, diff)
	}
	p.taskEvent("fix", EventChangeRecorded, "2 file(s) changed against "+repo.Second+", in ConfigMap fix-change")
	p.eventually("the change pod goes once recorded", func() (bool, string) {
		got := &corev1.Pod{}
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), got)
		return err != nil || !got.DeletionTimestamp.IsZero(), fmt.Sprint(err)
	})

	// A log that is not the diff the pod's result describes is not recorded: one of
	// another length, and one of the same length, which only its SHA-256 tells
	// from the diff the pod read.
	done := []string{pod.Name}
	for _, tamper := range []struct {
		request, what string
		sameLength    bool
		edit          func(string) string
	}{
		{"r2", "longer than the diff", false, func(log string) string { return strings.Replace(log, "added by", "planted by", 1) }},
		{"r3", "as long as the diff", true, func(log string) string { return strings.Replace(log, "added by", "ADDED BY", 1) }},
	} {
		p.askForChange("fix", tamper.request)
		tampered := p.gitPod("fix", gitws.OpChange, done...)
		done = append(done, tampered.Name)
		var original string
		p.runGitPodLogging(tampered, claim, func(log string) string {
			original = log
			return tamper.edit(log)
		})
		if edited := tamper.edit(original); edited == original || (tamper.sameLength && len(edited) != len(original)) {
			t.Fatalf("the tampered log %s is not what the test means it to be", tamper.what)
		}
		cm, rec = p.changeRecord("fix", tamper.request)
		if rec.Complete || cm.Data[gitws.DiffKey] != "" || !strings.Contains(rec.Message, "is not the diff its result describes") {
			t.Fatalf("a tampered log %s was recorded: %+v\n%s", tamper.what, rec, cm.Data[gitws.DiffKey])
		}
	}

	// A ConfigMap of the record's name that is not the task's is left alone, and the
	// task says why.
	p.gitTask("squat", repo.URL, "main", "git-creds")
	squatClaim := t.TempDir()
	p.runGitPod(p.gitPod("squat", gitws.OpClone), squatClaim)
	p.readyReason("squat", v1.ReasonWorkspaceReady)
	squatter := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: gitws.ChangeConfigMapName("squat")},
		Data: map[string]string{gitws.DiffKey: "+planted\n"}}
	if err := env.Client.Create(t.Context(), squatter); err != nil {
		t.Fatal(err)
	}
	p.askForChange("squat", "s1")
	p.taskEvent("squat", EventChangeNotRecorded, "is not this task's change record")
	got := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(squatter), got); err != nil || got.Data[gitws.DiffKey] != "+planted\n" || got.Annotations[v1.AnnotationChangeRequest] != "" {
		t.Fatalf("the squatter's ConfigMap was written: %+v %v", got, err)
	}
}
