// Package metrics holds toolgate's Prometheus metrics, registered into the
// controller-runtime registry so the manager's metrics endpoint serves them.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// ArchiveStored counts the records stored in the archive, by kind.
	ArchiveStored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_archive_stored_total",
		Help: "Records stored in the archive, by kind (Call, Task).",
	}, []string{"kind"})
	// ArchiveFailures counts the attempts to store a record that failed; the record
	// is stored again later, and nothing of it leaves the cluster meanwhile.
	ArchiveFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolgate_archive_failures_total",
		Help: "Attempts to store a record in the archive that failed (it is tried again; nothing of it leaves the cluster meanwhile).",
	})
	// Retired counts the objects retention deleted from the cluster once the
	// archive held their records, by kind (ToolIntent, Approval, Execution,
	// AgentTask).
	Retired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_retention_deleted_total",
		Help: "Objects deleted from the cluster by retention once the archive held their records, by kind.",
	}, []string{"kind"})
	// RetentionHeld counts the calls due to leave the cluster that stayed, by why:
	// NoArchive (none is configured: history grows in etcd) or ArchiveUnavailable
	// (the archive did not confirm their records).
	RetentionHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_retention_held_total",
		Help: "Finished calls past their retention window kept in etcd, counted each time retention looked at them, by reason (NoArchive, ArchiveUnavailable).",
	}, []string{"reason"})
	// ArchiveLag is the time from a record's object finishing (a call observed, a
	// task ended) to its record stored.
	ArchiveLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "toolgate_archive_lag_seconds",
		Help:    "Seconds from a call's observation, or a task's end, to its record stored in the archive.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
	})

	// NotificationsSent counts the messages a receiver accepted, by channel type
	// and event.
	NotificationsSent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_notifications_sent_total",
		Help: "Approval notifications a receiver accepted, by channel type (Slack, CloudEvents) and event (Requested, Decided, Expired, Superseded).",
	}, []string{"type", "event"})
	// NotificationFailures counts the delivery attempts that failed (the receiver
	// refused or did not answer, or the channel's Secret was unusable), by channel
	// type and event.
	NotificationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_notification_failures_total",
		Help: "Approval notification attempts that failed (refused, unanswered, or the channel's Secret unusable), by channel type and event.",
	}, []string{"type", "event"})
	// NotificationRetries counts the attempts after a delivery's first.
	NotificationRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_notification_retries_total",
		Help: "Approval notification attempts after the first of a delivery, by channel type.",
	}, []string{"type"})
	// NotificationsGivenUp counts the deliveries that ran out of attempts.
	NotificationsGivenUp = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_notifications_given_up_total",
		Help: "Approval notifications given up after their last attempt failed, by channel type.",
	}, []string{"type"})

	// IntentsObserved counts intents by tool and outcome when their observation is written.
	IntentsObserved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_intents_total",
		Help: "ToolIntents observed, by tool and outcome.",
	}, []string{"tool", "outcome"})

	// Decisions counts policy decisions by action and rule.
	Decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_decisions_total",
		Help: "Policy decisions, by action and what decided: the rule as Kind/policy/rule, or ModeDefault/MODE when no rule matched.",
	}, []string{"action", "rule"})

	// ApprovalWait observes how long approvals waited for a human decision.
	ApprovalWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolgate_approval_wait_seconds",
		Help:    "Time from an Approval's creation to its decision (or expiry), by result.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 9),
	}, []string{"result"})

	// ExecutionDuration observes how long tools ran.
	ExecutionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolgate_execution_duration_seconds",
		Help:    "Duration of tool executions as the runner measured it, by tool and outcome.",
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
	}, []string{"tool", "outcome"})

	// PipelineLatency observes the time toolgate itself adds: from an intent's creation
	// to its decision, and from the decision to its Execution's creation when no human
	// was asked.
	PipelineLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolgate_pipeline_latency_seconds",
		Help:    "Latency added by the pipeline, by stage (decide: creation to decision; dispatch: decision to Execution for calls that needed no human).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"stage"})
	// CompletionChecks counts the completion gate's verdicts on final answers.
	CompletionChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_completion_checks_total",
		Help: "Completion checks of final answers, by action (Allow: accepted; Redirect; Deny) and deciding rule.",
	}, []string{"action", "rule"})
	// JudgeVerdicts counts the judge's verdicts, by result and by whether they agree
	// with the deterministic decision (judge.Agreement): how often acting on the
	// judge would change what runs.
	JudgeVerdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_judge_verdicts_total",
		Help: "Judge verdicts on rule conditions (shadow: never acted on), by result (Match, NoMatch, Unknown) and agreement with the deterministic decision (true, false, unknown).",
	}, []string{"result", "agreement"})
	// MCPCalls counts the answers of the MCP endpoint to tools/call and
	// toolgate_wait requests by how they ended: the observation's outcome;
	// StillWaiting when the call outlasted the request (the client picks it up with
	// toolgate_wait, whose answer is counted again); Cancelled when the client
	// cancelled the call and it was withdrawn, CancelFailed when withdrawing it
	// failed.
	MCPCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_mcp_calls_total",
		Help: "Answers of the MCP endpoint to tools/call and toolgate_wait, by outcome (the observation's, StillWaiting, Cancelled, or CancelFailed).",
	}, []string{"outcome"})
	// MCPTokenReviews counts the bearer tokens the MCP endpoint checked without a
	// fresh cached review, by result: Authenticated or Rejected by a TokenReview,
	// RejectedCached (refused again without one), Limited (too many new tokens at
	// once), Error (the review failed).
	MCPTokenReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_mcp_token_reviews_total",
		Help: "Bearer tokens the MCP endpoint checked without a cached review, by result (Authenticated, Rejected, RejectedCached, Limited, Error).",
	}, []string{"result"})
	// JudgeLatency is the latency of the judge's requests.
	JudgeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "toolgate_judge_latency_seconds",
		Help:    "Latency of the judge request behind each verdict, timeouts included.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 10),
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(ArchiveStored, ArchiveFailures, ArchiveLag, Retired, RetentionHeld, IntentsObserved, Decisions, ApprovalWait, ExecutionDuration, PipelineLatency,
		CompletionChecks, JudgeVerdicts, JudgeLatency, MCPCalls, MCPTokenReviews,
		NotificationsSent, NotificationFailures, NotificationRetries, NotificationsGivenUp)
}
