package policy

import "github.com/toolgate/toolgate/api/v1alpha1"

// gitLogDiff are the options of git log, show, diff and their kind that only choose
// what is shown and how. --output (writes a file), --ext-diff and --textconv (run
// drivers from configuration), --show-signature (runs gpg) and -O / --open-files-in-
// pager are not here, so they are unknown. git accepts unambiguous prefixes of long
// options; this list is not the whole of git's, so a prefix is refused.
const gitLogDiff = "oneline stat[=] numstat shortstat name-only name-status patch no-patch raw summary patch-with-stat " +
	"patch-with-raw compact-summary dirstat[=] cumulative full-index binary abbrev[=] no-abbrev abbrev-commit no-abbrev-commit " +
	"graph decorate[=] no-decorate decorate-refs= decorate-refs-exclude= all branches[=] tags[=] remotes[=] glob= " +
	"exclude= format= pretty[=] since= after= until= before= author= committer= grep= all-match invert-grep " +
	"regexp-ignore-case basic-regexp extended-regexp fixed-strings perl-regexp follow first-parent merges no-merges " +
	"min-parents= max-parents= no-min-parents no-max-parents reverse topo-order date-order author-date-order " +
	"date= relative-date max-count= skip= left-right left-only right-only cherry-pick cherry-mark cherry boundary " +
	"ancestry-path simplify-by-decoration full-history dense sparse simplify-merges source use-mailmap mailmap " +
	"no-mailmap log-size no-color color[=] color-moved[=] color-words[=] word-diff[=] word-diff-regex= " +
	"ignore-space-change ignore-all-space ignore-space-at-eol ignore-blank-lines ignore-cr-at-eol " +
	"ignore-matching-lines= minimal patience histogram anchored= diff-algorithm= unified= inter-hunk-context= " +
	"function-context exit-code quiet check relative[=] no-relative text ignore-submodules[=] submodule[=] " +
	"src-prefix= dst-prefix= no-prefix default-prefix line-prefix= find-renames[=] find-copies[=] " +
	"find-copies-harder no-renames rename-empty no-rename-empty irreversible-delete diff-filter= pickaxe-all " +
	"pickaxe-regex cached staged merge-base no-index notes[=] no-notes expand-tabs[=] no-expand-tabs " +
	"encoding= children parents show-pulls walk-reflogs reflog in-commit-order no-walk[=] do-walk " +
	"diff-merges= remerge-diff combined-diff dense-combined first-parent-only show-linear-break[=] " +
	"count ita-invisible-in-index ita-visible-in-index output-indicator-new= output-indicator-old= " +
	"output-indicator-context= ws-error-highlight= break-rewrites[=] not stdin no-standard-notes " +
	"standard-notes"

// gitReadGrammars are the grammars of git's read-only subcommands. Short options are
// bundled and take values as with getopt; -NUM is a count (git log -5). git's
// parse-options and revision parser read options after operands; where a
// subcommand stops at its first operand instead (git grep and show-branch refuse
// or misread a later option), reading the later words as options is the stricter
// reading.
var gitReadGrammars = map[string]*grammar{
	"log":         {order: permutes, short: "pusn:S:G:L:M::C::B::lRzawbWDiEFP", long: gitLogDiff, digits: true},
	"show":        {order: permutes, short: "pusn:S:G:M::C::B::lRzawbWDiEFP", long: gitLogDiff, digits: true},
	"whatchanged": {order: permutes, short: "pusn:S:G:M::C::B::lRzawbWDiEFP", long: gitLogDiff, digits: true},
	"diff":        {order: permutes, short: "pusS:G:M::C::B::lRzawbWDiU::", long: gitLogDiff},
	"diff-tree":   {order: permutes, short: "pusS:G:M::C::B::lRzawbWDirtmcU::", long: gitLogDiff},
	"diff-files":  {order: permutes, short: "pusS:G:M::C::B::lRzawbWq0123U::", long: gitLogDiff},
	"diff-index":  {order: permutes, short: "pusS:G:M::C::B::lRzawbWmU::", long: gitLogDiff},
	"range-diff":  {order: permutes, short: "pusS:G:", long: gitLogDiff + " creation-factor= no-dual-color"},
	"shortlog":    {order: permutes, short: "nsecw::", long: gitLogDiff + " numbered email group= width[=]", digits: true},
	"rev-list":    {order: permutes, short: "n:", long: gitLogDiff + " objects objects-edge objects-edge-aggressive unpacked missing= filter= header timestamp", digits: true},
	"status": {
		order: permutes,
		short: "sbuvz",
		long: "short branch show-stash porcelain[=] long verbose untracked-files[=] ignore-submodules[=] ignored[=] " +
			"null column[=] no-column ahead-behind no-ahead-behind renames no-renames find-renames[=]",
	},
	"blame":     {order: permutes, short: "bL:ltfnsepcwM::C::S:", long: "root show-stats reverse= first-parent porcelain line-porcelain incremental encoding= contents= date= score-debug show-name show-number show-email ignore-rev= ignore-revs-file= color-lines color-by-age progress no-progress minimal abbrev="},
	"annotate":  {order: permutes, short: "bL:ltfnsepcwM::C::S:", long: "root show-stats reverse= porcelain incremental encoding= date= show-name show-number show-email"},
	"ls-files":  {order: permutes, short: "cdmoiskuzvftx:X:", long: "cached deleted modified others ignored stage unmerged killed directory no-empty-directory eol full-name recurse-submodules abbrev[=] exclude= exclude-from= exclude-per-directory= exclude-standard error-unmatch with-tree= format= sparse deduplicate"},
	"ls-tree":   {order: permutes, short: "dtrlz", long: "long name-only name-status object-only full-name full-tree abbrev[=] format="},
	"rev-parse": {order: permutes, long: "abbrev-ref[=] short[=] verify quiet sq-quote show-toplevel show-prefix show-cdup git-dir git-common-dir absolute-git-dir is-inside-work-tree is-inside-git-dir is-bare-repository is-shallow-repository show-superproject-working-tree shared-index-path show-object-format[=] show-ref-format symbolic symbolic-full-name all branches[=] tags[=] remotes[=] glob= exclude= disambiguate= local-env-vars path-format= git-path= resolve-git-dir= default= prefix= since= after= until= before= parseopt stuck-long keep-dashdash stop-at-non-option revs-only no-revs flags no-flags"},
	"describe":  {order: permutes, long: "all tags contains abbrev= candidates= exact-match debug long match= exclude= always first-parent dirty[=] broken[=]"},
	"grep": {
		order: permutes,
		short: "A:B:C:e:f:m:EFGPHhIilLnovwcqWpz",
		long: "cached untracked no-index no-exclude-standard exclude-standard recurse-submodules text textconv-no ignore-case " +
			"max-depth= recursive no-recursive word-regexp invert-match full-name extended-regexp basic-regexp perl-regexp " +
			"fixed-strings line-number column files-with-matches name-only files-without-match null only-matching count " +
			"color[=] no-color break heading show-function context= after-context= before-context= function-context " +
			"threads= and or not all-match quiet max-count=",
		digits: true,
	},
	"cat-file":      {order: permutes, short: "tspe", long: "batch[=] batch-check[=] batch-all-objects buffer follow-symlinks unordered allow-unknown-type"},
	"show-ref":      {order: permutes, short: "dsq", long: "head tags heads branches dereference hash[=] abbrev[=] verify exists quiet"},
	"merge-base":    {order: permutes, short: "a", long: "all octopus independent is-ancestor fork-point"},
	"name-rev":      {order: permutes, long: "tags refs= exclude= all annotate-stdin name-only no-undefined always"},
	"count-objects": {order: permutes, short: "vH", long: "verbose human-readable"},
	"for-each-ref":  {order: permutes, long: "count= sort= format= color[=] shell perl python tcl points-at= merged[=] no-merged[=] contains[=] no-contains[=] ignore-case omit-empty exclude= include-root-refs"},
	// git help TOPIC and --help run man (or the viewer configuration names): only
	// the lists are read-only.
	"help":             {order: permutes, short: "ag", long: "all guides config verbose", operands: atMostOperands(0, v1alpha1.CategoryUnknown, "git help TOPIC runs man or the viewer its configuration names")},
	"version":          {order: permutes, long: "build-options"},
	"check-ignore":     {order: permutes, short: "qvnz", long: "quiet verbose non-matching no-index stdin"},
	"var":              {order: permutes, short: "l"},
	"cherry":           {order: permutes, short: "v", long: "abbrev[=]"},
	"show-branch":      {order: permutes, short: "ar", long: "all remotes topo-order date-order current sparse more[=] list merge-base independent no-name sha1-name topics reflog[=] color[=] no-color"},
	"verify-commit":    {order: permutes, short: "v", long: "verbose raw"},
	"verify-tag":       {order: permutes, short: "v", long: "verbose raw format="},
	"fsck":             {order: permutes, long: "unreachable dangling no-dangling root tags cache no-reflogs full no-full connectivity-only strict verbose name-objects progress no-progress"},
	"check-attr":       {order: permutes, short: "az", long: "all cached stdin source="},
	"check-ref-format": {order: permutes, long: "normalize allow-onelevel no-allow-onelevel refspec-pattern branch"},
	// Subcommands that gitSubcommand calls read-only only in some forms.
	"branch": {order: permutes, short: "alrvq", long: "list all remotes verbose contains[=] no-contains[=] merged[=] no-merged[=] points-at= sort= format= color[=] no-color column[=] no-column abbrev[=] no-abbrev show-current ignore-case omit-empty"},
	"tag":    {order: permutes, short: "ln", long: "list contains[=] no-contains[=] merged[=] no-merged[=] points-at= sort= format= color[=] column[=] no-column ignore-case omit-empty"},
	"remote": {order: permutes, short: "vn", long: "verbose"},
	"stash":  {order: permutes, short: "pu", long: "include-untracked only-untracked patch stat name-only name-status"},
	"config": {order: permutes, short: "lz", long: "get get-all get-regexp get-urlmatch get-color get-colorbool list global system local worktree file= blob= " +
		"type= bool int bool-or-int path expiry-date null name-only show-origin show-scope includes no-includes default="},
	"reflog":    {order: permutes, short: "n:", long: gitLogDiff, digits: true},
	"clean":     {order: permutes, short: "ndxXqe:", long: "dry-run quiet exclude="},
	"worktree":  {order: permutes, long: "porcelain verbose expire= z"},
	"submodule": {order: permutes, long: "cached recursive quiet files summary-limit="},
}
