//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolgate/toolgate/internal/testenv"
)

// readmeWalkthrough is the shell block under the README's "Governing one tool call
// by hand", line by line: the spec runs what the README says, so the two cannot
// drift.
func readmeWalkthrough() []string {
	GinkgoHelper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	Expect(err).NotTo(HaveOccurred())
	_, after, found := strings.Cut(string(b), "### Governing one tool call by hand\n")
	Expect(found).To(BeTrue(), "the README has no walk-through section")
	_, block, found := strings.Cut(after, "```sh\n")
	Expect(found).To(BeTrue(), "the walk-through has no shell block")
	block, _, found = strings.Cut(block, "```")
	Expect(found).To(BeTrue())
	return strings.Split(strings.TrimSpace(block), "\n")
}

var _ = Describe("The README's walk-through", func() {
	It("runs as written: a task cloned from a git server, a read allowed, an edit asked and approved, the trace and the diff", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		root := testenv.RepoRoot()
		// The reader's kubectl context, in the spec's namespace; kubectl and the
		// plugin from bin/, where the Makefile builds them.
		config := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		out, err := exec.CommandContext(ctx, "kubectl", "config", "view", "--raw", "--minify").Output()
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(config, out, 0o600)).To(Succeed())
		env := append(os.Environ(), "KUBECONFIG="+config, "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"))
		shell := func(line string) (string, error) {
			cmd := exec.CommandContext(ctx, "sh", "-c", line)
			cmd.Dir, cmd.Env = root, env
			b, err := cmd.CombinedOutput()
			return string(b), err
		}
		_, err = shell("kubectl config set-context --current --namespace=" + ns)
		Expect(err).NotTo(HaveOccurred())

		// What each step prints that the next one uses, or that says it did its part.
		expect := []struct{ command, output string }{
			{"kubectl apply -f config/samples/gitserver.yaml", "pod/git-server created"},
			{"kubectl wait --for=condition=Ready pod/git-server", "condition met"},
			{"kubectl apply -f config/samples/toolgate_v1alpha1_toolpolicy.yaml", "toolpolicy.toolgate.dev/project-defaults created"},
			{"kubectl apply -f config/samples/toolgate_v1alpha1_agenttask.yaml", "agenttask.toolgate.dev/fix-tests created"},
			{"kubectl wait --for=condition=Ready agenttask/fix-tests", "condition met"},
			{"kubectl toolgate propose fix-tests --tool read_file", "echo $(($1 - $2))"},
			{"kubectl toolgate propose fix-tests --tool edit_file", "created (task fix-tests"},
			{"kubectl wait --for=condition=AwaitingApproval", "condition met"},
			{"kubectl toolgate approvals", "ask-edits"},
			{"kubectl toolgate approve APPROVAL", "approved by alice"},
			{"kubectl wait --for=condition=Observed toolintents --all", "condition met"},
			{"kubectl toolgate trace fix-tests", "Approved by alice"},
			{"kubectl toolgate diff fix-tests", "+echo $(($1 + $2))"},
		}
		lines := readmeWalkthrough()
		Expect(lines).To(HaveLen(len(expect)), "the README's walk-through has %d lines, the spec knows %d: %q", len(lines), len(expect), lines)
		approval := ""
		name := regexp.MustCompile(`(?m)^(fix-tests-\S+)\s+fix-tests\s`)
		for i, line := range lines {
			Expect(line).To(HavePrefix(expect[i].command), "README walk-through line %d", i+1)
			By(line)
			if strings.Contains(line, "APPROVAL") {
				Expect(approval).NotTo(BeEmpty(), "no approval was listed before %q", line)
				line = strings.ReplaceAll(line, "APPROVAL", approval)
			}
			out, err := shell(line)
			Expect(err).NotTo(HaveOccurred(), "%s:\n%s", line, out)
			Expect(out).To(ContainSubstring(expect[i].output), "%s printed:\n%s", line, out)
			if m := name.FindStringSubmatch(out); strings.HasPrefix(line, "kubectl toolgate approvals") && m != nil {
				approval = m[1]
			}
		}
	})
})
