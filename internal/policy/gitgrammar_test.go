package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// gitCanary is a word whose effect shows whether git read it as an option. A probe
// puts it right after the option under test: when the option takes the next word as
// its value, the canary has no effect.
type gitCanary int

const (
	// gitCanaryOutput is --output=FILE, which git's diff options open (and create)
	// when they read it: the canary of every command that parses diff options.
	gitCanaryOutput gitCanary = iota
	// gitCanaryHelp is --help-all, which parse-options answers with its usage on
	// standard output and exit status 129 (-h is an option of some subcommands).
	gitCanaryHelp
	// gitCanaryToplevel is --show-toplevel, which git rev-parse answers with the
	// repository's path (and which no other mode of it turns off).
	gitCanaryToplevel
	// gitCanaryVersion is --version, git's own option before a subcommand.
	gitCanaryVersion
	// gitCanaryNone: the command's parser has no canary (a loop of string
	// comparisons); its grammar may list only flags, each of which git must accept.
	gitCanaryNone
)

const (
	// gitUnknownProbe names no option of any git command.
	gitUnknownProbe = "--zz-toolgate-unknown"
	// gitShortSample is attached to a short option: a value to one that takes one,
	// an unknown option letter in a bundle to a flag.
	gitShortSample = "Q"
)

// gitProbeValues are the values attached to the long options whose value git
// checks by refusing any other as an unknown option (--no-walk=1 is "unrecognized
// argument"); the others get "1".
var gitProbeValues = map[string]string{"no-walk": "unsorted"}

// gitProbeContext is how to run one grammar's options: git ARGS OPTION CANARY
// OPERANDS, in a repository that has what the operands name.
type gitProbeContext struct {
	args     []string
	operands []string
	canary   gitCanary
}

// gitProbeContexts has a context for every grammar of gitReadGrammars (and "" for
// git's own options). A grammar without one cannot be checked, and fails the test.
var gitProbeContexts = map[string]gitProbeContext{
	"": {canary: gitCanaryVersion},

	"log":        {args: []string{"log"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"show":       {args: []string{"show"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"reflog":     {args: []string{"reflog", "show"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"stash list": {args: []string{"stash", "list"}, canary: gitCanaryOutput},
	"stash show": {args: []string{"stash", "show"}, operands: []string{"stash@{0}"}, canary: gitCanaryOutput},
	"diff":       {args: []string{"diff"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"diff-tree":  {args: []string{"diff-tree"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"diff-files": {args: []string{"diff-files"}, operands: []string{"f.txt"}, canary: gitCanaryOutput},
	"diff-index": {args: []string{"diff-index"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"range-diff": {args: []string{"range-diff"}, operands: []string{"HEAD~1...HEAD"}, canary: gitCanaryOutput},
	"rev-list":   {args: []string{"rev-list"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"shortlog":   {args: []string{"shortlog"}, operands: []string{"HEAD"}, canary: gitCanaryOutput},
	"blame":      {args: []string{"blame"}, operands: []string{"f.txt"}, canary: gitCanaryOutput},
	"annotate":   {args: []string{"annotate"}, operands: []string{"f.txt"}, canary: gitCanaryOutput},

	"status":           {args: []string{"status"}, operands: []string{"f.txt"}, canary: gitCanaryHelp},
	"ls-files":         {args: []string{"ls-files"}, operands: []string{"f.txt"}, canary: gitCanaryHelp},
	"ls-tree":          {args: []string{"ls-tree"}, operands: []string{"HEAD"}, canary: gitCanaryHelp},
	"grep":             {args: []string{"grep"}, operands: []string{"alpha"}, canary: gitCanaryHelp},
	"cat-file":         {args: []string{"cat-file"}, canary: gitCanaryHelp},
	"show-ref":         {args: []string{"show-ref"}, operands: []string{"main"}, canary: gitCanaryHelp},
	"merge-base":       {args: []string{"merge-base"}, operands: []string{"HEAD", "HEAD~1"}, canary: gitCanaryHelp},
	"name-rev":         {args: []string{"name-rev"}, operands: []string{"HEAD"}, canary: gitCanaryHelp},
	"count-objects":    {args: []string{"count-objects"}, canary: gitCanaryHelp},
	"for-each-ref":     {args: []string{"for-each-ref"}, operands: []string{"refs/heads"}, canary: gitCanaryHelp},
	"describe":         {args: []string{"describe"}, operands: []string{"HEAD"}, canary: gitCanaryHelp},
	"help":             {args: []string{"help"}, canary: gitCanaryHelp},
	"version":          {args: []string{"version"}, canary: gitCanaryHelp},
	"check-ignore":     {args: []string{"check-ignore"}, operands: []string{"f.txt"}, canary: gitCanaryHelp},
	"cherry":           {args: []string{"cherry"}, operands: []string{"HEAD~1"}, canary: gitCanaryHelp},
	"show-branch":      {args: []string{"show-branch"}, operands: []string{"main"}, canary: gitCanaryHelp},
	"fsck":             {args: []string{"fsck"}, canary: gitCanaryHelp},
	"check-attr":       {args: []string{"check-attr"}, operands: []string{"diff", "f.txt"}, canary: gitCanaryHelp},
	"branch":           {args: []string{"branch"}, operands: []string{"zz-probe-branch"}, canary: gitCanaryHelp},
	"tag":              {args: []string{"tag"}, operands: []string{"zz-probe-tag"}, canary: gitCanaryHelp},
	"remote":           {args: []string{"remote"}, canary: gitCanaryHelp},
	"remote show":      {args: []string{"remote", "show", "-n"}, operands: []string{"origin"}, canary: gitCanaryHelp},
	"remote get-url":   {args: []string{"remote", "get-url"}, operands: []string{"origin"}, canary: gitCanaryHelp},
	"config":           {args: []string{"config"}, operands: []string{"zz.probe"}, canary: gitCanaryHelp},
	"clean":            {args: []string{"clean"}, operands: []string{"f.txt"}, canary: gitCanaryHelp},
	"worktree list":    {args: []string{"worktree", "list"}, canary: gitCanaryHelp},
	"submodule":        {args: []string{"submodule", "status"}, canary: gitCanaryNone},
	"rev-parse":        {args: []string{"rev-parse"}, operands: []string{"HEAD"}, canary: gitCanaryToplevel},
	"var":              {args: []string{"var"}, canary: gitCanaryNone},
	"check-ref-format": {args: []string{"check-ref-format"}, operands: []string{"refs/heads/x"}, canary: gitCanaryNone},
}

// gitProber runs git in a throwaway repository.
type gitProber struct {
	git  string
	repo string
	env  []string
	// dir holds the canary files.
	dir  string
	next atomic.Int64
}

// gitRun is what one git command did.
type gitRun struct {
	stdout, stderr string
	code           int
	// fired says the canary had its effect: git read it as an option.
	fired bool
}

func newGitProber(t *testing.T) *gitProber {
	t.Helper()
	bin, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is not installed: the git grammars cannot be checked against it (%v)", err)
	}
	root := t.TempDir()
	// git prints the repository's real path (git rev-parse --show-toplevel).
	if root, err = filepath.EvalSymlinks(root); err != nil {
		t.Fatal(err)
	}
	p := &gitProber{git: bin, repo: filepath.Join(root, "repo"), dir: filepath.Join(root, "canaries")}
	home := filepath.Join(root, "home")
	for _, d := range []string{p.repo, p.dir, home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing of the machine's configuration, locale or terminal: git's messages are
	// read in English, and a pager or editor would wait.
	p.env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C", "LANG=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_PAGER=cat", "PAGER=cat",
		"GIT_EDITOR=false", "EDITOR=false", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0",
		"GIT_AUTHOR_NAME=Probe", "GIT_AUTHOR_EMAIL=probe@example.com",
		"GIT_COMMITTER_NAME=Probe", "GIT_COMMITTER_EMAIL=probe@example.com",
	}
	must := func(args ...string) {
		t.Helper()
		if r := p.exec(args...); r.code != 0 {
			t.Fatalf("git %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(p.repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must("init", "-q", "--template=", "-b", "main")
	write("f.txt", "alpha\nbeta\n")
	must("add", "f.txt")
	must("commit", "-q", "-m", "one")
	write("f.txt", "alpha\nbeta\ngamma\n")
	must("commit", "-q", "-a", "-m", "two")
	must("tag", "v1")
	must("remote", "add", "origin", p.repo)
	write("f.txt", "alpha\nbeta\ngamma\ndelta\n")
	must("stash", "-q")
	write("f.txt", "alpha\nbeta\ngamma\nepsilon\n")
	return p
}

// exec runs git ARGS in the repository.
func (p *gitProber) exec(args ...string) gitRun {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.git, args...)
	cmd.Dir, cmd.Env = p.repo, p.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := gitRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		r.code, r.stderr = -1, err.Error()
	}
	return r
}

// probe runs git ARGS WORDS CANARY OPERANDS, or with afterOperands git ARGS OPERANDS
// WORDS CANARY, and says whether the canary fired.
func (p *gitProber) probe(c gitProbeContext, afterOperands bool, words ...string) gitRun {
	var canary, file string
	switch c.canary {
	case gitCanaryOutput:
		file = filepath.Join(p.dir, fmt.Sprintf("canary-%d", p.next.Add(1)))
		canary = "--output=" + file
	case gitCanaryHelp:
		canary = "--help-all"
	case gitCanaryToplevel:
		canary = "--show-toplevel"
	case gitCanaryVersion:
		canary = "--version"
	}
	args := append([]string{}, c.args...)
	if afterOperands {
		args = append(args, c.operands...)
	}
	args = append(args, words...)
	if canary != "" {
		args = append(args, canary)
	}
	if !afterOperands {
		args = append(args, c.operands...)
	}
	r := p.exec(args...)
	switch c.canary {
	case gitCanaryOutput:
		_, err := os.Stat(file)
		r.fired = err == nil
		os.Remove(file)
	case gitCanaryHelp:
		r.fired = r.code == 129 && strings.Contains(r.stdout, "usage: ") && !hasErrorLine(r.stderr)
	case gitCanaryToplevel:
		r.fired = hasLine(r.stdout, p.repo)
	case gitCanaryVersion:
		r.fired = strings.HasPrefix(r.stdout, "git version ")
	case gitCanaryNone:
		r.fired = r.code == 0
	}
	return r
}

func hasLine(out, line string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

func hasErrorLine(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "error: ") || strings.HasPrefix(l, "fatal: ") {
			return true
		}
	}
	return false
}

// gitRejection says how a context's git refuses an option it does not know.
type gitRejection int

const (
	// gitRejectsByName: a message names the word ("unknown option `x'",
	// "unrecognized argument: --x", "option `x' takes no value").
	gitRejectsByName gitRejection = iota
	// gitRejectsWithUsage: the usage and exit status 129, naming nothing (rev-list,
	// diff-tree, diff-files).
	gitRejectsWithUsage
	// gitRejectsByEcho: git rev-parse prints a word it does not know back.
	gitRejectsByEcho
	// gitRejectsByStatus: a non-zero exit status.
	gitRejectsByStatus
)

// rejects says whether git refused one of forms: the word under test as git may
// quote it (--x=1, x=1, x, -xQ, Q).
func (r gitRun) rejects(how gitRejection, forms ...string) bool {
	switch how {
	case gitRejectsWithUsage:
		if r.code == 129 && strings.Contains(r.stderr, "usage: ") {
			return true
		}
	case gitRejectsByEcho:
		for _, f := range forms {
			if strings.HasPrefix(f, "-") && hasLine(r.stdout, f) {
				return true
			}
		}
	case gitRejectsByStatus:
		return r.code != 0
	}
	out := r.stderr + "\n" + r.stdout
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		for _, f := range forms {
			for _, m := range []string{"unrecognized argument: " + f, "invalid option: " + f, "unknown option: " + f} {
				if strings.HasSuffix(l, m) {
					return true
				}
			}
			for _, m := range []string{"unknown option `" + f + "'", "unknown switch `" + f + "'", "option `" + f + "' takes no value",
				// A bare option that git reads only with an attached value.
				f + " requires an argument", "option `" + f + "' requires a value", "Option '" + f + "' requires a value"} {
				if strings.Contains(l, m) {
					return true
				}
			}
		}
	}
	return false
}

// gitArity is how git takes an option's value.
type gitArity string

const (
	gitFlag         gitArity = "a flag"
	gitNextWord     gitArity = "a value in the next word (or attached)"
	gitOptional     gitArity = "an optional value, attached only"
	gitAttachedOnly gitArity = "a value, attached only"
	gitUnknown      gitArity = "nothing (git does not know it)"
)

// notation is the grammar notation for an arity: long options "", "=", "[=]"; short
// options "", ":", "::". A value git takes attached only (--glob=X) is written as an
// optional one: the bare option, which the grammar then accepts, makes git exit with
// an error, and the next word is read as git reads it.
func (a gitArity) notation(long bool) string {
	switch a {
	case gitNextWord:
		if long {
			return "="
		}
		return ":"
	case gitOptional, gitAttachedOnly:
		if long {
			return "[=]"
		}
		return "::"
	}
	return ""
}

// gitOptionArity asks git how it takes option word (--name or -x).
func (p *gitProber) gitOptionArity(c gitProbeContext, how gitRejection, long bool, name string) gitArity {
	var bare, attached []string // the forms git may quote when it refuses the word
	word := "-" + name
	sample := word + gitShortSample
	if long {
		word = "--" + name
		value := "1"
		if v, ok := gitProbeValues[name]; ok {
			value = v
		}
		sample = word + "=" + value
		bare = []string{word, name}
		attached = []string{sample, name + "=" + value, name}
	} else {
		bare = []string{word, name}
		attached = []string{sample, gitShortSample, "-" + gitShortSample}
	}
	b := p.probe(c, false, word)
	if c.canary == gitCanaryNone {
		if b.rejects(how, bare...) {
			return gitUnknown
		}
		return gitFlag
	}
	a := p.probe(c, false, sample)
	bareRejected, attachedRejected := b.rejects(how, bare...), a.rejects(how, attached...)
	switch {
	case bareRejected && attachedRejected:
		return gitUnknown
	case bareRejected:
		return gitAttachedOnly
	case !b.fired:
		return gitNextWord
	case attachedRejected:
		return gitFlag
	}
	return gitOptional
}

// TestGitGrammarsMatchInstalledGit holds every git grammar to the git installed here:
// for each option it lists, git is run with the option and a canary word after it,
// and with a value attached, in a throwaway repository. The arity the grammar says
// (flag, value in the next word, optional or attached-only value) must be the one
// git shows: a grammar that says an option takes the next word when git reads that
// word as an option would hide a following --output=FILE, which git opens and
// truncates. Options git does not know, grammars without a way to run them, and
// contexts whose canary does not work fail too: what cannot be checked is taken out
// of the grammar, so the classifier refuses it. The test also checks that git reads
// options after operands exactly where the grammar says, and that short options
// bundle as getopt's do wherever the grammar lets them.
func TestGitGrammarsMatchInstalledGit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs git some thousand times")
	}
	p := newGitProber(t)
	version := strings.TrimSpace(p.exec("--version").stdout)
	grammars := map[string]*grammar{"": gitGlobal}
	for name, g := range gitReadGrammars {
		grammars[name] = g
	}
	names := make([]string, 0, len(grammars))
	for name := range grammars {
		names = append(names, name)
	}
	sort.Strings(names)
	checked := 0
	for _, name := range names {
		g := grammars[name]
		label := strings.TrimSpace("git " + name)
		t.Run(label, func(t *testing.T) {
			c, ok := gitProbeContexts[name]
			if !ok {
				t.Fatalf("%s: no probe context, so its grammar cannot be checked against git: add one to gitProbeContexts or take the grammar out", label)
			}
			if r := p.probe(c, false); !r.fired && c.canary != gitCanaryNone {
				t.Fatalf("%s: the canary does not work here, so no option can be checked (exit %d)\n%s%s", label, r.code, r.stdout, r.stderr)
			}
			how, ok := p.rejection(c)
			if !ok {
				t.Fatalf("%s: git's refusal of an unknown option is not recognized, so no option can be checked", label)
			}
			if g.digits {
				if r := p.probe(c, false, "-3"); r.rejects(how, "-3", "3") || (!r.fired && c.canary != gitCanaryNone) {
					t.Errorf("%s: the grammar takes -NUM as an option, git does not (exit %d)\n%s", label, r.code, r.stderr)
				}
			}
			for _, o := range g.longOptions() {
				// git takes a default for these as the last word (gitParse).
				if gitLastArgDefault[o.name] && o.value == "=" {
					if r := p.exec(append(append([]string{}, c.args...), "--"+o.name)...); r.code != 0 || r.rejects(how, "--"+o.name, o.name) {
						t.Errorf("%s: git does not take --%s alone as the last word (exit %d)\n%s", label, o.name, r.code, r.stderr)
					}
				}
			}
			p.checkOrdering(t, label, g, c)
			p.checkBundles(t, label, name, g, c, how)
			failures := p.checkArities(label, version, g, c, how)
			for _, f := range failures {
				t.Error(f)
			}
			checked++
		})
	}
	t.Logf("%d git grammars checked against %s", checked, version)
}

// checkArities asks git the arity of every option of g, four at a time, and says
// where the grammar differs.
func (p *gitProber) checkArities(label, version string, g *grammar, c gitProbeContext, how gitRejection) []string {
	type option struct {
		long bool
		name string
		want string
	}
	var options []option
	for _, o := range g.longOptions() {
		if o.name == "help" || o.name == "version" {
			continue // the grammar's own; git answers them before anything else
		}
		options = append(options, option{long: true, name: o.name, want: o.value})
	}
	for i := 0; i < len(g.short); i++ {
		if g.short[i] == ':' || (label == "git" && g.short[i] == 'h') {
			continue // git -h is git help, which the classifier handles itself
		}
		kind, _ := g.shortValue(g.short[i])
		options = append(options, option{name: string(g.short[i]), want: kind})
	}
	var mu sync.Mutex
	var failures []string
	work := make(chan option)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				got := p.gitOptionArity(c, how, o.long, o.name)
				if got != gitUnknown && got.notation(o.long) == o.want {
					continue
				}
				dashes := "-"
				if o.long {
					dashes = "--"
				}
				fix := "take it out of the grammar"
				if got != gitUnknown {
					fix = fmt.Sprintf("write %q", o.name+got.notation(o.long))
				}
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: the grammar lists %q, but %s takes %s%s as %s: %s",
					label, o.name+o.want, version, dashes, o.name, got, fix))
				mu.Unlock()
			}
		}()
	}
	for _, o := range options {
		work <- o
	}
	close(work)
	wg.Wait()
	sort.Strings(failures)
	return failures
}

// rejection finds how git refuses an unknown option in context c, and checks that
// an unknown short option is refused too (so that gitShortSample is no option).
func (p *gitProber) rejection(c gitProbeContext) (gitRejection, bool) {
	long := p.probe(c, false, gitUnknownProbe)
	short := p.probe(c, false, "-"+gitShortSample)
	for _, how := range []gitRejection{gitRejectsByName, gitRejectsByEcho, gitRejectsWithUsage, gitRejectsByStatus} {
		if how == gitRejectsByStatus && c.canary != gitCanaryNone {
			continue
		}
		if long.rejects(how, gitUnknownProbe, strings.TrimPrefix(gitUnknownProbe, "--")) &&
			short.rejects(how, "-"+gitShortSample, gitShortSample) {
			return how, true
		}
	}
	return 0, false
}

// checkOrdering runs the canary after the operands: git read it as an option
// exactly when the grammar reads options after operands.
func (p *gitProber) checkOrdering(t *testing.T, label string, g *grammar, c gitProbeContext) {
	t.Helper()
	if len(c.operands) == 0 || c.canary == gitCanaryNone {
		return
	}
	r := p.probe(c, true)
	switch {
	case r.fired && g.order == stopsAtOperand:
		t.Errorf("%s: git reads options after operands, the grammar stops at the first operand", label)
	case !r.fired && g.order != stopsAtOperand:
		t.Errorf("%s: git stops reading options at the first operand, the grammar reads them after operands: write order: stopsAtOperand", label)
	}
}

// checkBundles: where the classifier lets a short option that takes a value follow
// another in one word (-fx VALUE, as getopt reads it), git must read it so too.
// Elsewhere (gitOwnBundles) the classifier refuses such a bundle.
func (p *gitProber) checkBundles(t *testing.T, label, name string, g *grammar, c gitProbeContext, how gitRejection) {
	t.Helper()
	if !gitBundlesLikeGetopt(name) {
		return
	}
	if c.canary != gitCanaryHelp {
		t.Errorf("%s: the classifier bundles its short options as getopt does, but its context cannot check that: add it to gitOwnBundles", label)
		return
	}
	flag := byte(0)
	for i := 0; i < len(g.short); i++ {
		if kind, ok := g.shortValue(g.short[i]); ok && kind == "" {
			flag = g.short[i]
			break
		}
	}
	if flag == 0 {
		return
	}
	for i := 0; i < len(g.short); i++ {
		if kind, ok := g.shortValue(g.short[i]); !ok || kind != ":" {
			continue
		}
		bundle := "-" + string(flag) + string(g.short[i])
		if r := p.probe(c, false, bundle); r.fired || r.rejects(how, bundle, string(g.short[i])) {
			t.Errorf("%s: git does not read %s as getopt does (the value in the next word): add it to gitOwnBundles", label, bundle)
		}
	}
}

// git config get NAME and git config list are read subcommands from git 2.46 on; an
// older git takes "get" and "list" for names without a section and fails. Either
// way nothing is written, which gitConfigReads relies on.
func TestGitConfigGetAndListNeverWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs git")
	}
	p := newGitProber(t)
	config := filepath.Join(p.repo, ".git", "config")
	before, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"config", "get", "user.name"}, {"config", "list"}, {"config", "get", "core.bare"}, {"config", "core.bare"}} {
		words := append([]string{"git"}, args...)
		if got := ClassifyCommand(strings.Join(words, " ")).Category; got != v1alpha1.CategoryReadOnly {
			t.Errorf("%s: classified %s, want read-only", strings.Join(words, " "), got)
		}
		r := p.exec(args...)
		after, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Errorf("git %s changed .git/config (exit %d)", strings.Join(args, " "), r.code)
		}
	}
	// And git config stops reading options at its first operand: a trailing --get
	// is a value pattern, and the name is set.
	p.exec("config", "zz.probe", "set", "--get")
	if r := p.exec("config", "--get", "zz.probe"); strings.TrimSpace(r.stdout) != "set" {
		t.Errorf("git config NAME VALUE --get did not set NAME: the classifier's reading of git config is out of date (%q)", r.stdout)
	}
}

// One wrong arity in a git grammar hides the word after it. git's revision machinery
// takes --format=, --min-parents= and --max-parents= only attached, and --unified,
// --decorate and --ancestry-path with an optional attached value; blame's --reverse
// is a flag; and it reads -n only as a word of its own, so -pn is an unknown option
// to it, not -p -n (-iS likewise). The hand-written tables said
// otherwise, so the classifier took --output=owned.txt for a value; git read it as
// an option, opened and truncated owned.txt, and only then died.
func TestGitArityHidesNoOption(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		"git log --format --output=owned.txt",
		"git show --format --output=owned.txt HEAD",
		"git log --min-parents --output=owned.txt",
		"git log --max-parents --output=owned.txt",
		"git log --unified --output=owned.txt",
		"git log --decorate --output=owned.txt",
		"git log --ancestry-path --output=owned.txt HEAD~1..HEAD",
		"git log --no-walk --output=owned.txt",
		"git rev-list --format --output=owned.txt HEAD",
		"git rev-list --filter --output=owned.txt HEAD",
		"git rev-list --missing --output=owned.txt HEAD",
		"git blame --reverse --output=owned.txt notes.txt",
		"git blame --abbrev --output=owned.txt notes.txt",
		"git log -pn --output=owned.txt",
		"git log -pn5 --output=owned.txt",
		"git log -iS --output=owned.txt",
		"git diff --unified --output=owned.txt",
		"git diff --no-index --output=owned.txt notes.txt list.txt",
		"git reflog show --format --output=owned.txt",
		"git shortlog -w --output=owned.txt HEAD",
		"git whatchanged --output=owned.txt",
	)
}

// git config stops reading options at its first operand: git config NAME VALUE
// --get sets NAME (the --get is a value pattern), and the next read-only git
// command runs the pager or alias it set. An option that makes git config a read
// counts only before the first operand.
func TestGitConfigActionAfterOperandIsAValue(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		"git config core.pager 'touch pwned' --get",
		"git config alias.st '!touch pwned' --get-all",
		"git config core.fsmonitor 'touch pwned' --list",
		"git config core.pager 'touch pwned' -l",
		"git config --type bool core.x true",
		"git config list.x y",
		"git config edit",
		"git config user.name x",
		"git config user.$k",
		"git config \"$k\"",
	)
	exactly(t, v1alpha1.CategoryReadOnly,
		"git config user.name", "git config --global user.email", "git config --get user.name",
		"git config get user.name", "git config list", "git config -l", "git config --type=bool core.bare",
	)
}

// Forms an agent runs every day that the gate refused, though git only reads with
// them: -n5 and -U1 (the revision machinery's own spellings), log options of git
// stash list (which runs git log), a pager turned off with cat, the bare --merged
// that takes HEAD, and words known only when they run where the grammar proves them
// no option (a value, after --, or after text that is no option).
func TestGitCommonFormsAreReadOnly(t *testing.T) {
	exactly(t, v1alpha1.CategoryReadOnly,
		"git log -n5", "git log -U1", "git log -p -U1 -1", "git show -U5 HEAD", "git log -5 --oneline",
		"git stash list --date=relative", "git stash list -n5", "git stash show -p stash@{0}",
		"GIT_PAGER=cat git log", "PAGER=cat git log -1", "export GIT_PAGER=cat; git log --oneline",
		"git branch --merged", "git branch --no-merged", "git tag --contains", "git status -uno", "git tag -n5",
		`git show "v$ver"`, `git log -n "$n" --oneline`, `git log -- "$f"`, `git diff "origin/$b"...HEAD`,
		`git -C "$dir" log -1`, `git show --stat "HEAD~$n"`, `git log --author "$me" --oneline`,
		"git reflog -n 10", "git reflog show --date=iso", "git grep -nA3 alpha", "git grep -ie alpha",
		"git log --oneline --graph --decorate --all", "git remote -v show -n origin", "git worktree list --porcelain",
	)
}

// A word known only when it runs may be any option, or several words: "$rev" could be
// --output=owned.txt, $n could be "5 --output=owned.txt", and a pager other than cat
// runs a program.
func TestGitDynamicWordsThatCouldBeOptions(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		`git show "$rev"`, `git log $range`, `git log -n $n`, `git "$sub"`, `git checkout "$b"`,
		`git -C $dir log`, `git log --format="$f"`, `git grep "$pattern"`, `git for-each-ref --format "$f"`,
		"git for-each-ref --format='%(signature)'", "git for-each-ref --sort=signature", `git branch --sort "$k"`,
		"GIT_PAGER=less git log", `GIT_PAGER="$p" git log`, "GIT_PAGER='cat; touch pwned' git log",
		"PAGER='cat -v' git log", "GIT_PAGER+=cat git log",
	)
	exactly(t, v1alpha1.CategoryWrite, "git branch -- --merged")
}
