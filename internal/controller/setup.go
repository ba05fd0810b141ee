// Package controller holds toolgate's reconcilers. Each reconciler reads the world,
// calls pure decision functions (internal/policy, internal/pipeline, internal/executor)
// and writes status once.
package controller

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/judge"
	"github.com/toolgate/toolgate/internal/policyset"
)

// Options configure the reconcilers.
type Options struct {
	// RunnerImage holds the runner binary; an init container copies it into each
	// Execution's pod.
	RunnerImage string
	// Judge evaluates the match.judge conditions of DryRun rules (shadow); nil when
	// no judge endpoint is configured, and their verdicts then say so.
	Judge *judge.Judge
	// DefaultSandboxImage is used when a task names no sandbox image.
	DefaultSandboxImage string
	// ControllerIdentity is the Kubernetes user the controller runs as. The agent loop
	// names it in spec.requestedBy of the ToolIntents it creates for a model, because
	// the admission policy (config/admission) requires requestedBy to be the creator.
	// Empty means DefaultControllerIdentity.
	ControllerIdentity string
	// ModelEndpoints are the model endpoints a task's spec.agent.model.baseURL may
	// name: the controller sends a task's API key only there. The zero value means
	// agent.DefaultEndpoints.
	ModelEndpoints agent.Endpoints
	// Now is the clock of the intent and task reconcilers; nil means time.Now. Tests
	// move it to expire approvals without waiting.
	Now func() time.Time
	// Workers is how many objects of each kind reconcile at once.
	Workers Workers
	// SpentJobTTL is how long a call's Job and pod are kept once its Execution holds
	// the whole result (executor.HoldsWholeResult); zero means DefaultSpentJobTTL.
	SpentJobTTL time.Duration
	// SessionIdleTimeout is how long a task's sessions stay up with no call; zero
	// means DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration
	// SessionExecutor delivers calls to session pods; nil means pods/exec through
	// the API server (executor.PodExec). Tests without a kubelet replace it.
	SessionExecutor executor.SessionExecutor
	// LogReader reads the logs of toolgate's git pods (a change's diff); nil means
	// the pods/log subresource. Tests play the kubelet with their own.
	LogReader executor.LogReader
	// GitRetry is how often a git workspace that could not be cloned is looked at
	// again (an unreachable host, a Secret missing, unlabelled or refused); zero
	// means DefaultGitRetry.
	GitRetry time.Duration
	// Archive stores the record of every finished call (docs/archive.md); nil when
	// no archive is configured, and the records then stay in etcd only.
	Archive *archive.Archive
	// CallRetention is how long a finished call stays in the cluster after its
	// observation once the archive holds its record; zero means
	// DefaultCallRetention. Without an archive, calls stay.
	CallRetention time.Duration
	// TaskTTLAfterFinished is how long an ended task stays when its
	// spec.ttlSecondsAfterFinished is unset; zero means DefaultTaskTTLAfterFinished.
	TaskTTLAfterFinished time.Duration
	// Notifications configure how Approvals are announced (NotificationChannels).
	Notifications Notifications

	// policies is the one policy cache of the process, which the ToolIntent and
	// AgentTask reconcilers share (SetupWithManager makes it): one LIST per scope
	// and wave, and each policy compiled once per generation, for both.
	policies *policyset.Cache
}

// DefaultGitRetry is GitRetry's default: a fixed Secret or a host back is seen
// within half a minute, at the cost of one metadata read per stuck task.
const DefaultGitRetry = 30 * time.Second

func (o Options) gitRetry() time.Duration {
	if o.GitRetry > 0 {
		return o.GitRetry
	}
	return DefaultGitRetry
}

func (o Options) sessionIdleTimeout() time.Duration {
	if o.SessionIdleTimeout > 0 {
		return o.SessionIdleTimeout
	}
	return DefaultSessionIdleTimeout
}

// DefaultSpentJobTTL keeps a spent Job a minute: long enough to look at its pod
// after a call, short enough that neither the cluster nor the controller's cache
// keeps a pod per call (a day of calls would be a day of pods).
const DefaultSpentJobTTL = time.Minute

func (o Options) spentJobTTL() time.Duration {
	if o.SpentJobTTL > 0 {
		return o.SpentJobTTL
	}
	return DefaultSpentJobTTL
}

// Workers is how many objects of each kind reconcile at once; zero means the
// default of DefaultWorkers. One object is never reconciled by two workers at once
// (the work queue's promise), so the pipeline's order per object is unchanged. Calls
// of one task do reconcile at once: the compare-and-swap of each intent's status
// covers that intent only, so what calls share is decided from what the others have
// recorded (a sibling that has not decided holds its batch back; see
// pipeline.HoldsSiblings), as it already was for two replicas.
type Workers struct {
	// Intent is for ToolIntents: validation and the policy decision.
	Intent int
	// Execution is for Executions: the chain check, the Job, the result.
	Execution int
	// Approval is for Approvals: their state.
	Approval int
	// Task is for AgentTasks: their status and the agent loop, which waits for the
	// model endpoint (one slow endpoint must not hold every other task).
	Task int
}

// DefaultWorkers are the workers of a kind whose Workers field is zero. Eight keep
// two cores busy while each worker mostly waits on the API server; tasks get as many
// because a model turn waits for its endpoint.
var DefaultWorkers = Workers{Intent: 8, Execution: 8, Approval: 2, Task: 8}

func (w Workers) orDefault() Workers {
	pick := func(n, def int) int {
		if n > 0 {
			return n
		}
		return def
	}
	return Workers{
		Intent:    pick(w.Intent, DefaultWorkers.Intent),
		Execution: pick(w.Execution, DefaultWorkers.Execution),
		Approval:  pick(w.Approval, DefaultWorkers.Approval),
		Task:      pick(w.Task, DefaultWorkers.Task),
	}
}

// DefaultControllerIdentity is the service account config/default deploys the
// controller as, and the one the admission policies of config/admission exempt.
const DefaultControllerIdentity = "system:serviceaccount:toolgate-system:toolgate-controller-manager"

func (o Options) identity() string {
	if o.ControllerIdentity != "" {
		return o.ControllerIdentity
	}
	return DefaultControllerIdentity
}

func (o Options) modelEndpoints() agent.Endpoints {
	if !o.ModelEndpoints.IsZero() {
		return o.ModelEndpoints
	}
	return agent.MustParseEndpoints(agent.DefaultEndpoints)
}

// policySet is the process's policy cache; a reconciler made alone (in a test) gets
// its own.
func (o Options) policySet() *policyset.Cache {
	if o.policies != nil {
		return o.policies
	}
	return policyset.NewCache()
}

func (o Options) clock() func() time.Time {
	if o.Now != nil {
		return o.Now
	}
	return time.Now
}

// SetupWithManager registers every toolgate reconciler with the manager.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	opts.policies = policyset.NewCache()
	setups := []func(ctrl.Manager, Options) error{
		setupIndexes,
		setupAgentTask,
		setupToolIntent,
		setupApproval,
		setupExecution,
		setupPolicies,
		setupArchive,
		setupNotification,
	}
	for _, setup := range setups {
		if err := setup(mgr, opts); err != nil {
			return err
		}
	}
	return nil
}

// CacheOptions limit what the manager's cache watches and holds. Only the Jobs and
// Pods (of Jobs and sessions) toolgate created are cached: caching every pod of a
// large cluster would cost memory for nothing. Every NetworkPolicy is cached, not
// only toolgate's fences: any policy that selects a sandbox pod may open its walls
// (wallsWidened), and namespaces hold few of them. Only the Secrets labelled
// v1.LabelModelCredentials=true are cached, and the agent loop reads API keys through
// the cache: any other Secret is invisible to the controller's reads, whatever its
// RBAC (which cannot select by label) allows.
func CacheOptions() cache.Options {
	ours, err := labels.NewRequirement(v1.LabelExecution, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	credentials, err := labels.NewRequirement(v1.LabelModelCredentials, selection.Equals, []string{v1.ModelCredentialsValue})
	if err != nil {
		panic(err)
	}
	// Job pods and session pods both name their task.
	tasks, err := labels.NewRequirement(v1.LabelTask, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	byLabel := labels.NewSelector().Add(*ours)
	return cache.Options{
		DefaultTransform: trimCached,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:    {Label: labels.NewSelector().Add(*tasks), Transform: trimCachedPod},
			&batchv1.Job{}:   {Label: byLabel, Transform: trimCachedJob},
			&corev1.Secret{}: {Label: labels.NewSelector().Add(*credentials)},
			&v1.ToolIntent{}: {Transform: trimCachedIntent},
			&v1.Execution{}:  {Transform: trimCachedExecution},
		},
	}
}

// The cache keeps of each object only what the reconcilers read: with every call
// leaving an intent, an Execution, a Job, a pod and a NetworkPolicy behind until
// they are deleted, the copies the API server keeps for its own bookkeeping
// (managed fields, the last applied configuration) and the specs toolgate wrote
// itself and never reads back would be most of the controller's memory. Nothing
// read from the cache is written back whole: Jobs and pods are only created and
// deleted, and the reconcilers update status, which is kept. A reader that needs a
// stripped field reads around the cache (APIReader).

// trimCached drops the managed fields and the last applied configuration.
func trimCached(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
		if a := o.GetAnnotations(); a[corev1.LastAppliedConfigAnnotation] != "" {
			delete(a, corev1.LastAppliedConfigAnnotation)
			o.SetAnnotations(a)
		}
	}
	return obj, nil
}

// trimCachedPod keeps a pod's metadata and status: the Execution reads its
// containers' states and termination messages, never its spec.
func trimCachedPod(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		pod.Spec = corev1.PodSpec{}
		for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
			for i := range statuses {
				statuses[i] = corev1.ContainerStatus{Name: statuses[i].Name, State: statuses[i].State}
			}
		}
		pod.Status.EphemeralContainerStatuses = nil
	}
	return trimCached(obj)
}

// trimCachedIntent keeps of an observed intent what is read of a call that has
// ended: its spec, observation and conditions (the agent loop's conversation, the
// task's counts, the edit baselines, the early return of its own reconcile), and of
// its decision the verdict alone: action, deciding rule, reason, category and the
// task it was decided for (a Stop or Redirect of a turn consumes its siblings and
// ends the task, rule fires are counted from it, and Completion rules read the
// category). Its validation and the rest of its decision are the API server's
// record; the one reader that may come to them from the cache, an Execution's chain
// check, reads the API server when the cached intent does not hold the chain.
func trimCachedIntent(obj any) (any, error) {
	if in, ok := obj.(*v1.ToolIntent); ok && in.Status.Observation != nil {
		in.Status.Validation = nil
		if d := in.Status.Decision; d != nil {
			// The fingerprint stays: a denied call retired into the task's history
			// keeps it there (pipeline.Retire), read from this cache.
			verdict := &v1.Decision{Action: d.Action, PolicyRuleRef: d.PolicyRuleRef, Reason: d.Reason, Category: d.Category, Fingerprint: d.Fingerprint}
			if d.Sandbox != nil {
				verdict.Sandbox = &v1.DecidedSandbox{TaskUID: d.Sandbox.TaskUID}
			}
			in.Status.Decision = verdict
		}
	}
	return trimCached(obj)
}

// trimCachedExecution keeps of a finished Execution its references, tool, limits
// and status without the output. A finished Execution is final (its reconcile only
// reaps its spent Job), so the sandbox, walls and input it ran with are never read
// from the cache again, and its output is read once, by its intent, from the API
// server (ToolIntentReconciler.observe): kept here, every call's output would be
// held twice, in its Execution and in its intent's observation.
func trimCachedExecution(obj any) (any, error) {
	if exec, ok := obj.(*v1.Execution); ok && executor.IsFinished(&exec.Status) {
		exec.Spec = v1.ExecutionSpec{
			IntentRef: exec.Spec.IntentRef, TaskRef: exec.Spec.TaskRef, Tool: exec.Spec.Tool,
			TimeoutSeconds: exec.Spec.TimeoutSeconds, MaxOutputBytes: exec.Spec.MaxOutputBytes,
		}
		exec.Status.Output = ""
	}
	return trimCached(obj)
}

// trimCachedJob keeps a Job's metadata, status, deadline and pod labels (by which its
// pod is found and checked, jobInTheWay), not the pod spec toolgate built.
func trimCachedJob(obj any) (any, error) {
	if job, ok := obj.(*batchv1.Job); ok {
		job.Spec = batchv1.JobSpec{
			ActiveDeadlineSeconds: job.Spec.ActiveDeadlineSeconds,
			Template:              corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: job.Spec.Template.Labels}},
		}
	}
	return trimCached(obj)
}
