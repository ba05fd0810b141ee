//go:build e2e

// Package e2e tests toolgate on a real cluster: whatever cluster KUBECONFIG names,
// with toolgate deployed (config/default) and its images available to the nodes.
// `make test-e2e` without KUBECONFIG brings up the kind cluster (hack/kind.sh), pushes
// the images to its registry and deploys toolgate from there first.
//
// Each spec runs in its own namespace with its own workspace claim, and talks to
// the API through an uncached client; `kubectl` (on PATH) is used where a person
// would use it: reading a pod's log, approving. When a spec fails, the namespace's
// objects, events and pod logs and the controller's log are written to
// test/e2e/logs/.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolgate/toolgate/internal/testenv"
)

// Where toolgate is deployed by config/default.
const (
	controllerNamespace  = "toolgate-system"
	controllerDeployment = "toolgate-controller-manager"
)

// Images the specs run tools in; the defaults are the ones the Makefile builds. On
// the kind cluster `make test-e2e` names them by digest in its registry.
var (
	workspaceImage = envOr("E2E_WORKSPACE_IMAGE", "toolgate/workspace:dev")
	logsDir        = envOr("E2E_LOGS_DIR", "logs")
)

var k8s client.Client

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "toolgate e2e")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// kubectl toolgate runs in this process in some specs; its clients log here.
	ctrllog.SetLogger(GinkgoLogr)
	cfg, err := config.GetConfig()
	Expect(err).NotTo(HaveOccurred(), "KUBECONFIG must name a cluster with toolgate deployed")
	k8s, err = client.New(cfg, client.Options{Scheme: testenv.NewScheme()})
	Expect(err).NotTo(HaveOccurred())

	By("waiting for the toolgate controller to be available")
	Eventually(func(g Gomega) {
		var d appsv1.Deployment
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: controllerDeployment}, &d)).To(Succeed())
		g.Expect(d.Status.AvailableReplicas).To(BeNumerically(">=", 1), "the controller Deployment has no available replica")
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())

	By("checking that every node is Ready and under no pressure")
	// A node short of disk or memory evicts pods and admits no new ones: every spec
	// would then wait out its timeout. Say so once, here, instead.
	var nodes corev1.NodeList
	Expect(k8s.List(ctx, &nodes)).To(Succeed())
	Expect(nodes.Items).NotTo(BeEmpty(), "the cluster has no node")
	for _, n := range nodes.Items {
		Expect(nodeTrouble(n)).To(BeEmpty(), "node %s cannot run the suite's pods", n.Name)
	}
}, NodeTimeout(4*time.Minute))

// nodeTrouble lists what keeps node from running new pods: not Ready, a pressure
// condition, or a NoSchedule/NoExecute taint other than the control plane's.
func nodeTrouble(node corev1.Node) []string {
	var trouble []string
	for _, c := range node.Status.Conditions {
		bad := c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue ||
			c.Type != corev1.NodeReady && c.Status == corev1.ConditionTrue
		if bad {
			trouble = append(trouble, fmt.Sprintf("%s=%s: %s", c.Type, c.Status, c.Message))
		}
	}
	for _, t := range node.Spec.Taints {
		if t.Key != "node-role.kubernetes.io/control-plane" && t.Effect != corev1.TaintEffectPreferNoSchedule {
			trouble = append(trouble, fmt.Sprintf("taint %s:%s", t.Key, t.Effect))
		}
	}
	return trouble
}

// newNamespace creates a namespace for one spec, deleted after it (kept when the
// spec failed, for inspection) and dumped to logsDir on failure.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-", Labels: map[string]string{"toolgate.dev/e2e": "true"}}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			dumpNamespace(ctx, ns.Name)
			return
		}
		Expect(k8s.Delete(ctx, ns)).To(Succeed())
	}, NodeTimeout(time.Minute))
	return ns.Name
}

// newWorkspace creates the workspace claim (the cluster's default StorageClass) the
// Executions of the namespace mount.
func newWorkspace(ctx context.Context, ns string) string {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	Expect(k8s.Create(ctx, pvc)).To(Succeed())
	return pvc.Name
}

// kubectl runs kubectl against the suite's cluster and returns its stdout.
func kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// dumpNamespace writes what a person debugging the failure would look at.
func dumpNamespace(ctx context.Context, ns string) {
	dir := filepath.Join(logsDir, unsafeFileChars.ReplaceAllString(CurrentSpecReport().FullText(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		GinkgoWriter.Printf("cannot write the failure's logs: %v\n", err)
		return
	}
	save := func(name string, args ...string) {
		out, err := kubectl(ctx, args...)
		if err != nil {
			out += "\n" + err.Error()
		}
		_ = os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644)
	}
	save("objects.yaml", "get", "-n", ns, "-o", "yaml", "executions,toolintents,approvals,agenttasks,jobs,pods,pvc")
	save("events.txt", "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
	save("pod-logs.txt", "logs", "-n", ns, "--all-containers", "--prefix", "-l", "toolgate.dev/execution", "--tail=200")
	save("controller.log", "logs", "-n", controllerNamespace, "deployment/"+controllerDeployment, "--tail=2000")
	GinkgoWriter.Printf("the namespace %s is kept; its objects and logs are in %s\n", ns, dir)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
