//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// The people and agents of the attacks, and what each is granted in the namespace.
const (
	// alice decides approvals, and every asking rule lists her.
	alice = "alice"
	// bob holds toolgate-approver too, but no rule lists him.
	bob = "bob"
	// rita is the tasks' proposer (toolgate-agent) and an approver whom the asking
	// rule lists: only the requester rule keeps her from approving her own calls.
	rita = "rita"
	// agentBot holds toolgate-agent and is no task's proposer.
	agentBot = "agent-bot"
	// pat holds a broad custom Role: patch approvals, create approvals and
	// executions, write statuses. Only admission stands between pat and those writes.
	pat = "pat"
	// olivia owns the tasks and the policy (toolgate-editor).
	olivia = "olivia"
	// vic reads (toolgate-viewer).
	vic = "vic"
	// eddie holds Kubernetes' built-in edit role, as everyone who works in a
	// namespace commonly does.
	eddie = "eddie"
)

// The deployed names of config/rbac's roles (config/default prefixes them).
const (
	roleAgent    = "toolgate-agent"
	roleApprover = "toolgate-approver"
	roleEditor   = "toolgate-editor"
	roleViewer   = "toolgate-viewer"
)

// Every attack of issue 14 on the real cluster, as users other than the admin: the
// API server's refusals on the Approval itself, then the holes the controller
// closes. Each attack checks that nothing ran (no Job, the workspace file the call
// would write is absent or unchanged) and that the refusal says why. The attacks
// share one namespace, its grants, workspace and policy; each has its own task, so
// that one task's budgets, cancellation or deletion touch no other attack.
var _ = Describe("attacks", Ordered, ContinueOnFailure, func() {
	var (
		ns, claim, elsewhere string
		clients              map[string]client.Client
		anyFailed            bool
	)
	as := func(user string) client.Client { return clients[user] }

	BeforeAll(func(ctx SpecContext) {
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-attacks-", Labels: map[string]string{"toolgate.dev/e2e": "true"}}}
		Expect(k8s.Create(ctx, nsObj)).To(Succeed())
		ns = nsObj.Name
		DeferCleanup(func(ctx SpecContext) {
			if anyFailed {
				GinkgoWriter.Printf("the namespace %s is kept for inspection\n", ns)
				return
			}
			Expect(k8s.Delete(ctx, nsObj)).To(Succeed())
		}, NodeTimeout(time.Minute))

		claim = newWorkspace(ctx, ns)
		// Another team's workspace in the same namespace, where a task owner would
		// like an approved call to run instead.
		other := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		Expect(k8s.Create(ctx, other)).To(Succeed())
		elsewhere = other.Name

		// Every script the calls run appends to the file its argument names (or a
		// file of its own), so a file that is absent afterwards is a call that did
		// not run.
		seedWorkspace(ctx, ns, claim, map[string]string{
			"mark.sh":    "printf 'ran\\n' >> \"$1\"\n",
			"approve.sh": "printf 'ran\\n' >> \"$1\"\n",
			"slow.sh":    "printf 'started\\n' >> slow.txt\nsleep 100\nprintf 'finished\\n' >> slow.txt\n",
			// The tool forges the runner's result: it writes a success into the
			// termination message, leaves two processes behind in sessions of their
			// own (setsid), one rewriting the forged success in a loop and one
			// writing a file a moment later, and exits 7.
			"forge.sh": `forged='{"exitCode":0,"message":"forged success","durationMs":1,"stdoutBytes":0,"stderrBytes":0,"uid":65532,"readOnlyRoot":true}'
printf '%s' "$forged" > /dev/termination-log
setsid sh -c 'while :; do printf "%s" "$1" > /dev/termination-log; done' forger "$forged" < /dev/null > /dev/null 2>&1 &
setsid sh -c 'sleep 5; printf "survived\n" >> forge-survivor.txt' < /dev/null > /dev/null 2>&1 &
echo the tool exits 7
exit 7
`,
			// The tool tries to keep the runner from writing its result: it makes the
			// termination message read-only (if it can), forges a success, exits 5.
			"forge-readonly.sh": `chmod 444 /dev/termination-log 2>/dev/null && echo made the termination message read-only || echo cannot change the termination message
printf '%s' '{"exitCode":0,"message":"forged success","durationMs":1,"stdoutBytes":0,"stderrBytes":0,"uid":65532,"readOnlyRoot":true}' > /dev/termination-log
exit 5
`,
		})

		By("granting the roles, as a cluster admin does")
		bindClusterRole(ctx, ns, "approvers", roleApprover, userSubject(alice), userSubject(bob), userSubject(rita))
		bindClusterRole(ctx, ns, "agents", roleAgent, userSubject(rita), userSubject(agentBot))
		bindClusterRole(ctx, ns, "task-owners", roleEditor, userSubject(olivia))
		bindClusterRole(ctx, ns, "viewers", roleViewer, userSubject(vic))
		bindClusterRole(ctx, ns, "namespace-editors", "edit", userSubject(eddie))
		// The controller's service account holds toolgate-approver here, so that the
		// only thing that stops it from deciding is the admission rule that names it
		// (without the binding, RBAC refuses it first: its role has no patch on
		// approvals).
		bindClusterRole(ctx, ns, "controller-as-approver", roleApprover,
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: controllerNamespace, Name: controllerDeployment})
		broad := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "broad", Namespace: ns},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{toolgatev1alpha1.GroupVersion.Group}, Resources: []string{"approvals", "executions", "toolintents"}, Verbs: []string{"get", "list", "create", "patch", "update"}},
				{APIGroups: []string{toolgatev1alpha1.GroupVersion.Group}, Resources: []string{"approvals/status", "executions/status", "toolintents/status"}, Verbs: []string{"get", "patch", "update"}},
			},
		}
		Expect(k8s.Create(ctx, broad)).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "broad", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: broad.Name},
			Subjects:   []rbacv1.Subject{userSubject(pat)},
		})).To(Succeed())
		const toolgate = "toolgate.dev"
		waitAllowed(ctx, ns,
			access{user: alice, verb: "approve", group: toolgate, resource: "approvals"},
			access{user: bob, verb: "approve", group: toolgate, resource: "approvals"},
			access{user: rita, verb: "approve", group: toolgate, resource: "approvals"},
			access{user: rita, verb: "create", group: toolgate, resource: "toolintents"},
			access{user: agentBot, verb: "create", group: toolgate, resource: "toolintents"},
			access{user: olivia, verb: "create", group: toolgate, resource: "agenttasks"},
			access{user: vic, verb: "get", group: toolgate, resource: "executions"},
			access{user: eddie, verb: "create", group: "networking.k8s.io", resource: "networkpolicies"},
			access{user: pat, verb: "create", group: toolgate, resource: "executions"},
			access{user: pat, verb: "patch", group: toolgate, resource: "approvals", subresource: "status"},
			access{user: controllerServiceAccount, groups: controllerGroups, verb: "approve", group: toolgate, resource: "approvals"},
		)
		clients = map[string]client.Client{}
		for _, user := range []string{alice, bob, rita, agentBot, pat, olivia, vic, eddie} {
			clients[user] = actingAs(user)
		}
		clients[controllerServiceAccount] = actingAs(controllerServiceAccount, controllerGroups...)

		By("the task owner writes the namespace's policy")
		Expect(as(olivia).Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "attacks", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{
				{
					Name: "run-scripts", Action: toolgatev1alpha1.RuleAllow,
					Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "mark.sh"), pattern("sh", "forge.sh"), pattern("sh", "forge-readonly.sh")}},
					Reason: "These scripts are reviewed.",
				},
				{
					Name: "ask-scripts", Action: toolgatev1alpha1.RuleAsk,
					Match:     toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "approve.sh"), pattern("sh", "slow.sh")}},
					Reason:    "A person approves these scripts.",
					Approvers: toolgatev1alpha1.Approvers{Users: []string{alice, rita}},
				},
				{
					Name: "ask-identity", Action: toolgatev1alpha1.RuleAsk,
					Match:     toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("id")}},
					Reason:    "Who the sandbox runs as is asked.",
					Approvers: toolgatev1alpha1.Approvers{Users: []string{alice}},
				},
			}},
		})).To(Succeed())
	}, NodeTimeout(5*time.Minute))

	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			anyFailed = true
			dumpNamespace(ctx, ns)
		}
	}, NodeTimeout(time.Minute))

	// newTask creates an external-agent task owned by olivia, in Edit mode on the
	// shared workspace, whose only proposer is rita.
	newTask := func(ctx SpecContext, name string, change ...func(*toolgatev1alpha1.AgentTaskSpec)) *toolgatev1alpha1.AgentTask {
		GinkgoHelper()
		task := &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal:      "Run the reviewed scripts.",
				Mode:      toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Agent: toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{
					Description: "rita's agent", Proposers: toolgatev1alpha1.Proposers{Users: []string{rita}},
				}},
			},
		}
		for _, f := range change {
			f(&task.Spec)
		}
		Expect(as(olivia).Create(ctx, task)).To(Succeed())
		return task
	}

	// propose creates the bash intent of the task's turn as user, who must be its
	// requester (admission checks that).
	propose := func(ctx SpecContext, user, task string, turn int32, command, reason string) *toolgatev1alpha1.ToolIntent {
		GinkgoHelper()
		raw, err := json.Marshal(map[string]string{"command": command})
		Expect(err).NotTo(HaveOccurred())
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: intentName(task, turn), Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task},
				Turn:    turn, Tool: toolgatev1alpha1.ToolBash,
				Input:       runtime.RawExtension{Raw: raw},
				Reason:      reason,
				RequestedBy: user,
			},
		}
		Expect(as(user).Create(ctx, intent)).To(Succeed())
		return intent
	}

	// pendingApproval waits until the intent waits for its Approval and returns the
	// Approval as reader reads it.
	pendingApproval := func(ctx SpecContext, reader client.Client, intent *toolgatev1alpha1.ToolIntent) *toolgatev1alpha1.Approval {
		GinkgoHelper()
		approval := &toolgatev1alpha1.Approval{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
			g.Expect(intent.Status.ApprovalName).NotTo(BeEmpty(), "intent %s asks for no approval: %v", intent.Name, intent.Status.Conditions)
			g.Expect(reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent.Status.ApprovalName}, approval)).To(Succeed())
			g.Expect(approval.Status.State).To(Equal(toolgatev1alpha1.ApprovalStatePending))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(intent.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionAsk))
		return approval
	}

	// decide appends a vote, as kubectl patch --type json with add /spec/votes/- does.
	decide := func(ctx SpecContext, c client.Client, approval *toolgatev1alpha1.Approval, decision toolgatev1alpha1.ApprovalDecision, user string) error {
		data, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/votes/-", "value": toolgatev1alpha1.ApprovalVote{User: user, Decision: decision}}})
		Expect(err).NotTo(HaveOccurred())
		return c.Patch(ctx, approval.DeepCopy(), client.RawPatch(types.JSONPatchType, data))
	}

	// nothingRan checks that no Job existed for the intent by its observation: the
	// controller writes the observation of a call that does not run in the
	// reconcile that would have started it, and an observed call is final.
	nothingRan := func(ctx SpecContext, intent string) {
		GinkgoHelper()
		observed := func() (bool, string) {
			got := &toolgatev1alpha1.ToolIntent{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent}, got); err != nil {
				return false, err.Error()
			}
			return got.Status.Observation != nil, fmt.Sprintf("%+v", got.Status.Conditions)
		}
		testenv.Absent(GinkgoT(), 2*time.Minute, "the observation of intent "+intent, observed, "a Job for intent "+intent, func() bool {
			return len(jobsOf(ctx, ns, intent)) > 0
		})
	}

	// stillWaits checks that no Job exists for an intent the controller recorded as
	// waiting for its Approval and not running: a call that waits has no observation
	// to wait for, so the moment is the recorded wait itself.
	stillWaits := func(ctx SpecContext, intent, approval string) {
		GinkgoHelper()
		Expect(approval).NotTo(BeEmpty(), "intent %s names no Approval", intent)
		testenv.Absent(GinkgoT(), 2*time.Minute, "intent "+intent+" waiting for Approval "+approval, func() (bool, string) {
			got := &toolgatev1alpha1.ToolIntent{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent}, got); err != nil {
				return false, err.Error()
			}
			return got.Status.ApprovalName == approval && got.Status.ExecutionName == "", got.Status.ApprovalName + " " + got.Status.ExecutionName
		}, "a Job for intent "+intent, func() bool { return len(jobsOf(ctx, ns, intent)) > 0 })
	}

	It("refuses every attack on the Approval itself, and accepts the rightful decision once", func(ctx SpecContext) {
		newTask(ctx, "approval")
		intent := propose(ctx, rita, "approval", 0, "sh approve.sh approved.txt", "")
		approval := pendingApproval(ctx, as(alice), intent)
		Expect(approval.Spec.RequestedBy).To(Equal(rita))
		Expect(approval.Spec.Approvers).NotTo(BeNil())
		Expect(approval.Spec.Approvers.Users).To(ConsistOf(alice, rita))

		By("a vote in another's name")
		expectForbidden(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionApproved, bob),
			"a vote must carry your own user name, which is alice (this one says bob).")
		By("an approver the rule does not list")
		expectForbidden(decide(ctx, as(bob), approval, toolgatev1alpha1.DecisionApproved, bob),
			"bob is not one of this approval's approvers (users: [")
		By("an agent")
		expectForbidden(decide(ctx, as(agentBot), approval, toolgatev1alpha1.DecisionApproved, agentBot),
			`User "agent-bot" cannot patch resource "approvals"`)
		By("the controller's service account")
		expectForbidden(decide(ctx, as(controllerServiceAccount), approval, toolgatev1alpha1.DecisionApproved, controllerServiceAccount),
			"the toolgate controller's service account can never vote on an approval; a person must.")
		By("a user who may patch approvals but does not hold the approve verb, and a namespace editor")
		expectForbidden(decide(ctx, as(pat), approval, toolgatev1alpha1.DecisionApproved, pat),
			"pat may not vote on approvals in namespace "+ns+": that needs the approve verb on approvals.toolgate.dev (the toolgate-approver role).")
		expectForbidden(decide(ctx, as(eddie), approval, toolgatev1alpha1.DecisionApproved, eddie),
			`User "eddie" cannot patch resource "approvals"`)
		By("the requester, who is a listed approver")
		expectForbidden(decide(ctx, as(rita), approval, toolgatev1alpha1.DecisionApproved, rita),
			"you requested this intent, and the requester never votes: other people must decide.")
		By("a changed fingerprint, alone and with a vote")
		otherFingerprint := strings.Repeat("0", 64)
		expectInvalid(mergePatch(ctx, as(alice), approval, map[string]any{"spec": map[string]any{"fingerprint": otherFingerprint}}),
			"only spec.votes of an Approval may change")
		expectInvalid(mergePatch(ctx, as(alice), approval, map[string]any{"spec": map[string]any{"fingerprint": otherFingerprint, "votes": []any{map[string]any{"user": alice, "decision": "Approved"}}}}),
			"only spec.votes of an Approval may change")
		By("a status write on the Approval")
		approvedStatus := map[string]any{"status": map[string]any{"state": "Approved"}}
		expectForbidden(mergePatchStatus(ctx, as(alice), approval, approvedStatus), `User "alice" cannot patch resource "approvals/status"`)
		expectForbidden(mergePatchStatus(ctx, as(pat), approval, approvedStatus), "only the toolgate controller writes the status of a Approval, and pat is not the controller.")

		By("an Execution created directly, for the waiting call")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
		forged, err := pipeline.BuildExecution(intent)
		Expect(err).NotTo(HaveOccurred())
		expectForbidden(as(agentBot).Create(ctx, forged.DeepCopy()), `User "agent-bot" cannot create resource "executions"`)
		expectForbidden(as(rita).Create(ctx, forged.DeepCopy()), `User "rita" cannot create resource "executions"`)
		expectForbidden(as(pat).Create(ctx, forged.DeepCopy()), "only the toolgate controller creates executions, and pat is not the controller.")

		By("an Approval created directly, naming approvers of one's choice")
		handMade := &toolgatev1alpha1.Approval{
			ObjectMeta: metav1.ObjectMeta{Name: "approval-t0-0-by-hand", Namespace: ns},
			Spec:       *approval.Spec.DeepCopy(),
		}
		handMade.Spec.Approvers = &toolgatev1alpha1.Approvers{Users: []string{pat}}
		expectForbidden(as(pat).Create(ctx, handMade.DeepCopy()), "only the toolgate controller creates approvals, and pat is not the controller.")
		expectForbidden(as(rita).Create(ctx, handMade.DeepCopy()), `User "rita" cannot create resource "approvals"`)

		By("an agent writing its intent's status: a decision of Allow")
		// Only the action changes: the forged status is one the schema accepts, so that
		// admission is what refuses it.
		allow := map[string]any{"status": map[string]any{"decision": map[string]any{"action": "Allow"}}}
		expectForbidden(mergePatchStatus(ctx, as(rita), intent, allow), `User "rita" cannot patch resource "toolintents/status"`)
		expectForbidden(mergePatchStatus(ctx, as(pat), intent, allow), "only the toolgate controller writes the status of a ToolIntent, and pat is not the controller.")

		By("nothing ran and nothing changed")
		// Every attack was refused by the API server; the call still waits for its
		// Approval, as the controller recorded before them.
		stillWaits(ctx, intent.Name, approval.Name)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(approval), approval)).To(Succeed())
		Expect(approval.Spec.Votes).To(BeEmpty())
		Expect(approval.Status.State).To(Equal(toolgatev1alpha1.ApprovalStatePending))
		Expect(approval.Spec.Fingerprint).To(Equal(intent.Status.Decision.Fingerprint))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
		Expect(intent.Status.ExecutionName).To(BeEmpty())
		Expect(intent.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionAsk))
		Expect(workspaceFiles(ctx, ns, claim, "approved.txt")).To(HaveKeyWithValue("approved.txt", absent))

		By("the rightful decision: alice, listed, not the requester")
		Expect(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionApproved, alice)).To(Succeed())
		intent = observedIntent(ctx, intent)
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), intent.Status.Observation.Summary)
		Expect(jobsOf(ctx, ns, intent.Name)).To(HaveLen(1))

		By("flipping the decision made")
		expectInvalid(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionDenied, alice),
			"spec.votes holds one vote per person: you already voted, and a vote is final")
		expectForbidden(decide(ctx, as(bob), approval, toolgatev1alpha1.DecisionDenied, bob),
			"this approval was already approved by alice (1 of 1 needed); a decision is final")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(approval), approval)).To(Succeed())
		Expect(approval.Spec.Votes).To(HaveLen(1))
		Expect(approval.Status.State).To(Equal(toolgatev1alpha1.ApprovalStateConsumed))
		Expect(workspaceFiles(ctx, ns, claim, "approved.txt")).To(HaveKeyWithValue("approved.txt", "ran\n"), "the approved call ran once")
	})

	It("1: runs nothing an agent who is not a task's proposer proposes into it; a proposer's call runs", func(ctx SpecContext) {
		newTask(ctx, "proposers", func(s *toolgatev1alpha1.AgentTaskSpec) {
			s.Agent.External.Proposers.Groups = []string{"reviewers"}
		})
		By("the outsider cannot pass for a proposer: the API server checks requestedBy and the groups claimed")
		impostor := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: intentName("proposers", 0), Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "proposers"}, Tool: toolgatev1alpha1.ToolBash,
				Input:       runtime.RawExtension{Raw: []byte(`{"command":"sh mark.sh outsider.txt"}`)},
				RequestedBy: rita,
			},
		}
		expectForbidden(as(agentBot).Create(ctx, impostor.DeepCopy()), "spec.requestedBy must be your user name, which is agent-bot (it was rita).")
		impostor.Spec.RequestedBy, impostor.Spec.RequestedByGroups = agentBot, []string{"reviewers"}
		expectForbidden(as(agentBot).Create(ctx, impostor.DeepCopy()), "spec.requestedByGroups: reviewers is not one of your groups")

		By("the outsider proposes as itself")
		outsider := propose(ctx, agentBot, "proposers", 0, "sh mark.sh outsider.txt", "")
		outsider = observedIntent(ctx, outsider)
		Expect(outsider.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeValidationFailed))
		Expect(outsider.Status.Observation.Executed).To(BeFalse())
		Expect(outsider.Status.Observation.Summary).To(ContainSubstring("agent-bot may not propose calls for AgentTask proposers; its proposers are users rita; groups reviewers"))
		validated := meta.FindStatusCondition(outsider.Status.Conditions, toolgatev1alpha1.ConditionValidated)
		Expect(validated).NotTo(BeNil())
		Expect(validated.Status).To(Equal(metav1.ConditionFalse))
		Expect(validated.Message).To(ContainSubstring("its proposers are users rita"))
		Expect(outsider.Status.Decision).To(BeNil())
		Expect(outsider.Status.ExecutionName).To(BeEmpty())
		nothingRan(ctx, outsider.Name)

		By("the proposer's call, allowed by the same rule, runs")
		proposer := observedIntent(ctx, propose(ctx, rita, "proposers", 1, "sh mark.sh proposer.txt", ""))
		Expect(proposer.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), proposer.Status.Observation.Summary)
		Expect(workspaceFiles(ctx, ns, claim, "outsider.txt", "proposer.txt")).To(Equal(map[string]string{"outsider.txt": absent, "proposer.txt": "ran\n"}))
	})

	It("2: runs an approved call in the sandbox it was decided for, whatever the task owner changes afterwards", func(ctx SpecContext) {
		newTask(ctx, "switch")
		intent := propose(ctx, rita, "switch", 0, "sh approve.sh switched.txt", "")
		approval := pendingApproval(ctx, as(alice), intent)
		Expect(approval.Spec.Request.Sandbox).NotTo(BeNil())
		Expect(approval.Spec.Request.Sandbox.Profile.WorkspaceClaimName).To(Equal(claim))
		Expect(approval.Spec.Request.Sandbox.Profile.Image).To(Equal(workspaceImage))
		Expect(approval.Spec.Request.Sandbox.Profile.Network.Mode).To(Equal(toolgatev1alpha1.NetworkNone))

		By("the task owner may not switch the workspace (a CRD rule), but switches the image and opens egress while the approval waits")
		task := &toolgatev1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "switch", Namespace: ns}}
		Expect(mergePatch(ctx, as(olivia), task, map[string]any{"spec": map[string]any{
			"workspace": map[string]any{"existingClaim": elsewhere},
		}})).To(MatchError(ContainSubstring("spec.workspace.existingClaim and spec.workspace.volumeClaim are immutable")))
		Expect(mergePatch(ctx, as(olivia), task, map[string]any{"spec": map[string]any{
			"sandbox": map[string]any{
				"image":   "toolgate/exfiltrate:dev",
				"network": map[string]any{"mode": "AllowList", "egress": []any{map[string]any{"cidr": "0.0.0.0/0"}}},
			},
		}})).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(task), task)).To(Succeed())
		Expect(task.Spec.Sandbox.Image).To(Equal("toolgate/exfiltrate:dev"))

		Expect(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionApproved, alice)).To(Succeed())
		intent = observedIntent(ctx, intent)
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), intent.Status.Observation.Summary)

		By("the Job's pod mounts the decided claim, runs the decided image, behind the deny-all NetworkPolicy")
		exec := executionOf(ctx, intent)
		var job batchv1.Job
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: executor.JobName(exec)}, &job)).To(Succeed())
		var claims []string
		for _, v := range job.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims = append(claims, v.PersistentVolumeClaim.ClaimName)
			}
		}
		Expect(claims).To(Equal([]string{claim}))
		var images []string
		for _, c := range job.Spec.Template.Spec.Containers {
			if c.Name == executor.ToolContainerName {
				images = append(images, c.Image)
			}
		}
		Expect(images).To(Equal([]string{workspaceImage}))
		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelExecution: exec.Name})).To(Succeed())
		Expect(pods.Items).NotTo(BeEmpty(), "the approved call's pod is gone")
		for _, pod := range pods.Items {
			for _, v := range pod.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					Expect(v.PersistentVolumeClaim.ClaimName).To(Equal(claim), "pod %s mounts another claim", pod.Name)
				}
			}
			for _, c := range pod.Spec.Containers {
				if c.Name == executor.ToolContainerName {
					Expect(c.Image).To(Equal(workspaceImage), "pod %s runs another image", pod.Name)
				}
			}
		}
		Expect(egressRules(ctx, exec)).To(BeEmpty(), "the approved call's NetworkPolicy allows egress the approver never saw")
		files := workspaceFiles(ctx, ns, claim, "switched.txt")
		Expect(files).To(HaveKeyWithValue("switched.txt", "ran\n"))
		Expect(workspaceFiles(ctx, ns, elsewhere, "switched.txt")).To(HaveKeyWithValue("switched.txt", absent), "the call wrote into the claim the owner switched to")
	})

	It("2: never runs an approval of a task that was deleted and created again under the same name", func(ctx SpecContext) {
		first := newTask(ctx, "recreated")
		intent := propose(ctx, rita, "recreated", 0, "sh approve.sh recreated.txt", "")
		approval := pendingApproval(ctx, as(alice), intent)
		oldUID := string(first.UID)

		By("the owner deletes the task, asking to keep its intents, and creates another of the same name on another workspace")
		Expect(as(olivia).Delete(ctx, first, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(first), &toolgatev1alpha1.AgentTask{}))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
		second := newTask(ctx, "recreated", func(s *toolgatev1alpha1.AgentTaskSpec) {
			s.Mode = toolgatev1alpha1.ModeAuto
			s.Workspace.ExistingClaim = elsewhere
			s.Sandbox.Network = toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "0.0.0.0/0"}}}
		})

		// The approver decides the old Approval if it is still there; whether the API
		// server takes the decision or not, it must not run the call in the new task.
		if err := decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionApproved, alice); err != nil {
			GinkgoWriter.Printf("the approval of the old task's call was not taken: %v\n", err)
		}

		// Three endings are sound. The old intent is gone with its Approval (the
		// collector removed it, as a plain deletion would). Or it outlived the first
		// task and ends Aborted: while the task was being deleted (a task being
		// deleted starts no call), or once the new task is there, naming both UIDs.
		// Either way nothing runs, in either workspace.
		var gone bool
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)
			if gone = apierrors.IsNotFound(err); gone {
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(meta.IsStatusConditionTrue(intent.Status.Conditions, toolgatev1alpha1.ConditionObserved)).To(BeTrue(),
				"ToolIntent %s is neither gone nor Observed: %v", intent.Name, intent.Status.Conditions)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		if gone {
			GinkgoWriter.Printf("the old task's intent %s was deleted with it\n", intent.Name)
			Eventually(func() bool {
				return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(approval), &toolgatev1alpha1.Approval{}))
			}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "the old task's Approval outlived its intent")
		} else {
			GinkgoWriter.Printf("the old task's intent %s outlived it and was observed\n", intent.Name)
			Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeAborted), intent.Status.Observation.Summary)
			Expect(intent.Status.Observation.Executed).To(BeFalse())
			if summary := intent.Status.Observation.Summary; !strings.Contains(summary, "ended before this call ran (it is being deleted)") {
				Expect(summary).To(ContainSubstring("deleted and created again"))
				Expect(summary).To(ContainSubstring(oldUID))
				Expect(summary).To(ContainSubstring(string(second.UID)))
			}
			Expect(intent.Status.ExecutionName).To(BeEmpty())
		}
		nothingRan(ctx, intent.Name)
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent.Name}, &toolgatev1alpha1.Execution{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "an Execution exists for the old task's call (%v)", err)
		Expect(workspaceFiles(ctx, ns, elsewhere, "recreated.txt")).To(HaveKeyWithValue("recreated.txt", absent))
		Expect(workspaceFiles(ctx, ns, claim, "recreated.txt")).To(HaveKeyWithValue("recreated.txt", absent))
	})

	It("3: denies an approved call that an emergency ClusterToolPolicy Deny, added while it waited, matches", func(ctx SpecContext) {
		newTask(ctx, "frozen")
		intent := propose(ctx, rita, "frozen", 0, "sh approve.sh frozen.txt", "")
		approval := pendingApproval(ctx, as(alice), intent)

		By("the cluster admin freezes changes while the approval waits")
		// Cluster-wide: its rule matches only this spec's command.
		freeze := &toolgatev1alpha1.ClusterToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-freeze"},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "change-freeze", Action: toolgatev1alpha1.RuleDeny,
				Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "approve.sh", "frozen.txt")}},
				Reason: "Change freeze: nothing changes the workspace.",
			}}},
		}
		Expect(k8s.Create(ctx, freeze)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, freeze)).To(Succeed()) }, NodeTimeout(time.Minute))

		Expect(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionApproved, alice)).To(Succeed())
		intent = observedIntent(ctx, intent)
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeDenied), intent.Status.Observation.Summary)
		Expect(intent.Status.Observation.Executed).To(BeFalse())
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("ClusterToolPolicy/" + freeze.Name + "/change-freeze"))
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("Change freeze"))
		decided := meta.FindStatusCondition(intent.Status.Conditions, toolgatev1alpha1.ConditionDecided)
		Expect(decided).NotTo(BeNil())
		Expect(decided.Reason).To(Equal(toolgatev1alpha1.ReasonRedecided))
		Expect(decided.Message).To(ContainSubstring("ClusterToolPolicy/" + freeze.Name))
		Expect(intent.Status.ExecutionName).To(BeEmpty())
		Expect(warningNotes(ctx, ns, "ToolIntent", intent.Name, toolintent.EventRedecided)).To(ContainElement(ContainSubstring("ClusterToolPolicy/" + freeze.Name)))
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(approval), approval)).To(Succeed())
			g.Expect(approval.Status.State).To(Equal(toolgatev1alpha1.ApprovalStateSuperseded))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		nothingRan(ctx, intent.Name)

		By("an allowed call held for a sibling that waits for a human, when the freeze is widened to it")
		proposeIndex := func(index int32, command string) *toolgatev1alpha1.ToolIntent {
			GinkgoHelper()
			raw, err := json.Marshal(map[string]string{"command": command})
			Expect(err).NotTo(HaveOccurred())
			i := &toolgatev1alpha1.ToolIntent{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("frozen-t1-%d", index), Namespace: ns},
				Spec: toolgatev1alpha1.ToolIntentSpec{
					// The turn announces both calls, so the first is held for the second
					// however soon it is decided (without turnCalls, a turn is what exists).
					TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "frozen"}, Turn: 1, Index: index, TurnCalls: 2, Tool: toolgatev1alpha1.ToolBash,
					Input: runtime.RawExtension{Raw: raw}, RequestedBy: rita,
				},
			}
			Expect(as(rita).Create(ctx, i)).To(Succeed())
			return i
		}
		held := proposeIndex(0, "sh mark.sh held.txt")
		sibling := proposeIndex(1, "sh approve.sh sibling.txt")
		siblingApproval := pendingApproval(ctx, as(alice), sibling)
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
			executed := meta.FindStatusCondition(held.Status.Conditions, toolgatev1alpha1.ConditionExecuted)
			g.Expect(executed).NotTo(BeNil())
			g.Expect(executed.Reason).To(Equal(toolgatev1alpha1.ReasonWaitingForSiblings))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(held.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionAllow))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(freeze), freeze)).To(Succeed())
		freeze.Spec.Rules = append(freeze.Spec.Rules, toolgatev1alpha1.PolicyRule{
			Name: "freeze-held", Action: toolgatev1alpha1.RuleDeny,
			Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "mark.sh", "held.txt")}},
			Reason: "Change freeze: not even reviewed scripts.",
		})
		Expect(k8s.Update(ctx, freeze)).To(Succeed())
		Expect(decide(ctx, as(alice), siblingApproval, toolgatev1alpha1.DecisionApproved, alice)).To(Succeed())
		held = observedIntent(ctx, held)
		Expect(held.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeDenied), held.Status.Observation.Summary)
		Expect(held.Status.Observation.Executed).To(BeFalse())
		Expect(held.Status.Observation.Summary).To(ContainSubstring("ClusterToolPolicy/" + freeze.Name + "/freeze-held"))
		Expect(held.Status.ExecutionName).To(BeEmpty())
		sibling = observedIntent(ctx, sibling)
		Expect(sibling.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), sibling.Status.Observation.Summary)
		nothingRan(ctx, held.Name)
		Expect(workspaceFiles(ctx, ns, claim, "frozen.txt", "held.txt", "sibling.txt")).To(Equal(map[string]string{
			"frozen.txt": absent, "held.txt": absent, "sibling.txt": "ran\n",
		}))
	})

	It("4: does not honour an approval decided after it expired", func(ctx SpecContext) {
		newTask(ctx, "ttl", func(s *toolgatev1alpha1.AgentTaskSpec) { s.Budgets.ApprovalTTLSeconds = 10 })
		intent := propose(ctx, rita, "ttl", 0, "sh approve.sh late.txt", "")
		approval := pendingApproval(ctx, as(alice), intent)

		By("alice decides just after expiresAt, before or after the controller notices the expiry")
		time.Sleep(time.Until(approval.Spec.ExpiresAt.Time) + 200*time.Millisecond)
		if err := decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionApproved, alice); err != nil {
			GinkgoWriter.Printf("the API server refused the late decision: %v\n", err)
		} else {
			GinkgoWriter.Printf("the API server took the late decision; the controller must not honour it\n")
		}
		intent = observedIntent(ctx, intent)
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeApprovalExpired), intent.Status.Observation.Summary)
		Expect(intent.Status.Observation.Executed).To(BeFalse())
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("expired"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(approval), approval)).To(Succeed())
		Expect(approval.Status.State).To(Equal(toolgatev1alpha1.ApprovalStateExpired))
		// Which of the two the message says depends on whether the controller saw the
		// expiry or the late decision first; either way it expired.
		Expect(approval.Status.Message).To(Or(ContainSubstring("nobody decided before"), ContainSubstring("a late decision does not count")))
		Expect(approval.Status.ConsumedByExecutionName).To(BeEmpty())
		Expect(intent.Status.ExecutionName).To(BeEmpty())
		nothingRan(ctx, intent.Name)
		Expect(workspaceFiles(ctx, ns, claim, "late.txt")).To(HaveKeyWithValue("late.txt", absent))
	})

	It("5: runs no Execution created directly: the API server refuses a user, the chain check the admin", func(ctx SpecContext) {
		newTask(ctx, "direct")
		intent := propose(ctx, rita, "direct", 0, "sh approve.sh direct.txt", "")
		pendingApproval(ctx, as(alice), intent)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())

		// The Execution the controller would make once the call is approved, under
		// another name, owned by the waiting intent, naming its Approval: everything
		// but the consumed approval.
		forged, err := pipeline.BuildExecution(intent)
		Expect(err).NotTo(HaveOccurred())
		forged.Name = "direct-skips-the-approval"
		yes := true
		forged.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolIntent", Name: intent.Name, UID: intent.UID,
			Controller: &yes, BlockOwnerDeletion: &yes,
		}}

		By("a user, even with a Role that allows creating Executions, is refused by the API server")
		expectForbidden(as(pat).Create(ctx, forged.DeepCopy()), "only the toolgate controller creates executions, and pat is not the controller.")
		expectForbidden(as(eddie).Create(ctx, forged.DeepCopy()), `User "eddie" cannot create resource "executions"`)

		By("the admin, past admission, gets no Job: the chain check refuses it")
		admin := asMastersAdmin(ctx)
		Expect(admin.Create(ctx, forged)).To(Succeed())
		unowned := forged.DeepCopy()
		unowned.ObjectMeta = metav1.ObjectMeta{Name: "direct-owned-by-nobody", Namespace: ns}
		Expect(admin.Create(ctx, unowned)).To(Succeed())
		for _, e := range []struct {
			exec *toolgatev1alpha1.Execution
			why  string
		}{
			{forged, "not consumed by Execution direct-skips-the-approval"},
			{unowned, "is not controlled by a ToolIntent"},
		} {
			exec := e.exec
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(exec), exec)).To(Succeed())
				g.Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
			}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
			Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException))
			Expect(exec.Status.Message).To(ContainSubstring(e.why))
			Expect(exec.Status.JobName).To(BeEmpty())
			Expect(warningNotes(ctx, ns, "Execution", exec.Name, controller.EventChainBroken)).To(ContainElement(ContainSubstring(e.why)))
			var jobs batchv1.JobList
			Expect(k8s.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelExecution: exec.Name})).To(Succeed())
			Expect(jobs.Items).To(BeEmpty())
		}
		stillWaits(ctx, intent.Name, intent.Status.ApprovalName)
		Expect(workspaceFiles(ctx, ns, claim, "direct.txt")).To(HaveKeyWithValue("direct.txt", absent))

		By("the admin replays a call that ran, as a copy of its Execution")
		ran := observedIntent(ctx, propose(ctx, rita, "direct", 1, "sh mark.sh replayed.txt", ""))
		Expect(ran.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), ran.Status.Observation.Summary)
		original := executionOf(ctx, ran)
		replay := &toolgatev1alpha1.Execution{
			ObjectMeta: metav1.ObjectMeta{Name: original.Name + "-again", Namespace: ns, OwnerReferences: original.OwnerReferences},
			Spec:       *original.Spec.DeepCopy(),
		}
		Expect(admin.Create(ctx, replay)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(replay), replay)).To(Succeed())
			g.Expect(replay.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(replay.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException))
		Expect(replay.Status.Message).To(ContainSubstring("ran its call as Execution " + original.Name + ", not " + replay.Name + "; an intent runs once"))
		Expect(warningNotes(ctx, ns, "Execution", replay.Name, controller.EventChainBroken)).To(ContainElement(ContainSubstring("an intent runs once")))
		Expect(jobsOf(ctx, ns, ran.Name)).To(HaveLen(1), "the replayed call got a Job")
		Expect(workspaceFiles(ctx, ns, claim, "replayed.txt")).To(HaveKeyWithValue("replayed.txt", "ran\n"), "the call ran more than once")
	})

	It("6: records the tool's real result, not the one it forged in the termination message", func(ctx SpecContext) {
		newTask(ctx, "forge")
		intent := observedIntent(ctx, propose(ctx, rita, "forge", 0, "sh forge.sh", ""))
		finished := time.Now()
		Expect(intent.Status.Decision.PolicyRuleRef.Rule).To(Equal("run-scripts"))
		exec := executionOf(ctx, intent)
		Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed), "the forged success was recorded: %+v", exec.Status)
		Expect(exitCode(exec)).To(Equal(int32(7)))
		Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorExitCode))
		Expect(exec.Status.Message).NotTo(ContainSubstring("forged"))
		Expect(exec.Status.Output).To(ContainSubstring("the tool exits 7"))
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeFailed))
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("[exit code: 7]"))
		Expect(intent.Status.Observation.Summary).NotTo(ContainSubstring("forged success"))

		By("the termination message the kubelet kept is the runner's result, not the forgery")
		pod := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: exec.Status.PodName}, pod)).To(Succeed())
		var terminated *corev1.ContainerStateTerminated
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == executor.ToolContainerName {
				terminated = cs.State.Terminated
			}
		}
		Expect(terminated).NotTo(BeNil(), "the tool container of pod %s did not terminate", pod.Name)
		Expect(terminated.ExitCode).To(Equal(int32(protocol.ExitFailed)), "the runner did not exit as one that wrote a failure")
		var result protocol.Result
		Expect(json.Unmarshal([]byte(terminated.Message), &result)).To(Succeed(), "termination message %q", terminated.Message)
		Expect(result.ExitCode).To(Equal(7))
		Expect(result.Message).NotTo(ContainSubstring("forged"))

		By("the processes the tool left behind did not outlive the call")
		time.Sleep(time.Until(finished.Add(6 * time.Second)))
		Expect(workspaceFiles(ctx, ns, claim, "forge-survivor.txt")).To(HaveKeyWithValue("forge-survivor.txt", absent))

		By("a tool that forges a success and tries to keep the runner from writing over it")
		readOnly := observedIntent(ctx, propose(ctx, rita, "forge", 1, "sh forge-readonly.sh", ""))
		exec = executionOf(ctx, readOnly)
		Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed), "the forged success was recorded: %+v", exec.Status)
		// The runner either wrote over the forgery (the tool may not change the
		// file's mode) and reports exit code 5, or could not write and the controller
		// refuses whatever the termination message holds.
		Expect(exec.Status.ErrorKind).To(BeElementOf(toolgatev1alpha1.ErrorExitCode, toolgatev1alpha1.ErrorException))
		if exec.Status.ErrorKind == toolgatev1alpha1.ErrorExitCode {
			Expect(exitCode(exec)).To(Equal(int32(5)))
		}
		Expect(exec.Status.Message).NotTo(ContainSubstring("forged"))
		Expect(readOnly.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeFailed))
		Expect(readOnly.Status.Observation.Summary).NotTo(ContainSubstring("forged success"))
		GinkgoWriter.Printf("the read-only forgery ended %s: %s\n", exec.Status.ErrorKind, exec.Status.Output)
	})

	It("7: stops an approved call that is running when its task is cancelled", func(ctx SpecContext) {
		newTask(ctx, "cancel")
		intent := propose(ctx, rita, "cancel", 0, "sh slow.sh", "")
		approval := pendingApproval(ctx, as(alice), intent)
		Expect(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionApproved, alice)).To(Succeed())
		exec := &toolgatev1alpha1.Execution{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent.Name}, exec)).To(Succeed())
			g.Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionRunning))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		// The tool has started once it wrote its first line.
		Eventually(func() map[string]string {
			return workspaceFiles(ctx, ns, claim, "slow.txt")
		}).WithContext(ctx).WithTimeout(time.Minute).Should(HaveKeyWithValue("slow.txt", "started\n"))

		By("the task owner cancels the task")
		task := &toolgatev1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "cancel", Namespace: ns}}
		Expect(mergePatch(ctx, as(olivia), task, map[string]any{"spec": map[string]any{"lifecycle": "Cancelled"}})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(exec), exec)).To(Succeed())
			g.Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorAborted), "Execution %s: %+v", exec.Name, exec.Status)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: executor.JobName(exec)}, &batchv1.Job{}))
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeTrue(), "the cancelled call's Job is still there")
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelExecution: exec.Name})).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "the cancelled call's pod still runs")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		intent = observedIntent(ctx, intent)
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeAborted), intent.Status.Observation.Summary)
		Expect(intent.Status.Observation.Executed).To(BeTrue())
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("[aborted: the execution was stopped before it finished"))
		Expect(workspaceFiles(ctx, ns, claim, "slow.txt")).To(HaveKeyWithValue("slow.txt", "started\n"), "the cancelled call finished")
	})

	It("8: runs nothing behind a NetworkPolicy, and reads no Job, that a namespace editor planted under the name of the call's fence or Job", func(ctx SpecContext) {
		newTask(ctx, "innocent")
		// The namespace's NetworkPolicy for calls without network, which the call runs behind.
		name := executor.NetworkPolicyName(&toolgatev1alpha1.Execution{Spec: toolgatev1alpha1.ExecutionSpec{
			TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "innocent"},
			Sandbox: toolgatev1alpha1.SandboxProfile{Network: toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone}},
		}})
		By("eddie, with the built-in edit role, makes the call's fence select nothing: he plants it, or changes the one earlier calls made")
		decoy := &networkingv1.NetworkPolicy{}
		selectsNothing := networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"selects": "nothing"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		}
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, decoy)
		if apierrors.IsNotFound(err) {
			decoy = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: selectsNothing}
			Expect(as(eddie).Create(ctx, decoy)).To(Succeed())
		} else {
			Expect(err).To(Succeed())
			decoy.Spec = selectsNothing
			Expect(as(eddie).Update(ctx, decoy)).To(Succeed())
		}

		intent := observedIntent(ctx, propose(ctx, rita, "innocent", 0, "sh mark.sh fenced.txt", ""))
		Expect(intent.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionAllow))
		exec := executionOf(ctx, intent)
		Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException))
		Expect(exec.Status.Message).To(ContainSubstring("NetworkPolicy " + name + " in namespace " + ns + " is not the one toolgate makes for these network walls"))
		Expect(exec.Status.JobName).To(BeEmpty())
		Expect(warningNotes(ctx, ns, "Execution", exec.Name, toolintent.EventObjectInTheWay)).To(ContainElement(ContainSubstring("NetworkPolicy " + name)))
		Expect(intent.Status.Observation.Outcome).NotTo(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("NetworkPolicy " + name))
		nothingRan(ctx, intent.Name)
		Expect(workspaceFiles(ctx, ns, claim, "fenced.txt")).To(HaveKeyWithValue("fenced.txt", absent))

		By("eddie takes the decoy away, and plants a Job under the next call's name, labelled like the Execution's, whose pod reports a success")
		Expect(as(eddie).Delete(ctx, decoy)).To(Succeed())
		jobName := intentName("innocent", 1)
		pod := workspacePod(ns, claim, "", []string{"sh", "-c", `printf '%s' '{"exitCode":0,"message":"planted success","durationMs":1,"stdoutBytes":0,"stderrBytes":0,"uid":65532,"readOnlyRoot":true}' > /dev/termination-log`}, true)
		pod.Spec.Containers[0].Name = executor.ToolContainerName
		labels := map[string]string{toolgatev1alpha1.LabelExecution: jobName, toolgatev1alpha1.LabelIntent: jobName, toolgatev1alpha1.LabelTask: "innocent"}
		planted := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: ns, Labels: labels},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0),
				Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
			},
		}
		Expect(as(eddie).Create(ctx, planted)).To(Succeed())
		jobbed := observedIntent(ctx, propose(ctx, rita, "innocent", 1, "sh mark.sh jobbed.txt", ""))
		exec = executionOf(ctx, jobbed)
		Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException))
		Expect(exec.Status.Message).To(ContainSubstring("a Job named " + jobName + " already exists in namespace " + ns + " and is not this Execution's"))
		Expect(exec.Status.ExitCode).To(BeNil(), "the planted Job's result was read as the call's")
		Expect(exec.Status.Message).NotTo(ContainSubstring("planted success"))
		Expect(warningNotes(ctx, ns, "Execution", exec.Name, toolintent.EventObjectInTheWay)).To(ContainElement(ContainSubstring("a Job named " + jobName)))
		Expect(jobbed.Status.Observation.Outcome).NotTo(Equal(toolgatev1alpha1.OutcomeSucceeded))
		for _, job := range jobsOf(ctx, ns, jobbed.Name) {
			Expect(metav1.IsControlledBy(&job, exec)).To(BeFalse(), "a Job of the refused Execution exists: %s", job.Name)
		}
		Expect(workspaceFiles(ctx, ns, claim, "jobbed.txt")).To(HaveKeyWithValue("jobbed.txt", absent))
	})

	It("9: shows the approver what runs with the agent's escapes escaped, and masks a printed secret for a viewer", func(ctx SpecContext) {
		newTask(ctx, "display")
		const reason = "tidy up\x1b[2K\r\u202eharmless"
		intent := propose(ctx, rita, "display", 0, "echo password=$(id)", reason)
		By("alice reads the Approval with her own identity")
		approval := pendingApproval(ctx, as(alice), intent)
		Expect(approval.Spec.Request.PolicyRuleRef.Rule).To(Equal("ask-identity"))
		Expect(approval.Spec.Request.Input).To(ContainSubstring("password=$(id)"))
		for _, raw := range []string{"\x1b", "\r", "\u202e"} {
			Expect(approval.Spec.Request.ProposerReason).NotTo(ContainSubstring(raw))
		}
		Expect(approval.Spec.Request.ProposerReason).To(ContainSubstring(`\x1b[2K`))
		Expect(approval.Spec.Request.ProposerReason).To(ContainSubstring(`\u202e`))
		Expect(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionDenied, alice)).To(Succeed())
		denied := observedIntent(ctx, intent)
		Expect(denied.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeApprovalDenied))
		nothingRan(ctx, intent.Name)

		By("vic, a viewer, reads the output of a call that printed a secret")
		printed := observedIntent(ctx, propose(ctx, rita, "display", 1, "echo token=hunter2secret", ""))
		Expect(printed.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), printed.Status.Observation.Summary)
		exec := &toolgatev1alpha1.Execution{}
		Expect(as(vic).Get(ctx, client.ObjectKey{Namespace: ns, Name: printed.Status.ExecutionName}, exec)).To(Succeed())
		Expect(exec.Status.Output).To(ContainSubstring("token=[MASKED]"))
		Expect(exec.Status.Output).NotTo(ContainSubstring("hunter2secret"))
		Expect(printed.Status.Observation.Summary).NotTo(ContainSubstring("hunter2secret"))
	})

	It("9: shows the approver a command hidden in a variable whose name looks like a secret's", func(ctx SpecContext) {
		// The variable's value is not a secret but the program the call runs: masking
		// it would hide an executable part of the call from the approver.
		newTask(ctx, "hidden")
		intent := propose(ctx, rita, "hidden", 0, "run_token=uname; $run_token -a", "")
		approval := pendingApproval(ctx, as(alice), intent)
		Expect(approval.Spec.Request.Input).To(ContainSubstring("uname"),
			"HOLE (issue 14, 9: masking hides what runs): the Approval masks the program the call runs as a secret value; alice sees %s", approval.Spec.Request.Input)
		Expect(decide(ctx, as(alice), approval, toolgatev1alpha1.DecisionDenied, alice)).To(Succeed())
		nothingRan(ctx, intent.Name)
	})

	It("10: never uses a Secret that does not opt in, nor sends a key to an endpoint off the allow-list", func(ctx SpecContext) {
		// A Secret of the namespace that is no model key: a deploy token.
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "deploy-token", Namespace: ns},
			StringData: map[string]string{"apiKey": "deploy-token-value"},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "model-key", Namespace: ns, Labels: map[string]string{toolgatev1alpha1.LabelModelCredentials: toolgatev1alpha1.ModelCredentialsValue}},
			StringData: map[string]string{"apiKey": "model-key-value"},
		})).To(Succeed())
		modelTask := func(name, baseURL, secret string) {
			GinkgoHelper()
			Expect(as(olivia).Create(ctx, &toolgatev1alpha1.AgentTask{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: toolgatev1alpha1.AgentTaskSpec{
					Goal:      "Fix the tests.",
					Mode:      toolgatev1alpha1.ModeReadOnly,
					Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
					Agent: toolgatev1alpha1.AgentSpec{Model: &toolgatev1alpha1.ModelAgent{
						BaseURL: baseURL, Model: "any",
						APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "apiKey"},
					}},
				},
			})).To(Succeed())
		}
		// 127.0.0.1 is on the deployed allow-list; the endpoint is never reached.
		modelTask("borrowed-key", "http://127.0.0.1:9/v1", "deploy-token")
		modelTask("send-elsewhere", "https://models.attacker.example/v1", "model-key")
		modelTask("send-with-userinfo", "http://bob:hunter2@127.0.0.1:9/v1", "model-key")

		waiting := func(name, reason string) string {
			GinkgoHelper()
			task := &toolgatev1alpha1.AgentTask{}
			var ready *metav1.Condition
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, task)).To(Succeed())
				ready = meta.FindStatusCondition(task.Status.Conditions, toolgatev1alpha1.ConditionReady)
				g.Expect(ready).NotTo(BeNil(), "task %s has no Ready condition: %+v", name, task.Status)
				g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(ready.Reason).To(Equal(reason), ready.Message)
			}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
			Expect(task.Status.Phase).To(Equal(toolgatev1alpha1.TaskPending))
			Expect(task.Status.Turn).To(BeZero())
			// No turn was recorded: the model was never asked.
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-turn-0"}, &corev1.ConfigMap{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "task %s recorded a turn (%v)", name, err)
			return ready.Message
		}
		msg := waiting("borrowed-key", controller.ReasonCredentialsNotAllowed)
		Expect(msg).To(ContainSubstring(`Secret "deploy-token"`))
		Expect(msg).To(ContainSubstring(toolgatev1alpha1.LabelModelCredentials + "=" + toolgatev1alpha1.ModelCredentialsValue))
		Expect(msg).NotTo(ContainSubstring("deploy-token-value"))
		msg = waiting("send-elsewhere", controller.ReasonEndpointNotAllowed)
		Expect(msg).To(ContainSubstring(`"https://models.attacker.example/v1"`))
		Expect(msg).To(ContainSubstring("--model-endpoints"))
		msg = waiting("send-with-userinfo", controller.ReasonEndpointNotAllowed)
		Expect(msg).To(ContainSubstring("userinfo"))
		Expect(msg).NotTo(ContainSubstring("hunter2"))

		By("nobody but the agent loop proposes into a model task")
		outsider := observedIntent(ctx, propose(ctx, agentBot, "borrowed-key", 0, "cat /workspace/mark.sh", ""))
		Expect(outsider.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeValidationFailed))
		Expect(outsider.Status.Observation.Summary).To(ContainSubstring("agent-bot may not propose calls for AgentTask borrowed-key: its agent is a model"))
		Expect(metav1.GetControllerOf(outsider)).To(BeNil(), "the model task adopted an outsider's intent")
		nothingRan(ctx, outsider.Name)
	})
})
