//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

// mcpSDKVersion is the TypeScript MCP SDK the spec installs from the npm registry.
const mcpSDKVersion = "1.32.2"

// mcpClientDir holds the TypeScript SDK and the client script, installed once and
// cached in bin/.
func mcpClientDir(ctx context.Context) string {
	GinkgoHelper()
	dir := filepath.Join(testenv.RepoRoot(), "bin", "mcp-client-"+mcpSDKVersion)
	if _, err := exec.LookPath("npm"); err != nil {
		// Debian's Node.js and npm, where the machine has none.
		out, err := exec.CommandContext(ctx, "sh", "-c", "apt-get update -qq && apt-get install -y -qq nodejs npm").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "installing Node.js and npm: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"toolgate-e2e-mcp-client","private":true,"type":"module"}`), 0o644)).To(Succeed())
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "@modelcontextprotocol/sdk@"+mcpSDKVersion)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "npm install: %s", out)
	}
	script, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "test", "e2e", "mcpclient", "client.mjs"))
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "client.mjs"), script, 0o644)).To(Succeed())
	return dir
}

// portForward forwards a free local port to the manager's MCP Service until the
// spec ends, and returns the local address.
func portForward(ctx context.Context) string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	Expect(l.Close()).To(Succeed())
	pfCtx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(pfCtx, "kubectl", "port-forward", "-n", "toolgate-system", "svc/toolgate-mcp", fmt.Sprintf("%d:8090", port))
	stdout, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() { cancel(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	Expect(err).NotTo(HaveOccurred(), "kubectl port-forward")
	Expect(line).To(ContainSubstring("Forwarding from"))
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// mcpLine is one line the client script prints.
type mcpLine struct {
	ConnectError string         `json:"connectError"`
	Tools        []string       `json:"tools"`
	Call         string         `json:"call"`
	IsError      bool           `json:"isError"`
	Text         string         `json:"text"`
	Structured   map[string]any `json:"structured"`
	Progress     []string       `json:"progress"`
}

// runMCPClient runs the TypeScript client against url with token and calls.
func runMCPClient(ctx context.Context, dir, url, token string, calls []map[string]any) []mcpLine {
	GinkgoHelper()
	raw, err := json.Marshal(calls)
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MCP_URL="+url, "MCP_TOKEN="+token, "MCP_CALLS="+string(raw))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "node client.mjs: %s", stderr.String())
	var lines []mcpLine
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m mcpLine
		Expect(json.Unmarshal([]byte(l), &m)).To(Succeed(), l)
		lines = append(lines, m)
	}
	return lines
}

var _ = Describe("The MCP endpoint", func() {
	It("governs the calls of the TypeScript MCP SDK: lists the task's tools, runs an allowed call in the sandbox, refuses a denied one and a caller who is no proposer", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		dir := mcpClientDir(ctx)
		addr := portForward(ctx)

		cfg, err := config.GetConfig()
		Expect(err).NotTo(HaveOccurred())
		kube, err := kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		token := func(sa string) string {
			GinkgoHelper()
			_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}
		agentToken, strangerToken := token("coding-agent"), token("stranger")
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "agents", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-agent"},
			Subjects: []rbacv1.Subject{
				{Kind: rbacv1.ServiceAccountKind, Name: "coding-agent", Namespace: ns},
				{Kind: rbacv1.ServiceAccountKind, Name: "stranger", Namespace: ns},
			},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "mcp", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "no-network", Action: toolgatev1alpha1.RuleDeny, Reason: "No network calls from this task.",
				Match: toolgatev1alpha1.RuleMatch{Categories: []toolgatev1alpha1.CommandCategory{toolgatev1alpha1.CategoryNetwork}},
			}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: "mcp-task", Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal: "Answer questions about the workspace.", Mode: toolgatev1alpha1.ModeAuto,
				Workspace: toolgatev1alpha1.WorkspaceSpec{VolumeClaim: &toolgatev1alpha1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")}},
				Agent: toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "an MCP client",
					Proposers: toolgatev1alpha1.Proposers{ServiceAccounts: []toolgatev1alpha1.ServiceAccountReference{{Namespace: ns, Name: "coding-agent"}}}}},
				Budgets: toolgatev1alpha1.Budgets{MaxTurns: 20, MaxIntents: 20},
			},
		})).To(Succeed())
		url := "http://" + addr + "/mcp/" + ns + "/mcp-task"

		By("the proposer lists the tools, runs a command in the sandbox, is refused a network call, and is told a failing command failed")
		lines := runMCPClient(ctx, dir, url, agentToken, []map[string]any{
			{"name": "bash", "arguments": map[string]any{"command": "echo hello from mcp > greeting.txt; cat greeting.txt"}},
			{"name": "bash", "arguments": map[string]any{"command": "curl https://example.com"}},
			{"name": "bash", "arguments": map[string]any{"command": "echo about to fail; exit 3"}},
		})
		Expect(lines).To(HaveLen(4), "%+v", lines)
		Expect(lines[0].ConnectError).To(BeEmpty())
		Expect(lines[0].Tools).To(ContainElements("bash", "read_file", "write_file", "toolgate_wait"))
		Expect(lines[0].Tools).NotTo(ContainElement("git_push"))
		ran, denied := lines[1], lines[2]
		Expect(ran.IsError).To(BeFalse(), ran.Text)
		Expect(ran.Text).To(ContainSubstring("[exit code: 0]"))
		Expect(ran.Text).To(ContainSubstring("hello from mcp"))
		Expect(ran.Progress).To(ContainElement("observed: Succeeded"))
		Expect(denied.IsError).To(BeTrue(), denied.Text)
		Expect(denied.Text).To(ContainSubstring("[not executed]"))
		Expect(denied.Text).To(ContainSubstring("No network calls from this task."))
		Expect(denied.Structured["executed"]).To(BeFalse())
		failed := lines[3]
		Expect(failed.IsError).To(BeTrue(), "a command that exits non-zero is an error result: %s", failed.Text)
		Expect(failed.Text).To(ContainSubstring("[exit code: 3]"))
		Expect(failed.Structured["executed"]).To(BeTrue())

		By("the call is a ToolIntent requested by the service account, proposed over MCP")
		intent := &toolgatev1alpha1.ToolIntent{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ran.Structured["intentName"].(string)}, intent)).To(Succeed())
		Expect(intent.Spec.RequestedBy).To(Equal("system:serviceaccount:" + ns + ":coding-agent"))
		Expect(intent.Spec.ProposedBy.Provider).To(Equal("mcp"))
		Expect(intent.Spec.ProposedBy.Model).To(Equal("e2e-typescript-client"))
		Expect(intent.Status.ExecutionName).NotTo(BeEmpty())

		By("a caller who is no proposer, and a bad token, are refused saying why")
		lines = runMCPClient(ctx, dir, url, strangerToken, nil)
		Expect(lines).To(HaveLen(1))
		Expect(lines[0].ConnectError).To(ContainSubstring("stranger may not propose calls for AgentTask " + ns + "/mcp-task"))
		lines = runMCPClient(ctx, dir, url, "not-a-token", nil)
		Expect(lines).To(HaveLen(1))
		Expect(lines[0].ConnectError).To(ContainSubstring("the bearer token is not valid for this cluster"))
	}, NodeTimeout(10*time.Minute))
})
