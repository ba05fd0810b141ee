package controller

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/protocol"
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
	allowBefore, denyBefore := decided("Allow", "ModeDefault/ReadOnly"), decided("Deny", "ModeDefault/ReadOnly")

	p := startPipeline(t)
	p.task("m", v1.ModeReadOnly)
	p.propose("m", 0, 0, v1.ToolReadFile, `{"path":"a.txt"}`)
	p.runJob("m-t0-0", protocol.Result{ExitCode: 0, DurationMs: 40}, "a\n")
	p.observed("m-t0-0")
	p.propose("m", 1, 0, v1.ToolBash, `{"command":"touch b.txt"}`)
	p.observed("m-t1-0")

	// The counters rise once the status write returned: a moment after the
	// observation can be read.
	for _, c := range []struct {
		metric string
		rise   func() float64
	}{
		{"toolgate_intents_total{read_file,Succeeded}", func() float64 { return observed("read_file", "Succeeded") - readsBefore }},
		{"toolgate_intents_total{bash,Denied}", func() float64 { return observed("bash", "Denied") - deniesBefore }},
		{"toolgate_decisions_total{Allow,ModeDefault/ReadOnly}", func() float64 { return decided("Allow", "ModeDefault/ReadOnly") - allowBefore }},
		{"toolgate_decisions_total{Deny,ModeDefault/ReadOnly}", func() float64 { return decided("Deny", "ModeDefault/ReadOnly") - denyBefore }},
	} {
		p.eventually(c.metric+" to rise by 1", func() (bool, string) { got := c.rise(); return got == 1, fmt.Sprintf("rose by %v", got) })
	}
	p.absent(all(p.reconciledNow("toolintent", p.getIntent("m-t0-0")), p.reconciledNow("toolintent", p.getIntent("m-t1-0"))), "a counter rising by more than 1", func() bool {
		return observed("read_file", "Succeeded")-readsBefore > 1 || observed("bash", "Denied")-deniesBefore > 1
	})
}
