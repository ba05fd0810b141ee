package policy

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// The grammars of git's read-only forms. git reads options with three parsers: its
// parse-options library (most subcommands: bundles like getopt, --opt VALUE or
// --opt=VALUE, optional values attached only), the revision machinery behind log,
// show, rev-list and diff (-n and -i only as words of their own, --format= and
// --min-parents= attached only, --since VALUE and --since=VALUE alike), and git's
// own loop before the subcommand (-C DIR only). One option whose arity is wrong in a
// table hides the word after it: "format=" made git log --format --output=x look
// like a format, where git reads --output=x, opens and truncates x, and only then
// dies on the bare --format. So every table here is checked against the installed
// git by TestGitGrammarsMatchInstalledGit, which runs each option with a canary word
// after it and a value attached; an option the test cannot check is not listed,
// so it is refused. The tables are written by hand, because which options only read
// is a review decision git cannot make; the arity beside each name is git's.

// gitDiffOptions are the options of git's diff machinery that only choose what is
// shown and how. --output (writes a file), --ext-diff and --textconv (run drivers
// from configuration), -O (reads an order file) and --skip-to/--rotate-to are not
// listed, so they are unknown. git accepts unambiguous prefixes of long options;
// these lists are not the whole of git's, so a prefix is refused.
const gitDiffOptions = "patch no-patch unified[=] raw patch-with-raw patch-with-stat numstat shortstat dirstat[=] " +
	"cumulative dirstat-by-file[=] summary name-only name-status stat[=] stat-width= stat-name-width= stat-graph-width= " +
	"stat-count= compact-summary binary full-index color[=] no-color color-moved[=] no-color-moved color-moved-ws= " +
	"no-color-moved-ws color-words[=] word-diff[=] word-diff-regex= ws-error-highlight= abbrev[=] no-abbrev " +
	"src-prefix= dst-prefix= no-prefix line-prefix= inter-hunk-context= output-indicator-new= output-indicator-old= " +
	"output-indicator-context= break-rewrites[=] find-renames[=] find-copies[=] find-copies-harder no-renames " +
	"rename-empty no-rename-empty irreversible-delete diff-filter= find-object= pickaxe-all pickaxe-regex relative[=] " +
	"no-relative text ignore-cr-at-eol ignore-space-at-eol ignore-space-change ignore-all-space ignore-blank-lines " +
	"ignore-matching-lines= indent-heuristic no-indent-heuristic minimal patience histogram anchored= diff-algorithm= " +
	"function-context exit-code quiet no-ext-diff no-textconv ignore-submodules[=] submodule[=] ita-invisible-in-index " +
	"ita-visible-in-index check"

// gitDiffShort are the diff machinery's short options.
const gitDiffShort = "puU::sM::C::B::l:DS:G:RazbwWI:X::"

// gitWalkOptions are the revision walk's options: which commits, in which order.
const gitWalkOptions = "all branches[=] tags[=] remotes[=] glob= exclude= not reflog since= after= until= before= " +
	"max-count= skip= author= committer= grep= grep-reflog= all-match invert-grep regexp-ignore-case basic-regexp " +
	"extended-regexp fixed-strings perl-regexp merges no-merges min-parents[=] max-parents[=] no-min-parents " +
	"no-max-parents first-parent reverse topo-order date-order author-date-order left-right left-only right-only " +
	"cherry-pick cherry-mark cherry boundary ancestry-path[=] simplify-by-decoration full-history dense sparse " +
	"simplify-merges show-pulls walk-reflogs no-walk[=] do-walk in-commit-order"

// gitCommitFormat are the options that choose how commits are shown.
const gitCommitFormat = "oneline format[=] pretty[=] abbrev-commit no-abbrev-commit encoding= expand-tabs[=] " +
	"no-expand-tabs notes[=] no-notes standard-notes no-standard-notes date= relative-date parents children graph " +
	"show-linear-break[=] log-size"

// gitLogOwn are git log's own options (and git show's), read
// before the revision machinery's. --show-signature runs gpg: not listed.
const gitLogOwn = "source use-mailmap mailmap no-mailmap decorate[=] no-decorate decorate-refs= " +
	"decorate-refs-exclude= clear-decorations follow diff-merges= no-diff-merges remerge-diff cc"

// gitLog is the grammar of git log and its kind: the log's, the walk's, the
// format's and the diff machinery's options.
func gitLog() *grammar {
	return &grammar{order: permutes,
		short:  gitDiffShort + "n:L:iEFPgcmtrq",
		long:   gitLogOwn + " " + gitWalkOptions + " " + gitCommitFormat + " " + gitDiffOptions,
		digits: true,
	}
}

// gitBriefLog is the grammar of the log forms that are not git log itself (git
// stash list, git reflog): the common options.
const gitBriefLog = "oneline format[=] pretty[=] abbrev-commit no-abbrev-commit date= relative-date max-count= " +
	"skip= since= after= until= before= author= committer= grep= all-match invert-grep regexp-ignore-case " +
	"stat[=] name-only name-status patch no-patch numstat shortstat color[=] no-color decorate[=] no-decorate"

// gitReadGrammars are the grammars of git's read-only forms, by subcommand, or by
// subcommand and action for those whose action word picks the options (stash list,
// remote show). Short options bundle and take values as with getopt, except in the
// grammars of gitOwnBundles; -NUM is a count (git log -5).
var gitReadGrammars = map[string]*grammar{
	"log":        gitLog(),
	"show":       gitLog(),
	"reflog":     {order: permutes, short: "n:ps", long: gitBriefLog, digits: true},
	"stash list": {order: permutes, short: "n:ps", long: gitBriefLog, digits: true},
	"stash show": {order: permutes, short: "upsR", long: gitDiffOptions + " include-untracked only-untracked"},
	"diff":       {order: permutes, short: gitDiffShort, long: gitDiffOptions + " cached staged merge-base"},
	"diff-tree":  {order: permutes, short: gitDiffShort + "rtmcv", long: gitDiffOptions + " root no-commit-id always merge-base"},
	"diff-files": {short: gitDiffShort + "q", long: gitDiffOptions, order: stopsAtOperand},
	"diff-index": {order: permutes, short: gitDiffShort + "m", long: gitDiffOptions + " cached merge-base"},
	"range-diff": {order: permutes, long: "creation-factor= no-dual-color left-only right-only notes[=] no-notes color[=] no-color stat[=] name-only name-status"},
	"shortlog": {order: permutes,
		short:  "nsecw::",
		long:   "numbered summary email committer group= all branches[=] tags[=] since= after= until= before= author= max-count= no-merges merges first-parent",
		digits: true,
	},
	"rev-list": {order: permutes,
		short:  "n:",
		long:   gitWalkOptions + " objects objects-edge objects-edge-aggressive count header timestamp parents children abbrev-commit abbrev[=] format[=] pretty[=] oneline missing[=] filter[=] disk-usage[=]",
		digits: true,
	},
	"status": {order: permutes,
		short: "sbu::vz",
		long: "short branch show-stash porcelain[=] long verbose untracked-files[=] ignore-submodules[=] ignored[=] " +
			"null column[=] no-column ahead-behind no-ahead-behind renames[=] no-renames find-renames[=]",
	},
	"blame":     {order: permutes, short: "bL:ltfnsepcwM::C::S:", long: "root show-stats reverse first-parent porcelain line-porcelain incremental encoding= contents= date= score-debug show-name show-number show-email ignore-rev= ignore-revs-file= color-lines color-by-age progress no-progress minimal abbrev[=]"},
	"annotate":  {order: permutes, short: "bL:ltfnsepcwM::C::S:", long: "root show-stats reverse porcelain incremental encoding= date= show-name show-number show-email"},
	"ls-files":  {order: permutes, short: "cdmoiskuzvftx:X:", long: "cached deleted modified others ignored stage unmerged killed directory no-empty-directory eol full-name recurse-submodules abbrev[=] exclude= exclude-from= exclude-per-directory= exclude-standard error-unmatch with-tree= format= sparse deduplicate"},
	"ls-tree":   {order: permutes, short: "dtrlz", long: "long name-only name-status object-only full-name full-tree abbrev[=] format="},
	"rev-parse": {order: permutes, long: "abbrev-ref[=] short[=] verify quiet show-toplevel show-prefix show-cdup git-dir git-common-dir absolute-git-dir is-inside-work-tree is-inside-git-dir is-bare-repository is-shallow-repository show-superproject-working-tree shared-index-path show-object-format[=] symbolic symbolic-full-name all branches[=] tags[=] remotes[=] glob[=] exclude[=] disambiguate[=] local-env-vars path-format[=] git-path= resolve-git-dir= default= prefix= since[=] after[=] until[=] before[=] revs-only no-revs flags no-flags"},
	"describe":  {order: permutes, long: "all tags contains abbrev[=] candidates= exact-match debug long match= exclude= always first-parent dirty[=] broken[=]"},
	"grep": {
		short: "A:B:C:e:f:m:EFGPHhIilLnovwcqWpz",
		long: "cached untracked no-index no-exclude-standard exclude-standard recurse-submodules text ignore-case " +
			"max-depth= recursive no-recursive word-regexp invert-match full-name extended-regexp basic-regexp perl-regexp " +
			"fixed-strings line-number column files-with-matches name-only files-without-match null only-matching count " +
			"color[=] no-color break heading show-function context= after-context= before-context= function-context " +
			"threads= and or not all-match quiet max-count=",
		digits: true,
		order:  stopsAtOperand,
	},
	"cat-file":      {order: permutes, short: "tspe", long: "batch[=] batch-check[=] batch-all-objects buffer follow-symlinks unordered allow-unknown-type"},
	"show-ref":      {order: permutes, short: "ds::q", long: "head tags heads dereference hash[=] abbrev[=] verify quiet"},
	"merge-base":    {order: permutes, short: "a", long: "all octopus independent is-ancestor fork-point"},
	"name-rev":      {order: permutes, long: "tags refs= exclude= all name-only no-undefined always"},
	"count-objects": {order: permutes, short: "vH", long: "verbose human-readable"},
	"for-each-ref":  {order: permutes, long: "count= sort= format= color[=] shell perl python tcl points-at= merged= no-merged= contains= no-contains= ignore-case"},
	// git help TOPIC and --help run man (or the viewer its configuration names): only
	// the lists are read-only.
	"help":             {order: permutes, short: "ag", long: "all guides config verbose", operands: atMostOperands(0, v1alpha1.CategoryUnknown, "git help TOPIC runs man or the viewer its configuration names")},
	"version":          {order: permutes, long: "build-options"},
	"check-ignore":     {order: permutes, short: "qvnz", long: "quiet verbose non-matching no-index stdin"},
	"var":              {order: permutes, short: "l"},
	"cherry":           {order: permutes, short: "v", long: "abbrev[=]"},
	"show-branch":      {short: "ar", long: "all remotes topo-order date-order current sparse more[=] list merge-base independent no-name sha1-name topics reflog[=] color[=] no-color", order: stopsAtOperand},
	"fsck":             {order: permutes, long: "unreachable dangling no-dangling root tags cache no-reflogs full no-full connectivity-only strict verbose name-objects progress no-progress"},
	"check-attr":       {order: permutes, short: "az", long: "all cached stdin"},
	"check-ref-format": {order: permutes, long: "normalize allow-onelevel no-allow-onelevel refspec-pattern branch"},
	// Subcommands that gitSubcommand calls read-only only in some forms.
	"branch":         {order: permutes, short: "alrvq", long: "list all remotes verbose contains= no-contains= merged= no-merged= points-at= sort= format= color[=] no-color column[=] no-column abbrev[=] no-abbrev show-current ignore-case"},
	"tag":            {order: permutes, short: "ln::", long: "list contains= no-contains= merged= no-merged= points-at= sort= format= color[=] column[=] no-column ignore-case"},
	"remote":         {short: "v", long: "verbose", order: stopsAtOperand},
	"remote show":    {order: permutes, short: "n"},
	"remote get-url": {order: permutes, long: "push all"},
	"worktree list":  {order: permutes, short: "vz", long: "porcelain verbose expire="},
	"submodule":      {order: permutes, short: "q", long: "quiet cached recursive"},
	// git config stops reading options at its first operand: git config NAME VALUE
	// --get sets NAME.
	"config": {
		short: "lzt:f:", long: "get get-all get-regexp get-urlmatch get-color get-colorbool list global system local worktree file= blob= " +
			"type= bool int bool-or-int bool-or-str path expiry-date null name-only show-origin show-scope includes no-includes default= fixed-value",
		order: stopsAtOperand,
	},
	"clean": {order: permutes, short: "ndxXqe:", long: "dry-run quiet exclude="},
}

// gitOwnBundles are the grammars whose git does not bundle short options as getopt
// does: the revision machinery reads -n, -i and -E only as words of their own, and
// git's own loop and the other hand-written parsers bundle nothing. In them a short
// option that takes a value must start its word, or the part is unknown: git log
// -pn --output=x is -p and -n with the value --output=x to getopt, and to git an
// unknown option -pn, after which it opens x. Elsewhere git's parse-options bundles
// as getopt does, which the test checks.
var gitOwnBundles = set("", "log", "show", "reflog", "stash list", "stash show", "diff", "diff-tree", "diff-files",
	"diff-index", "range-diff", "rev-list", "shortlog", "blame", "annotate", "rev-parse", "var", "check-ref-format",
	"submodule")

// gitBundlesLikeGetopt says whether grammar key bundles short options as getopt.
func gitBundlesLikeGetopt(key string) bool {
	return !gitOwnBundles[key]
}

// gitBundledValue finds, in the words g reads, a short option that takes a value
// after another short option of the same word ("-pn 5"), and says why it is refused.
// It reads the words as grammar.parse does.
func gitBundledValue(g *grammar, args []word) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		t := a.text
		switch {
		case !a.static || a.split || t == "-" || !strings.HasPrefix(t, "-"):
			if g.order == stopsAtOperand {
				return ""
			}
			continue
		case t == "--":
			return ""
		case strings.HasPrefix(t, "--"):
			name, _, hasValue := strings.Cut(t[2:], "=")
			if o, problem := g.resolveLong(name); problem == "" && o.value == "=" && !hasValue {
				i++
			}
			continue
		case g.digits && isDigits(t[1:]):
			continue
		}
		for j := 1; j < len(t); j++ {
			kind, ok := g.shortValue(t[j])
			if !ok || kind == "" {
				if !ok {
					break // the grammar refuses the letter
				}
				continue
			}
			if j > 1 {
				return fmt.Sprintf("git reads -%c only at the start of a word, not bundled in %s: write -%s -%s", t[j], t, t[1:j], t[j:])
			}
			if kind == ":" && j == len(t)-1 {
				i++
			}
			break
		}
	}
	return ""
}

// harmlessPager says whether NAME=VALUE only turns the pager off: git takes
// GIT_PAGER=cat and PAGER=cat as no pager at all, and other programs that read
// PAGER run cat, which only copies.
func harmlessPager(name, value string) bool {
	return (name == "GIT_PAGER" || name == "PAGER") && value == "cat"
}

// gitConfigSets is why a git config that does not provably read is refused.
const gitConfigSets = "git config sets configuration (which later git commands run programs from) unless it names " +
	"one KEY, or a get or list action comes before its first operand: git stops reading options there"

// gitConfigReads says whether git config, its words parsed with its grammar (which
// stops reading options at the first operand, as git does), only reads: an action
// that gets or lists, given before the operands; git config list and git config get
// NAME, the read subcommands of git 2.46 and later (an older git takes "list" and
// "get" for names without a section and fails without writing); or no action and
// one operand NAME.KEY, which git gets. NAME VALUE sets, and an action word after an
// operand is a value: git config NAME VALUE --get sets NAME.
func gitConfigReads(p parsedArgs) bool {
	for _, o := range p.operands {
		if !o.static || o.split {
			return false // it could be several operands
		}
	}
	switch {
	case p.has("l", "list", "get", "get-all", "get-regexp", "get-urlmatch", "get-color", "get-colorbool"):
		return true
	case len(p.operands) == 1 && p.operands[0].text == "list":
		return true
	case len(p.operands) == 2 && p.operands[0].text == "get":
		return true
	case len(p.operands) == 1:
		return strings.Contains(p.operands[0].text, ".")
	}
	return false
}

// gitLastArgDefault are the options that take the next word as their value or, as
// the last word, a default: git branch --merged is git branch --merged HEAD.
var gitLastArgDefault = set("contains", "no-contains", "merged", "no-merged")

// gitParse parses args with g as git reads them, a bare option of gitLastArgDefault
// in the last word included.
func gitParse(g *grammar, args []word) parsedArgs {
	n := len(args)
	if n == 0 || !args[n-1].static || args[n-1].split || !strings.HasPrefix(args[n-1].text, "--") {
		return g.parse(args)
	}
	name := args[n-1].text[2:]
	if o, problem := g.resolveLong(name); problem != "" || o.value != "=" || !gitLastArgDefault[name] || hasWord(args[:n-1], "--") {
		return g.parse(args)
	}
	p := g.parse(args[:n-1])
	p.options = append(p.options, parsedOption{name: name})
	return p
}

// pagerOff says whether an assignment only turns the pager off (GIT_PAGER=cat).
func pagerOff(a *syntax.Assign) bool {
	if a.Name == nil || a.Index != nil || a.Append || a.Array != nil || a.Value == nil {
		return false
	}
	v := wordOf(a.Value)
	return v.static && !v.split && harmlessPager(a.Name.Value, v.text)
}
