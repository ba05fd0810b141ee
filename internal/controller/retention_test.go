package controller

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

// gone says whether the object of that name is no longer in the cluster.
func (p *pipelineEnv) gone(obj client.Object, name string) bool {
	err := env.Client.Get(p.t.Context(), client.ObjectKey{Namespace: p.ns, Name: name}, obj)
	return apierrors.IsNotFound(err)
}

// archivedCall waits until a holds the intent's record.
func (p *pipelineEnv) archivedCall(a *archive.Archive, name string) {
	p.t.Helper()
	p.eventually(name+" archived", func() (bool, string) { return archived(p.t, a, p.getIntent(name)) })
}

// taskArchived waits for the task's Archived condition with that reason and returns
// the task.
func (p *pipelineEnv) taskArchived(name, reason string) *v1.AgentTask {
	p.t.Helper()
	var task *v1.AgentTask
	p.eventually(name+" Archived "+reason, func() (bool, string) {
		task = p.getTask(name)
		c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionArchived)
		return c != nil && c.Reason == reason, fmt.Sprintf("%+v", c)
	})
	return task
}

// Finished calls leave the cluster once archived and past the retention window,
// by whole turns, and go on counting: the task's counts, its intent and approval
// budgets and a human's denial hold across retirement. A retired turn is closed.
// Once the task ended and its TTL passed, it leaves too, its record stored last in
// its chain, which verifies.
func TestRetiredCallsLeaveTheClusterAndStillCount(t *testing.T) {
	a := openArchive(t, sharedArchiveServer(t))
	p := startPipeline(t, func(o *Options) { o.Archive = a })
	p.task("r", v1.ModeEdit, func(task *v1.AgentTask) {
		task.Spec.Budgets.MaxIntents = 4
		task.Spec.Budgets.MaxConsecutiveRefusals = 10
		task.Spec.TTLSecondsAfterFinished = ptr.To[int32](60)
	})
	p.propose("r", 0, 0, v1.ToolBash, `{"command":"npm install left-pad"}`)
	p.decide("r-t0-0", v1.DecisionDenied, "bob", "we vendor our dependencies")
	p.propose("r", 0, 1, v1.ToolReadFile, `{"path":"../outside"}`)
	p.propose("r", 1, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	for _, n := range []string{"r-t0-0", "r-t0-1", "r-t1-0"} {
		p.observed(n)
		p.archivedCall(a, n)
	}
	if task := p.taskArchived("r", v1.ReasonArchiving); task.Status.History != nil {
		t.Fatalf("calls retired before their window passed: %+v", task.Status.History)
	}

	asked := p.getIntent("r-t0-0")
	p.clock.Advance(2 * DefaultCallRetention)
	touch(t, &v1.AgentTask{}, p.ns, "r")
	p.eventually("turn 0 retired", func() (bool, string) {
		task := p.getTask("r")
		return p.gone(&v1.ToolIntent{}, "r-t0-0") && p.gone(&v1.ToolIntent{}, "r-t0-1") && p.gone(&v1.Approval{}, "r-t0-0") &&
			task.Status.History != nil && len(task.Status.History.Retiring) == 0, fmt.Sprintf("%+v", task.Status.History)
	})
	if p.gone(&v1.ToolIntent{}, "r-t1-0") {
		t.Fatal("the call of the task's latest turn retired while the task runs")
	}
	task := p.getTask("r")
	h := task.Status.History
	if task.Status.Intents.Total != 3 || h.Intents.Total != 2 || h.ApprovalRequests != 1 || task.Status.ApprovalRequests != 1 || len(h.DeniedFingerprints) != 1 || h.ThroughTurn != 0 {
		t.Fatalf("status after retirement: intents %+v, approvals %d, history %+v", task.Status.Intents, task.Status.ApprovalRequests, h)
	}

	// The record is the whole call, not the cache's trimmed copy of it. The calls of
	// turn 0 are archived in the order they were observed, which the test does not
	// fix: the asked call's record is found by its name.
	page, err := a.TaskRecords(t.Context(), string(task.UID), 0, 20)
	var askedBody string
	for _, r := range page.Records {
		if r.Name == "r-t0-0" {
			askedBody = string(r.Body)
		}
	}
	if err != nil || !strings.Contains(askedBody, asked.Status.Decision.Fingerprint) || !strings.Contains(askedBody, `"deniedBy": "bob"`) {
		t.Fatalf("the record of r-t0-0 is not the whole asked call: %v, %+v", err, page.Records)
	}

	// The call the human denied is not asked again, though its Approval is gone.
	p.propose("r", 2, 0, v1.ToolBash, `{"command":"npm install left-pad"}`)
	if obs := p.observed("r-t2-0").Status.Observation; obs.Outcome != v1.OutcomeDenied || !strings.Contains(obs.Summary, "already denied by a human") {
		t.Fatalf("the denied call came back as %s: %s", obs.Outcome, obs.Summary)
	}
	// The intent budget counts the retired calls: this is the fifth of four.
	p.propose("r", 2, 1, v1.ToolReadFile, `{"path":"README.md"}`)
	mustContain(t, "over budget", p.observed("r-t2-1").Status.Observation.Summary, "intent budget is spent: 4 of budgets.maxIntents=4")
	// A retired turn takes no new call.
	p.propose("r", 0, 5, v1.ToolReadFile, `{"path":"README.md"}`)
	mustContain(t, "into a retired turn", p.observed("r-t0-5").Status.Observation.Summary, "turn 0 of AgentTask r is closed")

	// Four calls were the task's budget: it ended.
	p.finished("r", v1.ConditionFailed, v1.ReasonIntentBudgetExhausted)
	for _, n := range []string{"r-t2-0", "r-t2-1", "r-t0-5"} {
		p.archivedCall(a, n)
	}
	p.clock.Advance(2 * DefaultCallRetention)
	touch(t, &v1.AgentTask{}, p.ns, "r")
	p.eventually("the ended task gone after its TTL", func() (bool, string) {
		return p.gone(&v1.AgentTask{}, "r"), "still there"
	})
	var list v1.ToolIntentList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(p.ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("intents left after the task: %d, %v", len(list.Items), err)
	}
	page, err = a.TaskRecords(t.Context(), string(task.UID), 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range page.Records {
		kinds = append(kinds, string(r.Kind))
	}
	if got := strings.Join(kinds, ","); got != "Call,Call,Call,Call,Call,Call,Task" {
		t.Fatalf("the task's chain is %s, want its six calls then the task", got)
	}
	last := page.Records[len(page.Records)-1]
	if !strings.Contains(string(last.Body), v1.ReasonIntentBudgetExhausted) || !strings.Contains(string(last.Body), `"history"`) {
		t.Fatalf("the task's record is not its final state: %s", last.Body)
	}
	if brk, n, err := a.Verify(t.Context(), string(task.UID)); err != nil || brk != nil || n != 7 {
		t.Fatalf("Verify = %v, %d, %v", brk, n, err)
	}
}

// Nothing leaves the cluster without the archive's word: not while the archive
// holds another record of the call (changed in place), not while it is down, and
// not without an archive at all; the task's Archived condition says why, and the
// calls retire once the archive answers again with the same record.
func TestNothingLeavesTheClusterWithoutTheArchivesWord(t *testing.T) {
	server, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	dsn := server.NewDatabase(t)
	a, err := archive.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	p := startPipeline(t, func(o *Options) { o.Archive = a })
	p.task("k", v1.ModeEdit)
	p.propose("k", 0, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	p.propose("k", 1, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	for _, n := range []string{"k-t0-0", "k-t1-0"} {
		p.observed(n)
		p.archivedCall(a, n)
	}
	uid := string(p.getIntent("k-t0-0").UID)

	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(t.Context()) }()
	var body string
	if err := conn.QueryRow(t.Context(), `SELECT body::text FROM records WHERE uid = $1`, uid).Scan(&body); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `UPDATE records SET body = jsonb_set(body, '{intent,spec,reason}', '"nothing to see"') WHERE uid = $1`, uid); err != nil {
		t.Fatal(err)
	}
	held := func() float64 {
		return testutil.ToFloat64(metrics.RetentionHeld.WithLabelValues(v1.ReasonArchiveUnavailable))
	}
	heldBefore := held()
	p.clock.Advance(2 * DefaultCallRetention)
	touch(t, &v1.AgentTask{}, p.ns, "k")
	task := p.taskArchived("k", v1.ReasonArchiveUnavailable)
	if held() <= heldBefore {
		t.Fatalf("toolgate_retention_held_total{reason=ArchiveUnavailable} stayed at %v while a call due to leave was held", heldBefore)
	}
	mustContain(t, "Archived message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionArchived).Message, "holds another record of ToolIntent k-t0-0")
	if p.gone(&v1.ToolIntent{}, "k-t0-0") || task.Status.History != nil {
		t.Fatal("a call left the cluster while the archive holds another record of it")
	}

	// The record put back, the archive down: still nothing leaves.
	if _, err := conn.Exec(t.Context(), `UPDATE records SET body = $2::jsonb WHERE uid = $1`, uid, body); err != nil {
		t.Fatal(err)
	}
	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	p.clock.Advance(2 * archiveRetryAfter)
	touch(t, &v1.AgentTask{}, p.ns, "k")
	p.eventually("the outage in the Archived condition", func() (bool, string) {
		c := meta.FindStatusCondition(p.getTask("k").Status.Conditions, v1.ConditionArchived)
		return c != nil && c.Reason == v1.ReasonArchiveUnavailable && !strings.Contains(c.Message, "another record"), fmt.Sprintf("%+v", c)
	})
	if p.gone(&v1.ToolIntent{}, "k-t0-0") {
		t.Fatal("a call left the cluster while the archive was down")
	}

	if err := server.Restart(); err != nil {
		t.Fatal(err)
	}
	p.eventually("the call retired once the archive answers", func() (bool, string) {
		if p.gone(&v1.ToolIntent{}, "k-t0-0") {
			return true, ""
		}
		// The pool's first connections after the restart fail, and retention
		// leaves a failing archive alone for archiveRetryAfter: move past it.
		p.clock.Advance(archiveRetryAfter)
		touch(t, &v1.AgentTask{}, p.ns, "k")
		return false, "still there"
	})
	task = p.taskArchived("k", v1.ReasonArchiving)
	if task.Status.Intents.Total != 2 || task.Status.History.Intents.Total != 1 {
		t.Fatalf("counts after retirement: %+v, history %+v", task.Status.Intents, task.Status.History)
	}
}

// Without an archive, nothing is deleted, and every task says that history grows
// in etcd.
func TestWithoutAnArchiveHistoryStays(t *testing.T) {
	p := startPipeline(t)
	p.task("n", v1.ModeEdit, func(task *v1.AgentTask) { task.Spec.TTLSecondsAfterFinished = ptr.To[int32](0) })
	p.propose("n", 0, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	p.propose("n", 1, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	p.observed("n-t0-0")
	p.observed("n-t1-0")
	task := p.taskArchived("n", v1.ReasonNoArchive)
	mustContain(t, "Archived message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionArchived).Message, "history grows there")

	// The reconcile that records the end would retire turn 0 and, past the TTL,
	// delete the task, had it an archive.
	p.clock.Advance(2 * DefaultCallRetention)
	patch := client.MergeFrom(task.DeepCopy())
	task.Spec.Lifecycle = v1.LifecycleCancelled
	if err := env.Client.Patch(t.Context(), task, patch); err != nil {
		t.Fatal(err)
	}
	held := func() float64 { return testutil.ToFloat64(metrics.RetentionHeld.WithLabelValues(v1.ReasonNoArchive)) }
	heldBefore := held()
	p.finished("n", v1.ConditionFailed, v1.ReasonCancelled)
	touch(t, &v1.AgentTask{}, p.ns, "n")
	// The metric says so too: the calls that would have left are counted held.
	p.eventually("toolgate_retention_held_total{reason=NoArchive} counting the held calls", func() (bool, string) {
		return held() >= heldBefore+2, fmt.Sprintf("%v, was %v", held(), heldBefore)
	})
	if p.gone(&v1.ToolIntent{}, "n-t0-0") || p.gone(&v1.AgentTask{}, "n") || p.getTask("n").Status.History != nil {
		t.Fatal("history left etcd with no archive to hold it")
	}
}

// A rule's maxFires holds across retirement: the turn it redirected left the
// cluster, and the next delete is not redirected again (the mode asks instead).
func TestFireLimitsHoldAcrossRetirement(t *testing.T) {
	a := openArchive(t, sharedArchiveServer(t))
	p := startPipeline(t, func(o *Options) { o.Archive = a })
	p.policy("plan", planBeforeDelete())
	p.task("f", v1.ModeEdit)
	p.propose("f", 0, 0, v1.ToolBash, `{"command":"rm -rf build"}`)
	if d := p.observed("f-t0-0").Status.Decision; d.Action != v1.DecisionRedirect {
		t.Fatalf("the first delete was decided %s, want Redirect", d.Action)
	}
	p.propose("f", 1, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	p.observed("f-t1-0")
	p.archivedCall(a, "f-t0-0")
	p.archivedCall(a, "f-t1-0")
	p.clock.Advance(2 * DefaultCallRetention)
	touch(t, &v1.AgentTask{}, p.ns, "f")
	p.eventually("the redirected turn retired", func() (bool, string) {
		return p.gone(&v1.ToolIntent{}, "f-t0-0"), "still there"
	})
	p.propose("f", 2, 0, v1.ToolBash, `{"command":"rm -rf dist"}`)
	p.eventually("the second delete decided", func() (bool, string) {
		d := p.getIntent("f-t2-0").Status.Decision
		return d != nil, "undecided"
	})
	if d := p.getIntent("f-t2-0").Status.Decision; d.Action == v1.DecisionRedirect {
		t.Fatalf("the rule fired again after its only fire was retired: %+v", d)
	}
}

// Retention deletes the version of an object the archive holds a copy of, or
// nothing: an object changed since (here an intent's annotation, as any user who
// may patch it can) is not deleted at the version confirmed before the change.
func TestRetentionDeletesOnlyTheArchivedVersion(t *testing.T) {
	ns := env.Namespace(t)
	intent := fixtures.ToolIntent(ns, "gone", 0, 0, v1.ToolReadFile, `{"path":"README.md"}`, "agent")
	if err := env.Client.Create(t.Context(), intent); err != nil {
		t.Fatal(err)
	}
	archivedVersion := intent.ResourceVersion
	changed := intent.DeepCopy()
	changed.Annotations = map[string]string{"example.com/note": "changed after its record"}
	if err := env.Client.Update(t.Context(), changed); err != nil {
		t.Fatal(err)
	}
	r := &AgentTaskReconciler{Client: env.Client}
	done, err := r.deleteAt(t.Context(), intent, archivedVersion)
	if err != nil || done {
		t.Fatalf("delete at the archived version of a changed intent: done %t, err %v; want not done", done, err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(intent), &v1.ToolIntent{}); err != nil {
		t.Fatalf("the changed intent was deleted: %v", err)
	}
	if done, err = r.deleteAt(t.Context(), changed, ""); err != nil || done {
		t.Fatalf("delete without a version the archive holds: done %t, err %v; want not done", done, err)
	}
	if done, err = r.deleteAt(t.Context(), changed, changed.ResourceVersion); err != nil || !done {
		t.Fatalf("delete at the current version: done %t, err %v", done, err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(intent), &v1.ToolIntent{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the intent is still there after its delete: %v", err)
	}
}

// A call changed after its record was stored retires only if the change is no
// part of the record: an annotation is not (the record is built again, is the
// same, takes the new versions, and the call leaves); a label is (the archive
// holds another record, and the call stays, the task saying why).
func TestACallChangedAfterItsRecord(t *testing.T) {
	a := openArchive(t, sharedArchiveServer(t))
	p := startPipeline(t, func(o *Options) { o.Archive = a })
	p.task("c", v1.ModeEdit)
	p.propose("c", 0, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	p.propose("c", 1, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	p.propose("c", 2, 0, v1.ToolReadFile, `{"path":"../outside"}`)
	for _, n := range []string{"c-t0-0", "c-t1-0", "c-t2-0"} {
		p.observed(n)
		p.archivedCall(a, n)
	}
	annotated := p.getIntent("c-t0-0")
	annotated.Annotations = map[string]string{"example.com/note": "read later"}
	if err := env.Client.Update(t.Context(), annotated); err != nil {
		t.Fatal(err)
	}
	relabelled := p.getIntent("c-t1-0")
	relabelled.Labels = map[string]string{"example.com/hidden": "true"}
	if err := env.Client.Update(t.Context(), relabelled); err != nil {
		t.Fatal(err)
	}
	p.clock.Advance(2 * DefaultCallRetention)
	touch(t, &v1.AgentTask{}, p.ns, "c")
	p.eventually("the annotated call retired", func() (bool, string) {
		return p.gone(&v1.ToolIntent{}, "c-t0-0"), "still there"
	})
	task := p.taskArchived("c", v1.ReasonArchiveUnavailable)
	mustContain(t, "Archived message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionArchived).Message, "holds another record of ToolIntent c-t1-0")
	if p.gone(&v1.ToolIntent{}, "c-t1-0") || p.gone(&v1.ToolIntent{}, "c-t2-0") {
		t.Fatal("a call whose record differs from the cluster's, or a later one, left the cluster")
	}
	held, err := a.Current(t.Context(), []string{string(annotated.UID)})
	if err != nil {
		t.Fatal(err)
	}
	if v := held[string(annotated.UID)]; v.Object != annotated.ResourceVersion {
		t.Fatalf("the annotated call's record names version %q; want the version it was confirmed at, %q", v.Object, annotated.ResourceVersion)
	}
}
