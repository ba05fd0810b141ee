package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/runner"
)

// TestPipelineRecordsMetrics checks that one allowed call and one denied call move the
// counters a dashboard reads: intents by tool and outcome, decisions by action and rule.
func TestPipelineRecordsMetrics(t *testing.T) {
	observed := func(tool, outcome string) float64 {
		return testutil.ToFloat64(metrics.IntentsObserved.WithLabelValues(tool, outcome))
	}
	decided := func(action, rule string) float64 {
		return testutil.ToFloat64(metrics.Decisions.WithLabelValues(action, rule))
	}
	readsBefore, deniesBefore := observed("read_file", "Succeeded"), observed("bash", "Denied")
	allowBefore, denyBefore := decided("Allow", "mode-default"), decided("Deny", "mode-default")

	p := startPipeline(t)
	p.task("m", v1.ModeReadOnly)
	p.propose("m", 0, 0, v1.ToolReadFile, `{"path":"a.txt"}`)
	p.runJob("m-t0-0", runner.Result{ExitCode: 0, DurationMs: 40}, "a\n")
	p.observed("m-t0-0")
	p.propose("m", 1, 0, v1.ToolBash, `{"command":"touch b.txt"}`)
	p.observed("m-t1-0")

	if got := observed("read_file", "Succeeded") - readsBefore; got != 1 {
		t.Errorf("toolgate_intents_total{read_file,Succeeded} rose by %v, want 1", got)
	}
	if got := observed("bash", "Denied") - deniesBefore; got != 1 {
		t.Errorf("toolgate_intents_total{bash,Denied} rose by %v, want 1", got)
	}
	if got := decided("Allow", "mode-default") - allowBefore; got != 1 {
		t.Errorf("toolgate_decisions_total{Allow,mode-default} rose by %v, want 1", got)
	}
	if got := decided("Deny", "mode-default") - denyBefore; got != 1 {
		t.Errorf("toolgate_decisions_total{Deny,mode-default} rose by %v, want 1", got)
	}
}
