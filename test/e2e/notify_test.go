//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/notify"
)

// notifySink starts hack/notifysink (in the git server's image) in the namespace
// behind Service "notify-sink" on port 80, checking signatures with the key in
// Secret secret, key hmac.
func notifySink(ctx context.Context, ns, secret string) {
	GinkgoHelper()
	labels := map[string]string{"e2e-notify": "sink"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "notify-sink", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "sink", Image: gitServerImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"/notifysink"},
				Env: []corev1.EnvVar{{Name: "NOTIFY_SINK_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "hmac"}}}},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
			}},
		},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "notify-sink", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	})).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		ready := false
		for _, c := range pod.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		g.Expect(ready).To(BeTrue(), "the notification sink is not ready: %+v", pod.Status)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// sinkMessage is one delivery as the sink's GET /messages shows it.
type sinkMessage struct {
	Verified bool            `json:"verified"`
	Error    string          `json:"error"`
	Type     string          `json:"type"`
	ID       string          `json:"id"`
	Event    json.RawMessage `json:"event"`
}

var _ = Describe("Approval notifications", func() {
	It("announces an asked call to a signed CloudEvents sink in the cluster, the token of its input masked", func(ctx SpecContext) {
		const token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
		ns := newNamespace(ctx)
		me := whoAmI(ctx)
		claim := newWorkspace(ctx, ns)

		By("a sink, its webhook Secret and a channel")
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "notify-webhook", Namespace: ns, Labels: map[string]string{toolgatev1alpha1.LabelNotificationCredentials: "true"}},
			StringData: map[string]string{"url": "http://notify-sink." + ns + ".svc/hook", "hmac": "e2e-signing-key"},
		})).To(Succeed())
		notifySink(ctx, ns, "notify-webhook")
		Expect(k8s.Create(ctx, &toolgatev1alpha1.NotificationChannel{
			ObjectMeta: metav1.ObjectMeta{Name: "approvals", Namespace: ns},
			Spec: toolgatev1alpha1.NotificationChannelSpec{
				Type:             toolgatev1alpha1.ChannelCloudEvents,
				URLSecretRef:     toolgatev1alpha1.SecretKeyReference{Name: "notify-webhook", Key: "url"},
				SigningSecretRef: &toolgatev1alpha1.SecretKeyReference{Name: "notify-webhook", Key: "hmac"},
			},
		})).To(Succeed())

		By("a call the task's Edit mode asks about, with a token in its input")
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal: "Build the release.", Mode: toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Agent: toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{
					Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}},
				}},
			},
		})).To(Succeed())
		raw, err := json.Marshal(map[string]string{"command": "make build-release GITHUB_TOKEN=" + token})
		Expect(err).NotTo(HaveOccurred())
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: "fix-t0-0", Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "fix"}, Tool: toolgatev1alpha1.ToolBash,
				Input: runtime.RawExtension{Raw: raw}, Reason: "release it", RequestedBy: me,
			},
		}
		Expect(k8s.Create(ctx, intent)).To(Succeed())
		approval := &toolgatev1alpha1.Approval{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
			g.Expect(intent.Status.ApprovalName).NotTo(BeEmpty(), "intent asks for no approval: %v", intent.Status.Conditions)
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent.Status.ApprovalName}, approval)).To(Succeed())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

		By("the sink received it, signed, through the Service proxy")
		var got []sinkMessage
		Eventually(func(g Gomega) {
			out, err := kubectl(ctx, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/services/notify-sink:http/proxy/messages", ns))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(json.Unmarshal([]byte(out), &got)).To(Succeed())
			g.Expect(got).NotTo(BeEmpty(), "the sink has received nothing")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		Expect(got).To(HaveLen(1), "one message for one event: %+v", got)
		Expect(got[0].Verified).To(BeTrue(), "the sink refused the signature: %s", got[0].Error)
		Expect(got[0].Type).To(Equal("dev.toolgate.approval.requested"))
		Expect(got[0].ID).To(Equal(string(approval.UID) + ".requested"))
		Expect(string(got[0].Event)).NotTo(ContainSubstring(token))
		var ce notify.CloudEvent
		Expect(json.Unmarshal(got[0].Event, &ce)).To(Succeed())
		Expect(ce.Data.ApproveCommand).To(Equal("kubectl toolgate approve " + approval.Name + " -n " + ns))
		Expect(ce.Data.Goal).To(Equal("Build the release."))
		Expect(ce.Data.Input).To(ContainSubstring("make build-release"))
		Expect(strings.Contains(ce.Data.Input, "[MASKED]")).To(BeTrue(), "the input is not masked: %s", ce.Data.Input)

		By("the Approval records the delivery")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(approval), approval)).To(Succeed())
			g.Expect(approval.Status.Notifications).To(HaveLen(1))
			g.Expect(approval.Status.Notifications[0].DeliveredAt).NotTo(BeNil(), "%+v", approval.Status.Notifications)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	})
})
