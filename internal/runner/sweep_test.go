package runner

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
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

// What KillOthers leaves alive with background jobs to spare: PID 1, itself, each
// spared runner whose start time matches and everything below it; a runner whose
// pid was reused (another start time) is no job, and neither is a process of an
// earlier call that names itself after a job.
func TestKillOthersSparesOnlyTheJobsItWasGiven(t *testing.T) {
	stat := func(pid, comm string, ppid int, start uint64) string {
		// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
		// cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime
		return pid + " (" + comm + ") S " + itoa(ppid) + " 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + utoa(start) + " 0 0"
	}
	root := fakeProc(t, map[string]string{
		"1":  stat("1", "runner", 0, 10),
		"20": stat("20", "runner", 0, 500), // job runner, spared
		"21": stat("21", "bash", 20, 510),  // the job's shell
		"22": stat("22", "sleep", 21, 520), // and its child
		"23": stat("23", "sleep", 1, 530),  // orphan of the job... inherited by PID 1: not below it
		"30": stat("30", "runner", 0, 900), // reused pid of an ended job: start differs
		"31": stat("31", "sh", 30, 910),
		"40": stat("40", "runner", 0, 950), // this call's runner
		"41": stat("41", "evil (runner)", 1, 960),
	})
	procs, err := readProcs(root)
	if err != nil {
		t.Fatal(err)
	}
	keep := spared(root, procs, []Process{{PID: 20, Start: 500}, {PID: 30, Start: 800}, {PID: 99, Start: 1}})
	got := pids(othersOf(procs, 40, keep))
	if want := []int{23, 30, 31, 41}; !reflect.DeepEqual(got, want) {
		t.Errorf("killed %v, want %v", got, want)
	}
	if start, err := ProcessStart(root, 22); err != nil || start != 520 {
		t.Errorf("ProcessStart(22) = %d, %v; want 520", start, err)
	}
	if got := pids(othersOf(procs, 40, spared(root, procs, nil))); !reflect.DeepEqual(got, []int{20, 21, 22, 23, 30, 31, 41}) {
		t.Errorf("with nothing to spare, killed %v", got)
	}
}

func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

// ProcessStart reads this very process's start time, as `runner exec` reports its
// own for a background job.
func TestProcessStartOfSelf(t *testing.T) {
	start, err := ProcessStart("/proc", os.Getpid())
	if err != nil || start == 0 {
		t.Fatalf("ProcessStart(self) = %d, %v", start, err)
	}
	if again, _ := ProcessStart("/proc", os.Getpid()); again != start {
		t.Errorf("start time moved: %d then %d", start, again)
	}
}
