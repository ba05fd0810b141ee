package leakcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A process started with the marker in its environment, or working in the run's
// folder, is found until it is gone; a process of neither is not.
func TestScanFindsTheProcessesOfTheRun(t *testing.T) {
	root := t.TempDir()
	marked := exec.Command("sleep", "300")
	marked.Env = []string{MarkerEnv + "=" + root}
	inRoot := exec.Command("sleep", "300")
	inRoot.Dir, inRoot.Env = root, []string{}
	other := exec.Command("sleep", "300")
	other.Env = []string{MarkerEnv + "=" + filepath.Join(root, "another-run")}
	for _, cmd := range []*exec.Cmd{marked, inRoot, other} {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	found := map[int]bool{}
	for _, p := range scan(root) {
		found[p.pid] = true
	}
	if !found[marked.Process.Pid] || !found[inRoot.Process.Pid] || found[other.Process.Pid] || len(found) != 2 {
		t.Fatalf("found %v; want the marked sleep %d and the one in the run's folder %d only", found, marked.Process.Pid, inRoot.Process.Pid)
	}
	for _, cmd := range []*exec.Cmd{marked, inRoot} {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	if left := survivors(root, 10*time.Second); len(left) != 0 {
		t.Fatalf("killed processes still found: %v", left)
	}
}

func TestLeftoversNamesWhatIsLeft(t *testing.T) {
	root := t.TempDir()
	if left := leftovers(root); len(left) != 0 {
		t.Fatalf("an empty folder has leftovers %v", left)
	}
	if err := os.Mkdir(filepath.Join(root, "runner-bin-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(root); len(left) != 1 || left[0] != filepath.Join(root, "runner-bin-1") {
		t.Fatalf("leftovers %v", left)
	}
}
