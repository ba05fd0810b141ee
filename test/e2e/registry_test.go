//go:build e2e

package e2e

import (
	"os"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The kind cluster pulls toolgate's images from its registry, as a production cluster
// pulls from its own: `make test-e2e` pushes them there (E2E_REGISTRY) and deploys
// them by digest. containerd reports a container's image as the reference by digest
// it pulled it under, so an image that was loaded into the node, or pulled from
// elsewhere, shows another name.
var _ = Describe("toolgate's images", func() {
	It("are pulled from the cluster's registry by digest", func(ctx SpecContext) {
		registry := os.Getenv("E2E_REGISTRY")
		if registry == "" {
			Skip("E2E_REGISTRY names no registry the cluster pulls from (make test-e2e sets it on the kind cluster)")
		}
		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(controllerNamespace))).To(Succeed())
		seen := map[string]bool{}
		for _, pod := range pods.Items {
			if pod.Status.Phase != corev1.PodRunning {
				continue
			}
			images := map[string]string{}
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				images[c.Name] = c.Image
			}
			for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
				image := images[s.Name]
				Expect(image).To(HavePrefix(registry+"/"), "pod %s container %s runs %s, not an image of the registry", pod.Name, s.Name, image)
				Expect(image).To(ContainSubstring("@sha256:"), "pod %s container %s names its image by tag, not by digest", pod.Name, s.Name)
				Expect(s.ImageID).To(Equal(image), "pod %s container %s: the runtime ran another image than the one pulled from the registry", pod.Name, s.Name)
				seen[strings.SplitN(strings.TrimPrefix(image, registry+"/"), "@", 2)[0]] = true
			}
		}
		Expect(seen).To(HaveKey("toolgate/controller"), "no running controller pod")
		Expect(seen).To(HaveKey("toolgate/postgres"), "no running archive database pod")

		By("the images of the Jobs: the controller names the runner and the sandbox by digest in the registry")
		var deployment appsv1.Deployment
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: controllerDeployment}, &deployment)).To(Succeed())
		args := strings.Join(deployment.Spec.Template.Spec.Containers[0].Args, " ")
		Expect(args).To(MatchRegexp(`--runner-image=%s/toolgate/runner@sha256:[0-9a-f]{64}( |$)`, regexp.QuoteMeta(registry)))
		Expect(args).To(ContainSubstring("--default-sandbox-image="+workspaceImage), "the suite's workspace image is not the controller's default sandbox image")

		By("a pod of the sandbox image pulls it from the registry")
		Expect(workspaceImage).To(MatchRegexp(`^%s/toolgate/workspace@sha256:[0-9a-f]{64}$`, regexp.QuoteMeta(registry)))
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pulled", Namespace: newNamespace(ctx)},
			Spec: corev1.PodSpec{
				RestartPolicy:                corev1.RestartPolicyNever,
				AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{
					Name: "workspace", Image: workspaceImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"},
					SecurityContext: &corev1.SecurityContext{
						RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
						Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
				}},
			},
		}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "the pod has not run: %+v", pod.Status.ContainerStatuses)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
		Expect(pod.Status.ContainerStatuses[0].ImageID).To(Equal(workspaceImage))
	})
})
