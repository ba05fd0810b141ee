package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/executor"
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

// TestVolumeIsWritableByTheSandboxGroup: the kubelet does not apply fsGroup to a
// local volume, so the provisioner makes the directory what fsGroup would: the
// sandbox group's, setgid, group-writable. A process running as the sandbox's
// uid and gid (as the Job and session pods do) creates a file and a directory in
// it, and they keep the group; a process of another uid and gid (a pod without
// toolgate's fsGroup) cannot write, as on a real cluster.
func TestVolumeIsWritableByTheSandboxGroup(t *testing.T) {
	if DefaultGroup != executor.SandboxGID {
		t.Fatalf("DefaultGroup %d is not the sandbox's gid %d", DefaultGroup, executor.SandboxGID)
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	root := t.TempDir()
	p := &Provisioner{Client: env.Client, Root: root, Node: "node-a", Group: DefaultGroup}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "ws", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(ClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	// Provisioned twice: a second pass over an existing directory keeps it so.
	// (Sync would also reach the volumes other tests left in the cluster.)
	for range 2 {
		if err := p.provision(ctx, claim); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(root, volumeName(claim))
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.Mode(), os.ModeDir|os.ModeSetgid|0o775; got != want {
		t.Errorf("the volume's directory is %s; want %s", got, want)
	}
	if gid := info.Sys().(*syscall.Stat_t).Gid; gid != DefaultGroup {
		t.Errorf("the volume's directory belongs to group %d; want %d", gid, DefaultGroup)
	}

	if os.Geteuid() != 0 {
		t.Skip("running processes as other users needs root")
	}
	// The kubelet mounts the directory itself into a pod; here a process reaches it
	// through the test's temporary folders, which only their owner may enter.
	for d := root; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	as := func(uid, gid uint32, script string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{gid}}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	sandbox := uint32(executor.SandboxUID)
	if out, err := as(sandbox, uint32(executor.SandboxGID), "echo ok > written && mkdir made && echo ok > made/nested"); err != nil {
		t.Fatalf("the sandbox's uid and gid cannot write the volume: %v: %s", err, out)
	}
	for _, name := range []string{"written", "made", "made/nested"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if gid := info.Sys().(*syscall.Stat_t).Gid; gid != DefaultGroup {
			t.Errorf("%s, made by the sandbox, belongs to group %d; want %d (setgid)", name, gid, DefaultGroup)
		}
	}
	if out, err := as(12345, 12345, "echo x > stranger"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("a process of another uid and gid wrote the volume: %v: %s", err, out)
	}
}
