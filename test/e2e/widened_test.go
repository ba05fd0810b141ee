//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// NetworkPolicies add up: a namespace's own baseline that selects every pod would
// widen the walls of a no-network call. toolgate runs no call behind such a policy
// and says which policy is in the way.
var _ = Describe("Walls another NetworkPolicy of the namespace would widen", func() {
	var ns, claim string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim = newWorkspace(ctx, ns)
	})

	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	baselines := map[string]networkingv1.NetworkPolicySpec{
		"allow-all-egress": {
			PodSelector: metav1.LabelSelector{}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}},
		},
		"allow-dns": {
			PodSelector: metav1.LabelSelector{}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}}}},
		},
	}
	for name, spec := range baselines {
		It(fmt.Sprintf("runs no no-network call under a namespace %s baseline, and names the baseline", name), func(ctx SpecContext) {
			Expect(k8s.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec})).To(Succeed())
			exec := run(ctx, ns, claim, bash("behind-"+name, "echo ran > ran.txt"))

			Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed), "Execution %s: %+v", exec.Name, exec.Status)
			cond := meta.FindStatusCondition(exec.Status.Conditions, toolgatev1alpha1.ConditionComplete)
			Expect(cond).NotTo(BeNil())
			Expect(cond.Reason).To(Equal(toolgatev1alpha1.ReasonWallsWidened), "the Complete condition: %+v", cond)
			Expect(exec.Status.Message).To(ContainSubstring("NetworkPolicy " + name + " in namespace " + ns + " opens the network walls of"))
			Expect(exec.Status.Message).To(ContainSubstring(toolgatev1alpha1.LabelNetwork), "the message says how to exclude toolgate's pods")

			By("no Job was made, and the command wrote nothing")
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: executor.JobName(exec)}, &batchv1.Job{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the call's Job: %v", err)
			Expect(workspaceFiles(ctx, ns, claim, "ran.txt")).To(HaveKeyWithValue("ran.txt", absent))
		})
	}
})

// On a cluster where nothing enforces NetworkPolicy, toolgate's fence is only words.
// The runner proves its walls before the tool starts: with kube-router stopped, a
// pod made now is fenced by nothing, and a no-network call fails closed.
var _ = Describe("A no-network call where nothing enforces NetworkPolicy", Serial, func() {
	It("fails closed with an Exception naming the network wall, and runs nothing", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		claim := newWorkspace(ctx, ns)
		stopKubeRouter(ctx)

		exec := run(ctx, ns, claim, bash("unfenced", "echo ran > ran.txt"))
		Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed), "Execution %s: %+v", exec.Name, exec.Status)
		Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException), "Execution %s: %+v", exec.Name, exec.Status)
		Expect(exec.Status.Message + exec.Status.Output).To(ContainSubstring("network wall does not hold"))
		Expect(workspaceFiles(ctx, ns, claim, "ran.txt")).To(HaveKeyWithValue("ran.txt", absent))
	})
})

// stopKubeRouter takes kube-router's pods off the node (a nodeSelector no node
// matches) and, when the spec ends, puts them back and waits until they run again.
// The rules kube-router made stay on the node; a pod made while it is away gets
// none.
func stopKubeRouter(ctx context.Context) {
	GinkgoHelper()
	key := client.ObjectKey{Namespace: "kube-system", Name: "kube-router"}
	setSelector := func(ctx context.Context, selector map[string]string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			var ds appsv1.DaemonSet
			g.Expect(k8s.Get(ctx, key, &ds)).To(Succeed())
			ds.Spec.Template.Spec.NodeSelector = selector
			g.Expect(k8s.Update(ctx, &ds)).To(Succeed())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}
	var ds appsv1.DaemonSet
	Expect(k8s.Get(ctx, key, &ds)).To(Succeed())
	original := ds.Spec.Template.Spec.NodeSelector
	DeferCleanup(func(ctx SpecContext) {
		setSelector(ctx, original)
		out, err := kubectl(ctx, "-n", key.Namespace, "rollout", "status", "daemonset/"+key.Name, "--timeout=3m")
		Expect(err).NotTo(HaveOccurred(), "kube-router did not come back: %s", out)
	})
	setSelector(ctx, map[string]string{"toolgate.dev/e2e-no-such-node": "true"})
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabels{"app": "kube-router"})).To(Succeed())
		names := make([]string, 0, len(pods.Items))
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		g.Expect(names).To(BeEmpty(), "kube-router pods still there: %s", strings.Join(names, ", "))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
