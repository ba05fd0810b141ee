package controller

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// sessionPodOf reads the session pod the Execution's call was delivered to.
func sessionPodOf(t *testing.T, ns, execName string) *corev1.Pod {
	t.Helper()
	exec := getExecution(t, ns, execName)
	pod := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: exec.Status.SessionName}, pod); err != nil {
		t.Fatalf("the session pod of %s: %v", execName, err)
	}
	return pod
}

// retired waits until no live pod of the name has uid: it was deleted.
func retired(p *pipelineEnv, name string, uid types.UID) {
	p.eventually("session pod "+name+" ("+string(uid)+") is retired", func() (bool, string) {
		pod := sessionPods(p.t, p.ns)[name]
		return pod == nil || pod.UID != uid, fmt.Sprint(pod != nil)
	})
}

// A call that did not end clean may have left a process in its session pod that
// reaches the next call's runner before it shields itself (stops it, swaps its
// invocation on its stdin). Here the first call kills its own runner (as one that
// stops it with SIGSTOP, leaving a helper behind, would end when its exec is cut):
// the call queued behind it never runs in that pod. The session is retired before
// the queued call gets its turn, and the queued call ends "not run", saying why.
func TestACallQueuedBehindOneThatDidNotEndCleanNeverRunsInItsPod(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("uc", v1.ModeAuto, sessionTask())
	ws := l.workspace("uc-workspace")
	p.propose("uc", 0, 0, v1.ToolBash, `{"command":"touch started; while [ ! -e go ]; do sleep 0.1; done; kill -KILL $PPID"}`)
	fileAppears(p, "the first call started", filepath.Join(ws, "started"))
	dirty := sessionPodOf(t, p.ns, "uc-t0-0")
	p.propose("uc", 0, 1, v1.ToolBash, `{"command":"echo queued > queued.txt"}`)
	p.eventually("the second call waits for its turn", func() (bool, string) {
		e := &v1.Execution{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "uc-t0-1"}, e); err != nil {
			return false, err.Error()
		}
		return e.Status.Phase == v1.ExecutionRunning, string(e.Status.Phase)
	})
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	p.observed("uc-t0-0")
	p.observed("uc-t0-1")
	_, ranErr := os.Stat(filepath.Join(ws, "queued.txt"))
	if n := l.deliveredTo(dirty.UID); n != 1 || ranErr == nil {
		t.Fatalf("the call queued behind one that did not end clean ran in its session pod %s (%d calls delivered to it, queued.txt written: %v)", dirty.Name, n, ranErr == nil)
	}
	queued := getExecution(t, p.ns, "uc-t0-1")
	if queued.Status.ErrorKind != v1.ErrorException {
		t.Fatalf("the queued call: %+v", queued.Status)
	}
	mustContain(t, "the queued call's message", queued.Status.Message,
		"not run: session pod "+dirty.Name+" was retired while the call waited for its turn, because a call's runner exited 137 without its result", "nothing of the call ran")
	retired(p, dirty.Name, dirty.UID)

	// The next call runs, in a new session.
	p.propose("uc", 1, 0, v1.ToolBash, `{"command":"echo next > next.txt"}`)
	if obs := p.observed("uc-t1-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded {
		t.Fatalf("the next call: %+v", obs)
	}
	if next := sessionPodOf(t, p.ns, "uc-t1-0"); next.UID == dirty.UID {
		t.Fatal("the next call ran in the retired session pod")
	}
}

// The runner's result names the invocation it read. A call whose invocation was
// swapped on its way to the runner (here by the pods/exec of the test, as a process
// left in the session pod that opened the runner's stdin would) is refused: its
// Execution shows neither a success nor the output of what ran instead, and its
// session is retired.
func TestTheResultOfASwappedInvocationIsRefusedAndRetiresItsSession(t *testing.T) {
	p, l := startSessionPipeline(t)
	// The call is read-only (its workspace mounted so): what the forged command
	// writes goes outside it, where the test can see that it ran.
	forged := filepath.Join(l.root, "forged.txt")
	l.mu.Lock()
	l.forge = func(line []byte) []byte {
		return bytes.Replace(line, []byte("echo approved"), []byte("echo forged > "+forged+"; echo forged output"), 1)
	}
	l.mu.Unlock()
	p.task("sw", v1.ModeAuto, sessionTask())
	p.propose("sw", 0, 0, v1.ToolBash, `{"command":"echo approved"}`)
	obs := p.observed("sw-t0-0").Status.Observation
	if _, err := os.Stat(forged); err != nil {
		t.Fatalf("the forged invocation did not run (%v): the test swapped nothing", err)
	}
	exec := getExecution(t, p.ns, "sw-t0-0")
	if obs.Outcome == v1.OutcomeSucceeded || exec.Status.ErrorKind != v1.ErrorException {
		t.Fatalf("the call whose invocation was swapped: observation %+v, status %+v", obs, exec.Status)
	}
	mustContain(t, "the message", exec.Status.Message, "cannot be trusted", "result of another invocation", "which is replaced before the next call")
	if bytes.Contains([]byte(exec.Status.Output+obs.Summary), []byte("forged output")) || exec.Status.Sandbox != nil {
		t.Fatalf("what ran instead of the call is shown as its result: output %q, summary %q", exec.Status.Output, obs.Summary)
	}
	l.mu.Lock()
	uid := l.uids[0]
	l.mu.Unlock()
	retired(p, exec.Status.SessionName, uid)
}
