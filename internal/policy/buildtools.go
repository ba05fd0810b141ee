package policy

import (
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Each handler here is registered through sensitive, so it gets static words
// only: a word known only when it runs could be any subcommand or option.

// makeCmd classifies make by its targets: test targets test, install installs,
// clean deletes, anything else (including the default target) builds. -n only prints.
func makeCmd(c *classifier, w []word, _ int) {
	args := w[1:]
	for _, a := range args {
		if t := a.text; t == "--" {
			break
		} else if strings.HasPrefix(t, "--ev") || (strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "--") && strings.ContainsRune(t, 'E')) {
			// An inline makefile is not the project's code: it is whatever the
			// command says, even under -n ($(shell ...) runs).
			c.addWithReason(w, v1alpha1.CategoryUnknown, "make --eval (-E) runs a makefile given on the command line")
			return
		}
	}
	if hasFlag(args, "nq", "dry-run", "just-print", "question", "recon") {
		// make -n still expands $(shell ...) and runs recursive + lines.
		c.addWithReason(w, v1alpha1.CategoryBuild, "make -n still runs $(shell ...) in the makefile")
		return
	}
	category := v1alpha1.CategoryBuild
	targets := 0
	for i := 0; i < len(args); i++ {
		t := args[i].text
		if t == "-C" || t == "-f" || t == "-j" || t == "-I" || t == "-o" || t == "-W" {
			i++
			continue
		}
		if strings.HasPrefix(t, "-") || strings.Contains(t, "=") {
			continue
		}
		targets++
		var target v1alpha1.CommandCategory
		switch {
		case t == "test" || t == "tests" || t == "check" || strings.HasPrefix(t, "test-") || strings.HasPrefix(t, "test_") || t == "lint" || t == "vet":
			target = v1alpha1.CategoryTest
		case t == "install":
			target = v1alpha1.CategoryInstall
		case t == "clean" || t == "distclean" || t == "mrproper":
			target = v1alpha1.CategoryDelete
		default:
			target = v1alpha1.CategoryBuild
		}
		if targets == 1 {
			category = target
		} else {
			category = strictestOf(category, target)
		}
	}
	c.add(w, category)
}

func cargo(c *classifier, w []word, _ int) {
	ops := operands(w[1:])
	if len(ops) == 0 || hasFlag(w[1:], "V", "version") {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	for _, a := range w[1:] {
		if t := a.text; t == "--" {
			break
		} else if t == "--config" || strings.HasPrefix(t, "--config=") || t == "-Z" || strings.HasPrefix(t, "-Z") {
			// target.*.runner, build.rustc-wrapper, doc.browser: configuration given
			// here runs what it names.
			c.addWithReason(w, v1alpha1.CategoryUnknown, "cargo --config and -Z set configuration that names programs cargo runs")
			return
		}
	}
	var category v1alpha1.CommandCategory
	switch ops[0].text {
	case "test", "t", "bench", "nextest":
		category = v1alpha1.CategoryTest
	case "build", "b", "check", "c", "clippy", "doc", "d", "run", "r":
		category = v1alpha1.CategoryBuild
	case "fmt", "fix", "new", "init":
		category = v1alpha1.CategoryWrite
	case "install", "add", "remove", "rm", "update", "fetch", "vendor", "generate-lockfile":
		category = v1alpha1.CategoryInstall
	case "publish", "search", "login", "yank", "owner":
		category = v1alpha1.CategoryNetwork
	case "clean":
		category = v1alpha1.CategoryDelete
	case "help", "version", "locate-project", "pkgid", "verify-project":
		category = v1alpha1.CategoryReadOnly
	case "tree", "metadata":
		// They update the registry index when the lock file is not enough.
		category = v1alpha1.CategoryNetwork
	default:
		category = v1alpha1.CategoryUnknown
	}
	c.add(w, category)
}

// javaBuild classifies mvn and gradle by their goals or tasks: only test goals is a
// test run; install and deploy install; clean deletes; anything else builds.
func javaBuild(c *classifier, w []word, _ int) {
	goals := operands(w[1:])
	category := v1alpha1.CategoryBuild
	onlyTests := len(goals) > 0
	for _, o := range goals {
		goal := o.text
		if i := strings.LastIndex(goal, ":"); i >= 0 {
			goal = goal[i+1:]
		}
		switch goal {
		case "test", "verify", "check", "integration-test":
			continue
		case "install", "publish", "deploy", "dependencies":
			category = strictestOf(category, v1alpha1.CategoryInstall)
		case "clean":
			category = strictestOf(category, v1alpha1.CategoryDelete)
		}
		onlyTests = false
	}
	if onlyTests {
		category = v1alpha1.CategoryTest
	}
	c.add(w, category)
}

// cargoReadOnly are the read-only forms of cargo. Everything else it does is test,
// build, write, install, network, delete or unknown (cargo).
var cargoReadOnly = map[string]devForm{
	"help":           {flags: flags(""), noOperands: true},
	"version":        {flags: flags("", "v", "verbose")},
	"locate-project": {flags: flags("manifest-path message-format color", "workspace", "q", "quiet", "offline", "frozen", "locked")},
	"pkgid":          {flags: flags("manifest-path p package color", "q", "quiet", "offline", "frozen", "locked")},
	"verify-project": {flags: flags("manifest-path color", "q", "quiet", "offline", "frozen", "locked")},
}

// testRunnerOptions are the options of test runners that do more than run the
// project's tests, by the option's start (an abbreviation counts).
var testRunnerOptions = map[string][]struct {
	prefix   string
	category v1alpha1.CommandCategory
	reason   string
}{
	"pytest": {{"--basetemp", v1alpha1.CategoryDelete, "pytest --basetemp deletes the folder it names if it exists"}},
	"jest": {
		{"--clearCache", v1alpha1.CategoryDelete, "jest --clearCache deletes its cache folder (--cacheDirectory names any)"},
		{"--clear-cache", v1alpha1.CategoryDelete, "jest --clear-cache deletes its cache folder (--cache-directory names any)"},
	},
	"ctest": {
		{"-D", v1alpha1.CategoryNetwork, "ctest -D runs a dashboard: it updates from version control and submits results"},
		{"-T", v1alpha1.CategoryNetwork, "ctest -T runs a dashboard step (Update, Submit reach servers)"},
		{"-M", v1alpha1.CategoryNetwork, "ctest -M runs a dashboard model"},
		{"-S", v1alpha1.CategoryUnknown, "ctest -S runs a CTest script"},
		{"--dashboard", v1alpha1.CategoryNetwork, "ctest --dashboard runs a dashboard step"},
		{"--test-action", v1alpha1.CategoryNetwork, "ctest --test-action runs a dashboard step"},
		{"--test-model", v1alpha1.CategoryNetwork, "ctest --test-model runs a dashboard model"},
		{"--script", v1alpha1.CategoryUnknown, "ctest --script runs a CTest script"},
	},
}

// testRunner runs the project's tests, unless an option of testRunnerOptions says
// it does more.
func testRunner(c *classifier, w []word, _ int) {
	name := w[0].text
	if name == "py.test" {
		name = "pytest"
	}
	category, reason := v1alpha1.CategoryTest, ""
	for _, a := range w[1:] {
		if a.text == "--" {
			break
		}
		for _, o := range testRunnerOptions[name] {
			if strings.HasPrefix(a.text, o.prefix) && Stricter(o.category, category) {
				category, reason = o.category, o.reason
			}
		}
	}
	c.addWithReason(w, category, reason)
}
