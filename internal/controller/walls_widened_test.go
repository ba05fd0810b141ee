package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// The baselines namespaces commonly hold, which select every pod, toolgate's too.
// NetworkPolicies add up: each opens a channel out of a call that was to have no
// network.

// allowAllEgress lets every pod of the namespace send anywhere.
func allowAllEgress(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-all-egress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
		},
	}
}

// allowDNSEverywhere lets every pod of the namespace send DNS anywhere.
func allowDNSEverywhere(ns string) *networkingv1.NetworkPolicy {
	dns := intstr.FromInt32(53)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-dns"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: ptr.To(corev1.ProtocolUDP), Port: &dns},
				{Protocol: ptr.To(corev1.ProtocolTCP), Port: &dns},
			}}},
		},
	}
}

// startWallsPipeline starts the pipeline on ns, with the test's kubelet and
// pods/exec for session tasks.
func startWallsPipeline(t *testing.T, ns string, session bool) (*pipelineEnv, *localSessions) {
	t.Helper()
	if !session {
		return startPipelineIn(t, ns), nil
	}
	l := &localSessions{t: t, runner: testRunnerBinary(t), root: t.TempDir()}
	p := startPipelineIn(t, ns, func(o *Options) { o.SessionExecutor = l })
	playKubelet(t, ns)
	return p, l
}

func isolationOf(session bool) func(*v1.AgentTask) {
	return func(task *v1.AgentTask) {
		if session {
			task.Spec.Sandbox.Isolation = v1.IsolationSession
		}
	}
}

// createPolicy creates a NetworkPolicy and waits until the controller's cache holds
// it: a call proposed before would race the controller's watch of it.
func createPolicy(t *testing.T, p *pipelineEnv, policy *networkingv1.NetworkPolicy) {
	t.Helper()
	if err := env.Client.Create(t.Context(), policy); err != nil {
		t.Fatalf("creating NetworkPolicy %s: %v", policy.Name, err)
	}
	if p == nil {
		return
	}
	p.eventually("the controller sees NetworkPolicy "+policy.Name, func() (bool, string) {
		err := p.mgr.GetClient().Get(context.Background(), client.ObjectKeyFromObject(policy), &networkingv1.NetworkPolicy{})
		return err == nil, fmt.Sprint(err)
	})
}

// assertWallsWidened checks that the call was refused for the policy, saying so
// to the model and to a human, with nothing run.
func assertWallsWidened(t *testing.T, p *pipelineEnv, name, policy string) {
	t.Helper()
	p.eventually("Execution "+name, func() (bool, string) { return p.executionExists(name), "" })
	exec := waitRefused(t, p.ns, name, EventWallsWidened, "NetworkPolicy "+policy+" in namespace "+p.ns+" opens the network walls of ")
	cond := meta.FindStatusCondition(exec.Status.Conditions, v1.ConditionComplete)
	if cond == nil || cond.Reason != v1.ReasonWallsWidened {
		t.Errorf("Complete condition %+v; want reason %s", cond, v1.ReasonWallsWidened)
	}
	mustContain(t, "the Execution's message", exec.Status.Message, "(no network at all)", "its podSelector {} selects every pod",
		"{key: "+v1.LabelNetwork+", operator: DoesNotExist}", "or delete it")
	obs := p.observed(name).Status.Observation
	if obs.Outcome != v1.OutcomeFailed {
		t.Errorf("observation %s: %s; want Failed", obs.Outcome, obs.Summary)
	}
	mustContain(t, "the observation", obs.Summary, "NetworkPolicy "+policy)
}

// A namespace baseline that allows every pod all egress, or DNS anywhere, selects
// toolgate's sandbox pods too: a no-network call would reach what the baseline
// allows. The call does not run, as a Job or in a session; its Execution says
// which policy is in the way and how to get it out of the way.
func TestNamespaceBaselineWidensNoCallsWalls(t *testing.T) {
	baselines := []func(string) *networkingv1.NetworkPolicy{allowAllEgress, allowDNSEverywhere}
	for _, baseline := range baselines {
		for _, session := range []bool{false, true} {
			name := baseline("").Name + map[bool]string{false: "/PerCall", true: "/Session"}[session]
			t.Run(name, func(t *testing.T) {
				ns := env.Namespace(t)
				policy := baseline(ns)
				// Made before the controller starts: its cache holds it from the start.
				createPolicy(t, nil, policy)
				p, l := startWallsPipeline(t, ns, session)
				p.task("t", v1.ModeAuto, isolationOf(session))
				p.propose("t", 0, 0, v1.ToolBash, `{"command":"echo ran > ran.txt"}`)
				assertWallsWidened(t, p, "t-t0-0", policy.Name)
				noJobs(t, ns)
				if session {
					if pods := sessionPods(t, ns); len(pods) != 0 {
						t.Errorf("session pods started behind widened walls: %v", pods)
					}
					if got := l.delivered(); len(got) != 0 {
						t.Errorf("the call was delivered to %v", got)
					}
					if _, err := os.Stat(filepath.Join(l.workspace("t-workspace"), "ran.txt")); !os.IsNotExist(err) {
						t.Errorf("the call ran: ran.txt %v", err)
					}
				}
			})
		}
	}
}

// A policy made while a session is up widens its walls: the session takes no
// further call.
func TestPolicyMadeWhileASessionIsUpRefusesItsNextCall(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("s", v1.ModeAuto, sessionTask())
	p.propose("s", 0, 0, v1.ToolBash, `{"command":"echo first > first.txt"}`)
	if obs := p.observed("s-t0-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded {
		t.Fatalf("the first call: %+v", obs)
	}
	session := getExecution(t, p.ns, "s-t0-0").Status.SessionName

	createPolicy(t, p, allowAllEgress(p.ns))
	p.propose("s", 1, 0, v1.ToolBash, `{"command":"echo second > second.txt"}`)
	assertWallsWidened(t, p, "s-t1-0", "allow-all-egress")
	mustContain(t, "the Execution's message", getExecution(t, p.ns, "s-t1-0").Status.Message, "session pod "+session)
	if got := l.delivered(); len(got) != 1 {
		t.Errorf("delivered %v; want the first call only", got)
	}
	if _, err := os.Stat(filepath.Join(l.workspace("s-workspace"), "second.txt")); !os.IsNotExist(err) {
		t.Errorf("the second call ran: second.txt %v", err)
	}
}

// A policy made while a session call runs stops the call: the policy's watch
// wakes it.
func TestPolicyMadeWhileASessionCallRunsStopsIt(t *testing.T) {
	p, l := startSessionPipeline(t)
	p.task("r", v1.ModeAuto, sessionTask())
	p.propose("r", 0, 0, v1.ToolBash, `{"command":"touch started; sleep 30"}`)
	fileAppears(p, "the call started", filepath.Join(l.workspace("r-workspace"), "started"))

	createPolicy(t, p, allowDNSEverywhere(p.ns))
	obs := p.observed("r-t0-0").Status.Observation
	if obs.Outcome != v1.OutcomeAborted {
		t.Errorf("observation %s; want Aborted: %s", obs.Outcome, obs.Summary)
	}
	exec := getExecution(t, p.ns, "r-t0-0")
	mustContain(t, "the Execution's message", exec.Status.Message, "stopped while it ran, because NetworkPolicy allow-dns", "in namespace "+p.ns+" opens the network walls of session pod "+exec.Status.SessionName, "UDP/53, TCP/53")
}

// A baseline that leaves toolgate's pods out (DoesNotExist on the network label)
// opens nothing: the calls run, as a Job and in a session.
func TestBaselineThatExcludesToolgatesPodsLetsCallsRun(t *testing.T) {
	excluding := func(policy *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
		policy.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: v1.LabelNetwork, Operator: metav1.LabelSelectorOpDoesNotExist,
		}}}
		return policy
	}
	for _, session := range []bool{false, true} {
		t.Run(map[bool]string{false: "PerCall", true: "Session"}[session], func(t *testing.T) {
			ns := env.Namespace(t)
			createPolicy(t, nil, excluding(allowAllEgress(ns)))
			createPolicy(t, nil, excluding(allowDNSEverywhere(ns)))
			p, l := startWallsPipeline(t, ns, session)
			p.task("t", v1.ModeAuto, isolationOf(session))
			p.propose("t", 0, 0, v1.ToolBash, `{"command":"echo ran > ran.txt"}`)
			if !session {
				waitForJob(t, ns, "t-t0-0")
				return
			}
			if obs := p.observed("t-t0-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded {
				t.Fatalf("observation: %+v", obs)
			}
			if got, err := os.ReadFile(filepath.Join(l.workspace("t-workspace"), "ran.txt")); err != nil || string(got) != "ran\n" {
				t.Errorf("ran.txt %q (%v)", got, err)
			}
		})
	}
}
