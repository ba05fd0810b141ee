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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// DefaultSessionIdleTimeout is how long a task's sessions stay up with no call.
const DefaultSessionIdleTimeout = 10 * time.Minute

// sessionRecheck is how often a call waiting for its session looks again; the
// session pod's watch usually wakes it sooner.
const sessionRecheck = time.Second

// maxResultBytes bounds what is read of a session call's stderr: the runner's
// Result is at most runner.MaxTerminationMessageBytes.
const maxResultBytes = 64 << 10

// sessionExecGrace is added to a call's timeout to bound its exec: the runner stops
// the tool at the timeout and reports; the grace covers the sweep and the stream.
const sessionExecGrace = 30 * time.Second

// sessionCalls delivers calls to session pods and keeps each call's run until the
// Execution reconciler recorded it. A session runs one call at a time: calls of one
// session share its uid and pod, and two at once could reach each other's
// processes. The runs live in this process only: a controller that restarts loses
// the calls in flight, whose streams close (which stops them in their sessions), and
// the reconciler ends them as Exceptions (never runs them again).
type sessionCalls struct {
	exec executor.SessionExecutor
	// wake is the Execution controller's source: a finished run is sent here.
	wake chan event.GenericEvent
	now  func() time.Time

	mu       sync.Mutex
	inFlight map[types.UID]bool
	done     map[types.UID]*executor.SessionRun
	// sessions holds a turn of each session pod (namespace/name) with calls queued
	// or running; a session's entry goes when its last call did.
	sessions map[string]*sessionTurn
}

type sessionTurn struct {
	lock  chan struct{}
	users int
}

func newSessionCalls(exec executor.SessionExecutor, now func() time.Time) *sessionCalls {
	return &sessionCalls{
		exec:     exec,
		wake:     make(chan event.GenericEvent, 1024),
		now:      now,
		inFlight: map[types.UID]bool{},
		done:     map[types.UID]*executor.SessionRun{},
		sessions: map[string]*sessionTurn{},
	}
}

// known says whether the call was delivered by this process (in flight or done).
func (s *sessionCalls) known(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight[uid] || s.done[uid] != nil
}

// run returns the call's finished run, or nil and whether it is still in flight.
func (s *sessionCalls) run(uid types.UID) (*executor.SessionRun, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[uid], s.inFlight[uid]
}

// forget drops a recorded run.
func (s *sessionCalls) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.done, uid)
}

func (s *sessionCalls) acquire(key string) *sessionTurn {
	s.mu.Lock()
	t := s.sessions[key]
	if t == nil {
		t = &sessionTurn{lock: make(chan struct{}, 1)}
		s.sessions[key] = t
	}
	t.users++
	s.mu.Unlock()
	t.lock <- struct{}{}
	return t
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
func (s *sessionCalls) deliver(ctx context.Context, exec *v1.Execution, pod string) error {
	invocation, err := json.Marshal(executor.BuildInvocation(exec))
	if err != nil {
		return fmt.Errorf("encoding the runner's invocation: %w", err)
	}
	s.mu.Lock()
	if s.inFlight[exec.UID] || s.done[exec.UID] != nil {
		s.mu.Unlock()
		return nil
	}
	s.inFlight[exec.UID] = true
	s.mu.Unlock()
	wake := &v1.Execution{ObjectMeta: metav1.ObjectMeta{Namespace: exec.Namespace, Name: exec.Name}}
	uid, namespace, timeout := exec.UID, exec.Namespace, time.Duration(exec.Spec.TimeoutSeconds)*time.Second+sessionExecGrace
	maxOutput := int(exec.Spec.MaxOutputBytes)
	go func() {
		key := namespace + "/" + pod
		turn := s.acquire(key)
		run := s.runCall(ctx, namespace, pod, invocation, maxOutput, timeout)
		s.release(key, turn)
		s.mu.Lock()
		delete(s.inFlight, uid)
		s.done[uid] = run
		s.mu.Unlock()
		select {
		case s.wake <- event.GenericEvent{Object: wake}:
		case <-ctx.Done():
		}
	}()
	return nil
}

// runCall execs the runner with the invocation as stdin's first line, stdin held
// open until the exec returns: its end is the call's end.
func (s *sessionCalls) runCall(ctx context.Context, namespace, pod string, invocation []byte, maxOutput int, timeout time.Duration) *executor.SessionRun {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	defer func() { _ = stdinR.Close() }() // a write the exec never read returns
	go func() {
		_, _ = stdinW.Write(append(invocation, '\n'))
		<-ctx.Done()
		_ = stdinW.Close()
	}()
	stdout := &boundedBuffer{limit: maxOutput + 1}
	stderr := &boundedBuffer{limit: maxResultBytes}
	run := &executor.SessionRun{StartedAt: s.now()}
	code, err := s.exec.Exec(ctx, namespace, pod, stdinR, stdout, stderr)
	cancel()
	run.FinishedAt = s.now()
	run.ExitCode, run.Err = code, err
	if err == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		run.Err = fmt.Errorf("the call ran past its timeout and the session's grace of %s", sessionExecGrace)
	}
	run.Output, run.Result = stdout.Bytes(), bytes.TrimSpace(stderr.Bytes())
	return run
}

// boundedBuffer keeps the first limit bytes written to it and drops the rest.
type boundedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
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
// (made first, so that the pod never runs unfenced). An existing pod of the name is
// left as it is: the caller checks it (sessionInTheWay).
func startSession(ctx context.Context, c client.Client, api client.Reader, scheme *runtime.Scheme, task *v1.AgentTask, profile v1.SandboxProfile, runnerImage string) (*refusal, error) {
	policy, err := executor.BuildProfileNetworkPolicy(task.Namespace, profile)
	if err != nil {
		return refuse(EventChainBroken, "%s", err), nil
	}
	if refused, err := ensureNetworkPolicy(ctx, c, api, policy); err != nil || refused != nil {
		return refused, err
	}
	pod, err := executor.BuildSessionPod(task.Namespace, task.Name, profile, runnerImage)
	if err != nil {
		return refuse(EventChainBroken, "%s", err), nil
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
func sessionInTheWay(pod *corev1.Pod, task *v1.AgentTask, profile v1.SandboxProfile) (*refusal, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "AgentTask" || owner.Name != task.Name {
		return refuse(EventObjectInTheWay, "a pod named %s exists in namespace %s and is not a session of AgentTask %s; delete it, and the next call starts the session", pod.Name, pod.Namespace, task.Name), nil
	}
	if owner.UID != task.UID {
		return nil, errEarlierTask
	}
	for k, v := range executor.SessionLabels(task.Name, profile) {
		if pod.Labels[k] != v {
			return refuse(EventObjectInTheWay, "session pod %s in namespace %s lost its label %s=%s; it is not trusted to run calls. Delete it, and the next call starts a new session", pod.Name, pod.Namespace, k, v), nil
		}
	}
	return nil, nil
}

// errEarlierTask: the pod belongs to a deleted task of the same name.
var errEarlierTask = errors.New("the pod belongs to an earlier AgentTask of this name, which is being deleted")

// deleteSessionPod deletes a session pod by UID (a new pod of the name is not this
// one), ignoring one already gone.
func deleteSessionPod(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	err := c.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
