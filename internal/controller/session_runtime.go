package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/protocol"
)

// DefaultSessionIdleTimeout is how long a task's sessions stay up with no call.
const DefaultSessionIdleTimeout = 10 * time.Minute

// sessionRecheck is how often a call waiting for its session looks again; the
// session pod's watch usually wakes it sooner.
const sessionRecheck = time.Second

// maxResultBytes bounds what is read of a session call's stderr: the runner's
// Result is at most protocol.MaxTerminationMessageBytes.
const maxResultBytes = 64 << 10

// sessionExecGrace is added to a call's timeout to bound its exec: the runner stops
// the tool at the timeout and reports; the grace covers the sweep and the stream.
const sessionExecGrace = 30 * time.Second

// sessionCalls delivers calls to session pods and keeps each call's run until the
// Execution reconciler recorded it. A session runs one call at a time: calls of one
// session share its uid and pod, and two at once could reach each other's
// processes; a background job has a session of its own. The runs live in this
// process only: a controller that
// restarts loses the calls in flight, whose streams close (which stops them in their
// sessions, background jobs too), and the reconciler ends them as Exceptions (never
// runs them again).
type sessionCalls struct {
	exec executor.SessionExecutor
	// pods reads a session pod fresh, before a call runs in it, and
	// deletes one that ran a call which did not end clean.
	pods    client.Reader
	deleter client.Writer
	// wake is the Execution controller's source: a finished run, or a background
	// job that started, is sent here.
	wake chan event.GenericEvent
	now  func() time.Time

	mu       sync.Mutex
	inFlight map[types.UID]*sessionCall
	done     map[types.UID]*executor.SessionRun
	// doneOf names each done run's Execution, so that the run of one deleted
	// before it was recorded is dropped (gone).
	doneOf map[types.NamespacedName]types.UID
	// stopped keeps why the controller stopped a call (stop), until its end is
	// recorded.
	stopped map[types.UID]string
	// sessions holds a turn of each session pod (namespace/name) with calls queued
	// or running; a session's entry goes when its last call did.
	sessions map[string]*sessionTurn
	// retired says, by pod UID, why a session pod takes no call any more (retireAfter)
	// and since when: it is set before the next call gets the session's turn, so
	// that no call runs in the pod even while its deletion fails or lags.
	retired map[types.UID]retiredPod
}

// retiredPod is why, and since when, a session pod takes no call.
type retiredPod struct {
	why   string
	since time.Time
}

// retiredKeep is how long a retired pod is remembered: by then it is deleted (the
// Execution reconciler retries a deletion that failed), and the fresh read before
// each call refuses a pod being deleted or gone.
const retiredKeep = time.Hour

// sessionCall is a call in flight.
type sessionCall struct {
	// exec is the Execution; pod is the session pod's namespace/name.
	exec types.NamespacedName
	pod  string
	// hangUp closes the call's stdin, which stops it in its session: the runner
	// stops the tool, kills what it started and reports. cancel ends the exec
	// itself, sessionStopGrace later, for a runner that does not.
	hangUp   chan struct{}
	hangOnce sync.Once
	cancel   context.CancelCauseFunc
	// job is set for a background job.
	job *liveJob
	// gone is set (under sessionCalls.mu) once the call's Execution was deleted:
	// nobody records its run.
	gone bool
}

// sessionStopGrace is how long a call whose stdin was closed (stop) has to report
// before its exec is cut: the runner's kill grace and sweep take a few seconds.
const sessionStopGrace = 15 * time.Second

// end stops the call: its stdin closes at once, its exec is cut after
// sessionStopGrace.
func (c *sessionCall) end(why string) {
	c.hangOnce.Do(func() {
		close(c.hangUp)
		time.AfterFunc(sessionStopGrace, func() { c.cancel(errors.New(why)) })
	})
}

// ended says whether the call's end was asked for (its hang-up channel is closed).
func ended(hangUp <-chan struct{}) bool {
	select {
	case <-hangUp:
		return true
	default:
		return false
	}
}

// liveJob is a background job's runner and output, as its stream brings them.
type liveJob struct {
	mu        sync.Mutex
	out       *protocol.Capture
	maxOutput int32
	started   time.Time // when the runner reported the job started
}

// startedAt is when the job's runner reported it started; zero before, and for no
// job.
func (j *liveJob) startedAt() time.Time {
	if j == nil {
		return time.Time{}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.started
}

// snapshot is the job's output so far (head and tail, as a Run's Output) and its
// whole length.
func (j *liveJob) snapshot() ([]byte, int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]byte(nil), j.out.Bytes(j.maxOutput)...), j.out.Total()
}

func (j *liveJob) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.Write(p)
}

type sessionTurn struct {
	lock  chan struct{}
	users int
}

func newSessionCalls(exec executor.SessionExecutor, pods client.Reader, deleter client.Writer, now func() time.Time) *sessionCalls {
	return &sessionCalls{
		exec:     exec,
		pods:     pods,
		deleter:  deleter,
		wake:     make(chan event.GenericEvent, 1024),
		now:      now,
		inFlight: map[types.UID]*sessionCall{},
		done:     map[types.UID]*executor.SessionRun{},
		doneOf:   map[types.NamespacedName]types.UID{},
		stopped:  map[types.UID]string{},
		sessions: map[string]*sessionTurn{},
		retired:  map[types.UID]retiredPod{},
	}
}

// retireHeld marks the session pod of uid as taking no call, for why, and deletes
// it. The caller holds the session's turn: no call starts in the pod from then on,
// whether the deletion succeeded or not.
func (s *sessionCalls) retireHeld(namespace, name string, uid types.UID, why string) {
	now := s.now()
	s.mu.Lock()
	for u, r := range s.retired {
		if now.Sub(r.since) > retiredKeep {
			delete(s.retired, u)
		}
	}
	if _, already := s.retired[uid]; !already {
		s.retired[uid] = retiredPod{why: why, since: now}
	}
	s.mu.Unlock()
	s.retire(namespace, name, uid, why)
}

// retiredBecause says why the session pod of uid takes no call, or "".
func (s *sessionCalls) retiredBecause(uid types.UID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retired[uid].why
}

// known says whether the call was delivered by this process (in flight or done).
func (s *sessionCalls) known(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight[uid] != nil || s.done[uid] != nil
}

// run returns the call's finished run, or nil and whether it is still in flight.
func (s *sessionCalls) run(uid types.UID) (*executor.SessionRun, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[uid], s.inFlight[uid] != nil
}

// stoppedBy says why the controller stopped the call, or "".
func (s *sessionCalls) stoppedBy(uid types.UID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped[uid]
}

// job returns the background job's live record, nil when the call is no
// background job in flight here.
func (s *sessionCalls) job(uid types.UID) *liveJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.inFlight[uid]; c != nil {
		return c.job
	}
	return nil
}

// forget drops a recorded run.
func (s *sessionCalls) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if run := s.done[uid]; run != nil {
		for name, u := range s.doneOf {
			if u == uid {
				delete(s.doneOf, name)
			}
		}
	}
	delete(s.done, uid)
	delete(s.stopped, uid)
}

// stop ends a call in flight: its stream closes, which stops the tool (and a
// background job's whole tree), and its run records why.
//
// A call not delivered yet is stopped too: its delivery runs nothing.
func (s *sessionCalls) stop(uid types.UID, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, already := s.stopped[uid]; !already {
		s.stopped[uid] = why
	}
	if c := s.inFlight[uid]; c != nil {
		c.end(why)
	}
}

// gone stops the call of an Execution that was deleted, and drops its run: nobody
// is left to record it.
func (s *sessionCalls) gone(name types.NamespacedName) {
	s.mu.Lock()
	var calls []*sessionCall
	for _, c := range s.inFlight {
		if c.exec == name {
			c.gone = true
			calls = append(calls, c)
		}
	}
	if uid, ok := s.doneOf[name]; ok {
		delete(s.doneOf, name)
		delete(s.done, uid)
		delete(s.stopped, uid)
	}
	s.mu.Unlock()
	for _, c := range calls {
		c.end(fmt.Sprintf("its Execution %s was deleted", name.Name))
	}
}

// acquire takes the session's turn, and says whether it had to wait for it.
func (s *sessionCalls) acquire(key string) (*sessionTurn, bool) {
	s.mu.Lock()
	t := s.sessions[key]
	if t == nil {
		t = &sessionTurn{lock: make(chan struct{}, 1)}
		s.sessions[key] = t
	}
	t.users++
	s.mu.Unlock()
	select {
	case t.lock <- struct{}{}:
		return t, false
	default:
	}
	t.lock <- struct{}{}
	return t, true
}

func (s *sessionCalls) release(key string, t *sessionTurn) {
	<-t.lock
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.users--; t.users == 0 {
		delete(s.sessions, key)
	}
}

// deliver starts the call in its session pod, in the background: ctx is the
// controller's, whose end closes the call's stream.
//
// The call runs in the pod of uid: the pod is read again first, and the call does
// not run in a pod that replaced it meanwhile (an idle session stopped, a task
// re-created under the same name), whether it waited for its turn or not.
func (s *sessionCalls) deliver(ctx context.Context, exec *v1.Execution, pod string, uid types.UID) {
	inv := executor.BuildInvocation(exec)
	invocation, encodeErr := executor.EncodeInvocation(exec)
	key := exec.Namespace + "/" + pod
	callCtx, cancel := context.WithCancelCause(ctx)
	call := &sessionCall{exec: client.ObjectKeyFromObject(exec), pod: key, hangUp: make(chan struct{}), cancel: cancel}
	if inv.Background {
		call.job = &liveJob{out: protocol.NewCapture(inv.MaxOutputBytes), maxOutput: inv.MaxOutputBytes}
	}
	if !s.admit(exec.UID, call) {
		cancel(nil)
		return
	}
	d := &delivery{
		call: call, ctx: ctx, callCtx: callCtx,
		wake:    &v1.Execution{ObjectMeta: metav1.ObjectMeta{Namespace: exec.Namespace, Name: exec.Name}},
		execUID: exec.UID, namespace: exec.Namespace, pod: pod, key: key, uid: uid,
		invocation: invocation, encodeErr: encodeErr,
		timeout:   time.Duration(exec.Spec.TimeoutSeconds)*time.Second + sessionExecGrace,
		maxOutput: int(exec.Spec.MaxOutputBytes),
	}
	go func() {
		defer cancel(nil)
		turn, waited := s.acquire(key)
		run := s.runInTurn(d, waited)
		// A session takes no call after one that did not end clean: it is retired
		// while this call still holds its turn, so that no call queued behind it runs
		// in the pod (what this call left there could reach the next call's runner).
		// The Execution reconciler retires it again once the run is recorded: that
		// one retries.
		if why := retireAfter(run, call.job != nil); why != "" {
			s.retireHeld(d.namespace, pod, uid, why)
		}
		s.release(key, turn)
		s.keepRun(d, run)
	}()
}

// delivery is a call on its way to its session pod (namespace/pod, of UID uid).
type delivery struct {
	call *sessionCall
	// ctx is the controller's, which bounds waking the reconciler; callCtx is the
	// call's own, which its stop cuts.
	ctx, callCtx context.Context
	// wake is the Execution sent to the reconciler when the run ended, or a
	// background job started.
	wake                *v1.Execution
	execUID             types.UID
	namespace, pod, key string
	uid                 types.UID
	invocation          []byte
	encodeErr           error
	timeout             time.Duration
	maxOutput           int
}

// admit records call as the Execution's call in flight, unless it is in flight or
// done already: a call is delivered at most once.
func (s *sessionCalls) admit(execUID types.UID, call *sessionCall) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight[execUID] != nil || s.done[execUID] != nil {
		return false
	}
	s.inFlight[execUID] = call
	return true
}

// notify wakes the Execution reconciler for the call.
func (s *sessionCalls) notify(d *delivery) {
	select {
	case s.wake <- event.GenericEvent{Object: d.wake}:
	case <-d.ctx.Done():
	}
}

// runInTurn runs the call, now that it holds its session's turn (waited says
// whether it had to wait for it), or says why it does not run.
func (s *sessionCalls) runInTurn(d *delivery, waited bool) *executor.SessionRun {
	var run *executor.SessionRun
	switch notRun := s.whyNotRun(d, waited); {
	case notRun != "":
		run = &executor.SessionRun{StartedAt: s.now(), FinishedAt: s.now(), NotRun: notRun}
	case d.encodeErr != nil:
		run = &executor.SessionRun{StartedAt: s.now(), FinishedAt: s.now(), Err: fmt.Errorf("encoding the runner's invocation: %w", d.encodeErr)}
	case d.call.job != nil:
		run = s.runBackgroundJob(d)
	default:
		stdout, stderr := &boundedBuffer{limit: d.maxOutput + 1}, &boundedBuffer{limit: maxResultBytes}
		run = s.runCall(d.callCtx, d.call.hangUp, d.namespace, d.pod, d.invocation, stdout, stderr, d.timeout)
		run.Output, run.Result = stdout.Bytes(), bytes.TrimSpace(stderr.Bytes())
	}
	if run.Err != nil && executor.NeverOpened(run.Err) {
		run.NotRun = fmt.Sprintf("the exec into session pod %s was refused before it started (%v)", d.pod, run.Err)
	}
	run.PodUID, run.InvocationSHA256 = d.uid, protocol.HashInvocation(d.invocation)
	return run
}

// whyNotRun says why the call must not run, now that it holds its session's turn,
// or "".
func (s *sessionCalls) whyNotRun(d *delivery, waited bool) string {
	when := "before the call started"
	if waited {
		when = "while the call waited for its turn"
	}
	if why := s.stoppedBy(d.execUID); why != "" {
		return "the call was stopped before it started: " + why
	}
	if ended(d.call.hangUp) {
		// Ended while it waited for its turn (its Execution deleted: gone), and
		// nothing else recorded why.
		return "the call was stopped before it started"
	}
	if why := s.retiredBecause(d.uid); why != "" {
		return fmt.Sprintf("session pod %s was retired %s, because %s", d.pod, when, why)
	}
	// Not waiting is no proof either: this goroutine may start late, after a
	// call before it ended and its pod was replaced under the same name.
	return s.replaced(d.callCtx, d.namespace, d.pod, d.uid, when)
}

// runBackgroundJob runs a background job: its output goes to its live record,
// which the job tools read while it runs, and its runner's first line, once the
// job started, wakes the reconciler to record the start.
func (s *sessionCalls) runBackgroundJob(d *delivery) *executor.SessionRun {
	job := d.call.job
	stderr := &startedWriter{rest: boundedBuffer{limit: maxResultBytes}, started: func() {
		job.mu.Lock()
		job.started = s.now()
		job.mu.Unlock()
		s.notify(d)
	}}
	run := s.runCall(d.callCtx, d.call.hangUp, d.namespace, d.pod, d.invocation, job, stderr, d.timeout)
	stderr.flush()
	run.Output, _ = job.snapshot()
	run.Result, run.JobStartedAt = bytes.TrimSpace(stderr.rest.Bytes()), job.startedAt()
	return run
}

// keepRun moves the call from in flight to done, for the reconciler to record, and
// wakes the reconciler; the run of a call whose Execution is gone is dropped.
func (s *sessionCalls) keepRun(d *delivery, run *executor.SessionRun) {
	s.mu.Lock()
	delete(s.inFlight, d.execUID)
	gone := d.call.gone
	if !gone {
		s.done[d.execUID], s.doneOf[d.call.exec] = run, d.execUID
	}
	s.mu.Unlock()
	if gone {
		return // nobody records this run
	}
	s.notify(d)
}

// retireAfter says why a session must not take another call after run, or "": a
// background job's session was its own; a call that did not end clean (no
// trusted Result: the stream broke or timed out, the runner was killed or stopped,
// it said it could not clean up, or its Result names another invocation than the
// one sent) may have left processes that would see the next call.
func retireAfter(run *executor.SessionRun, job bool) string {
	switch {
	case job:
		return "its background job ended"
	case run.NotRun != "":
		return ""
	case run.Err != nil:
		return "a call's stream broke before its runner reported"
	case run.ExitCode != protocol.ExitSucceeded && run.ExitCode != protocol.ExitFailed:
		return fmt.Sprintf("a call's runner exited %d without its result", run.ExitCode)
	}
	res, err := protocol.DecodeResult(run.Result)
	switch {
	case err != nil:
		return "a call's runner sent no readable result"
	case res.Unclean:
		return "a call's runner could not make sure its processes are gone"
	case res.InvocationSHA256 != run.InvocationSHA256:
		return "a call's runner reported on another invocation than the one it was sent"
	}
	return ""
}

// retire deletes a session pod that takes no call any more (by UID: a new pod of
// the name is not this one). Nothing retries it here: an error is logged, and the
// Execution reconciler retires a recorded run's session again, retrying.
func (s *sessionCalls) retire(namespace, name string, uid types.UID, why string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.deleter.Delete(ctx, pod, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		ctrl.Log.WithName("sessions").Error(err, "could not delete the session pod", "pod", namespace+"/"+name, "why", why)
		return
	}
	ctrl.Log.WithName("sessions").Info("session pod deleted", "pod", namespace+"/"+name, "why", why)
}

// replaced says why the session pod is no longer the one of uid (gone, replaced, or
// being deleted), or "" when it still is, or cannot be read (the exec then says).
func (s *sessionCalls) replaced(ctx context.Context, namespace, name string, uid types.UID, when string) string {
	pod := &corev1.Pod{}
	err := s.pods.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("session pod %s was deleted %s", name, when)
	case err != nil:
		return ""
	case pod.UID != uid:
		return fmt.Sprintf("session pod %s was replaced by another pod of the name %s", name, when)
	case pod.DeletionTimestamp != nil:
		return fmt.Sprintf("session pod %s began to be deleted %s", name, when)
	}
	return ""
}

// runCall execs the runner with the invocation as stdin's first line, stdin held
// open until the exec returns or hangUp closes: its end is the call's end. It
// returns once the exec did: nothing writes to stdout or stderr after.
func (s *sessionCalls) runCall(ctx context.Context, hangUp <-chan struct{}, namespace, pod string, invocation []byte, stdout, stderr io.Writer, timeout time.Duration) *executor.SessionRun {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	defer func() { _ = stdinR.Close() }() // a write the exec never read returns
	go func() {
		_, _ = stdinW.Write(append(invocation, '\n'))
		select {
		case <-ctx.Done():
		case <-hangUp:
		}
		_ = stdinW.Close()
	}()
	run := &executor.SessionRun{StartedAt: s.now()}
	code, err := s.exec.Exec(ctx, namespace, pod, stdinR, stdout, stderr)
	cancel()
	run.FinishedAt = s.now()
	run.ExitCode, run.Err = code, err
	if err == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		run.Err = fmt.Errorf("the call ran past its timeout and the session's grace of %s", sessionExecGrace)
	}
	return run
}
