//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolgate/toolgate/internal/testenv"
)

// The attack specs act as people and agents other than the admin: the admin's
// kubeconfig impersonates them, so the API server authenticates, authorizes and
// admits each request as that user's, and what they may do comes only from the
// RoleBindings the specs create, as a cluster admin grants them.

// controllerServiceAccount is the identity config/default deploys the controller
// as; the admission policies name it.
const controllerServiceAccount = "system:serviceaccount:" + controllerNamespace + ":" + controllerDeployment

// controllerGroups are the groups the API server puts a service account of the
// controller's namespace in.
var controllerGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + controllerNamespace}

// mastersGroup is the group the admission policies exempt: a controller run outside
// the cluster with an admin's credentials (make run) must be able to write what the
// controller writes. kubeadm's admin kubeconfig (kind's) is in kubeadm:cluster-admins,
// not in it; that user, bound to cluster-admin, may impersonate it.
const mastersGroup = "system:masters"

// asMastersAdmin is the suite's own user acting as a member of mastersGroup, for the
// attacks that an admin past admission makes.
func asMastersAdmin(ctx context.Context) client.Client {
	GinkgoHelper()
	return actingAs(whoAmI(ctx), mastersGroup)
}

var setLoggerOnce sync.Once

// actingAs returns an uncached client whose requests the API server takes for
// user's, in groups (system:authenticated is added by the server).
func actingAs(user string, groups ...string) client.Client {
	GinkgoHelper()
	// controller-runtime complains, with a stack trace, about clients made once its
	// logger has gone unset for a while; its messages go where the spec's do.
	setLoggerOnce.Do(func() { ctrllog.SetLogger(GinkgoLogr) })
	cfg, err := config.GetConfig()
	Expect(err).NotTo(HaveOccurred())
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: testenv.NewScheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}
}

// bindClusterRole grants a ClusterRole in namespace ns, as
// `kubectl create rolebinding NAME --clusterrole=ROLE --user=...` does.
func bindClusterRole(ctx context.Context, ns, name, clusterRole string, subjects ...rbacv1.Subject) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   subjects,
	})).To(Succeed())
}

// access is one permission a spec relies on, asked of the API server's authorizer.
type access struct {
	user            string
	groups          []string
	verb            string
	group, resource string
	subresource     string
}

// waitAllowed waits until RBAC grants each access in ns: the authorizer works from a
// cache, and a binding made a moment ago may not count yet.
func waitAllowed(ctx context.Context, ns string, accesses ...access) {
	GinkgoHelper()
	for _, a := range accesses {
		Eventually(func(g Gomega) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: a.user, Groups: a.groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
				},
			}}
			g.Expect(k8s.Create(ctx, sar)).To(Succeed())
			g.Expect(sar.Status.Allowed).To(BeTrue(), "RBAC does not allow %s to %s %s.%s in %s yet", a.user, a.verb, a.resource, a.group, ns)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
}

// mergePatch sends a JSON merge patch as c's user, as `kubectl patch --type merge`
// does. A copy of obj is patched, so a refused patch leaves obj as it was.
func mergePatch(ctx context.Context, c client.Client, obj client.Object, patch map[string]any) error {
	GinkgoHelper()
	data, err := json.Marshal(patch)
	Expect(err).NotTo(HaveOccurred())
	return c.Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, data))
}

// mergePatchStatus is mergePatch on the status subresource.
func mergePatchStatus(ctx context.Context, c client.Client, obj client.Object, patch map[string]any) error {
	GinkgoHelper()
	data, err := json.Marshal(patch)
	Expect(err).NotTo(HaveOccurred())
	return c.Status().Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, data))
}

// expectForbidden fails unless err is the API server's 403 and says want.
func expectForbidden(err error, want string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the API server accepted what it must refuse with %q", want)
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a Forbidden refusal saying %q; got %v (reason %s)", want, err, apierrors.ReasonForError(err))
	Expect(err.Error()).To(ContainSubstring(want))
}

// expectInvalid fails unless err is the API server's 422 and says want.
func expectInvalid(err error, want string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the API server accepted what it must refuse with %q", want)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid refusal saying %q; got %v (reason %s)", want, err, apierrors.ReasonForError(err))
	Expect(err.Error()).To(ContainSubstring(want))
}

// absent is what workspaceFiles reports for a file that does not exist.
const absent = "<absent>"

// workspaceFiles reads files of the claim with a pod running as the sandbox's user,
// outside toolgate, and returns their contents (absent for a missing file). The
// contents travel base64-encoded in the pod's termination message, so they must be
// small (a few kilobytes in all).
func workspaceFiles(ctx context.Context, ns, claim string, names ...string) map[string]string {
	GinkgoHelper()
	const script = `for f in "$@"; do
  if [ -e "$f" ]; then printf '%s %s\n' "$f" "$(base64 -w 0 < "$f")"; else printf '%s -\n' "$f"; fi
done > /dev/termination-log`
	pod := workspacePod(ns, claim, "read-workspace-", append([]string{"sh", "-c", script, "sh"}, names...), true)
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	var message string
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "the reading pod is %s", pod.Status.Phase)
		g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
		g.Expect(pod.Status.ContainerStatuses[0].State.Terminated).NotTo(BeNil())
		message = pod.Status.ContainerStatuses[0].State.Terminated.Message
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	files := map[string]string{}
	for line := range strings.Lines(message) {
		name, encoded, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		Expect(ok).To(BeTrue(), "unexpected line %q from the reading pod", line)
		if encoded == "-" {
			files[name] = absent
			continue
		}
		content, err := base64.StdEncoding.DecodeString(encoded)
		Expect(err).NotTo(HaveOccurred())
		files[name] = string(content)
	}
	Expect(files).To(HaveLen(len(names)), "the reading pod reported %q", message)
	return files
}

// workspacePod is a pod that mounts the claim at /workspace and runs command as the
// sandbox's user, with the sandbox's restrictions.
func workspacePod(ns, claim, generateName string, command []string, readOnly bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "workspace", Image: workspaceImage, Command: command, WorkingDir: "/workspace",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace", ReadOnly: readOnly}},
			}},
			Volumes: []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly},
			}}},
		},
	}
}

// warningNotes waits for a Warning event with reason about the object of kind and
// name in ns, and returns the notes of all such events.
func warningNotes(ctx context.Context, ns, kind, name, reason string) []string {
	GinkgoHelper()
	var notes []string
	Eventually(func(g Gomega) {
		notes = nil
		var events eventsv1.EventList
		g.Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
		for _, e := range events.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).NotTo(BeEmpty(), "no Warning event %s about %s %s", reason, kind, name)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	return notes
}
