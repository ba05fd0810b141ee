package executor

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/workspace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testRunnerImage = "example.test/toolgate/runner:v1"

// execBuilder builds Executions for tests.
type execBuilder struct{ exec toolgatev1alpha1.Execution }

func makeExecution(name string) *execBuilder {
	return &execBuilder{exec: toolgatev1alpha1.Execution{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", Generation: 1},
		Spec: toolgatev1alpha1.ExecutionSpec{
			IntentRef:      toolgatev1alpha1.LocalObjectReference{Name: "fix-bug-t1-0"},
			TaskRef:        toolgatev1alpha1.LocalObjectReference{Name: "fix-bug"},
			Tool:           toolgatev1alpha1.ToolReadFile,
			Input:          runtime.RawExtension{Raw: []byte(`{"path":"README.md"}`)},
			TimeoutSeconds: 30,
			MaxOutputBytes: 1024,
			Sandbox: toolgatev1alpha1.SandboxProfile{
				Image:              "example.test/workspace:v1",
				WorkspaceClaimName: "fix-bug-workspace",
			},
		},
	}}
}

func (b *execBuilder) Tool(tool toolgatev1alpha1.ToolName, input string) *execBuilder {
	b.exec.Spec.Tool = tool
	b.exec.Spec.Input = runtime.RawExtension{Raw: []byte(input)}
	return b
}
func (b *execBuilder) ReadOnly() *execBuilder { b.exec.Spec.Sandbox.ReadOnlyWorkspace = true; return b }
func (b *execBuilder) RuntimeClass(name string) *execBuilder {
	b.exec.Spec.Sandbox.RuntimeClassName = &name
	return b
}
func (b *execBuilder) Timeout(seconds int32) *execBuilder {
	b.exec.Spec.TimeoutSeconds = seconds
	return b
}
func (b *execBuilder) MaxOutput(n int32) *execBuilder { b.exec.Spec.MaxOutputBytes = n; return b }
func (b *execBuilder) Env(name, value string) *execBuilder {
	b.exec.Spec.Env = append(b.exec.Spec.Env, toolgatev1alpha1.EnvVar{Name: name, Value: value})
	return b
}
func (b *execBuilder) Workdir(dir string) *execBuilder  { b.exec.Spec.Workdir = dir; return b }
func (b *execBuilder) Baseline(sha string) *execBuilder { b.exec.Spec.BaselineSHA256 = sha; return b }
func (b *execBuilder) Resources(r corev1.ResourceRequirements) *execBuilder {
	b.exec.Spec.Sandbox.Resources = toolgatev1alpha1.SandboxResources{Limits: r.Limits, Requests: r.Requests}
	return b
}
func (b *execBuilder) Network(n toolgatev1alpha1.NetworkSpec) *execBuilder {
	b.exec.Spec.Sandbox.Network = n
	return b
}
func (b *execBuilder) Obj() *toolgatev1alpha1.Execution { return b.exec.DeepCopy() }

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run the test with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs from the golden file (-want +got); if the change is intended, run with -update:\n%s", path, diff)
	}
}

func TestBuildJobGolden(t *testing.T) {
	tests := []struct {
		name string
		exec *toolgatev1alpha1.Execution
	}{
		{"read_file-readonly", makeExecution("fix-bug-t1-0").ReadOnly().Obj()},
		{"write_file", makeExecution("fix-bug-t2-0").
			Tool(toolgatev1alpha1.ToolWriteFile, `{"content":"hello\n","path":"notes.txt"}`).
			Baseline("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855").Obj()},
		{"bash", makeExecution("fix-bug-t3-0").
			Tool(toolgatev1alpha1.ToolBash, `{"command":"go test ./..."}`).
			Workdir("src").Timeout(600).MaxOutput(65536).
			Env("GOFLAGS", "-mod=mod").Env("CGO_ENABLED", "0").Obj()},
		{"bash-runtimeclass-resources", makeExecution("fix-bug-t3-1").
			Tool(toolgatev1alpha1.ToolBash, `{"command":"make"}`).
			RuntimeClass("gvisor").
			Resources(corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("2"),
				corev1.ResourceMemory: resource.MustParse("2Gi"),
			}}).Obj()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, err := BuildJob(tt.exec, testRunnerImage)
			if err != nil {
				t.Fatalf("BuildJob: %v", err)
			}
			out, err := yaml.Marshal(job)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "job-"+tt.name+".yaml", out)
		})
	}
}

func TestBuildNetworkPolicyGolden(t *testing.T) {
	tests := []struct {
		name string
		exec *toolgatev1alpha1.Execution
	}{
		{"none", makeExecution("fix-bug-t3-0").Tool(toolgatev1alpha1.ToolBash, `{"command":"ls"}`).Obj()},
		{"allowlist", makeExecution("fix-bug-t3-1").Tool(toolgatev1alpha1.ToolBash, `{"command":"go mod download"}`).
			Network(toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{
				{CIDR: "203.0.113.0/24", Ports: []int32{443, 80}},
				{CIDR: "198.51.100.7/32"},
			}, ClusterDNS: true}).Obj()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			np, err := BuildNetworkPolicy(tt.exec)
			if err != nil {
				t.Fatalf("BuildNetworkPolicy: %v", err)
			}
			out, err := yaml.Marshal(np)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "networkpolicy-"+tt.name+".yaml", out)
		})
	}
}

// TestBuildJobSandbox checks the security properties directly, so that a golden file
// rewritten by mistake cannot hide a weakened sandbox.
func TestBuildJobSandbox(t *testing.T) {
	for _, readOnly := range []bool{true, false} {
		b := makeExecution("e1").Tool(toolgatev1alpha1.ToolBash, `{"command":"true"}`).Timeout(45).Env("A", "b").
			Network(toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "10.0.0.0/8", Ports: []int32{443}}}, ClusterDNS: true})
		if readOnly {
			b.ReadOnly()
		}
		exec := b.Obj()
		job, err := BuildJob(exec, testRunnerImage)
		if err != nil {
			t.Fatal(err)
		}
		spec := job.Spec.Template.Spec
		checks := map[string]bool{
			"name is the Execution's":            job.Name == "e1" && job.Namespace == "team-a",
			"no retries":                         ptr.Deref(job.Spec.BackoffLimit, -1) == 0,
			"deadline is timeout plus grace":     ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) == 45+DeadlineGraceSeconds,
			"ttl set":                            job.Spec.TTLSecondsAfterFinished != nil,
			"restart never":                      spec.RestartPolicy == corev1.RestartPolicyNever,
			"no token":                           spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken,
			"no service links":                   spec.EnableServiceLinks != nil && !*spec.EnableServiceLinks,
			"non-root pod":                       ptr.Deref(spec.SecurityContext.RunAsNonRoot, false) && ptr.Deref(spec.SecurityContext.RunAsUser, 0) == SandboxUID && ptr.Deref(spec.SecurityContext.FSGroup, 0) == SandboxGID,
			"seccomp RuntimeDefault":             spec.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
			"pod selected by execution label":    job.Spec.Template.Labels[toolgatev1alpha1.LabelExecution] == "e1",
			"intent and task labels":             job.Labels[toolgatev1alpha1.LabelIntent] == "fix-bug-t1-0" && job.Labels[toolgatev1alpha1.LabelTask] == "fix-bug",
			"one init container from the runner": len(spec.InitContainers) == 1 && spec.InitContainers[0].Image == testRunnerImage,
			"tool container runs the runner":     len(spec.Containers) == 1 && spec.Containers[0].Command[0] == RunnerPath,
			"tool container uses sandbox image":  spec.Containers[0].Image == "example.test/workspace:v1",
			"termination message from file":      spec.Containers[0].TerminationMessagePolicy == corev1.TerminationMessageReadFile,
			"default resources when none":        spec.Containers[0].Resources.Limits.Memory().Cmp(resource.MustParse("512Mi")) == 0,
			"runtimeClass unset when none":       spec.RuntimeClassName == nil,
			"env is the invocation and the node's address": len(spec.Containers[0].Env) == 2 && spec.Containers[0].Env[0].Name == protocol.InvocationEnv &&
				spec.Containers[0].Env[1].Name == protocol.NodeIPEnv && spec.Containers[0].Env[1].ValueFrom.FieldRef.FieldPath == "status.hostIP",
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			sc := c.SecurityContext
			checks[c.Name+": no privilege escalation"] = sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
			checks[c.Name+": read-only root"] = sc != nil && ptr.Deref(sc.ReadOnlyRootFilesystem, false)
			checks[c.Name+": drop ALL"] = sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL" && len(sc.Capabilities.Add) == 0
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range spec.Containers[0].VolumeMounts {
			mounts[m.MountPath] = m
		}
		checks["workspace read-only matches the tool"] = mounts[workspace.Root].ReadOnly == readOnly
		checks["runner mounted read-only"] = mounts[RunnerDir].ReadOnly
		_, tmp := mounts[TmpDir]
		checks["writable /tmp"] = tmp && !mounts[TmpDir].ReadOnly
		for _, v := range spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				checks["workspace claim"] = v.PersistentVolumeClaim.ClaimName == "fix-bug-workspace" && v.PersistentVolumeClaim.ReadOnly == readOnly
			}
		}
		var inv protocol.Invocation
		if err := json.Unmarshal([]byte(spec.Containers[0].Env[0].Value), &inv); err != nil {
			t.Fatalf("invocation is not JSON: %v", err)
		}
		checks["invocation carries the spec"] = inv.ExecutionName == "e1" && inv.Tool == "bash" && string(inv.Input) == `{"command":"true"}` &&
			inv.TimeoutSeconds == 45 && inv.MaxOutputBytes == 1024 && inv.Env["A"] == "b"
		checks["invocation carries the walls"] = inv.Walls.ReadOnlyWorkspace == readOnly && inv.Walls.Network.Mode == toolgatev1alpha1.NetworkAllowList &&
			len(inv.Walls.Network.Egress) == 1 && inv.Walls.Network.Egress[0].CIDR == "10.0.0.0/8" && inv.Walls.Network.Egress[0].Ports[0] == 443 && inv.Walls.Network.ClusterDNS
		for name, ok := range checks {
			if !ok {
				t.Errorf("readOnly=%v: %s: not so", readOnly, name)
			}
		}
	}
}

func TestBuildJobDeterministic(t *testing.T) {
	exec := makeExecution("e1").Tool(toolgatev1alpha1.ToolBash, `{"command":"true"}`).
		Env("Z", "1").Env("A", "2").Env("M", "3").Obj()
	first, err := BuildJob(exec, testRunnerImage)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := BuildJob(exec, testRunnerImage)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			t.Fatalf("BuildJob is not deterministic (-first +again):\n%s", diff)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := []struct {
		name    string
		exec    *toolgatev1alpha1.Execution
		image   string
		wantErr string
	}{
		{"name too long for a Job", makeExecution(long).Obj(), testRunnerImage, "at most 63 characters"},
		{"name with a dot", makeExecution("a.b").Obj(), testRunnerImage, "metadata.name"},
		{"no runner image", makeExecution("e1").Obj(), "", "--runner-image"},
		{"no sandbox image", func() *toolgatev1alpha1.Execution {
			e := makeExecution("e1").Obj()
			e.Spec.Sandbox.Image = ""
			return e
		}(), testRunnerImage, "spec.sandbox.image"},
		{"no workspace", func() *toolgatev1alpha1.Execution {
			e := makeExecution("e1").Obj()
			e.Spec.Sandbox.WorkspaceClaimName = ""
			return e
		}(), testRunnerImage, "spec.sandbox.workspaceClaimName"},
		{"zero timeout", makeExecution("e1").Timeout(0).Obj(), testRunnerImage, "spec.timeoutSeconds"},
		{"input not JSON", makeExecution("e1").Tool(toolgatev1alpha1.ToolBash, `{"command":`).Obj(), testRunnerImage, "spec.input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildJob(tt.exec, tt.image)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("BuildJob error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}

	netTests := []struct {
		name    string
		network toolgatev1alpha1.NetworkSpec
		wantErr string
	}{
		{"egress without AllowList", toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}}, "only allowed with mode AllowList"},
		{"bad CIDR", toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}, {CIDR: "example.com"}}}, "egress[1].cidr"},
		{"cluster DNS without AllowList", toolgatev1alpha1.NetworkSpec{ClusterDNS: true}, "clusterDNS is true but network.mode"},
		{"unknown mode", toolgatev1alpha1.NetworkSpec{Mode: "Open"}, "spec.sandbox.network.mode"},
	}
	for _, tt := range netTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildNetworkPolicy(makeExecution("e1").Network(tt.network).Obj())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("BuildNetworkPolicy error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestNetworkPolicyDeniesByDefault(t *testing.T) {
	np, err := BuildNetworkPolicy(makeExecution("e1").Obj())
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Egress) != 0 || len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("default policy must deny all ingress and egress: %+v", np.Spec)
	}
	// It selects exactly the pods of the same network walls, which the Job's pod is.
	job, err := BuildJob(makeExecution("e1").Obj(), "runner:test")
	if err != nil {
		t.Fatal(err)
	}
	selector, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || selector.Empty() || !selector.Matches(labels.Set(job.Spec.Template.Labels)) {
		t.Errorf("policy selects %v, which does not select the Execution's pod %v (%v)", np.Spec.PodSelector.MatchLabels, job.Spec.Template.Labels, err)
	}
}

// TestNetworkPolicyPerWalls: the calls behind the same network walls share one
// NetworkPolicy, whatever their task; other walls get their own, and a policy of one
// network spec never selects a pod of another, either way (no policy widens another's
// rules, and none takes a pod out from under the deny-all).
func TestNetworkPolicyPerWalls(t *testing.T) {
	allow := toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}}
	a1, a2 := makeExecution("a1").Obj(), makeExecution("a2").Obj()
	aEgress := makeExecution("a3").Network(allow).Obj()
	other := makeExecution("b1").Obj()
	other.Spec.TaskRef.Name = "another-task"
	defaulted := makeExecution("a4").Network(toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone}).Obj()
	for _, same := range []*toolgatev1alpha1.Execution{a2, other, defaulted} {
		if NetworkPolicyName(a1) != NetworkPolicyName(same) || NetworkKey(a1) != NetworkKey(same) {
			t.Errorf("%s and %s run behind the same walls but get policies %s and %s", a1.Name, same.Name, NetworkPolicyName(a1), NetworkPolicyName(same))
		}
	}
	if NetworkPolicyName(a1) == NetworkPolicyName(aEgress) || NetworkKey(a1) == NetworkKey(aEgress) {
		t.Errorf("a call with egress shares the policy of a call without: %s", NetworkPolicyName(a1))
	}
	pods := map[string]*batchv1.Job{}
	policies := map[string]*networkingv1.NetworkPolicy{}
	for _, exec := range []*toolgatev1alpha1.Execution{a1, aEgress} {
		job, err := BuildJob(exec, "runner:test")
		if err != nil {
			t.Fatal(err)
		}
		np, err := BuildNetworkPolicy(exec)
		if err != nil {
			t.Fatal(err)
		}
		pods[exec.Name], policies[exec.Name] = job, np
	}
	for policyOf, np := range policies {
		selector, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		for podOf, job := range pods {
			if got := selector.Matches(labels.Set(job.Spec.Template.Labels)); got != (policyOf == podOf) {
				t.Errorf("the policy of %s selects the pod of %s: %t", policyOf, podOf, got)
			}
		}
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("x", 62) + "-" + "tail"
	if got := LabelValue(long); len(got) > 63 || strings.HasSuffix(got, "-") {
		t.Errorf("LabelValue(%q) = %q: not a valid label value", long, got)
	}
	if got := LabelValue("short"); got != "short" {
		t.Errorf("LabelValue(short) = %q", got)
	}
}
