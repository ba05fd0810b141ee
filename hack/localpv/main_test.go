package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, nil)) }

// TestProvisionAndRemove runs the provisioner's passes against a real API server: a
// pending claim of the class gets a local volume bound to it on a fresh directory,
// other claims are left alone, and a released volume loses its directory and object.
func TestProvisionAndRemove(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	root := t.TempDir()
	p := &Provisioner{Client: env.Client, Root: root, Node: "node-a"}

	claim := func(name string, class *string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: class,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
			},
		}
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ours := claim("ours", ptr.To(ClassName))
	other := claim("other", ptr.To("some-other-class"))

	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var class storagev1.StorageClass
	if err := env.Client.Get(ctx, client.ObjectKey{Name: ClassName}, &class); err != nil {
		t.Fatalf("the StorageClass was not created: %v", err)
	}
	if class.Annotations[annotationDefaultClass] != "true" || class.Provisioner != ProvisionerName {
		t.Errorf("StorageClass = %+v, want the default class of %s", class.ObjectMeta, ProvisionerName)
	}

	var pv corev1.PersistentVolume
	if err := env.Client.Get(ctx, client.ObjectKey{Name: volumeName(ours)}, &pv); err != nil {
		t.Fatalf("no volume for the claim: %v", err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Name != "ours" || ref.Namespace != ns || ref.UID != ours.UID {
		t.Errorf("claimRef = %+v, want the claim %s/ours", pv.Spec.ClaimRef, ns)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("capacity = %s, want the claim's 2Gi", got.String())
	}
	wantDir := filepath.Join(root, volumeName(ours))
	if pv.Spec.Local == nil || pv.Spec.Local.Path != wantDir {
		t.Fatalf("volume source = %+v, want local %s", pv.Spec.PersistentVolumeSource, wantDir)
	}
	if info, err := os.Stat(wantDir); err != nil || !info.IsDir() {
		t.Errorf("the volume's directory: %v", err)
	}
	terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchExpressions[0].Values[0] != "node-a" {
		t.Errorf("node affinity = %+v, want node-a", terms)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: volumeName(other)}, &corev1.PersistentVolume{}); !apierrors.IsNotFound(err) {
		t.Errorf("a claim of another class got a volume: %v", err)
	}

	// A second pass changes nothing.
	if err := p.Sync(ctx); err != nil {
		t.Fatalf("second pass: %v", err)
	}

	// Released (what the PV controller sets when the claim is gone): removed.
	if err := os.WriteFile(filepath.Join(wantDir, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pv.Status.Phase = corev1.VolumeReleased
	if err := env.Client.Status().Update(ctx, &pv); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, ours); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(wantDir); !os.IsNotExist(err) {
		t.Errorf("the released volume's directory still exists: %v", err)
	}
	var after corev1.PersistentVolume
	err := env.Client.Get(ctx, client.ObjectKey{Name: pv.Name}, &after)
	if err == nil && after.DeletionTimestamp == nil {
		t.Error("the released volume was not deleted")
	}
}

// TestRemoveRefusesForeignPaths: a volume whose path is not a directory of the root
// is never removed, whatever its annotation says.
func TestRemoveRefusesForeignPaths(t *testing.T) {
	outside := t.TempDir()
	p := &Provisioner{Client: env.Client, Root: t.TempDir(), Node: "node-a"}
	pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		Local: &corev1.LocalVolumeSource{Path: outside},
	}}}
	if err := p.remove(context.Background(), pv); err == nil {
		t.Fatal("remove of a path outside the root succeeded")
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("the outside directory is gone: %v", err)
	}
}
