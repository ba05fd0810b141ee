package controller

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/protocol"
)

// envtest has no kubelet, so neither session pods nor pods/exec exist here: the
// tests below play the kubelet (a session pod is marked running once created) and
// deliver each exec to the real runner binary, run as `runner exec` on a real
// folder standing for the task's workspace claim. test/e2e delivers through the
// API server into real session pods.

var (
	buildRunnerOnce sync.Once
	runnerBinary    string
	buildRunnerErr  error
)

// removeTestRunner removes the runner built for the tests, once they all ran.
func removeTestRunner() {
	if runnerBinary != "" {
		_ = os.RemoveAll(filepath.Dir(runnerBinary))
	}
}

func testRunnerBinary(t *testing.T) string {
	t.Helper()
	buildRunnerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toolgate-runner-")
		if err != nil {
			buildRunnerErr = err
			return
		}
		runnerBinary = filepath.Join(dir, "runner")
		build := exec.Command("go", "build", "-o", runnerBinary, "../../cmd/runner")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			buildRunnerErr = fmt.Errorf("building the runner: %v\n%s", err, out)
		}
	})
	if buildRunnerErr != nil {
		t.Fatal(buildRunnerErr)
	}
	return runnerBinary
}

// localSessions is the kubelet and pods/exec of these tests: each session pod's
// workspace claim is a folder, and an exec runs the runner there while the pod
// lives; the stream breaks when the pod is deleted or fails, as the real one does.
type localSessions struct {
	t      *testing.T
	runner string
	root   string
	mu     sync.Mutex
	// forge, when set, rewrites the invocation line on its way to the runner, as a
	// process left in the session pod that reached the runner's stdin could.
	forge func(line []byte) []byte
	execs []string    // pods exec'd into, in order
	uids  []types.UID // and their UIDs
}

func (l *localSessions) workspace(claim string) string {
	dir := filepath.Join(l.root, claim)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		l.t.Fatal(err)
	}
	return dir
}

func (l *localSessions) Exec(ctx context.Context, namespace, name string, stdin io.Reader, stdout, stderr io.Writer) (int32, error) {
	pod := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return 0, fmt.Errorf("pod %s: %w", name, err)
	}
	if ready, why := executor.SessionReady(pod); !ready {
		return 0, fmt.Errorf("container not running: %s", why)
	}
	l.mu.Lock()
	l.execs = append(l.execs, name)
	l.uids = append(l.uids, pod.UID)
	forge := l.forge
	l.mu.Unlock()
	claim := pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	// The folder of the claim the pod mounts (a git task's tools see its worktree).
	ws := filepath.Join(l.workspace(claim), pod.Spec.Containers[0].VolumeMounts[0].SubPath)
	cmd := exec.CommandContext(ctx, l.runner, "exec")
	if pod.Spec.Containers[0].VolumeMounts[0].ReadOnly {
		// The runner proves a read-only workspace by its mount: bind the folder
		// read-only in a mount namespace of the runner's own.
		cmd = exec.CommandContext(ctx, "unshare", "--mount", "--map-root-user", "--", "sh", "-c",
			`mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" exec`, "sh", ws, l.runner)
	}
	// On a host: the runner is not in a session pod, and must not kill its namespace.
	// Its probe targets refuse every connection, as a fenced pod sees them.
	// A bash call's home goes under the test's folder: a runner killed with its
	// stream leaves it behind.
	cmd.Env = []string{"TOOLGATE_WORKSPACE=" + ws, "PATH=/usr/bin:/bin", "TOOLGATE_OUTSIDE_SESSION=1", "TMPDIR=" + l.root,
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1", protocol.NodeIPEnv + "=127.0.0.1",
		protocol.KubeletPortEnv + "=1", protocol.DNSServerEnv + "=127.0.0.1:1"}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Copied by hand: exec.Cmd would wait for a Stdin reader that the controller
	// keeps open for the whole call.
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() {
		if forge != nil {
			lines := bufio.NewReader(stdin)
			line, err := lines.ReadBytes('\n')
			if _, werr := in.Write(forge(line)); err != nil || werr != nil {
				_ = in.Close()
				return
			}
			stdin = lines
		}
		_, _ = io.Copy(in, stdin)
		_ = in.Close()
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			if state := cmd.ProcessState; state != nil && state.ExitCode() >= 0 {
				return int32(state.ExitCode()), nil
			} else if status, ok := state.Sys().(syscall.WaitStatus); state != nil && ok && status.Signaled() {
				// A container runtime reports a process killed by a signal as 128+n.
				return 128 + int32(status.Signal()), nil
			}
			return 0, err
		case <-time.After(50 * time.Millisecond):
			current := &corev1.Pod{}
			err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), current)
			if apierrors.IsNotFound(err) || (err == nil && (current.UID != pod.UID || current.DeletionTimestamp != nil || current.Status.Phase == corev1.PodFailed)) {
				// A kubelet ends every process of the container, not only its first.
				killTree(cmd.Process.Pid)
				waitErr := <-done
				return 0, fmt.Errorf("error reading from error stream: connection reset: pod %s ended (%v)", name, waitErr)
			}
		}
	}
}

// killTree kills pid and every process under it, however each one grouped itself
// (the runner starts a tool in a process group of its own), as a container's end
// would. The processes are stopped before they are killed, so none forks away.
func killTree(pid int) {
	for range 3 {
		tree := descendants(pid)
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// processAlive says whether pid runs: a zombie (killed, not yet reaped) does not.
func processAlive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// descendants lists the processes under pid, read from /proc.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	for next := []int{pid}; len(next) > 0; {
		p := next[len(next)-1]
		next = next[:len(next)-1]
		for _, c := range children[p] {
			out = append(out, c)
			next = append(next, c)
		}
	}
	return out
}

func (l *localSessions) delivered() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.execs...)
}

// deliveredTo counts the execs into the pod of uid.
func (l *localSessions) deliveredTo(uid types.UID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, u := range l.uids {
		if u == uid {
			n++
		}
	}
	return n
}

// playKubelet marks every session pod of the namespace running once it exists, until
// the test ends.
func playKubelet(t *testing.T, ns string) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			var pods corev1.PodList
			if err := env.Client.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{v1.LabelSession}); err == nil {
				for i := range pods.Items {
					pod := &pods.Items[i]
					if (pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending) && pod.DeletionTimestamp == nil {
						pod.Status.Phase = corev1.PodRunning
						pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: executor.ToolContainerName, State: running()}}
						_ = env.Client.Status().Update(ctx, pod)
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func startSessionPipeline(t *testing.T, tune ...func(*Options)) (*pipelineEnv, *localSessions) {
	t.Helper()
	l := &localSessions{t: t, runner: testRunnerBinary(t), root: t.TempDir()}
	p := startPipeline(t, append([]func(*Options){func(o *Options) { o.SessionExecutor = l }}, tune...)...)
	playKubelet(t, p.ns)
	return p, l
}

func sessionTask(mutate ...func(*v1.AgentTask)) func(*v1.AgentTask) {
	return func(task *v1.AgentTask) {
		task.Spec.Sandbox.Isolation = v1.IsolationSession
		for _, m := range mutate {
			m(task)
		}
	}
}

// fileAppears waits until the file exists: the call under test got that far.
func fileAppears(p *pipelineEnv, what, path string) {
	p.eventually(what, func() (bool, string) {
		_, err := os.Stat(path)
		return err == nil, fmt.Sprint(err)
	})
}

func sessionPods(t *testing.T, ns string) map[string]*corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client.List(t.Context(), &pods, client.InNamespace(ns), client.HasLabels{v1.LabelSession}); err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			out[pods.Items[i].Name] = &pods.Items[i]
		}
	}
	return out
}

func TestSessionTaskKeepsTwoWarmSessionsWithTheWallsOfAJob(t *testing.T) {
	p, _ := startSessionPipeline(t)
	task := p.task("warm", v1.ModeAuto, sessionTask())
	profiles, err := pipeline.SessionProfiles(p.getTask("warm"), testSandboxImage)
	if err != nil {
		t.Fatal(err)
	}
	p.eventually("two warm sessions", func() (bool, string) {
		return len(sessionPods(t, p.ns)) == 2, fmt.Sprint(len(sessionPods(t, p.ns)))
	})
	pods := sessionPods(t, p.ns)
	for i, profile := range profiles {
		name := executor.SessionName(task.Name, profile)
		pod := pods[name]
		if pod == nil {
			t.Fatalf("no session pod %s for profile %d (%+v); have %v", name, i, profile, pods)
		}
		if owner := metav1.GetControllerOf(pod); owner == nil || owner.Kind != "AgentTask" || owner.Name != "warm" {
			t.Errorf("session %s owner %+v", name, pod.OwnerReferences)
		}
		// The same walls as a Job's pod for the profile: only the tool's command, its
		// environment and the grace period differ.
		job, err := executor.BuildJob(&v1.Execution{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: p.ns},
			Spec:       v1.ExecutionSpec{Sandbox: profile, TimeoutSeconds: 1, MaxOutputBytes: 256, Input: runtime.RawExtension{Raw: []byte(`{}`)}},
		}, testRunnerImage)
		if err != nil {
			t.Fatal(err)
		}
		want := job.Spec.Template.Spec
		want.Containers[0].Command = []string{executor.RunnerPath, "session"}
		want.Containers[0].Env = want.Containers[0].Env[1:] // the probe targets, without the invocation
		got := pod.Spec
		if got.TerminationGracePeriodSeconds == nil || *got.TerminationGracePeriodSeconds != executor.SessionGraceSeconds {
			t.Errorf("grace period %v", got.TerminationGracePeriodSeconds)
		}
		if *got.AutomountServiceAccountToken || !*got.SecurityContext.RunAsNonRoot || !*got.Containers[0].SecurityContext.ReadOnlyRootFilesystem ||
			got.Containers[0].SecurityContext.Capabilities.Drop[0] != "ALL" || got.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("session %s lost a wall: %+v", name, got)
		}
		if got.Volumes[0].PersistentVolumeClaim.ReadOnly != profile.ReadOnlyWorkspace || got.Containers[0].VolumeMounts[0].ReadOnly != profile.ReadOnlyWorkspace {
			t.Errorf("session %s workspace read-only %v, profile says %v", name, got.Volumes[0].PersistentVolumeClaim.ReadOnly, profile.ReadOnlyWorkspace)
		}
		if got.Containers[0].Image != want.Containers[0].Image || got.Containers[0].Command[1] != "session" {
			t.Errorf("session %s container %+v", name, got.Containers[0])
		}
		if pod.Labels[v1.LabelNetwork] != executor.NetworkKey(&v1.Execution{Spec: v1.ExecutionSpec{Sandbox: profile}}) {
			t.Errorf("session %s is not behind its profile's NetworkPolicy: %v", name, pod.Labels)
		}
	}
}

func TestSessionCallsRunInTheirSessionsWithoutJobs(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("s", v1.ModeAuto, sessionTask())
	ws := l.workspace("s-workspace")
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("first line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.propose("s", 0, 0, v1.ToolReadFile, `{"path":"notes.txt"}`)
	read := p.observed("s-t0-0")
	if obs := read.Status.Observation; obs.Outcome != v1.OutcomeSucceeded || !strings.Contains(obs.Summary, "first line") {
		t.Fatalf("read_file observation: %+v", obs)
	}
	exec := getExecution(t, p.ns, "s-t0-0")
	if exec.Status.JobName != "" || exec.Status.SessionName == "" || exec.Status.PodName != exec.Status.SessionName {
		t.Fatalf("read_file ran as job %q in session %q (pod %q)", exec.Status.JobName, exec.Status.SessionName, exec.Status.PodName)
	}
	if exec.Status.SessionName != executor.ExecutionSession(exec) || !exec.Spec.Sandbox.ReadOnlyWorkspace {
		t.Fatalf("a read-only call ran in %s, not its read-only session %s", exec.Status.SessionName, executor.ExecutionSession(exec))
	}
	if exec.Status.Sandbox == nil || exec.Status.OutputSHA256 == "" || exec.Status.ExitCode == nil {
		t.Fatalf("the runner's result is not in the status: %+v", exec.Status)
	}

	p.propose("s", 1, 0, v1.ToolBash, `{"command":"echo written > out.txt && cat out.txt"}`)
	write := p.observed("s-t1-0")
	if obs := write.Status.Observation; obs.Outcome != v1.OutcomeSucceeded || !strings.Contains(obs.Summary, "written") {
		t.Fatalf("bash observation: %+v", obs)
	}
	writeExec := getExecution(t, p.ns, "s-t1-0")
	if writeExec.Spec.Sandbox.ReadOnlyWorkspace || writeExec.Status.SessionName == exec.Status.SessionName {
		t.Fatalf("a writing call ran in session %s (read-only %v)", writeExec.Status.SessionName, writeExec.Spec.Sandbox.ReadOnlyWorkspace)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(got) != "written\n" {
		t.Fatalf("the workspace holds %q (%v)", got, err)
	}
	var jobs batchv1.JobList
	if err := env.Client.List(t.Context(), &jobs, client.InNamespace(p.ns)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("Jobs were created for session calls: %d (%v)", len(jobs.Items), err)
	}
	if got := l.delivered(); len(got) != 2 {
		t.Fatalf("delivered %v, want each call once", got)
	}
}

// A session pod that dies while a call runs gives that call an Exception that says
// so; the call is not run again, and the next call gets a new session.
func TestSessionThatDiesMidCallFailsTheCallAndIsReplaced(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("d", v1.ModeAuto, sessionTask())
	p.propose("d", 0, 0, v1.ToolBash, `{"command":"touch started; sleep 30"}`)
	ws := l.workspace("d-workspace")
	fileAppears(p, "the call started", filepath.Join(ws, "started"))
	exec := getExecution(t, p.ns, "d-t0-0")
	pod := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: exec.Status.SessionName}, pod); err != nil {
		t.Fatal(err)
	}
	oldUID := pod.UID
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "OOMKilled"
	if err := env.Client.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	p.observed("d-t0-0")
	exec = getExecution(t, p.ns, "d-t0-0")
	if exec.Status.ErrorKind != v1.ErrorException {
		t.Fatalf("error kind %q, want Exception: %s", exec.Status.ErrorKind, exec.Status.Message)
	}
	mustContain(t, "message", exec.Status.Message, "session pod "+exec.Status.SessionName, "not run again")

	p.propose("d", 1, 0, v1.ToolBash, `{"command":"echo again > again.txt"}`)
	again := p.observed("d-t1-0")
	if again.Status.Observation.Outcome != v1.OutcomeSucceeded {
		t.Fatalf("the next call: %+v", again.Status.Observation)
	}
	next := getExecution(t, p.ns, "d-t1-0")
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: next.Status.SessionName}, pod); err != nil {
		t.Fatal(err)
	}
	if pod.UID == oldUID {
		t.Fatalf("the next call ran in the dead session pod")
	}
	if n := strings.Count(strings.Join(l.delivered(), ","), exec.Status.SessionName); n != 2 {
		t.Fatalf("deliveries %v: want the dead call once and the next once", l.delivered())
	}
}

// A task that ends stops its sessions: the call in flight is Aborted, the session
// pods are deleted.
func TestSessionsEndWithTheirTask(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("e", v1.ModeAuto, sessionTask())
	p.propose("e", 0, 0, v1.ToolBash, `{"command":"touch started; sleep 30"}`)
	ws := l.workspace("e-workspace")
	fileAppears(p, "the call started", filepath.Join(ws, "started"))
	task := p.getTask("e")
	unchanged := task.DeepCopy()
	task.Spec.Lifecycle = v1.LifecycleCancelled
	// A merge patch: the controller writes the task's status meanwhile.
	if err := env.Client.Patch(t.Context(), task, client.MergeFrom(unchanged)); err != nil {
		t.Fatal(err)
	}
	p.observed("e-t0-0")
	exec := getExecution(t, p.ns, "e-t0-0")
	if exec.Status.ErrorKind != v1.ErrorAborted {
		t.Fatalf("error kind %q: %s", exec.Status.ErrorKind, exec.Status.Message)
	}
	mustContain(t, "message", exec.Status.Message, "AgentTask e ended", "Cancelled", "whether the call changed anything is unknown")
	p.eventually("no session left", func() (bool, string) {
		return len(sessionPods(t, p.ns)) == 0, fmt.Sprint(len(sessionPods(t, p.ns)))
	})
}

// Sessions idle for the idle timeout are deleted; the next call starts one again.
func TestIdleSessionsStopAndComeBack(t *testing.T) {
	p, _ := startSessionPipeline(t, func(o *Options) { o.SessionIdleTimeout = 2 * time.Second })
	p.task("i", v1.ModeAuto, sessionTask())
	// The warm sessions start first; the idle stop is what takes them away.
	p.eventually("warm sessions", func() (bool, string) {
		n := len(sessionPods(t, p.ns))
		return n > 0, fmt.Sprint(n)
	})
	p.eventually("no session once idle", func() (bool, string) {
		n := len(sessionPods(t, p.ns))
		return n == 0, fmt.Sprint(n)
	})
	p.propose("i", 0, 0, v1.ToolBash, `{"command":"echo back"}`)
	if obs := p.observed("i-t0-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded {
		t.Fatalf("observation %+v", obs)
	}
}

// A controller that restarts while a call runs in a session loses the call's
// stream, which stops the call; the next controller ends it as an Exception that
// says so, and never delivers it again.
func TestACallInFlightWhenTheControllerRestartsIsNeverRunAgain(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("r", v1.ModeAuto, sessionTask())
	p.propose("r", 0, 0, v1.ToolBash, `{"command":"echo run >> runs.txt; sleep 30"}`)
	ws := l.workspace("r-workspace")
	fileAppears(p, "the call started", filepath.Join(ws, "runs.txt"))
	lost := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: getExecution(t, p.ns, "r-t0-0").Status.SessionName}, lost); err != nil {
		t.Fatal(err)
	}
	p.stop()

	again := startPipelineIn(t, p.ns, func(o *Options) { o.SessionExecutor = l })
	again.observed("r-t0-0")
	exec := getExecution(t, p.ns, "r-t0-0")
	if exec.Status.ErrorKind != v1.ErrorException {
		t.Fatalf("error kind %q: %s", exec.Status.ErrorKind, exec.Status.Message)
	}
	mustContain(t, "message", exec.Status.Message, "delivered to session pod "+exec.Status.SessionName+" by a controller that is gone", "not run again")
	if got, err := os.ReadFile(filepath.Join(ws, "runs.txt")); err != nil || string(got) != "run\n" {
		t.Fatalf("the call ran %q (%v), want once", got, err)
	}
	if n := len(l.delivered()); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
	// What the lost call left running must not see the next call: its session pod
	// goes (a new one of the name may be there already).
	again.eventually("the session is replaced", func() (bool, string) {
		pod := &corev1.Pod{}
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: exec.Status.SessionName}, pod)
		return apierrors.IsNotFound(err) || (err == nil && (pod.UID != lost.UID || pod.DeletionTimestamp != nil)), fmt.Sprint(err)
	})
}

// A background job (bash runInBackground) is observed as started at once and runs
// on, in a session pod of its own, while the task's next calls run in the task's
// session; job_output shows its output so far and job_list
// lists it; another task can neither read nor kill it; job_kill stops its whole
// tree, and the task's end stops the rest.
func TestBackgroundJobsRunOnUntilKilledOrTheTaskEnds(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("b", v1.ModeAuto, sessionTask())
	p.task("other", v1.ModeAuto, sessionTask())
	ws := l.workspace("b-workspace")
	p.propose("b", 0, 0, v1.ToolBash, `{"command":"echo $$ > job.pid; echo tick; sleep 300","runInBackground":true}`)
	started := p.observed("b-t0-0").Status.Observation
	if started.Outcome != v1.OutcomeSucceeded || !strings.Contains(started.Summary, "[background job started: b-t0-0]") {
		t.Fatalf("the background call's observation: %+v", started)
	}
	job := getExecution(t, p.ns, "b-t0-0")
	if executor.IsFinished(&job.Status) || job.Status.Background == nil || job.Status.Phase != v1.ExecutionRunning {
		t.Fatalf("the job's Execution: %+v", job.Status)
	}
	// In a session pod of its own: no other call ever runs beside it.
	jobPod := sessionPods(t, p.ns)[job.Status.SessionName]
	if jobPod == nil || jobPod.Labels[v1.LabelJob] != "b-t0-0" || job.Status.SessionName == executor.SessionName("b", job.Spec.Sandbox) {
		t.Fatalf("the job runs in %s (%v), not a pod of its own", job.Status.SessionName, jobPod)
	}
	jobPid := 0
	p.eventually("the job wrote its pid", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(ws, "job.pid"))
		jobPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return jobPid > 0, fmt.Sprint(err)
	})

	// It survives its call, and the next calls run while it does.
	p.propose("b", 1, 0, v1.ToolBash, `{"command":"kill -0 $(cat job.pid) && echo alive"}`)
	if obs := p.observed("b-t1-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded || !strings.Contains(obs.Summary, "alive") {
		t.Fatalf("the job did not outlive its call: %+v", obs)
	}
	if next := getExecution(t, p.ns, "b-t1-0"); next.Status.SessionName == job.Status.SessionName {
		t.Fatalf("a call ran in the background job's pod %s", next.Status.SessionName)
	}
	p.propose("b", 2, 0, v1.ToolJobOutput, `{"job":"b-t0-0"}`)
	out := p.observed("b-t2-0").Status.Observation
	mustContain(t, "job_output", out.Summary, "[job b-t0-0: running since", "tick")
	if answered := getExecution(t, p.ns, "b-t2-0"); answered.Status.SessionName != "" || answered.Status.JobName != "" {
		t.Errorf("job_output ran in a sandbox: %+v", answered.Status)
	}
	p.propose("b", 3, 0, v1.ToolJobList, `{}`)
	mustContain(t, "job_list", p.observed("b-t3-0").Status.Observation.Summary, "b-t0-0\trunning\techo $$ > job.pid; echo tick; sleep 300")

	// Another task of the namespace learns nothing of it and cannot stop it.
	p.propose("other", 0, 0, v1.ToolJobOutput, `{"job":"b-t0-0"}`)
	p.propose("other", 0, 1, v1.ToolJobKill, `{"job":"b-t0-0"}`)
	p.propose("other", 0, 2, v1.ToolJobOutput, `{"job":"b-t1-0"}`)
	for _, name := range []string{"other-t0-0", "other-t0-1", "other-t0-2"} {
		obs := p.observed(name).Status.Observation
		if obs.Outcome != v1.OutcomeFailed || strings.Contains(obs.Summary, "tick") {
			t.Errorf("%s: %+v", name, obs)
		}
		mustContain(t, name, obs.Summary, "AgentTask other has no background job of that id")
	}
	if syscall.Kill(jobPid, 0) != nil {
		t.Fatal("another task's job_kill stopped the job")
	}

	p.propose("b", 4, 0, v1.ToolJobKill, `{"job":"b-t0-0"}`)
	mustContain(t, "job_kill", p.observed("b-t4-0").Status.Observation.Summary, "job b-t0-0 was stopped")
	// job_kill answers once the job is stopped; the job's own Execution records its
	// end in a reconcile of its own.
	p.eventually("the killed job's Execution to finish", func() (bool, string) {
		job = getExecution(t, p.ns, "b-t0-0")
		return executor.IsFinished(&job.Status), fmt.Sprintf("%+v", job.Status)
	})
	if !executor.IsFinished(&job.Status) || job.Status.ErrorKind != v1.ErrorAborted || job.Status.Background == nil {
		t.Fatalf("the killed job's Execution: %+v", job.Status)
	}
	mustContain(t, "the killed job's message", job.Status.Message, "ToolIntent b-t4-0 (job_kill) stopped it")
	mustContain(t, "the killed job's record", job.Status.Background.StoppedBy, "b-t4-0")
	mustContain(t, "the killed job's output", job.Status.Output, "tick")
	p.eventually("the job's shell ended with job_kill", func() (bool, string) {
		return !processAlive(jobPid), fmt.Sprintf("pid %d alive", jobPid)
	})
	p.eventually("the ended job's pod is gone", func() (bool, string) {
		_, there := sessionPods(t, p.ns)[job.Status.SessionName]
		return !there, job.Status.SessionName
	})
	p.propose("b", 5, 0, v1.ToolJobOutput, `{"job":"b-t0-0"}`)
	mustContain(t, "job_output of an ended job", p.observed("b-t5-0").Status.Observation.Summary, "[job b-t0-0: ended, exit code 124 (Aborted", "tick")
	p.propose("b", 5, 1, v1.ToolJobKill, `{"job":"b-t0-0"}`)
	mustContain(t, "job_kill of an ended job", p.observed("b-t5-1").Status.Observation.Summary, "had already ended, nothing was stopped")

	// The task's end stops the jobs still running.
	p.propose("b", 6, 0, v1.ToolBash, `{"command":"echo $$ > second.pid; sleep 300","runInBackground":true}`)
	p.observed("b-t6-0")
	second := 0
	p.eventually("the second job wrote its pid", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(ws, "second.pid"))
		second, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return second > 0, fmt.Sprint(err)
	})
	task := p.getTask("b")
	unchanged := task.DeepCopy()
	task.Spec.Lifecycle = v1.LifecycleCancelled
	// A merge patch: the controller writes the task's status meanwhile.
	if err := env.Client.Patch(t.Context(), task, client.MergeFrom(unchanged)); err != nil {
		t.Fatal(err)
	}
	p.eventually("the second job ended with its task", func() (bool, string) {
		e := getExecution(t, p.ns, "b-t6-0")
		return executor.IsFinished(&e.Status), e.Status.Message
	})
	job = getExecution(t, p.ns, "b-t6-0")
	if job.Status.ErrorKind != v1.ErrorAborted {
		t.Fatalf("the second job: %+v", job.Status)
	}
	mustContain(t, "the second job's message", job.Status.Message, "AgentTask b ended")
	p.eventually("the second job's shell is gone", func() (bool, string) {
		return !processAlive(second), fmt.Sprintf("pid %d alive", second)
	})
}

// A PerCall task has no background jobs: the call fails validation, saying why,
// and nothing runs.
func TestBackgroundJobsNeedASession(t *testing.T) {
	p := startPipeline(t)
	p.task("pc", v1.ModeAuto)
	p.propose("pc", 0, 0, v1.ToolBash, `{"command":"sleep 300","runInBackground":true}`)
	obs := p.observed("pc-t0-0").Status.Observation
	if obs.Outcome != v1.OutcomeValidationFailed || obs.Executed {
		t.Fatalf("observation %+v", obs)
	}
	mustContain(t, "summary", obs.Summary, "spec.input.runInBackground", "isolation: Session")
}

// A call queued behind another in its session does not run in a pod that replaced
// its session while it waited: it ends "not run", saying why, leaves the workspace
// alone, and does not retire the new session, where the next call runs.
func TestAQueuedCallNeverRunsInAReplacedSession(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("q", v1.ModeAuto, sessionTask())
	ws := l.workspace("q-workspace")
	p.propose("q", 0, 0, v1.ToolBash, `{"command":"touch started; sleep 30"}`)
	fileAppears(p, "the first call started", filepath.Join(ws, "started"))
	p.propose("q", 0, 1, v1.ToolBash, `{"command":"echo queued > queued.txt"}`)
	p.eventually("the second call was delivered and waits for its turn", func() (bool, string) {
		e := &v1.Execution{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "q-t0-1"}, e); err != nil {
			return false, err.Error()
		}
		return e.Status.Phase == v1.ExecutionRunning, string(e.Status.Phase)
	})
	first := getExecution(t, p.ns, "q-t0-0")
	pod := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: first.Status.SessionName}, pod); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	p.observed("q-t0-1")
	queued := getExecution(t, p.ns, "q-t0-1")
	if queued.Status.ErrorKind != v1.ErrorException {
		t.Fatalf("the queued call: %+v", queued.Status)
	}
	mustContain(t, "the queued call's message", queued.Status.Message, "not run: session pod "+pod.Name, "while the call waited for its turn", "nothing of the call ran")
	if _, err := os.Stat(filepath.Join(ws, "queued.txt")); err == nil {
		t.Fatal("the queued call ran in the replacement session")
	}
	p.propose("q", 1, 0, v1.ToolBash, `{"command":"echo next > next.txt"}`)
	if obs := p.observed("q-t1-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded {
		t.Fatalf("the next call: %+v", obs)
	}
}

// A task set to PerCall while a call runs in its session lets the call end before
// its sessions go: the call succeeds, then the sessions are deleted.
func TestSessionsWithACallInThemOutliveASwitchToPerCall(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("sw", v1.ModeAuto, sessionTask())
	ws := l.workspace("sw-workspace")
	p.propose("sw", 0, 0, v1.ToolBash, `{"command":"touch started; sleep 3; echo finished"}`)
	fileAppears(p, "the call started", filepath.Join(ws, "started"))
	task := p.getTask("sw")
	unchanged := task.DeepCopy()
	task.Spec.Sandbox.Isolation = v1.IsolationPerCall
	// A merge patch: the controller writes the task's status meanwhile.
	if err := env.Client.Patch(t.Context(), task, client.MergeFrom(unchanged)); err != nil {
		t.Fatal(err)
	}
	if obs := p.observed("sw-t0-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded || !strings.Contains(obs.Summary, "finished") {
		t.Fatalf("the call in the session when the task switched: %+v", obs)
	}
	p.eventually("no session left", func() (bool, string) {
		return len(sessionPods(t, p.ns)) == 0, fmt.Sprint(len(sessionPods(t, p.ns)))
	})
}

// Deleting an Execution while its call runs stops the call: nothing is left to
// record it.
func TestDeletingAnExecutionStopsItsSessionCall(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("del", v1.ModeAuto, sessionTask())
	ws := l.workspace("del-workspace")
	p.propose("del", 0, 0, v1.ToolBash, `{"command":"echo $$ > shell.pid; sleep 300"}`)
	shell := 0
	p.eventually("the call started", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(ws, "shell.pid"))
		shell, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return shell > 0, fmt.Sprint(err)
	})
	if err := env.Client.Delete(t.Context(), getExecution(t, p.ns, "del-t0-0")); err != nil {
		t.Fatal(err)
	}
	p.eventually("the deleted Execution's call stopped", func() (bool, string) {
		return !processAlive(shell), fmt.Sprintf("pid %d alive", shell)
	})
	if obs := p.observed("del-t0-0").Status.Observation; obs.Outcome != v1.OutcomeAborted {
		t.Fatalf("the intent of the deleted Execution: %+v", obs)
	}
}

// A call stopped while it waits for its session's turn never runs.
func TestACallStoppedWhileQueuedNeverRuns(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("sq", v1.ModeAuto, sessionTask())
	ws := l.workspace("sq-workspace")
	// The first call holds the session until the test lets it go, however slowly the
	// second call gets to its turn.
	p.propose("sq", 0, 0, v1.ToolBash, `{"command":"touch started; while [ ! -e go ]; do sleep 0.1; done"}`)
	fileAppears(p, "the first call started", filepath.Join(ws, "started"))
	p.propose("sq", 0, 1, v1.ToolBash, `{"command":"echo queued > queued.txt"}`)
	queued := &v1.Execution{}
	p.eventually("the second call waits for its turn", func() (bool, string) {
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "sq-t0-1"}, queued); err != nil {
			return false, err.Error()
		}
		return queued.Status.Phase == v1.ExecutionRunning, string(queued.Status.Phase)
	})
	if err := env.Client.Delete(t.Context(), queued); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.observed("sq-t0-0")
	// The session's turn goes to the calls waiting for it in order: a call proposed
	// now gets it after the stopped one had it, and ran or not.
	p.propose("sq", 1, 0, v1.ToolBash, `{"command":"echo next > next.txt"}`)
	session := getExecution(t, p.ns, "sq-t0-0").Status.SessionName
	absent(t, moment{name: "the next call ran in the session", passed: func() (bool, string) {
		next := &v1.Execution{}
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "sq-t1-0"}, next)
		return err == nil && next.Status.Phase == v1.ExecutionSucceeded && next.Status.SessionName == session,
			fmt.Sprintf("%v %s in %s", err, next.Status.Phase, next.Status.SessionName)
	}}, "the call stopped while it waited for its turn ran", func() bool {
		_, err := os.Stat(filepath.Join(ws, "queued.txt"))
		return err == nil
	})
}

// A call decided for a task that was deleted and created again under its name never
// runs in the new task's sessions (the sessions are named after the task's name).
// The controller is stopped while the task is replaced, so that the next one finds
// the successor in place and only the task's UID tells them apart.
func TestACallOfAnEarlierTaskNeverRunsInItsSuccessorsSession(t *testing.T) {
	l := &localSessions{t: t, runner: testRunnerBinary(t), root: t.TempDir()}
	p := startPipeline(t, func(o *Options) { o.SessionExecutor = l })
	// No kubelet yet: the call waits for its session pod.
	old := p.task("re", v1.ModeAuto, sessionTask())
	p.propose("re", 0, 0, v1.ToolBash, `{"command":"echo old > old.txt"}`)
	p.eventually("the call waits for its session", func() (bool, string) {
		e := &v1.Execution{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "re-t0-0"}, e); err != nil {
			return false, err.Error()
		}
		return e.Status.Phase == v1.ExecutionPending && e.Status.Message != "", e.Status.Message
	})
	p.stop()
	// envtest has no garbage collector: the old task's intent and Execution stay.
	if err := env.Client.Delete(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	p.eventually("the old task is gone", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(old), &v1.AgentTask{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	for _, pod := range sessionPods(t, p.ns) {
		_ = env.Client.Delete(t.Context(), pod)
	}
	successor := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "re"}, Spec: *old.Spec.DeepCopy()}
	if err := env.Client.Create(t.Context(), successor); err != nil {
		t.Fatal(err)
	}
	again := startPipelineIn(t, p.ns, func(o *Options) { o.SessionExecutor = l })
	playKubelet(t, p.ns)
	again.eventually("the old call is refused", func() (bool, string) {
		e := getExecution(t, p.ns, "re-t0-0")
		return executor.IsFinished(&e.Status), e.Status.Message
	})
	e := getExecution(t, p.ns, "re-t0-0")
	mustContain(t, "the old call's message", e.Status.Message, "is not the task this call was decided for")
	if _, err := os.Stat(filepath.Join(l.workspace("re-workspace"), "old.txt")); err == nil {
		t.Fatal("the earlier task's call ran in the new task's session")
	}
}

// A pod under a session's name that is not the task's session takes no call (the
// gate is sessionInTheWay): neither a pod the task does not control, nor the task's
// own session pod that lost one of its labels (its NetworkPolicy selects it by
// label). Each call is refused, saying which pod and what to do, and nothing is
// delivered to the pod. The pods are put in place while the controller is stopped,
// so that the next controller finds them where the session was.
func TestAPodInTheWayOfASessionTakesNoCall(t *testing.T) {
	p, l := startSessionPipeline(t)
	sessions := map[string]string{}
	for _, task := range []string{"planted", "relabelled"} {
		p.task(task, v1.ModeAuto, sessionTask())
		// Both calls write: they are decided into one profile, so run in one session.
		p.propose(task, 0, 0, v1.ToolBash, `{"command":"echo first > first.txt"}`)
		if obs := p.observed(task + "-t0-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded {
			t.Fatalf("%s's first call: %+v", task, obs)
		}
		sessions[task] = getExecution(t, p.ns, task+"-t0-0").Status.SessionName
	}
	p.stop()

	// planted: the session pod replaced by one of its name, labels and spec that no
	// task controls.
	session := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: sessions["planted"]}, session); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), session); err != nil {
		t.Fatal(err)
	}
	p.eventually("the planted task's session pod gone", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(session), &corev1.Pod{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	planted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: session.Name, Labels: session.Labels}, Spec: *session.Spec.DeepCopy()}
	if err := env.Client.Create(t.Context(), planted); err != nil {
		t.Fatal(err)
	}
	// relabelled: the task's own session pod, its network label changed.
	relabelled := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: sessions["relabelled"]}, relabelled); err != nil {
		t.Fatal(err)
	}
	unchanged := relabelled.DeepCopy()
	relabelled.Labels[v1.LabelNetwork] = "open"
	if err := env.Client.Patch(t.Context(), relabelled, client.MergeFrom(unchanged)); err != nil {
		t.Fatal(err)
	}
	p.eventually("the planted pod running", func() (bool, string) {
		got := &corev1.Pod{}
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(planted), got)
		ready, why := executor.SessionReady(got)
		return err == nil && ready, fmt.Sprint(err, why)
	})
	delivered := len(l.delivered())

	again := startPipelineIn(t, p.ns, func(o *Options) { o.SessionExecutor = l })
	for task, want := range map[string][]string{
		"planted": {"a pod named " + planted.Name + " exists in namespace " + p.ns + " and is not a session of AgentTask planted",
			"delete it, and the next call starts the session"},
		"relabelled": {"session pod " + relabelled.Name + " in namespace " + p.ns + " lost its label " + v1.LabelNetwork + "=" + unchanged.Labels[v1.LabelNetwork],
			"it is not trusted to run calls", "Delete it, and the next call starts a new session"},
	} {
		again.propose(task, 1, 0, v1.ToolBash, `{"command":"echo second > second.txt"}`)
		if obs := again.observed(task + "-t1-0").Status.Observation; obs.Outcome != v1.OutcomeFailed || !strings.Contains(obs.Summary, "not run: ") {
			t.Errorf("%s's call beside a pod in the way: %+v", task, obs)
		}
		mustContain(t, task+"'s refused call", getExecution(t, p.ns, task+"-t1-0").Status.Message, want...)
		if _, err := os.Stat(filepath.Join(l.workspace(task+"-workspace"), "second.txt")); err == nil {
			t.Errorf("%s's refused call ran", task)
		}
	}
	if got := l.delivered(); len(got) != delivered {
		t.Fatalf("calls were delivered to a pod in the way: %v", got[delivered:])
	}
}

// A task deleted and created again under its name is another task: the job tools
// of the new one (job ids are intent names, which it may name) neither read, stop
// nor list the background jobs of the earlier one (the gate is sameTask, which
// compares the task UIDs the two calls were decided for).
func TestJobToolsOfATaskCreatedAgainDoNotReachTheEarlierTasksJobs(t *testing.T) {
	p, l := startSessionPipeline(t)
	old := p.task("re", v1.ModeAuto, sessionTask())
	p.propose("re", 0, 0, v1.ToolBash, `{"command":"echo earlier-task-output; touch job.started; sleep 300","runInBackground":true}`)
	p.observed("re-t0-0")
	fileAppears(p, "the earlier task's job started", filepath.Join(l.workspace("re-workspace"), "job.started"))
	p.propose("re", 0, 1, v1.ToolJobOutput, `{"job":"re-t0-0"}`)
	mustContain(t, "the earlier task's own job_output", p.observed("re-t0-1").Status.Observation.Summary, "earlier-task-output")

	// The earlier task ends, which stops its job, and goes. envtest has no garbage
	// collector: what it owned is deleted here, but its intents and Executions,
	// which name it, stay.
	cancelled := p.getTask("re")
	unchanged := cancelled.DeepCopy()
	cancelled.Spec.Lifecycle = v1.LifecycleCancelled
	// A merge patch: the controller writes the task's status meanwhile.
	if err := env.Client.Patch(t.Context(), cancelled, client.MergeFrom(unchanged)); err != nil {
		t.Fatal(err)
	}
	p.eventually("the earlier task's job ended with it", func() (bool, string) {
		e := getExecution(t, p.ns, "re-t0-0")
		return executor.IsFinished(&e.Status), e.Status.Message
	})
	if err := env.Client.Delete(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := env.Client.List(t.Context(), &pods, client.InNamespace(p.ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if err := env.Client.Delete(t.Context(), &pods.Items[i]); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	var claims corev1.PersistentVolumeClaimList
	if err := env.Client.List(t.Context(), &claims, client.InNamespace(p.ns)); err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		claim := &claims.Items[i]
		unchanged := claim.DeepCopy()
		claim.Finalizers = nil // no controller-manager here removes pvc-protection
		if err := env.Client.Patch(t.Context(), claim, client.MergeFrom(unchanged)); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(t.Context(), claim); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	p.eventually("the earlier task and what it owned gone", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(old), &v1.AgentTask{})
		var claims corev1.PersistentVolumeClaimList
		_ = env.Client.List(t.Context(), &claims, client.InNamespace(p.ns))
		return apierrors.IsNotFound(err) && len(claims.Items) == 0, fmt.Sprint(err, len(claims.Items))
	})

	successor := p.task("re", v1.ModeAuto, sessionTask())
	if successor.UID == old.UID {
		t.Fatal("the task was not created again")
	}
	p.propose("re", 1, 0, v1.ToolJobOutput, `{"job":"re-t0-0"}`)
	p.propose("re", 1, 1, v1.ToolJobKill, `{"job":"re-t0-0"}`)
	p.propose("re", 1, 2, v1.ToolJobList, `{}`)
	for _, name := range []string{"re-t1-0", "re-t1-1"} {
		obs := p.observed(name).Status.Observation
		if obs.Outcome != v1.OutcomeFailed || strings.Contains(obs.Summary, "earlier-task-output") {
			t.Errorf("%s of the earlier task's job: %+v", name, obs)
		}
		mustContain(t, name, obs.Summary, "job re-t0-0: AgentTask re has no background job of that id")
	}
	list := p.observed("re-t1-2").Status.Observation.Summary
	mustContain(t, "job_list", list, "AgentTask re has no background jobs.")
	mustNotContain(t, "job_list", list, "re-t0-0")
}
