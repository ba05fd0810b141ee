//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// The in-cluster PostgreSQL of config/archive, where `make deploy` points the
// controller (the Secret toolgate-archive).
const archivePod = "toolgate-archive-db-0"

// The archive on a real cluster: the calls of a demo-like task end up as rows in the
// PostgreSQL that config/default runs, through the Secret `make deploy` made.
var _ = Describe("The archive on a real cluster", func() {
	const task = "archived-task"
	var ns, me string

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim := newWorkspace(ctx, ns)
		me = whoAmI(ctx)
		seedWorkspace(ctx, ns, claim, map[string]string{
			"calc.sh": "echo $(($1 + $2))\n",
			"test.sh": "got=$(sh calc.sh 2 3)\n[ \"$got\" = 5 ] && echo PASS\n",
		})
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "archived", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{
				{
					Name: "no-recursive-delete", Action: toolgatev1alpha1.RuleDeny,
					Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("rm", "-rf")}},
					Reason: "Recursive deletes are never run by an agent.",
				},
				{
					Name: "run-tests", Action: toolgatev1alpha1.RuleAllow,
					Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "test.sh")}},
					Reason: "The test script only reads the workspace.",
				},
			}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: task, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal:      "Check that test.sh passes.",
				Mode:      toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Agent:     toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
			},
		})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			if CurrentSpecReport().Failed() {
				out, err := kubectl(ctx, "-n", controllerNamespace, "logs", archivePod, "--tail=200")
				AddReportEntry("PostgreSQL's log", fmt.Sprintf("%s\n%v", out, err))
			}
		}, NodeTimeout(time.Minute))
	})

	It("stores every observed call of a task, run or denied, labels its intent archived only once stored, and, once they left the cluster, traces the task from the archive", func(ctx SpecContext) {
		propose := func(turn int32, tool toolgatev1alpha1.ToolName, input map[string]any) *toolgatev1alpha1.ToolIntent {
			GinkgoHelper()
			raw, err := json.Marshal(input)
			Expect(err).NotTo(HaveOccurred())
			intent := &toolgatev1alpha1.ToolIntent{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-t%d-0", task, turn), Namespace: ns},
				Spec: toolgatev1alpha1.ToolIntentSpec{
					TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task},
					Turn:    turn, Index: 0, Tool: tool,
					Input:       runtime.RawExtension{Raw: raw},
					RequestedBy: me,
				},
			}
			Expect(k8s.Create(ctx, intent)).To(Succeed())
			return intent
		}

		By("running the test, reading the script, and a denied recursive delete")
		intents := []*toolgatev1alpha1.ToolIntent{
			observedIntent(ctx, propose(1, toolgatev1alpha1.ToolBash, map[string]any{"command": "sh test.sh"})),
			observedIntent(ctx, propose(2, toolgatev1alpha1.ToolReadFile, map[string]any{"path": "calc.sh"})),
			observedIntent(ctx, propose(3, toolgatev1alpha1.ToolBash, map[string]any{"command": "rm -rf /workspace"})),
		}
		Expect(intents[0].Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), intents[0].Status.Observation.Summary)
		Expect(intents[2].Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionDeny))

		By("waiting for the archive to hold each intent's record")
		// The first record may wait for PostgreSQL's first start (initdb) and the
		// schema's migrations, which the controller does not wait for at its own start.
		var uids []string
		for _, intent := range intents {
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
				out, err := kubectl(ctx, "-n", controllerNamespace, "exec", archivePod, "-c", "postgres", "--",
					"psql", "--no-psqlrc", "--tuples-only", "--no-align", "-c", fmt.Sprintf("SELECT count(*) FROM records WHERE uid = '%s'", intent.UID))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(strings.TrimSpace(out)).To(Equal("1"), "ToolIntent %s is not archived", intent.Name)
			}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
			uids = append(uids, string(intent.UID))
		}
		sort.Strings(uids)

		By("reading the rows in PostgreSQL itself: one per observed intent, under the intents' UIDs")
		Expect(archiveQuery(ctx, "SELECT count(*) FROM records WHERE kind = 'Call' AND namespace = '%s'", ns)).To(Equal(fmt.Sprint(len(intents))))
		rows := archiveQuery(ctx, "SELECT uid || ' ' || task || ' ' || name || ' ' || (body->'intent'->'status'->'decision'->>'action') FROM records WHERE kind = 'Call' AND namespace = '%s' ORDER BY uid", ns)
		var want []string
		byUID := map[string]*toolgatev1alpha1.ToolIntent{}
		for _, intent := range intents {
			byUID[string(intent.UID)] = intent
		}
		for _, uid := range uids {
			i := byUID[uid]
			want = append(want, fmt.Sprintf("%s %s %s %s", uid, task, i.Name, i.Status.Decision.Action))
		}
		Expect(strings.Split(rows, "\n")).To(Equal(want))

		By("ending the task, and reading its story")
		taskObj := &toolgatev1alpha1.AgentTask{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: task}, taskObj)).To(Succeed())
		patch := client.MergeFrom(taskObj.DeepCopy())
		taskObj.Spec.Lifecycle = toolgatev1alpha1.LifecycleDone
		Expect(k8s.Patch(ctx, taskObj, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(taskObj), taskObj)).To(Succeed())
			g.Expect(taskObj.Status.Phase).To(Equal(toolgatev1alpha1.TaskSucceeded))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		before := traceStory(ctx, ns, task)
		Expect(before).To(HaveLen(len(intents)))

		By("running the controller with a short retention, until the task and its calls left the cluster")
		shortRetention(ctx)
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(taskObj), &toolgatev1alpha1.AgentTask{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "AgentTask %s is still in the cluster (%v)", task, err)
			var left toolgatev1alpha1.ToolIntentList
			g.Expect(k8s.List(ctx, &left, client.InNamespace(ns))).To(Succeed())
			g.Expect(left.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(3 * time.Second).Should(Succeed())
		Expect(archiveQuery(ctx, "SELECT count(*) FROM records WHERE kind = 'Task' AND namespace = '%s'", ns)).To(Equal("1"))

		By("tracing the task from the archive: the same story")
		// The restarted controller made a new serving certificate for the archive's
		// API: the aggregator trusts it once it read the APIService again.
		Eventually(func(g Gomega) {
			g.Expect(traceStory(ctx, ns, task)).To(Equal(before))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(3 * time.Second).Should(Succeed())
	})
})

// traceStory is what `kubectl toolgate trace -o json` tells of a task: each call
// with its decision and what the model was told.
func traceStory(ctx context.Context, ns, task string) []string {
	GinkgoHelper()
	out, errOut, code := toolgateCLI(ctx, "trace", task, "-n", ns, "-o", "json")
	if code != 0 {
		return []string{fmt.Sprintf("kubectl toolgate trace exited %d: %s", code, errOut)}
	}
	var tr struct {
		Turns []struct {
			Intents []struct {
				Name     string `json:"name"`
				Decision *struct {
					Action string `json:"action"`
				} `json:"decision"`
				Observation *struct {
					Outcome string `json:"outcome"`
					Summary string `json:"summary"`
				} `json:"observation"`
			} `json:"intents"`
		} `json:"turns"`
	}
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		return []string{fmt.Sprintf("kubectl toolgate trace printed no trace (%v): %s", err, out)}
	}
	var story []string
	for _, turn := range tr.Turns {
		for _, in := range turn.Intents {
			line := in.Name
			if in.Decision != nil {
				line += " " + in.Decision.Action
			}
			if in.Observation != nil {
				line += " " + in.Observation.Outcome + ": " + in.Observation.Summary
			}
			story = append(story, line)
		}
	}
	return story
}

// shortRetention restarts the controller with finished calls and ended tasks kept
// ten seconds, and puts its arguments back when the spec ends.
func shortRetention(ctx context.Context) {
	GinkgoHelper()
	deploy := "deployment/" + controllerDeployment
	args, err := kubectl(ctx, "-n", controllerNamespace, "get", deploy, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	Expect(err).NotTo(HaveOccurred())
	restore := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/containers/0/args","value":%s}]`, args)
	DeferCleanup(func(ctx SpecContext) {
		_, err := kubectl(ctx, "-n", controllerNamespace, "patch", deploy, "--type=json", "-p", restore)
		Expect(err).NotTo(HaveOccurred())
		_, err = kubectl(ctx, "-n", controllerNamespace, "rollout", "status", deploy, "--timeout=3m")
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(4*time.Minute))
	_, err = kubectl(ctx, "-n", controllerNamespace, "patch", deploy, "--type=json", "-p",
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--call-retention=10s"},`+
			`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--task-ttl-after-finished=10s"}]`)
	Expect(err).NotTo(HaveOccurred())
	_, err = kubectl(ctx, "-n", controllerNamespace, "rollout", "status", deploy, "--timeout=3m")
	Expect(err).NotTo(HaveOccurred())
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// archiveQuery runs one SQL query with psql in the archive's pod, through its Unix
// socket (the NetworkPolicy admits only the controller over the network), and returns
// its unaligned rows. The query's %s is the namespace ns: a DNS label, which needs no
// quoting inside a SQL literal, as the check makes sure.
func archiveQuery(ctx context.Context, query, ns string) string {
	GinkgoHelper()
	Expect(ns).To(MatchRegexp(dnsLabel.String()))
	out, err := kubectl(ctx, "-n", controllerNamespace, "exec", archivePod, "-c", "postgres", "--",
		"psql", "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "--tuples-only", "--no-align", "-c", fmt.Sprintf(query, ns))
	Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(out)
}
