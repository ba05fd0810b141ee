package reliability

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// longRuns says whether the long variants run (make test-reliability sets it).
func longRuns() bool { return os.Getenv("TOOLGATE_RELIABILITY_LONG") == "1" }

// workload is a set of calls of one task that crosses every step boundary: allowed
// calls (validated, decided, Execution, Job, result, observation), asked calls that
// a person approves (the Approval created and consumed on the way) or denies, and
// calls the policy denies.
type workload struct {
	intents []*v1.ToolIntent
	// denyAsked names the asked intents a person denies; the others are approved.
	denyAsked map[string]bool
}

// newWorkload builds rounds of four calls, one per turn so that no call waits for a
// sibling of its batch: allowed, asked and approved, denied by the policy, and
// allowed again; the third asked call of every four is denied by the person. The refusals never
// come five in a row, so the task's refusal budget does not end it midway.
func newWorkload(ns, task string, rounds int) workload {
	w := workload{denyAsked: map[string]bool{}}
	turn := int32(0)
	add := func(input string) *v1.ToolIntent {
		in := fixtures.ToolIntent(ns, task, turn, 0, v1.ToolBash, input, testProposer)
		turn++
		w.intents = append(w.intents, in)
		return in
	}
	for i := range rounds {
		add(`{"command":"ls"}`)
		asked := add(fmt.Sprintf(`{"command":"touch f%d"}`, i))
		if i%4 == 2 {
			w.denyAsked[asked.Name] = true
		}
		add(fmt.Sprintf(`{"command":"rm -rf build%d"}`, i))
		add(fmt.Sprintf(`{"command":"cat f%d"}`, i))
	}
	return w
}

// newRoomyTask creates the task of newTask with budgets no workload here spends:
// the denied calls are observed at once while the allowed ones between them still
// run, so five refusals come "in a row" among the observed calls and the default
// refusal budget would end the task midway (a fault tested elsewhere).
func newRoomyTask(t *testing.T, ns, name string) {
	t.Helper()
	task := newTask(t, ns, name, v1.ModeEdit)
	patch := client.MergeFrom(task.DeepCopy())
	task.Spec.Budgets.MaxConsecutiveRefusals = 1000
	task.Spec.Budgets.MaxApprovalRequests = 1000
	task.Spec.Budgets.MaxIntents = 10000
	if err := env.Client.Patch(t.Context(), task, patch); err != nil {
		t.Fatalf("raising the budgets of task %s: %v", name, err)
	}
}

// create creates the workload's intents.
func (w workload) create(t *testing.T) {
	t.Helper()
	for _, in := range w.intents {
		if err := env.Client.Create(t.Context(), in); err != nil {
			t.Fatalf("creating intent %s: %v", in.Name, err)
		}
	}
}

// TestKillPointsKeepEveryPromise runs the manager as a subprocess built with
// failpoints and ends it at each step boundary in turn, where a crash hurts most:
// after a side effect (an Approval, an Execution, a Job created; an approval
// consumed) and before the status write that records it, or just after a step was
// recorded. A manager started again without the failpoint must finish every call
// without running one twice, without running a refused one, and without using an
// approval twice. It is killed at a later hit, not the first, so that other calls
// are in flight when it dies; the long variant kills at the first hit and at a later
// one as well.
func TestKillPointsKeepEveryPromise(t *testing.T) {
	m := failpointManager(t, t.TempDir())
	hits := []int{2}
	rounds := 3 // 12 calls: 6 allowed, 3 asked (2 approved), 3 denied
	if longRuns() {
		hits = []int{1, 3, 5}
		rounds = 6
	}
	for _, point := range failpoint.Points {
		for _, hit := range hits {
			t.Run(fmt.Sprintf("%s:%d", point, hit), func(t *testing.T) {
				killAt(t, m, point, hit, rounds)
			})
		}
	}
}

// killAt runs one kill: the workload against a manager that dies at the hit-th time
// it reaches point, then against a fresh manager until every call is observed.
func killAt(t *testing.T, m managerBinary, point string, hit, rounds int) {
	ns := env.Namespace(t)
	r := record(t, ns)
	playKubelet(t, ns)
	newRoomyTask(t, ns, "kill")
	denyDeletes(t, ns)
	w := newWorkload(ns, "kill", rounds)
	approveAsked(t, ns, w.denyAsked)

	spec := fmt.Sprintf("%s:%d", point, hit)
	doomed := startProcess(t, m, spec)
	w.create(t)
	code, exited := doomed.exitCode(90 * time.Second)
	switch {
	case !exited:
		n, observed := r.Count()
		t.Fatalf("the manager with %s=%s never reached it (%d of %d intents observed); its log:\n%s", failpoint.EnvVar, spec, observed, n, doomed.tail())
	case code != failpoint.ExitCode:
		t.Fatalf("the manager with %s=%s exited with code %d, not the failpoint's %d; its log:\n%s", failpoint.EnvVar, spec, code, failpoint.ExitCode, doomed.tail())
	}
	doomed.wantNoPanic(t)

	again := startProcess(t, m, "")
	if n, observed := r.Count(); observed == n && n == len(w.intents) {
		t.Logf("every call was already observed when the manager died at %s", spec)
	}
	waitObservedOr(t, r, len(w.intents), 90*time.Second, again)
	wantNoViolations(t, r)
	again.stop(t)
}

// waitObservedOr is waitObserved that shows the manager's log when it fails.
func waitObservedOr(t *testing.T, r *Recorder, want int, timeout time.Duration, p *managerProcess) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, observed := r.Count()
		if n >= want && observed == n {
			return
		}
		if code, exited := p.exitCode(0); exited {
			t.Fatalf("the restarted manager exited with code %d while %d of %d intents were observed; its log:\n%s", code, observed, n, p.tail())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d intents observed (want %d), violations so far: %v; the manager's log:\n%s", observed, n, want, r.Check(), p.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestKillPointsOneAfterAnother (long variant only) kills one manager after another
// in the same run, each at the first hit of the next step boundary, so that the
// state each crash leaves behind (an Approval or Execution not recorded, a Job not
// recorded, a result not observed) piles up for the next manager to find; a last
// manager without a failpoint must finish every call. A point that is not reached
// any more (its calls are all past it) is skipped.
func TestKillPointsOneAfterAnother(t *testing.T) {
	if !longRuns() {
		t.Skip("long variant: TOOLGATE_RELIABILITY_LONG=1 (make test-reliability)")
	}
	m := failpointManager(t, t.TempDir())
	ns := env.Namespace(t)
	r := record(t, ns)
	playKubelet(t, ns)
	newRoomyTask(t, ns, "chain")
	denyDeletes(t, ns)
	w := newWorkload(ns, "chain", 8)
	approveAsked(t, ns, w.denyAsked)
	w.create(t)
	for _, point := range failpoint.Points {
		p := startProcess(t, m, point+":1")
		for {
			if code, exited := p.exitCode(200 * time.Millisecond); exited {
				if code != failpoint.ExitCode {
					t.Fatalf("the manager with %s=%s:1 exited with code %d; its log:\n%s", failpoint.EnvVar, point, code, p.tail())
				}
				p.wantNoPanic(t)
				break
			}
			if n, observed := r.Count(); n == len(w.intents) && observed == n {
				t.Logf("%s was not reached: every call is past it", point)
				p.stop(t)
				break
			}
		}
	}
	last := startProcess(t, m, "")
	waitObservedOr(t, r, len(w.intents), 2*time.Minute, last)
	wantNoViolations(t, r)
	last.stop(t)
}
