package testenv

import (
	"path/filepath"
	"testing"
)

// A control plane that never comes up in time is retried by envtest, and each try
// reuses the folder the one before made. Start must fail with the cause and leave
// no folder behind, or the next run's leak check fails on it.
func TestStartThatFailsLeavesNoFolder(t *testing.T) {
	if _, err := assetsDir(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT", "1ms")
	env, err := Start()
	if err == nil {
		_ = env.Stop()
		t.Fatal("a control plane started within 1ms: the failure this test needs did not happen")
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "*"))
	if len(left) != 0 {
		t.Fatalf("a failed start left %v (error was: %v)", left, err)
	}
}

// A started control plane's folders are gone once it is stopped.
func TestStopRemovesTheFolders(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	env, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "k8s_test_framework_*")); len(left) == 0 {
		t.Fatalf("a running control plane has no folder under %s: the test looks in the wrong place", tmp)
	}
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "*"))
	if len(left) != 0 {
		t.Fatalf("a stopped control plane left %v", left)
	}
}
