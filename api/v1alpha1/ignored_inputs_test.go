package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestIgnoredInputsAreRefusedAtCreate: each of these was accepted and then ignored,
// or failed only after the task ran: a tool name nothing registers (the task was left
// with no tools), a CIDR that is none (the Job of an approved call could not be
// built), a credentials reference naming no Secret (the clone ran without
// credentials), resource claims (never given to the sandbox), and a resources block
// without limits (the documented default limits dropped). Each is refused when the
// task is created, with a message that says what to write.
func TestIgnoredInputsAreRefusedAtCreate(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	task := func(name string, spec map[string]any) client.Object {
		base := map[string]any{
			"goal":      "x",
			"workspace": map[string]any{"existingClaim": "ws"},
			"agent":     map[string]any{"external": map[string]any{"proposers": map[string]any{"users": []any{"agent"}}}},
		}
		for k, v := range spec {
			base[k] = v
		}
		return unstructuredTask(ns, name, base)
	}
	gitWorkspace := func(git map[string]any) map[string]any {
		return map[string]any{"workspace": map[string]any{"volumeClaim": map[string]any{}, "git": git}}
	}
	allowList := func(cidr string) map[string]any {
		return map[string]any{"sandbox": map[string]any{"network": map[string]any{"mode": "AllowList", "egress": []any{map[string]any{"cidr": cidr}}}}}
	}
	resources := func(r map[string]any) map[string]any {
		return map[string]any{"sandbox": map[string]any{"resources": r}}
	}
	for i, tc := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"a tool name nothing registers", map[string]any{"tools": []any{"bash", "read_fil"}},
			`spec.tools[1]: Unsupported value: "read_fil": supported values: "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list_dir", "job_output", "job_list", "job_kill"`},
		{"the controller's own tool", map[string]any{"tools": []any{"git_push"}}, `spec.tools[0]: Unsupported value: "git_push"`},
		{"a CIDR that is none", allowList("not-a-cidr"),
			"spec.sandbox.network.egress[0].cidr: Invalid value: \"not-a-cidr\": must be a CIDR block such as 10.0.0.0/8 or fd00::/8"},
		{"an address without its prefix length", allowList("10.0.0.1"), "must be a CIDR block"},
		{"an address inside the block", allowList("10.0.0.1/8"), "the address the block's first (10.0.0.0/8, not 10.0.0.1/8)"},
		{"a clone credentials reference naming no Secret", gitWorkspace(map[string]any{"url": "https://example.com/r.git", "secretRef": map[string]any{}}),
			"spec.workspace.git.secretRef.name: Required value"},
		{"a push credentials reference naming no Secret", gitWorkspace(map[string]any{"url": "https://example.com/r.git",
			"push": map[string]any{"branch": "fix", "secretRef": map[string]any{"name": ""}}}),
			"spec.workspace.git.push.secretRef.name"},
		{"an API key reference naming no Secret", map[string]any{"agent": map[string]any{"model": map[string]any{
			"baseURL": "http://m", "model": "m", "apiKeySecretRef": map[string]any{"key": "token"}}}},
			"spec.agent.model.apiKeySecretRef.name must name the Secret that holds the API key"},
		{"resource claims", resources(map[string]any{
			"limits": map[string]any{"cpu": "1", "memory": "512Mi"}, "claims": []any{map[string]any{"name": "gpu"}}}),
			"spec.sandbox.resources.claims is not supported: a tool's sandbox gets no dynamically allocated resources; remove it"},
		{"requests without limits", resources(map[string]any{"requests": map[string]any{"cpu": "2"}}),
			"spec.sandbox.resources.limits must set both cpu and memory"},
		{"a CPU limit only", resources(map[string]any{"limits": map[string]any{"cpu": "2"}}),
			"spec.sandbox.resources.limits must set both cpu and memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireInvalid(t, env.Client.Create(ctx, task(fmt.Sprintf("bad-%d", i), tc.spec)), tc.want)
		})
	}

	// What is meant is still accepted.
	for i, spec := range []map[string]any{
		{"tools": []any{"bash", "read_file", "job_output"}},
		allowList("10.0.0.0/8"),
		allowList("fd00::/8"),
		gitWorkspace(map[string]any{"url": "https://example.com/r.git", "secretRef": map[string]any{"name": "creds"}}),
		resources(map[string]any{"limits": map[string]any{"cpu": "2", "memory": "1Gi"}}),
		resources(map[string]any{"requests": map[string]any{"cpu": "500m"}, "limits": map[string]any{"cpu": 2, "memory": "1Gi", "ephemeral-storage": "1Gi"}}),
	} {
		if err := env.Client.Create(ctx, task(fmt.Sprintf("ok-%d", i), spec)); err != nil {
			t.Errorf("%v refused: %v", spec, err)
		}
	}
}

func unstructuredTask(ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toolgate.dev/v1alpha1", "kind": "AgentTask",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}
