//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// target is a TCP destination a probe connects to.
type target struct {
	name, host string
	port       int
}

func (t target) String() string { return fmt.Sprintf("%s:%d", t.host, t.port) }

// probeScript connects to each target, sends an HTTP request, and prints one line per
// target: "NAME connected: <the reply's first line> ... <its last line>" or
// "NAME failed: <nc's exit code and error>".
// busybox nc says "Connection refused" when the connection was refused (a TCP RST,
// or the ICMP port-unreachable a REJECT rule sends), and nothing but a non-zero exit
// when it timed out.
func probeScript(targets ...target) string {
	var b strings.Builder
	b.WriteString(`probe() { out=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 "$2" "$3" 2>&1); rc=$?; ` +
		`if [ $rc -eq 0 ] && [ -n "$out" ]; then echo "$1 connected: $(echo "$out" | head -n 1 | tr -d '\015') ... $(echo "$out" | tail -n 1)"; ` +
		`else echo "$1 failed: rc=$rc $(echo "$out" | tr '\n' ' ')"; fi; }` + "\n")
	for _, t := range targets {
		fmt.Fprintf(&b, "probe %s %s %d\n", t.name, t.host, t.port)
	}
	// And one name through the cluster's DNS (UDP): busybox nslookup says "Connection
	// refused" when the query is answered with the ICMP port-unreachable a REJECT
	// rule sends, and "connection timed out" alone when nothing answered.
	b.WriteString(`out=$(nslookup ` + dnsName + ` 2>&1); rc=$?; ` +
		`if [ $rc -eq 0 ]; then echo "` + dnsProbe + ` resolved: $(echo "$out" | sed -n '/^Name:/,$ s/^Address: *//p' | head -n 1)"; ` +
		`else echo "` + dnsProbe + ` failed: rc=$rc $(echo "$out" | tr '\n' ' ')"; fi` + "\n")
	return b.String()
}

// dnsName is the name probeScript resolves (the kubernetes Service's), and dnsProbe
// the name of its line.
const (
	dnsName  = "kubernetes.default.svc.cluster.local"
	dnsProbe = "dns"
)

// expectResolved checks that the DNS probe resolved dnsName to address.
func expectResolved(output, address string) {
	GinkgoHelper()
	Expect(probeLine(output, dnsProbe)).To(Equal(dnsProbe+" resolved: "+address), "whole output:\n%s", output)
}

// probeLine returns the line probeScript printed for target name.
func probeLine(output, name string) string {
	for line := range strings.SplitSeq(output, "\n") {
		if strings.HasPrefix(line, name+" ") {
			return line
		}
	}
	return name + " printed nothing"
}

// expectConnected and expectRefused check one target's line: connected, or refused
// (attempted, and answered with a refusal: not a timeout, not a missing route).
func expectConnected(output, name, reply string) {
	GinkgoHelper()
	Expect(probeLine(output, name)).To(HavePrefix(name+" connected: "), "whole output:\n%s", output)
	if reply != "" {
		Expect(probeLine(output, name)).To(ContainSubstring(reply), "whole output:\n%s", output)
	}
}

func expectRefused(output, name string) {
	GinkgoHelper()
	line := probeLine(output, name)
	Expect(line).To(HavePrefix(name+" failed: "), "whole output:\n%s", output)
	Expect(line).To(ContainSubstring("Connection refused"), "the connection must be refused, not time out: whole output:\n%s", output)
}

// listener starts a pod serving "reply-NAME" over HTTP on ports 8080 and 8081 and
// returns it once it is ready, with its IP.
func listener(ctx context.Context, ns, name string) *corev1.Pod {
	GinkgoHelper()
	serve := fmt.Sprintf("mkdir -p /tmp/www && echo reply-%s > /tmp/www/index.html && "+
		"busybox httpd -p 8081 -h /tmp/www && exec busybox httpd -f -p 8080 -h /tmp/www", name)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"e2e-listener": name}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "serve", Image: workspaceImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", serve},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}, PeriodSeconds: 1},
				VolumeMounts:   []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		ready := false
		for _, c := range pod.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		g.Expect(ready).To(BeTrue(), "listener %s is not ready: %+v", name, pod.Status)
		g.Expect(pod.Status.PodIP).NotTo(BeEmpty())
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return pod
}

// unfencedProbe runs probeScript in a plain pod that no NetworkPolicy selects and
// returns what it printed: what every target answers when nothing stands between.
func unfencedProbe(ctx context.Context, ns string, targets ...target) string {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unfenced-probe", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "probe", Image: workspaceImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", probeScript(targets...)},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "probe pod: %+v", pod.Status)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	out, err := kubectl(ctx, "-n", ns, "logs", pod.Name)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// sandboxedProbe runs probeScript as a bash call in an Execution with network and
// returns its output.
func sandboxedProbe(ctx context.Context, ns, claim, name string, network toolgatev1alpha1.NetworkSpec, targets ...target) string {
	GinkgoHelper()
	e := bash(name, probeScript(targets...))
	e.network = network
	exec := run(ctx, ns, claim, e)
	Expect(exitCode(exec)).To(Equal(int32(0)), "the probe script itself failed: %s", exec.Status.Output)
	return exec.Status.Output
}

var _ = Describe("The sandbox's network on a real cluster", Ordered, func() {
	var (
		ns, claim                       string
		a, b, aOther, api, svc, kubelet target
		all                             []target
	)
	BeforeAll(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim = newWorkspace(ctx, ns)
		podA, podB := listener(ctx, ns, "a"), listener(ctx, ns, "b")
		var kubernetes corev1.Service
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &kubernetes)).To(Succeed())
		a = target{"a", podA.Status.PodIP, 8080}
		aOther = target{"a-other-port", podA.Status.PodIP, 8081}
		b = target{"b", podB.Status.PodIP, 8080}
		// The node the pods run on: the API server's own address, and the kubelet's
		// port on it; and the API server through its Service.
		api = target{"apiserver", podA.Status.HostIP, 6443}
		kubelet = target{"kubelet", podA.Status.HostIP, 10250}
		svc = target{"kubernetes-service", kubernetes.Spec.ClusterIP, 443}
		all = []target{a, aOther, b, api, kubelet, svc}

		By("every target answers a pod that no NetworkPolicy selects")
		out := unfencedProbe(ctx, ns, all...)
		expectConnected(out, a.name, "reply-a")
		expectConnected(out, aOther.name, "reply-a")
		expectConnected(out, b.name, "reply-b")
		expectConnected(out, api.name, "")
		expectConnected(out, kubelet.name, "")
		expectConnected(out, svc.name, "")
		expectResolved(out, svc.host)
	})

	It("refuses every connection of a call whose network is None", func(ctx SpecContext) {
		out := sandboxedProbe(ctx, ns, claim, "net-none", toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone}, all...)
		for _, t := range all {
			expectRefused(out, t.name)
		}
		expectRefused(out, dnsProbe)
	})

	It("lets a call with an egress allow-list reach exactly the listed destination", func(ctx SpecContext) {
		network := toolgatev1alpha1.NetworkSpec{
			Mode:   toolgatev1alpha1.NetworkAllowList,
			Egress: []toolgatev1alpha1.EgressRule{{CIDR: a.host + "/32", Ports: []int32{int32(a.port)}}},
		}
		out := sandboxedProbe(ctx, ns, claim, "net-allow", network, all...)
		expectConnected(out, a.name, "reply-a")
		for _, t := range []target{aOther, b, api, kubelet, svc} {
			expectRefused(out, t.name)
		}
		expectRefused(out, dnsProbe)
	})

	It("resolves names through the cluster's DNS only when the allow-list includes it, and reaches no more", func(ctx SpecContext) {
		network := toolgatev1alpha1.NetworkSpec{
			Mode:       toolgatev1alpha1.NetworkAllowList,
			Egress:     []toolgatev1alpha1.EgressRule{{CIDR: a.host + "/32", Ports: []int32{int32(a.port)}}},
			ClusterDNS: true,
		}
		out := sandboxedProbe(ctx, ns, claim, "net-dns", network, all...)
		expectResolved(out, svc.host)
		expectConnected(out, a.name, "reply-a")
		// The name it resolved is not a destination it may reach.
		for _, t := range []target{aOther, b, api, kubelet, svc} {
			expectRefused(out, t.name)
		}
	})
})
