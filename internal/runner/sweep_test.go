package runner

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fakeProc writes a /proc with the given stat lines, keyed by pid directory name.
func fakeProc(t *testing.T, stats map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, stat := range stats {
		if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Not a process: must be ignored.
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func pids(ps []proc) []int {
	out := []int{}
	for _, p := range ps {
		out = append(out, p.pid)
	}
	return out
}

// Sweep's choice of targets, on a fixed /proc: as PID 1 everything but itself and the
// zombies; otherwise its live descendants only (an unrelated process of the machine,
// pid 50, is never a target).
func TestSweepTargets(t *testing.T) {
	root := fakeProc(t, map[string]string{
		"1":  "1 (runner) S 0 1 1 0",
		"7":  "7 (bash) S 1 7 7 0",
		"8":  "8 (sh (evil) )) R 7 8 8 0",
		"9":  "9 (sleep) Z 1 9 9 0",
		"12": "12 (sleep) S 8 9 9 0",
		"50": "50 (kubectl exec) S 0 50 50 0",
	})
	all, err := sweepTargets(root, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pids(all), []int{7, 8, 12, 50}; !reflect.DeepEqual(got, want) {
		t.Errorf("as PID 1: targets %v, want %v", got, want)
	}
	if all[1].comm != "sh (evil) )" {
		t.Errorf("comm %q", all[1].comm)
	}
	below, err := sweepTargets(root, 7, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pids(below), []int{8, 12}; !reflect.DeepEqual(got, want) {
		t.Errorf("below pid 7: targets %v, want %v", got, want)
	}
}

func TestParseStatRefusesGarbage(t *testing.T) {
	for _, stat := range []string{"", "3 sleep S 1", "3 (sleep)", "3 (sleep) S x"} {
		if _, err := parseStat(3, stat); err == nil {
			t.Errorf("parseStat(%q) succeeded", stat)
		}
	}
}

// A thread group whose leader exited shows a zombie leader while its other threads
// run: it is live, and Sweep kills it; a plain zombie is not.
func TestAZombieLeaderWithLiveThreadsIsLive(t *testing.T) {
	root := fakeProc(t, map[string]string{
		"1": "1 (runner) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 10",
		"7": "7 (zl) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 2 0 11",
		"8": "8 (sleep) Z 1 8 8 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12",
		"9": "9 (bash) S 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 13",
	})
	all, err := sweepTargets(root, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pids(all), []int{7, 9}; !reflect.DeepEqual(got, want) {
		t.Errorf("targets %v, want %v (the zombie leader with a live thread, and bash)", got, want)
	}
}

// InSession is true only where PID 1 is `runner session` of this very runner's
// path; its command line is all that can be read of it.
func TestInSession(t *testing.T) {
	self := os.Args[0]
	for cmdline, want := range map[string]bool{
		self + "\x00session\x00":          true,
		"/sbin/init\x00":                  false,
		"/tmp/x/runner\x00session\x00":    false,
		self + "\x00session\x00extra\x00": false,
		self + "\x00exec\x00":             false,
	} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "1", "cmdline"), []byte(cmdline), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := InSession(root); got != want {
			t.Errorf("InSession with PID 1 %q = %v, want %v", cmdline, got, want)
		}
	}
}
