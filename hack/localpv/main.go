// Command localpv is the volume provisioner of the kind cluster that hack/kind.sh
// creates (the node image's default storage). It makes the StorageClass toolgate-local the default,
// gives every pending claim of that class a directory on this node as a `local`
// PersistentVolume bound to the claim, and removes the directory and the volume when
// the claim is deleted.
//
// The kubelet does not apply a pod's fsGroup to a `local` volume made of a plain
// directory, as it does on a real CSI driver's volume. So the directory is made
// the way fsGroup leaves a volume's root: owned by root and by the group --group
// (toolgate's sandbox gid, its pods' fsGroup), setgid, group-writable (2775). A
// pod that holds that group (by fsGroup or runAsGroup) writes its workspace, and
// what it creates keeps the group; a pod without it cannot write, as on a real
// cluster, so a pod that forgot its fsGroup fails here too.
//
//	localpv [--kubeconfig FILE] --root DIR --node NAME [--group GID]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// ClassName is the StorageClass this provisioner serves.
	ClassName = "toolgate-local"
	// ProvisionerName is the StorageClass's provisioner and the volumes' provisioned-by.
	ProvisionerName = "toolgate.dev/localpv"

	annotationProvisionedBy = "pv.kubernetes.io/provisioned-by"
	annotationDefaultClass  = "storageclass.kubernetes.io/is-default-class"
)

// Provisioner creates and deletes volumes under Root on Node.
type Provisioner struct {
	Client client.Client
	Root   string
	Node   string
	// Group owns the volumes' directories (DefaultGroup: toolgate's sandbox gid).
	Group int
}

// DefaultGroup is the gid toolgate's pods run with and give as fsGroup
// (internal/executor SandboxGID).
const DefaultGroup = 65532

// volumeDirMode is what fsGroup makes of a volume's root: group-writable, and
// setgid so that what is created in it keeps the group.
const volumeDirMode = os.ModeSetgid | 0o775

func main() {
	kubeconfig := flag.String("kubeconfig", "", "Kubeconfig of the cluster (default: the pod's in-cluster credentials).")
	root := flag.String("root", "", "Folder the volumes' directories are made in (required).")
	node := flag.String("node", "", "Name of the node the volumes are on (required).")
	interval := flag.Duration("interval", time.Second, "How often claims and volumes are checked.")
	group := flag.Int("group", DefaultGroup, "Group that owns the volumes' directories (setgid, group-writable): the fsGroup of the pods that write them.")
	flag.Parse()
	if *root == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "localpv: --root and --node are required")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "localpv: %v\n", err)
		os.Exit(1)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "localpv: %v\n", err)
		os.Exit(1)
	}
	p := &Provisioner{Client: c, Root: *root, Node: *node, Group: *group}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	for {
		if err := p.Sync(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "localpv: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(*interval):
		}
	}
}

// Sync makes sure the StorageClass exists, provisions every pending claim of the class
// and deletes every released volume it provisioned.
func (p *Provisioner) Sync(ctx context.Context) error {
	if err := p.ensureClass(ctx); err != nil {
		return err
	}
	var claims corev1.PersistentVolumeClaimList
	if err := p.Client.List(ctx, &claims); err != nil {
		return err
	}
	for i := range claims.Items {
		claim := &claims.Items[i]
		if ptr.Deref(claim.Spec.StorageClassName, "") != ClassName || claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil {
			continue
		}
		if err := p.provision(ctx, claim); err != nil {
			return fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
	}
	var volumes corev1.PersistentVolumeList
	if err := p.Client.List(ctx, &volumes); err != nil {
		return err
	}
	for i := range volumes.Items {
		pv := &volumes.Items[i]
		if pv.Annotations[annotationProvisionedBy] != ProvisionerName {
			continue
		}
		if pv.Status.Phase == corev1.VolumeReleased || pv.Status.Phase == corev1.VolumeFailed {
			if err := p.remove(ctx, pv); err != nil {
				return fmt.Errorf("volume %s: %w", pv.Name, err)
			}
		}
	}
	return nil
}

func (p *Provisioner) ensureClass(ctx context.Context) error {
	class := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: ClassName, Annotations: map[string]string{annotationDefaultClass: "true"}},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	if err := p.Client.Create(ctx, class); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", ClassName, err)
	}
	return nil
}

// volumeName is deterministic, so a repeated pass finds the volume it created.
func volumeName(claim *corev1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

func (p *Provisioner) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	name := volumeName(claim)
	dir := filepath.Join(p.Root, name)
	if err := makeVolumeDir(dir, p.Group); err != nil {
		return err
	}
	capacity, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		capacity = resource.MustParse("1Gi")
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotationProvisionedBy: ProvisionerName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: capacity},
			AccessModes:                   claim.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              ClassName,
			VolumeMode:                    claim.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: dir},
			},
			ClaimRef: &corev1.ObjectReference{
				APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID,
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{p.Node},
				}}}},
			}},
		},
	}
	if err := p.Client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// makeVolumeDir makes dir (or finds it made by an earlier pass) group's own,
// with volumeDirMode. The mode is set after the directory is made: mkdir's mode
// passes through the umask, which takes the group's write bit.
func makeVolumeDir(dir string, group int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(dir, -1, group); err != nil {
		return fmt.Errorf("giving %s to group %d: %w", dir, group, err)
	}
	return os.Chmod(dir, volumeDirMode)
}

func (p *Provisioner) remove(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.Local == nil || filepath.Dir(pv.Spec.Local.Path) != filepath.Clean(p.Root) {
		return fmt.Errorf("its path is not a directory of %s; left alone", p.Root)
	}
	if err := os.RemoveAll(pv.Spec.Local.Path); err != nil {
		return err
	}
	if err := p.Client.Delete(ctx, pv); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
