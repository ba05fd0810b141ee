package admission

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// Tests of config/admission/sessions.yaml: only the controller makes, changes and
// enters a session sandbox, and the controller's service account execs nothing but
// the runner, and only in session pods.
//
// In each test namespace strangerUser is given every right on pods and their
// subresources, and the controller's service account what config/rbac/role.yaml gives
// it on pods plus attach, port-forward and ephemeral containers, which it does not
// hold in a cluster: so each refusal below comes from the policy, not from RBAC.
//
// envtest has no kubelet and no scheduler. A CONNECT (exec, attach, port-forward)
// that admission lets through then fails on the pod having no node; a refused one is
// Forbidden with the policy's message. wantPastAdmission and wantRefused tell them
// apart by the message.

// The names are the controller's own (internal/executor), so that the policy and
// the controller cannot drift apart unnoticed: the refusals below spell out what the
// policy expects.
const (
	sessionKey = "0123456789abcdef"
	// sessionPodName is a name the controller could give a session pod.
	sessionPodName = executor.SessionPrefix + sessionKey
	sessionLabel   = v1.LabelSession
	runnerPath     = executor.RunnerPath
)

// runnerExec is the exec the controller sends (executor.PodExec).
func runnerExec() *corev1.PodExecOptions {
	return &corev1.PodExecOptions{
		Container: executor.ToolContainerName, Command: slices.Clone(executor.ExecCommand),
		Stdin: true, Stdout: true, Stderr: true, TTY: false,
	}
}

// sessionPod builds a session pod as the controller creates it.
func sessionPod(ns string) *corev1.Pod {
	pod := plainPod(ns, sessionPodName)
	pod.Labels = map[string]string{sessionLabel: sessionKey}
	return pod
}

// plainPod builds a pod with one container named tool.
func plainPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "tool", Image: "example.test/sandbox:test",
				Command: []string{runnerPath, "serve"},
			}},
		},
	}
}

// sessionsNamespace is setupNamespace plus the pod rights described above, and
// returns once the sessions policy is enforced.
func sessionsNamespace(t *testing.T) string {
	t.Helper()
	ns := setupNamespace(t)
	pods := []string{"pods", "pods/exec", "pods/attach", "pods/portforward", "pods/ephemeralcontainers"}
	roles := []struct {
		name    string
		rules   []rbacv1.PolicyRule
		subject string
	}{
		{"every-pod-right", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: pods, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		}, strangerUser},
		// What config/rbac/role.yaml gives the controller on pods, and what it does not
		// hold but a careless grant could give it.
		{"controller-pods", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/attach", "pods/portforward"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"update", "patch"}},
		}, controllerUser},
	}
	for _, r := range roles {
		mustCreate(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.name}, Rules: r.rules})
		mustCreate(t, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: r.subject}},
		})
	}
	for _, w := range []struct{ user, verb, resource string }{
		{strangerUser, "create", "pods"},
		{strangerUser, "create", "pods/exec"},
		{strangerUser, "create", "pods/attach"},
		{strangerUser, "create", "pods/portforward"},
		{strangerUser, "update", "pods/ephemeralcontainers"},
		{controllerUser, "create", "pods"},
		{controllerUser, "create", "pods/exec"},
		{controllerUser, "create", "pods/attach"},
		{controllerUser, "create", "pods/portforward"},
		{controllerUser, "update", "pods/ephemeralcontainers"},
	} {
		waitPodAccess(t, ns, w.user, w.verb, w.resource)
	}
	// The suite's probes cover the other policies; this one is polled here because
	// its probe needs this namespace's pod rights.
	want := "mallory may not create pod " + ns + "/" + sessionPodName
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		last = clients[strangerUser].Create(ctx, sessionPod(ns), client.DryRunAll)
		return contains(last, want), nil
	})
	if err != nil {
		t.Fatalf("the sessions policy is not enforced (last answer: %v)", last)
	}
	return ns
}

// waitPodAccess waits until RBAC allows the user to do verb on a core resource
// ("pods" or "pods/exec") in ns.
func waitPodAccess(t *testing.T, ns, user, verb, resource string) {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: res, Subresource: sub},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("RBAC never allowed %s to %s %s in %s: %v", user, verb, resource, ns, err)
	}
}

// theAdmin stands for the envtest admin (system:masters) in clientset and connect.
const theAdmin = "the admin"

// clientset returns a client-go clientset acting as user.
func clientset(t *testing.T, user string) *kubernetes.Clientset {
	t.Helper()
	cfg := configs[user]
	if user == theAdmin {
		cfg = env.Config
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// connect sends a CONNECT request (a POST, as SPDY clients send) for a pod's
// subresource as user, with opts as its query parameters.
func connect(t *testing.T, user, ns, pod, subresource string, opts runtime.Object) error {
	t.Helper()
	return connectWith(t, "POST", user, ns, pod, subresource, opts)
}

// connectWith is connect with the HTTP method: GET is what websocket clients (kubectl,
// and the controller first) send, and is a CONNECT to admission too.
func connectWith(t *testing.T, method, user, ns, pod, subresource string, opts runtime.Object) error {
	t.Helper()
	return clientset(t, user).CoreV1().RESTClient().Verb(method).
		Namespace(ns).Resource("pods").Name(pod).SubResource(subresource).
		VersionedParams(opts, scheme.ParameterCodec).
		Do(t.Context()).Error()
}

// wantPastAdmission fails the test unless err is what the API server answers a
// CONNECT admission allowed: the pod has no node to connect to.
func wantPastAdmission(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: the request succeeded; want it past admission and failed on the pod having no node", what)
	}
	if apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "does not have a host assigned") {
		t.Fatalf("%s: got %v (reason %s); want it past admission and failed on the pod having no node", what, err, apierrors.ReasonForError(err))
	}
}

// TestSessionPodsOnlyTheController: creating or changing a session pod.
func TestSessionPodsOnlyTheController(t *testing.T) {
	ns := sessionsNamespace(t)
	ctx := t.Context()
	stranger := clients[strangerUser]

	// A stranger cannot plant a session pod: by its name, a generated name, or the
	// label alone.
	wantRefused(t, stranger.Create(ctx, sessionPod(ns)),
		"mallory may not create pod "+ns+"/"+sessionPodName+": a pod named toolgate-session-… or labelled toolgate.dev/session is a toolgate session sandbox, which runs every tool call of an AgentTask, so only the toolgate controller creates or changes one.")
	unlabelled := plainPod(ns, "toolgate-session-x")
	wantRefused(t, stranger.Create(ctx, unlabelled), "mallory may not create pod "+ns+"/toolgate-session-x: ")
	generated := plainPod(ns, "")
	generated.GenerateName = "toolgate-session-"
	wantRefused(t, stranger.Create(ctx, generated), "mallory may not create pod "+ns+"/toolgate-session-")
	labelled := plainPod(ns, "innocent")
	labelled.Labels = map[string]string{sessionLabel: sessionKey}
	wantRefused(t, stranger.Create(ctx, labelled), "mallory may not create pod "+ns+"/innocent: ")

	// Her own pods are not this policy's business, and she cannot turn one into a
	// session pod afterwards.
	own := plainPod(ns, "mine")
	if err := stranger.Create(ctx, own); err != nil {
		t.Fatalf("an ordinary pod was refused: %v", err)
	}
	wantRefused(t, stranger.Patch(ctx, own.DeepCopy(), mergePatchOf(t, map[string]any{
		"metadata": map[string]any{"labels": map[string]any{sessionLabel: sessionKey}},
	})), "mallory may not change pod "+ns+"/mine: ")

	// The controller creates session pods, by name or generated name.
	session := sessionPod(ns)
	if err := clients[controllerUser].Create(ctx, session); err != nil {
		t.Fatalf("the controller's session pod was refused: %v", err)
	}
	byGenerate := sessionPod(ns)
	byGenerate.Name, byGenerate.GenerateName = "", "toolgate-session-"
	if err := clients[controllerUser].Create(ctx, byGenerate); err != nil {
		t.Fatalf("the controller's session pod with a generated name was refused: %v", err)
	}
	// A pod the controller labelled under another name is a session pod too.
	other := plainPod(ns, "renamed")
	other.Labels = map[string]string{sessionLabel: sessionKey}
	if err := clients[controllerUser].Create(ctx, other); err != nil {
		t.Fatalf("the controller's labelled pod was refused: %v", err)
	}

	// Nobody else changes them: not the label (relabelled or removed), not the image.
	changes := []struct {
		what  string
		pod   *corev1.Pod
		patch map[string]any
	}{
		{"relabel", session, map[string]any{"metadata": map[string]any{"labels": map[string]any{sessionLabel: "ffffffffffffffff"}}}},
		{"remove the label", session, map[string]any{"metadata": map[string]any{"labels": map[string]any{sessionLabel: nil}}}},
		{"remove the label of a differently named pod", other, map[string]any{"metadata": map[string]any{"labels": map[string]any{sessionLabel: nil}}}},
		{"add a label", session, map[string]any{"metadata": map[string]any{"labels": map[string]any{"extra": "x"}}}},
		{"annotate", session, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"note": "x"}}}},
	}
	for _, c := range changes {
		wantRefused(t, stranger.Patch(ctx, c.pod.DeepCopy(), mergePatchOf(t, c.patch)),
			"mallory may not change pod "+ns+"/"+c.pod.Name+": a pod named toolgate-session-… or labelled toolgate.dev/session is a toolgate session sandbox")
	}
	image := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(session), image); err != nil {
		t.Fatal(err)
	}
	image.Spec.Containers[0].Image = "example.test/evil:latest"
	wantRefused(t, stranger.Update(ctx, image), "mallory may not change pod "+ns+"/"+sessionPodName+": ")

	// Finalizers and owner references, and nothing else, anyone may change: the
	// garbage collector does when it deletes a task in the foreground.
	if err := stranger.Patch(ctx, session.DeepCopy(), mergePatchOf(t, map[string]any{"metadata": map[string]any{"finalizers": []string{"example.test/hold"}}})); err != nil {
		t.Fatalf("a change of the finalizers only was refused: %v", err)
	}
	if err := stranger.Patch(ctx, session.DeepCopy(), mergePatchOf(t, map[string]any{"metadata": map[string]any{"finalizers": nil, "labels": map[string]any{"extra": "x"}}})); err == nil {
		t.Fatal("a change of the finalizers that also adds a label was allowed")
	}
	if err := stranger.Patch(ctx, session.DeepCopy(), mergePatchOf(t, map[string]any{"metadata": map[string]any{"finalizers": nil}})); err != nil {
		t.Fatalf("removing the finalizer was refused: %v", err)
	}

	// The refused changes left the pod as the controller made it.
	got := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(session), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[sessionLabel] != sessionKey || len(got.Labels) != 1 || got.Spec.Containers[0].Image != "example.test/sandbox:test" {
		t.Fatalf("the session pod changed: labels %v, image %s", got.Labels, got.Spec.Containers[0].Image)
	}
}

// TestSessionEphemeralContainers: nobody but an admin adds a debug container to a
// session pod, not even the controller.
func TestSessionEphemeralContainers(t *testing.T) {
	ns := sessionsNamespace(t)
	ctx := t.Context()
	session := sessionPod(ns)
	mustCreate(t, session)
	labelled := plainPod(ns, "renamed")
	labelled.Labels = map[string]string{sessionLabel: sessionKey}
	mustCreate(t, labelled)
	own := plainPod(ns, "mine")
	mustCreate(t, own)

	debug := func(pod *corev1.Pod) *corev1.Pod {
		p := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
			t.Fatal(err)
		}
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "example.test/busybox:latest", Command: []string{"sh"}},
			TargetContainerName:      "tool",
		})
		return p
	}
	for _, user := range []string{strangerUser, controllerUser} {
		for _, pod := range []*corev1.Pod{session, labelled} {
			_, err := clientset(t, user).CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, pod.Name, debug(pod), metav1.UpdateOptions{})
			wantRefused(t, err, user+" may not add an ephemeral container to pod "+ns+"/"+pod.Name+": it is a toolgate session sandbox, which runs every tool call of an AgentTask")
		}
	}
	// Her own pod is not this policy's business.
	if _, err := clientset(t, strangerUser).CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, own.Name, debug(own), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an ephemeral container in an ordinary pod was refused: %v", err)
	}
}

// TestSessionAttachAndPortForward: nobody but an admin attaches or port-forwards to
// a session pod, not even the controller.
func TestSessionAttachAndPortForward(t *testing.T) {
	ns := sessionsNamespace(t)
	mustCreate(t, sessionPod(ns))
	mustCreate(t, plainPod(ns, "mine"))
	attach := &corev1.PodAttachOptions{Container: "tool", Stdin: true, Stdout: true, Stderr: true}
	forward := &corev1.PodPortForwardOptions{Ports: []int32{8080}}

	for _, user := range []string{strangerUser, controllerUser} {
		wantRefused(t, connect(t, user, ns, sessionPodName, "attach", attach),
			user+" may not attach to pod "+ns+"/"+sessionPodName+": it is a toolgate session sandbox")
		wantRefused(t, connect(t, user, ns, sessionPodName, "portforward", forward),
			user+" may not port-forward to pod "+ns+"/"+sessionPodName+": it is a toolgate session sandbox")
	}
	// A cluster admin may; other pods are not this policy's business.
	wantPastAdmission(t, connect(t, theAdmin, ns, sessionPodName, "attach", attach), "the admin's attach")
	wantPastAdmission(t, connect(t, strangerUser, ns, "mine", "attach", attach), "an attach to an ordinary pod")
	wantPastAdmission(t, connect(t, strangerUser, ns, "mine", "portforward", forward), "a port-forward to an ordinary pod")
}

// TestSessionExec: only the controller execs into a session pod, and its service
// account only to start the runner; it execs into no other pod.
func TestSessionExec(t *testing.T) {
	ns := sessionsNamespace(t)
	mustCreate(t, sessionPod(ns))
	mustCreate(t, plainPod(ns, "mine"))

	// A stranger with pods/exec cannot exec into a session pod, not even the runner.
	for _, opts := range []*corev1.PodExecOptions{
		runnerExec(),
		{Container: "tool", Command: []string{"sh", "-c", "echo forged > /workspace/result"}, Stdin: true, Stdout: true, TTY: true},
	} {
		wantRefused(t, connect(t, strangerUser, ns, sessionPodName, "exec", opts),
			"mallory may not exec into pod "+ns+"/"+sessionPodName+": it is a toolgate session sandbox, which runs every tool call of an AgentTask, and a command run there by hand would act outside the pipeline")
	}

	// The controller's exec of the runner gets past admission, by either method.
	for _, method := range []string{"POST", "GET"} {
		wantPastAdmission(t, connectWith(t, method, controllerUser, ns, sessionPodName, "exec", runnerExec()), "the controller's runner exec ("+method+")")
	}
	wantRefused(t, connectWith(t, "GET", strangerUser, ns, sessionPodName, "exec", runnerExec()),
		"mallory may not exec into pod "+ns+"/"+sessionPodName+": ")
	wantRefused(t, connectWith(t, "GET", controllerUser, ns, sessionPodName, "exec", &corev1.PodExecOptions{Container: "tool", Command: []string{"sh"}, Stdout: true}),
		"the toolgate controller execs only its runner in a session pod")

	// Anything else it asks for is refused, each naming what it asked.
	const runnerOnly = "the toolgate controller execs only its runner in a session pod (container tool, command [\"/toolgate-runner/runner\", \"exec\"], no tty), and this exec into pod "
	cases := []struct {
		what string
		edit func(*corev1.PodExecOptions)
		want string
	}{
		{"a shell", func(o *corev1.PodExecOptions) { o.Command = []string{"sh"} },
			`asks for container "tool", command ["sh"], tty false.`},
		{"the runner with another argument", func(o *corev1.PodExecOptions) { o.Command = []string{runnerPath, "exec", "--unsafe"} },
			`command ["/toolgate-runner/runner", "exec", "--unsafe"]`},
		{"the runner without its argument", func(o *corev1.PodExecOptions) { o.Command = []string{runnerPath} },
			`command ["/toolgate-runner/runner"]`},
		{"another container", func(o *corev1.PodExecOptions) { o.Container = "sidecar" },
			`asks for container "sidecar", command ["/toolgate-runner/runner", "exec"], tty false.`},
		{"no container", func(o *corev1.PodExecOptions) { o.Container = "" },
			`asks for container (none), command`},
		{"a tty", func(o *corev1.PodExecOptions) { o.TTY = true },
			`asks for container "tool", command ["/toolgate-runner/runner", "exec"], tty true.`},
	}
	for _, c := range cases {
		opts := runnerExec()
		c.edit(opts)
		err := connect(t, controllerUser, ns, sessionPodName, "exec", opts)
		wantRefused(t, err, runnerOnly+ns+"/"+sessionPodName+" ")
		if !contains(err, c.want) {
			t.Errorf("%s: refusal %q does not name the request (%s)", c.what, err, c.want)
		}
	}

	// The controller's service account execs into no other pod, not even the runner.
	for _, pod := range []string{"mine", "toolgate-sessions"} {
		wantRefused(t, connect(t, controllerUser, ns, pod, "exec", runnerExec()),
			"the controller execs only the runner in toolgate's session pods (named toolgate-session-…), and pod "+ns+"/"+pod+" is not one.")
	}

	// A cluster admin may exec anything, and other pods are not this policy's
	// business for anyone else.
	wantPastAdmission(t, connect(t, theAdmin, ns, sessionPodName, "exec", &corev1.PodExecOptions{Container: "tool", Command: []string{"sh"}, Stdout: true}), "the admin's shell")
	wantPastAdmission(t, connect(t, strangerUser, ns, "mine", "exec", &corev1.PodExecOptions{Container: "tool", Command: []string{"sh"}, Stdout: true}), "a shell in an ordinary pod")
}

// TestGitPodsOnlyTheController: a git pod (clone, change read, push) is planted,
// changed or entered by nobody but the controller, which itself never enters one.
func TestGitPodsOnlyTheController(t *testing.T) {
	ns := sessionsNamespace(t)
	ctx := t.Context()
	stranger := clients[strangerUser]
	name := executor.GitPodName("clone", "task-uid")
	gitPod := func(name string) *corev1.Pod {
		pod := plainPod(ns, name)
		pod.Labels = map[string]string{v1.LabelGit: "clone"}
		return pod
	}
	// A planted clone pod would have its result recorded as the commit the task
	// started from: refused by its name, a generated name, or the label alone.
	wantRefused(t, stranger.Create(ctx, gitPod(name)),
		"mallory may not create pod "+ns+"/"+name+": a pod named toolgate-git-… or labelled toolgate.dev/git is toolgate's own clone")
	generated := plainPod(ns, "")
	generated.GenerateName = "toolgate-git-"
	wantRefused(t, stranger.Create(ctx, generated), "mallory may not create pod "+ns+"/toolgate-git-")
	wantRefused(t, stranger.Create(ctx, gitPod("innocent")), "mallory may not create pod "+ns+"/innocent: ")
	own := plainPod(ns, "mine")
	if err := stranger.Create(ctx, own); err != nil {
		t.Fatalf("an ordinary pod was refused: %v", err)
	}
	wantRefused(t, stranger.Patch(ctx, own.DeepCopy(), mergePatchOf(t, map[string]any{
		"metadata": map[string]any{"labels": map[string]any{v1.LabelGit: "clone"}},
	})), "mallory may not change pod "+ns+"/mine: ")

	pod := gitPod(name)
	if err := clients[controllerUser].Create(ctx, pod); err != nil {
		t.Fatalf("the controller's git pod was refused: %v", err)
	}
	wantRefused(t, stranger.Patch(ctx, pod.DeepCopy(), mergePatchOf(t, map[string]any{
		"metadata": map[string]any{"labels": map[string]any{v1.LabelGit: nil}},
	})), "mallory may not change pod "+ns+"/"+name+": ")
	// Nobody enters it (it holds the repository's credentials), not even the
	// controller; the admin may.
	for _, user := range []string{strangerUser, controllerUser} {
		wantRefused(t, connect(t, user, ns, name, "exec", runnerExec()), "may not enter pod "+ns+"/"+name+" (exec)")
		wantRefused(t, connect(t, user, ns, name, "attach", &corev1.PodAttachOptions{Container: "tool", Stdout: true}), "may not enter pod "+ns+"/"+name+" (attach)")
		wantRefused(t, connect(t, user, ns, name, "portforward", &corev1.PodPortForwardOptions{Ports: []int32{80}}), "may not enter pod "+ns+"/"+name+" (portforward)")
	}
	wantPastAdmission(t, connect(t, theAdmin, ns, name, "exec", runnerExec()), "the admin's exec into a git pod")
}
