package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/leakcheck"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m.Run))
}

// fixture is a tiny module with two gates (testdata/fixture/gate/gate.go).
const fixture = "testdata/fixture"

// allowed is the fixture's gate that TestAllowed proves.
var allowed = Gate{
	ID: "allowed", Keeps: "anyone but alice passing", File: "gate/gate.go",
	Anchor: `if name != "alice" {`, Mutation: `if false {`,
	Package: "./gate", Run: "^TestAllowed$",
}

func TestLocateRefusesStaleEntries(t *testing.T) {
	twice := allowed
	twice.ID, twice.Anchor, twice.Mutation = "twice", "return true", "return false"
	gone := allowed
	gone.ID, gone.Anchor = "gone", `if name != "bob" {`
	noFile := allowed
	noFile.ID, noFile.File = "nofile", "gate/missing.go"

	if err := Locate(fixture, []Gate{allowed}); err != nil {
		t.Fatalf("Locate(allowed) = %v, want nil", err)
	}
	err := Locate(fixture, []Gate{allowed, twice, gone, noFile})
	if err == nil {
		t.Fatal("Locate accepted an anchor found twice, one not found and a missing file")
	}
	for _, want := range []string{
		"twice: gate/gate.go: the anchor is found 2 times",
		"gone: gate/gate.go: the anchor is not found",
		"nofile: open " + fixture + "/gate/missing.go",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Locate's error does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "allowed:") {
		t.Errorf("Locate's error names the current entry:\n%v", err)
	}
}

func TestMutateMatchesAnyWhitespaceRun(t *testing.T) {
	g := Gate{Anchor: "if a  &&\n b {", Mutation: "if true {\n"}
	got, err := g.Mutate([]byte("x\nif a &&\n\t\tb {\n\treturn\n}"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "x\nif true {\n\treturn\n}"; string(got) != want {
		t.Errorf("Mutate = %q, want %q", got, want)
	}
	if _, err := g.Mutate([]byte("if a && c {")); err == nil {
		t.Error("Mutate found an anchor whose words differ")
	}
}

func TestLoadListRefusesMalformedEntries(t *testing.T) {
	for name, tc := range map[string]struct{ list, want string }{
		"unknown field": {
			`- {id: a, keeps: k, file: f.go, anchor: x, mutation: y, package: ./p, run: T, tset: T}`,
			`unknown field "tset"`,
		},
		"id twice": {
			"- {id: a, keeps: k, file: f.go, anchor: x, mutation: y, package: ./p, run: T}\n" +
				"- {id: a, keeps: k, file: f.go, anchor: z, mutation: y, package: ./p, run: T}",
			"entry 2 (a): the id is used twice",
		},
		"no keeps": {
			`- {id: a, file: f.go, anchor: x, mutation: y, package: ./p, run: T}`,
			"keeps is empty",
		},
		"mutation is the anchor": {
			`- {id: a, keeps: k, file: f.go, anchor: "x  y", mutation: "x y", package: ./p, run: T}`,
			"the mutation is the anchor",
		},
		"package outside": {
			`- {id: a, keeps: k, file: f.go, anchor: x, mutation: y, package: internal/p, run: T}`,
			`package "internal/p" is not a ./ path`,
		},
		"bad run": {
			`- {id: a, keeps: k, file: f.go, anchor: x, mutation: y, package: ./p, run: "T("}`,
			`run "T("`,
		},
		"empty": {"[]", "lists no gate"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gates.yaml")
			if err := os.WriteFile(path, []byte(tc.list), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadList(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadList = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestCheck runs the harness on the fixture: a removal the tests catch, one they
// do not, and entries that cannot be checked.
func TestCheck(t *testing.T) {
	survives := Gate{
		ID: "logged", Keeps: "an empty name written to the log", File: "gate/gate.go",
		Anchor: `if name == "" {`, Mutation: `if false {`,
		Package: "./gate", Run: "^TestAllowed$",
	}
	skips := allowed
	skips.ID, skips.Run = "skips", "^TestSkips$"
	fails := allowed
	fails.ID, fails.Run = "fails", "^TestFailsWhenAsked$"
	noTest := allowed
	noTest.ID, noTest.Run = "notest", "^TestNoSuchTest$"
	noBuild := allowed
	noBuild.ID, noBuild.Mutation = "nobuild", "if undefinedName {"
	gates := []Gate{allowed, survives, skips, fails, noTest, noBuild}

	before := snapshot(t, fixture)
	report, err := Check(context.Background(), Options{
		Root: fixture, Gates: gates, Jobs: 2,
		Env: append(os.Environ(), "FIXTURE_FAIL=1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, fixture); after != before {
		t.Error("Check changed the checkout")
	}
	want := map[string]struct {
		outcome Outcome
		detail  string
	}{
		"allowed": {Killed, "caught by TestAllowed"},
		"logged":  {Survived, "TestAllowed passed with the gate removed: an empty name written to the log"},
		"skips":   {Broken, `every test that -run "^TestSkips$" selects skips (TestSkips)`},
		"fails":   {Broken, "with the gate in place, the tests fail (TestFailsWhenAsked)"},
		"notest":  {Broken, `-run "^TestNoSuchTest$" selects no test of ./gate`},
		"nobuild": {Broken, "the mutation does not compile"},
	}
	for _, res := range report.Results {
		w := want[res.Gate.ID]
		if res.Outcome != w.outcome || !strings.Contains(res.Detail, w.detail) {
			t.Errorf("%s: %s %q, want %s saying %q", res.Gate.ID, res.Outcome, res.Detail, w.outcome, w.detail)
		}
	}
	if report.OK() {
		t.Error("a report with a surviving removal is OK")
	}
	if got := report.Scores(); len(got) != 1 || got[0] != (Score{Package: "./gate", Killed: 1, Listed: 6}) {
		t.Errorf("Scores = %+v, want ./gate 1 of 6", got)
	}

	report, err = Check(context.Background(), Options{Root: fixture, Gates: []Gate{allowed}, Jobs: 1, Env: os.Environ()})
	if err != nil || !report.OK() {
		t.Errorf("Check(allowed) = %+v, %v; want every removal caught", report.Results, err)
	}

	stale := allowed
	stale.Anchor = "return true"
	if _, err := Check(context.Background(), Options{Root: fixture, Gates: []Gate{stale}, Jobs: 1}); err == nil ||
		!strings.Contains(err.Error(), "found 2 times") {
		t.Errorf("Check ran a stale entry: %v", err)
	}
}

// A worker's tests get a TMPDIR at most 21 bytes longer than the check's own: a
// Unix socket's path holds 107 bytes, and a test's socket lies 74 bytes below
// TMPDIR (leakcheck's folder, then t.TempDir's: internal/gitws's
// TestCopyTreeSkipsSpecialFiles), so with TMPDIR=/tmp it must still fit, as it does
// outside the check.
func TestWorkersTmpLeavesRoomForASocket(t *testing.T) {
	base, err := workRoot()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(base) }()
	w, err := newWorker(fixture, workerDir(base, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	const most = 21 // "/gates-" and its 10 digits, "/0", "/t"
	if extra := len(w.tmp) - len(os.TempDir()); extra > most {
		t.Errorf("a worker's TMPDIR %s is %d bytes longer than %s, want at most %d: a test's Unix socket below it may not fit", w.tmp, extra, os.TempDir(), most)
	}
}

// TestTheGateListIsCurrent checks every entry of the repository's list against
// the code as it is: a stale entry fails here, in the ordinary test run, without
// waiting for make test-gates.
func TestTheGateListIsCurrent(t *testing.T) {
	gates, err := LoadList("gates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	if err := Locate(root, gates); err != nil {
		t.Error(err)
	}
	for _, g := range gates {
		if _, err := os.Stat(filepath.Join(root, g.Package)); err != nil {
			t.Errorf("%s: package %s: %v", g.ID, g.Package, err)
		}
	}
}

// snapshot is every file's content under dir, for comparing.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b bytes.Buffer
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		b.WriteString(path + "\n")
		b.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
