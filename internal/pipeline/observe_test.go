package pipeline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestRefusal(t *testing.T) {
	cases := []struct {
		outcome  v1.Outcome
		headline string
	}{
		{v1.OutcomeValidationFailed, "The call was invalid; fix it and propose it again:"},
		{v1.OutcomeDenied, "Policy denied the call; do not repeat it unchanged:"},
		{v1.OutcomeApprovalDenied, "A human denied the call:"},
		{v1.OutcomeApprovalExpired, "Nobody approved the call in time:"},
		{v1.OutcomeAborted, "The call was aborted:"},
		{v1.OutcomeFailed, "Failed:"},
	}
	for _, tc := range cases {
		t.Run(string(tc.outcome), func(t *testing.T) {
			reason := "curl -H 'Authorization: Bearer abcdefghijklmnop' was refused"
			got := Refusal(tc.outcome, reason, epoch)
			now := metav1.NewTime(epoch)
			want := &v1.Observation{
				Outcome:    tc.outcome,
				Executed:   false,
				Summary:    "[not executed] Nothing was run for this call. " + tc.headline + "\ncurl -H 'Authorization: [MASKED]' was refused",
				ObservedAt: &now,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Refusal() mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(got.Summary, "abcdefghijklmnop") {
				t.Errorf("summary leaks the token: %q", got.Summary)
			}
		})
	}
}

func TestValidationReason(t *testing.T) {
	got := ValidationReason([]string{"input/path: is required", "spec.requestedBy: required"})
	want := "- input/path: is required\n- spec.requestedBy: required"
	if got != want {
		t.Errorf("ValidationReason() = %q, want %q", got, want)
	}
}

func TestFromExecution(t *testing.T) {
	cases := []struct {
		name string
		exec *v1.Execution
		want v1.Observation // ObservedAt is filled in
	}{
		{
			name: "success",
			exec: makeExecution("x").succeeded().exitCode(0).output("ok\n").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: ptr[int32](0),
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: 0]\nok\n",
			},
		},
		{
			name: "what masking found in the output is carried, never the values",
			exec: func() *v1.Execution {
				e := makeExecution("x").succeeded().exitCode(0).output("key: [MASKED]\n").obj()
				e.Status.MaskedSecrets = &v1.MaskedSecrets{Count: 1, Kinds: []string{"aws-access-token"}}
				return e
			}(),
			want: v1.Observation{
				Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: ptr[int32](0),
				Artifact:      "the Execution x (no copy was kept)",
				Summary:       "[exit code: 0]\nkey: [MASKED]\n",
				MaskedSecrets: &v1.MaskedSecrets{Count: 1, Kinds: []string{"aws-access-token"}},
			},
		},
		{
			name: "success of a file tool carries the content hash, and a final newline is added",
			exec: makeExecution("x").succeeded().exitCode(0).output("1\tpackage main").contentSHA("c0ffee").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: ptr[int32](0), ContentSHA256: "c0ffee",
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: 0]\n1\tpackage main\n",
			},
		},
		{
			name: "non-zero exit is Failed with the code and no error line",
			exec: makeExecution("x").failed(v1.ErrorExitCode, "exit status 2").exitCode(2).output("FAIL\n").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeFailed, Executed: true, ExitCode: ptr[int32](2),
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: 2]\nFAIL\n",
			},
		},
		{
			name: "timeout says after how long and that the group was killed",
			exec: makeExecution("x").failed(v1.ErrorTimeout, "deadline exceeded").exitCode(137).output("building...\n").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeTimedOut, Executed: true, ExitCode: ptr[int32](137),
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: 137] [timed out after 30s: the process group was killed]\n[Timeout] deadline exceeded\nbuilding...\n",
			},
		},
		{
			name: "aborted may have had effects",
			exec: makeExecution("x").failed(v1.ErrorAborted, "the task was cancelled").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeAborted, Executed: true,
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: none] [aborted: the execution was stopped before it finished; it may have had effects]\n[Aborted] the task was cancelled\n",
			},
		},
		{
			name: "stale is Failed with its kind and message",
			exec: makeExecution("x").failed(v1.ErrorStale, "file changed since it was read (baseline abc)").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeFailed, Executed: true,
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: none]\n[Stale] file changed since it was read (baseline abc)\n",
			},
		},
		{
			name: "exception without an exit code",
			exec: makeExecution("x").failed(v1.ErrorException, "the Job was deleted").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeFailed, Executed: true,
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: none]\n[Exception] the Job was deleted\n",
			},
		},
		{
			name: "truncated output says how much and where the rest is",
			exec: makeExecution("x").succeeded().exitCode(0).output("head\n...\ntail\n").truncated(100000, 2345).
				artifactPath(".toolgate/out/x.log").podName("x-abcde").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: ptr[int32](0), Truncated: true,
				Artifact: "read_file .toolgate/out/x.log, or the log of pod/x-abcde container tool (kubectl logs, while the Job exists)",
				Summary: "[exit code: 0]\nhead\n...\ntail\n" +
					"[output truncated: 102345 bytes in all, only the head and tail are shown; the full output is at read_file .toolgate/out/x.log, or the log of pod/x-abcde container tool (kubectl logs, while the Job exists)]\n",
			},
		},
		{
			name: "whole output: the Execution holds it, not the pod's log (the Job is reaped)",
			exec: makeExecution("x").succeeded().exitCode(0).output("all of it\n").podName("x-abcde").whole("x").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: ptr[int32](0),
				Artifact: "the Execution x (status.output)",
				Summary:  "[exit code: 0]\nall of it\n",
			},
		},
		{
			name: "truncated with only the log",
			exec: makeExecution("x").failed(v1.ErrorExitCode, "").exitCode(1).output("a\n").truncated(50000, 0).podName("x-abcde").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeFailed, Executed: true, ExitCode: ptr[int32](1), Truncated: true,
				Artifact: "the log of pod/x-abcde container tool (kubectl logs, while the Job exists)",
				Summary:  "[exit code: 1]\na\n[output truncated: 50000 bytes in all, only the head and tail are shown; the full output is at the log of pod/x-abcde container tool (kubectl logs, while the Job exists)]\n",
			},
		},
		{
			name: "not truncated: no notice even when a copy was kept",
			exec: makeExecution("x").succeeded().exitCode(0).output("a\n").artifactPath(".toolgate/out/x.log").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: ptr[int32](0),
				Artifact: "read_file .toolgate/out/x.log",
				Summary:  "[exit code: 0]\na\n",
			},
		},
		{
			name: "secrets in output and message are masked",
			exec: makeExecution("x").failed(v1.ErrorException, "pull https://bob:hunter22@git.example.com failed").exitCode(1).
				output("export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123\n").obj(),
			want: v1.Observation{
				Outcome: v1.OutcomeFailed, Executed: true, ExitCode: ptr[int32](1),
				Artifact: "the Execution x (no copy was kept)",
				Summary:  "[exit code: 1]\n[Exception] pull https://bob:[MASKED]@git.example.com failed\nexport GITHUB_TOKEN=[MASKED]\n",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := FromExecution(tc.exec, epoch)
			now := metav1.NewTime(epoch)
			want := tc.want
			want.ObservedAt = &now
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("FromExecution() mismatch (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(got.Summary, "[exit code: ") {
				t.Errorf("summary does not open with the exit code marker: %q", got.Summary)
			}
			if got.Truncated != strings.Contains(got.Summary, "[output truncated:") {
				t.Errorf("truncated=%v but the summary's notice disagrees: %q", got.Truncated, got.Summary)
			}
		})
	}
}
