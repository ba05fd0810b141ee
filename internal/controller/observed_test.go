package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

// A test that asserts something did not happen first waits for a positive event
// that proves the moment it would have happened by has passed (testenv.Absent).
// Where the controller writes nothing that shows it looked (a call that waits, an
// Execution that is over, a decision given too late), the event is that the
// controller reconciled the object as it is now: the test nudges the object with
// an annotation and waits for a reconcile that began with the nudged object in the
// manager's cache, and ended without an error. Whatever that reconcile would do
// about the object as it is now, it has done by then.
//
// The reconciles are read from controller-runtime's own log lines ("Reconciling",
// then "Reconcile successful" or "Reconcile done, ..."), which carry the
// controller's name, the object's key and the reconcile's id: the manager of a
// test logs through a reconcileLog, which, when a reconcile begins, reads the
// nudge the object carries in the manager's cache. The reconcile reads the cache
// after that line, so it sees the nudge or something newer.

// nudgeAnnotation carries a nudge: a value of its own for each.
const nudgeAnnotation = "test.toolgate.dev/nudge"

// absentWithin bounds the wait for a positive event in these tests.
const absentWithin = 30 * time.Second

// moment is a positive event: its name, and whether it has come (and what was seen).
type moment struct {
	name   string
	passed func() (bool, string)
}

// absent asserts that what never happened by the moment (testenv.Absent).
func absent(t *testing.T, m moment, what string, happened func() bool) {
	t.Helper()
	testenv.Absent(t, absentWithin, m.name, m.passed, what, happened)
}

// reconcileLog records the reconciles of one manager from its log lines.
type reconcileLog struct {
	mu    sync.Mutex
	cache client.Reader
	// objects makes an empty object of a controller's kind.
	objects func(group, kind string) client.Object
	// began holds, for each reconcile by id, what it reconciled and the nudge the
	// object carried in the cache when it began; ended, the ids that ended well.
	began map[string]reconcileStart
	ended map[string]bool
}

type reconcileStart struct {
	controller string
	key        types.NamespacedName
	nudge      string
}

var (
	reconcileLogsMu sync.Mutex
	reconcileLogs   = map[ctrl.Manager]*reconcileLog{}
)

// newReconcileLog is the log of a manager not built yet: attach gives it the
// manager's cache once it is.
func newReconcileLog() *reconcileLog {
	return &reconcileLog{began: map[string]reconcileStart{}, ended: map[string]bool{}}
}

// attach binds the log to mgr: its cache, and the kinds of its scheme.
func (l *reconcileLog) attach(mgr ctrl.Manager) {
	scheme := mgr.GetScheme()
	l.mu.Lock()
	l.cache = mgr.GetCache()
	l.objects = func(group, kind string) client.Object {
		for gvk := range scheme.AllKnownTypes() {
			if gvk.Group == group && gvk.Kind == kind {
				if obj, err := scheme.New(gvk); err == nil {
					if o, ok := obj.(client.Object); ok {
						return o
					}
				}
			}
		}
		return nil
	}
	l.mu.Unlock()
	reconcileLogsMu.Lock()
	reconcileLogs[mgr] = l
	reconcileLogsMu.Unlock()
}

// logger is a logger that writes to base and records the reconciles.
func (l *reconcileLog) logger(base logr.Logger) logr.Logger {
	return logr.New(&reconcileSink{log: l, base: base.GetSink()})
}

// begin records the start of a reconcile, with the nudge its object carries in the
// cache now.
func (l *reconcileLog) begin(values []any) {
	v := valueMap(values)
	id, controller := v["reconcileID"], v["controller"]
	if id == "" || controller == "" {
		return
	}
	key := types.NamespacedName{Namespace: v["namespace"], Name: v["name"]}
	l.mu.Lock()
	cache, objects := l.cache, l.objects
	l.mu.Unlock()
	nudge := ""
	if cache != nil && objects != nil {
		if obj := objects(v["controllerGroup"], v["controllerKind"]); obj != nil {
			if err := cache.Get(context.Background(), key, obj); err == nil {
				nudge = obj.GetAnnotations()[nudgeAnnotation]
			}
		}
	}
	l.mu.Lock()
	l.began[id] = reconcileStart{controller: controller, key: key, nudge: nudge}
	l.mu.Unlock()
}

// end records that a reconcile ended without an error.
func (l *reconcileLog) end(values []any) {
	if id := valueMap(values)["reconcileID"]; id != "" {
		l.mu.Lock()
		l.ended[id] = true
		l.mu.Unlock()
	}
}

// reconciled says whether controller ended a reconcile of key that began with the
// object carrying nudge (any nudge, or none, when nudge is "").
func (l *reconcileLog) reconciled(controller string, key types.NamespacedName, nudge string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.began {
		if s.controller == controller && s.key == key && (nudge == "" || s.nudge == nudge) && l.ended[id] {
			return true
		}
	}
	return false
}

// valueMap reads key/value pairs as strings.
func valueMap(values []any) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(values); i += 2 {
		if k, ok := values[i].(string); ok {
			out[k] = fmt.Sprint(values[i+1])
		}
	}
	return out
}

// reconcileSink passes every line on to base, and the reconciles' lines to its log.
type reconcileSink struct {
	log    *reconcileLog
	base   logr.LogSink
	values []any
}

// reconcileLevel is the verbosity of controller-runtime's reconcile lines.
const reconcileLevel = 5

func (s *reconcileSink) Init(info logr.RuntimeInfo) {
	info.CallDepth++
	s.base.Init(info)
}

func (s *reconcileSink) Enabled(level int) bool {
	return level <= reconcileLevel || s.base.Enabled(level)
}

func (s *reconcileSink) Info(level int, msg string, kv ...any) {
	switch {
	case msg == "Reconciling":
		s.log.begin(append(append([]any(nil), s.values...), kv...))
	case msg == "Reconcile successful" || strings.HasPrefix(msg, "Reconcile done"):
		s.log.end(append(append([]any(nil), s.values...), kv...))
	}
	if s.base.Enabled(level) {
		s.base.Info(level, msg, kv...)
	}
}

func (s *reconcileSink) Error(err error, msg string, kv ...any) { s.base.Error(err, msg, kv...) }

func (s *reconcileSink) WithValues(kv ...any) logr.LogSink {
	return &reconcileSink{log: s.log, base: s.base.WithValues(kv...), values: append(append([]any(nil), s.values...), kv...)}
}

func (s *reconcileSink) WithName(name string) logr.LogSink {
	return &reconcileSink{log: s.log, base: s.base.WithName(name), values: s.values}
}

func (s *reconcileSink) WithCallDepth(depth int) logr.LogSink {
	base := s.base
	if d, ok := base.(logr.CallDepthLogSink); ok {
		base = d.WithCallDepth(depth)
	}
	return &reconcileSink{log: s.log, base: base, values: s.values}
}

// nudges numbers the nudges of the package's tests.
var nudges atomic.Int64

// logOf is the reconcile log of mgr.
func logOf(t *testing.T, mgr ctrl.Manager) *reconcileLog {
	t.Helper()
	reconcileLogsMu.Lock()
	defer reconcileLogsMu.Unlock()
	log := reconcileLogs[mgr]
	if log == nil {
		t.Fatal("the manager has no reconcile log (newTestManager makes one)")
	}
	return log
}

// reconciledNow nudges obj (obj is updated with the API server's answer: its new
// resourceVersion) and returns the moment controller (by its Named name) of mgr has
// reconciled it as it is now. The controller must reconcile on an annotation's
// change.
func reconciledNow(t *testing.T, mgr ctrl.Manager, controller string, obj client.Object) moment {
	t.Helper()
	log := logOf(t, mgr)
	value := fmt.Sprintf("%d", nudges.Add(1))
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nudgeAnnotation, value)
	if err := env.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("nudging %s: %v", obj.GetName(), err)
	}
	key := client.ObjectKeyFromObject(obj)
	return moment{
		name: fmt.Sprintf("the %s controller reconciled %s as it is now", controller, key),
		passed: func() (bool, string) {
			return log.reconciled(controller, key, value), "no reconcile of it that began after the nudge " + value + " ended"
		},
	}
}

// reconciledOnce is the moment controller of mgr, a manager started after obj
// last changed, has ended a reconcile of it: it read obj as it is now.
func reconciledOnce(t *testing.T, mgr ctrl.Manager, controller string, obj client.Object) moment {
	t.Helper()
	log := logOf(t, mgr)
	key := client.ObjectKeyFromObject(obj)
	return moment{
		name: fmt.Sprintf("the %s controller of a manager started since reconciled %s", controller, key),
		passed: func() (bool, string) {
			return log.reconciled(controller, key, ""), "no reconcile of it ended"
		},
	}
}

// all is the moment every one of ms has come.
func all(ms ...moment) moment {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return moment{name: strings.Join(names, ", and "), passed: func() (bool, string) {
		for _, m := range ms {
			if ok, seen := m.passed(); !ok {
				return false, m.name + ": " + seen
			}
		}
		return true, ""
	}}
}

// absent asserts that what never happened by the moment m.
func (p *pipelineEnv) absent(m moment, what string, happened func() bool) {
	p.t.Helper()
	absent(p.t, m, what, happened)
}

// wasObserved is the moment the intent's observation was written: the controller
// writes the observation of a call that does not run in the reconcile that would
// have started it, and an observed call is final.
func (p *pipelineEnv) wasObserved(name string) moment {
	return moment{name: "the observation of " + name, passed: func() (bool, string) {
		intent := &v1.ToolIntent{}
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, intent)
		return err == nil && intent.Status.Observation != nil, fmt.Sprint(err, intent.Status.Conditions)
	}}
}

// hasCondition is the moment the intent has the condition: the reconcile that
// wrote it took the step it names.
func (p *pipelineEnv) hasCondition(name, typ string, status metav1.ConditionStatus, reason string) moment {
	return moment{name: fmt.Sprintf("%s %s=%s/%s", name, typ, status, reason), passed: func() (bool, string) {
		intent := &v1.ToolIntent{}
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, intent)
		c := meta.FindStatusCondition(intent.Status.Conditions, typ)
		return err == nil && c != nil && c.Status == status && c.Reason == reason, fmt.Sprint(err, intent.Status.Conditions)
	}}
}

// reconciledNow is reconciledNow with the pipeline's manager.
func (p *pipelineEnv) reconciledNow(controller string, obj client.Object) moment {
	p.t.Helper()
	return reconciledNow(p.t, p.mgr, controller, obj)
}

// reconciledNow is reconciledNow with the manager the loop started last.
func (p *loopEnv) reconciledNow(controller string, obj client.Object) moment {
	p.t.Helper()
	return reconciledNow(p.t, p.mgr, controller, obj)
}
