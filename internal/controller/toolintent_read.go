package controller

// The facts the ToolIntent reconciler reads for toolintent.Next, each read where it
// must be: through the cache, or around it where the cache may lag.

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/judge"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// read reads the fact s needs into w.
func (r *ToolIntentReconciler) read(ctx context.Context, run *intentRun, w *toolintent.World, s toolintent.Step) error {
	intent := run.intent
	switch s.Need {
	case toolintent.NeedTaskIntents:
		list, err := r.taskIntents(ctx, intent)
		if err != nil {
			return err
		}
		history, err := r.historyAfterList(ctx, run)
		w.TaskIntents.Set(list)
		w.TaskHistory.Set(history)
		return err
	case toolintent.NeedStops:
		var list v1.ToolIntentList
		err := r.List(ctx, &list, client.InNamespace(intent.Namespace), client.MatchingFields{IndexIntentStop: run.task.Name})
		w.Stops.Set(list.Items)
		return err
	case toolintent.NeedDecided, toolintent.NeedRechecked:
		d, err := r.decideNow(ctx, run, w, s.Need == toolintent.NeedDecided)
		if err != nil {
			return err
		}
		if s.Need == toolintent.NeedDecided {
			w.Decided.Set(&d)
		} else {
			w.Rechecked.Set(&d)
		}
	case toolintent.NeedOtherApprovals:
		var approvals v1.ApprovalList
		if err := r.List(ctx, &approvals, client.InNamespace(intent.Namespace), client.MatchingFields{IndexApprovalTask: run.task.Name}); err != nil {
			return err
		}
		others := approvals.Items[:0]
		for _, a := range approvals.Items {
			if a.Spec.IntentRef.Name != intent.Name {
				others = append(others, a)
			}
		}
		w.OtherApprovals.Set(others)
		// The retired calls' approvals are counted in the history, read after.
		history, err := r.historyAfterList(ctx, run)
		if err != nil {
			return err
		}
		w.TaskHistory.Set(history)
	case toolintent.NeedResultPolicies:
		loaded, err := r.Policies.LoadFresh(ctx, r.APIReader, intent.Namespace, run.began)
		if err != nil {
			return err
		}
		w.ResultPolicies.Set(&toolintent.ResultPolicies{Cluster: loaded.Cluster, Namespaced: loaded.Namespaced, Broken: loaded.BrokenResult, Fires: r.fireCounts(ctx, run)})
	case toolintent.NeedResultApproval:
		a, err := r.readApproval(ctx, intent.Namespace, pipeline.ResultApprovalName(intent), true)
		w.ResultApproval.Set(a)
		return err
	case toolintent.NeedGrants:
		var grants v1.ApprovalGrantList
		if err := r.List(ctx, &grants, client.InNamespace(intent.Namespace), client.MatchingFields{IndexGrantTask: run.task.Name}); err != nil {
			return err
		}
		w.Grants.Set(grants.Items)
	case toolintent.NeedTurn:
		turn, err := r.turnSiblings(ctx, run)
		w.Turn.Set(turn)
		return err
	case toolintent.NeedApproval:
		a, err := r.readApproval(ctx, intent.Namespace, s.ApprovalName, s.FromAPIServer)
		w.Approval.Set(toolintent.NamedApproval{Name: s.ApprovalName, Value: a})
		return err
	case toolintent.NeedFingerprint:
		fp, err := r.currentFingerprint(ctx, run, w)
		w.Fingerprint.Set(fp)
		return err
	case toolintent.NeedExecution:
		exec := &v1.Execution{}
		if err := r.getFresh(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: intent.Status.ExecutionName}, exec); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			exec = nil
		}
		w.Execution.Set(exec)
	case toolintent.NeedStale:
		stale, err := r.staleIntent(ctx, intent)
		w.Stale.Set(stale)
		return err
	case toolintent.NeedFinishedExecution:
		done, err := r.finishedExecution(ctx, w.Execution.Value)
		w.FinishedExecution.Set(done)
		return err
	default:
		return fmt.Errorf("ToolIntent %s: the reconciler cannot read fact %d", intent.Name, s.Need)
	}
	return nil
}

// taskIntents lists all intents of the intent's task.
func (r *ToolIntentReconciler) taskIntents(ctx context.Context, intent *v1.ToolIntent) ([]v1.ToolIntent, error) {
	var list v1.ToolIntentList
	err := r.List(ctx, &list, client.InNamespace(intent.Namespace), client.MatchingFields{IndexIntentTask: intent.Spec.TaskRef.Name})
	return list.Items, err
}

// readApproval reads the Approval of that name, nil when none exists: from the API
// server when it is about to be retired (the write is a compare-and-swap on the
// version read), else from the cache, confirming a NotFound.
func (r *ToolIntentReconciler) readApproval(ctx context.Context, namespace, name string, fromAPIServer bool) (*v1.Approval, error) {
	a := &v1.Approval{}
	key := client.ObjectKey{Namespace: namespace, Name: name}
	var err error
	if fromAPIServer {
		err = kube.Latest(r.Client, r.APIReader).Get(ctx, key, a)
	} else {
		err = r.getFresh(ctx, key, a)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// finishedExecution is the API server's copy of exec (the cache keeps no finished
// Execution's output: trimCachedExecution); nil when it is gone.
func (r *ToolIntentReconciler) finishedExecution(ctx context.Context, exec *v1.Execution) (*v1.Execution, error) {
	if r.APIReader == nil {
		return exec, nil
	}
	current := &v1.Execution{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(exec), current); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return current, nil
}

// staleIntent says whether the API server holds a newer intent than the one read
// from the cache (or none any more).
func (r *ToolIntentReconciler) staleIntent(ctx context.Context, intent *v1.ToolIntent) (bool, error) {
	if r.APIReader == nil {
		return false, nil
	}
	fresh := &v1.ToolIntent{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(intent), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	return fresh.ResourceVersion != intent.ResourceVersion, nil
}

// decideNow decides the intent against the policies in force (read from the API
// server, never the cache) and the task as it is now, and records in the decision
// the sandbox the call would run in, under its fingerprint.
//
// With judged, the DryRun rules with a match.judge condition that matched the call
// are put to the judge, and its verdicts recorded on the decision (shadow: they
// change nothing); a decision made again just before the call runs is not judged.
func (r *ToolIntentReconciler) decideNow(ctx context.Context, run *intentRun, w *toolintent.World, judged bool) (v1.Decision, error) {
	intent, task := run.intent, run.task
	loaded, err := r.Policies.LoadFresh(ctx, r.APIReader, intent.Namespace, run.began)
	if err != nil {
		return v1.Decision{}, err
	}
	normalized := w.Input()
	req := policy.Request{
		Namespace: intent.Namespace,
		Task:      task.Name,
		Mode:      task.Spec.Mode,
		Tool:      intent.Spec.Tool,
		Input:     normalized,
		Now:       run.now,
		Fires:     r.fireCounts(ctx, run),
	}
	if intent.Status.Decision != nil {
		// Decided again before running: a rule's cooldown is measured when the call
		// was decided, so that a cooldown that ran out while the batch waited does
		// not turn one call of a turn into a Redirect after its siblings ran.
		req.Now = pipeline.DecidedAt(intent)
	}
	d := policy.Decide(req, loaded.Cluster, loaded.Namespaced, loaded.Broken)
	if candidates := policy.JudgeCandidates(d, loaded.Cluster, loaded.Namespaced); judged && len(candidates) > 0 {
		d.JudgeVerdicts = r.Options.Judge.Evaluate(ctx, judge.CallOf(intent.Spec.Tool, normalized, &d), candidates)
		for i, v := range d.JudgeVerdicts {
			agreement := judge.Agreement(v, candidates[i].Action, d.Action)
			latency := float64(v.LatencyMillis) / 1000
			run.observe = append(run.observe, func() {
				metrics.JudgeVerdicts.WithLabelValues(string(v.Result), agreement).Inc()
				if r.Options.Judge != nil {
					metrics.JudgeLatency.Observe(latency)
				}
			})
		}
	}
	sandbox, err := pipeline.DecideSandbox(task, intent.Status.Validation, d.Walls, r.Options.DefaultSandboxImage)
	if err != nil {
		return v1.Decision{}, err
	}
	pipeline.SealDecision(&d, req, sandbox)
	return d, nil
}

// fireCounts reads, when the engine asks, how often the task's recorded decisions
// fired each rule (pipeline.RuleFires). A list that fails counts no fires, and the
// rule acts: a limit lifted by a failed read holds a call back, never lets one run.
func (r *ToolIntentReconciler) fireCounts(ctx context.Context, run *intentRun) policy.FireCounts {
	var counts policy.FireCounts
	return func(key string) policy.Fires {
		if counts == nil {
			var list v1.ToolIntentList
			if err := r.List(ctx, &list, client.InNamespace(run.intent.Namespace), client.MatchingFields{IndexIntentTask: run.task.Name}); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "listing the task's intents to count rule fires")
				return policy.Fires{}
			}
			// The retired calls' fires are in the task's history, read after
			// the list (historyAfterList).
			history, err := r.historyAfterList(ctx, run)
			if err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "reading the task's history to count rule fires")
				return policy.Fires{}
			}
			fires := pipeline.RuleFires(string(run.task.UID), pipeline.LiveIntents(history, list.Items), nil)
			if history != nil {
				fires = pipeline.MergeRuleFires(history.RuleFires, fires)
			}
			counts = pipeline.FireCountsOf(fires)
		}
		return counts(key)
	}
}

// historyAfterList is the task's status.history, read after its intents were
// listed. Retirement writes the history before it deletes the calls, so a history
// read after the list counts every call the list misses; a call in both is not
// counted twice (the history lists it as retiring) or, for a moment, is: an over
// count holds a call back, never lets one through. With no archive nothing retires
// now, and the task the reconcile read will do.
func (r *ToolIntentReconciler) historyAfterList(ctx context.Context, run *intentRun) (*v1.CallHistory, error) {
	if r.Options.Archive == nil {
		return run.task.Status.History, nil
	}
	task := &v1.AgentTask{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(run.task), task); err != nil {
		return nil, fmt.Errorf("reading AgentTask %s for its history of retired calls: %w", run.task.Name, err)
	}
	if task.UID != run.task.UID {
		return nil, fmt.Errorf("AgentTask %s was replaced while its call was checked", run.task.Name)
	}
	return task.Status.History, nil
}

// currentFingerprint recomputes the decision's fingerprint with the deciding policy's
// current generation, so an approval given under an older rule is refused. The walls
// and the sandbox are the decision's own records: the Execution is built from them,
// so the approval binds exactly the sandbox the call runs in.
func (r *ToolIntentReconciler) currentFingerprint(ctx context.Context, run *intentRun, w *toolintent.World) (string, error) {
	d := run.intent.Status.Decision
	ref := d.PolicyRuleRef
	if !ref.IsModeDefault() {
		g, found, err := r.policyGeneration(ctx, run.intent.Namespace, ref)
		if err != nil {
			return "", err
		}
		if !found {
			return "", nil // the policy is gone: no fingerprint matches
		}
		ref.Generation = g
	}
	return policy.FingerprintWithSandbox(run.intent.Namespace, run.task.Name, run.intent.Spec.Tool, w.Input(), ref, d.Walls, d.Sandbox), nil
}

// policyGeneration is the current generation of the policy ref names; found is
// false when it does not exist.
func (r *ToolIntentReconciler) policyGeneration(ctx context.Context, namespace string, ref v1.PolicyRuleReference) (int64, bool, error) {
	var obj client.Object
	key := client.ObjectKey{Name: ref.Name}
	switch ref.Kind {
	case v1.PolicyRuleKindClusterToolPolicy:
		obj = &v1.ClusterToolPolicy{}
	case v1.PolicyRuleKindToolPolicy:
		obj = &v1.ToolPolicy{}
		key.Namespace = namespace
	default:
		return 0, false, nil
	}
	if err := r.APIReader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	return obj.GetGeneration(), true, nil
}
