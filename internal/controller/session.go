package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
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
	s.mu.Lock()
	if s.inFlight[exec.UID] != nil || s.done[exec.UID] != nil {
		s.mu.Unlock()
		cancel(nil)
		return
	}
	s.inFlight[exec.UID] = call
	s.mu.Unlock()
	wake := &v1.Execution{ObjectMeta: metav1.ObjectMeta{Namespace: exec.Namespace, Name: exec.Name}}
	execUID, namespace, timeout := exec.UID, exec.Namespace, time.Duration(exec.Spec.TimeoutSeconds)*time.Second+sessionExecGrace
	maxOutput := int(exec.Spec.MaxOutputBytes)
	notify := func() {
		select {
		case s.wake <- event.GenericEvent{Object: wake}:
		case <-ctx.Done():
		}
	}
	go func() {
		defer cancel(nil)
		turn, waited := s.acquire(key)
		var releaseOnce sync.Once
		release := func() { releaseOnce.Do(func() { s.release(key, turn) }) }
		var run *executor.SessionRun
		var notRun string
		when := "before the call started"
		if waited {
			when = "while the call waited for its turn"
		}
		if why := s.stoppedBy(execUID); why != "" {
			notRun = "the call was stopped before it started: " + why
		} else if ended(call.hangUp) {
			// Ended while it waited for its turn (its Execution deleted: gone), and
			// nothing else recorded why.
			notRun = "the call was stopped before it started"
		} else if why := s.retiredBecause(uid); why != "" {
			notRun = fmt.Sprintf("session pod %s was retired %s, because %s", pod, when, why)
		} else {
			// Not waiting is no proof either: this goroutine may start late, after a
			// call before it ended and its pod was replaced under the same name.
			notRun = s.replaced(callCtx, namespace, pod, uid, when)
		}
		switch {
		case notRun != "":
			run = &executor.SessionRun{StartedAt: s.now(), FinishedAt: s.now(), NotRun: notRun}
		case encodeErr != nil:
			run = &executor.SessionRun{StartedAt: s.now(), FinishedAt: s.now(), Err: fmt.Errorf("encoding the runner's invocation: %w", encodeErr)}
		case call.job != nil:
			stderr := &startedWriter{rest: boundedBuffer{limit: maxResultBytes}, started: func() {
				call.job.mu.Lock()
				call.job.started = s.now()
				call.job.mu.Unlock()
				notify()
			}}
			run = s.runCall(callCtx, call.hangUp, namespace, pod, invocation, call.job, stderr, timeout)
			stderr.flush()
			run.Output, _ = call.job.snapshot()
			run.Result, run.JobStartedAt = bytes.TrimSpace(stderr.rest.Bytes()), call.job.startedAt()
		default:
			stdout, stderr := &boundedBuffer{limit: maxOutput + 1}, &boundedBuffer{limit: maxResultBytes}
			run = s.runCall(callCtx, call.hangUp, namespace, pod, invocation, stdout, stderr, timeout)
			run.Output, run.Result = stdout.Bytes(), bytes.TrimSpace(stderr.Bytes())
		}
		if run.Err != nil && executor.NeverOpened(run.Err) {
			run.NotRun = fmt.Sprintf("the exec into session pod %s was refused before it started (%v)", pod, run.Err)
		}
		run.PodUID, run.InvocationSHA256 = uid, protocol.HashInvocation(invocation)
		// A session takes no call after one that did not end clean: it is retired
		// while this call still holds its turn, so that no call queued behind it runs
		// in the pod (what this call left there could reach the next call's runner).
		// The Execution reconciler retires it again once the run is recorded: that
		// one retries.
		if why := retireAfter(run, call.job != nil); why != "" {
			s.retireHeld(namespace, pod, uid, why)
		}
		release()
		s.mu.Lock()
		delete(s.inFlight, execUID)
		gone := call.gone
		if !gone {
			s.done[execUID], s.doneOf[call.exec] = run, execUID
		}
		s.mu.Unlock()
		if gone {
			return // nobody records this run
		}
		notify()
	}()
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

// boundedBuffer keeps the first limit bytes written to it and drops the rest. It
// is locked: an exec cut at its deadline may return before its stream's copiers
// stop writing.
type boundedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Bytes is a copy of what was kept.
func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// startedWriter is a background job's stderr: its first line, when it is the
// runner's protocol.Started, reports the job's runner; the rest is the Result.
type startedWriter struct {
	mu      sync.Mutex
	line    []byte
	done    bool
	rest    boundedBuffer
	started func()
}

// flush keeps a first line that never ended (the runner failed before the job
// started, and sent only its Result) as the Result.
func (w *startedWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.done = true
		_, _ = w.rest.Write(w.line)
	}
}

func (w *startedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if !w.done {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(w.line)+len(p) > maxResultBytes {
				// No runner's line is this long: it is the Result.
				w.done = true
				_, _ = w.rest.Write(w.line)
				_, _ = w.rest.Write(p)
				return n, nil
			}
			w.line = append(w.line, p...)
			return n, nil
		}
		w.line, p = append(w.line, p[:i]...), p[i+1:]
		w.done = true
		var st protocol.Started
		if json.Unmarshal(w.line, &st) == nil && st.Started {
			w.started()
		} else {
			_, _ = w.rest.Write(append(w.line, '\n'))
		}
	}
	_, _ = w.rest.Write(p)
	return n, nil
}

// ensureNetworkPolicy makes sure the NetworkPolicy that fences a sandbox's pods
// exists: the namespace's policy for its network walls (executor.NetworkPolicyName),
// made by the first pod behind those walls. One found by name (or AlreadyExists)
// counts only when its spec is what BuildNetworkPolicy makes: it then fences the pod
// exactly as the controller's own would, whoever made it. A policy of the name that
// selects nothing, or allows more, would leave the pod unfenced: a refusal.
func ensureNetworkPolicy(ctx context.Context, c client.Client, api client.Reader, policy *networkingv1.NetworkPolicy) (*refusal, error) {
	key := client.ObjectKeyFromObject(policy)
	existing := &networkingv1.NetworkPolicy{}
	err := c.Get(ctx, key, existing)
	if err == nil {
		return policyInTheWay(policy, existing), nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err := c.Create(ctx, policy); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating NetworkPolicy %s: %w", policy.Name, err)
		}
		if err := api.Get(ctx, key, existing); err != nil {
			return nil, err
		}
		return policyInTheWay(policy, existing), nil
	}
	return nil, nil
}

// startSession creates the task's session pod for profile, behind its NetworkPolicy
// (made first, so that the pod never runs unfenced), unless another NetworkPolicy
// would open its walls (wallsWidened). An existing pod of the name is left as it
// is: the caller checks it (sessionInTheWay).
func startSession(ctx context.Context, c client.Client, api client.Reader, scheme *runtime.Scheme, task *v1.AgentTask, session executor.Session, runnerImage string) (*refusal, error) {
	policy, err := executor.BuildProfileNetworkPolicy(task.Namespace, session.Profile)
	if err != nil {
		return refuse(EventChainBroken, "%s", err), nil
	}
	if refused, err := ensureNetworkPolicy(ctx, c, api, policy); err != nil || refused != nil {
		return refused, err
	}
	pod, err := executor.BuildSessionPod(task.Namespace, session, runnerImage)
	if err != nil {
		return refuse(EventChainBroken, "%s", err), nil
	}
	if refused, err := wallsWidened(ctx, c, policy, "session pod "+pod.Name, pod.Labels); err != nil || refused != nil {
		return refused, err
	}
	if err := controllerutil.SetControllerReference(task, pod, scheme); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating session pod %s: %w", pod.Name, err)
	}
	return nil, nil
}

// sessionInTheWay refuses a pod found under a session's name that is not the task's
// session for that profile: the task must control it and it must carry the
// session's labels. A pod of an earlier task of the same name is not refused but
// waited out (errEarlierTask): the garbage collector removes it.
func sessionInTheWay(pod *corev1.Pod, task *v1.AgentTask, session executor.Session) (*refusal, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "AgentTask" || owner.Name != task.Name {
		return refuse(EventObjectInTheWay, "a pod named %s exists in namespace %s and is not a session of AgentTask %s; delete it, and the next call starts the session", pod.Name, pod.Namespace, task.Name), nil
	}
	if owner.UID != task.UID {
		return nil, errEarlierTask
	}
	for k, v := range session.Labels() {
		if pod.Labels[k] != v {
			return refuse(EventObjectInTheWay, "session pod %s in namespace %s lost its label %s=%s; it is not trusted to run calls. Delete it, and the next call starts a new session", pod.Name, pod.Namespace, k, v), nil
		}
	}
	return nil, nil
}

// errEarlierTask: the pod belongs to a deleted task of the same name.
var errEarlierTask = errors.New("the pod belongs to an earlier AgentTask of this name, which is being deleted")
