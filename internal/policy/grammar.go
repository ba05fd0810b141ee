package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// readOnlyGrammars are the commands that can be read-only, each with the grammar of
// the options and operands under which it only reads. This table is the allowlist: a
// command missing from it is never read-only, and a word outside its grammar makes
// the part unknown. Long option lists marked complete are the tool's whole --help
// (GNU coreutils 9, grep 3, diffutils 3, findutils 4, sed 4), dangerous options
// included, so that an abbreviation resolves the way the tool resolves it.
//
// Review rule: add an option only after reading what the tool does with it; an option
// that runs a program, reads a script, or writes a file goes in effects. Declare the
// order after running the tool with an option after an operand
// (TestGrammarOrderMatchesTheProgram does it for every installed program).
var readOnlyGrammars = map[string]*grammar{
	"cat":  {order: permutes, short: "AbeEnstTuv", long: "show-all number-nonblank show-ends number squeeze-blank show-tabs show-nonprinting", complete: true, dynamic: true},
	"tac":  {order: permutes, short: "brs:", long: "before regex separator=", complete: true, dynamic: true},
	"head": {order: permutes, short: "c:n:qvz", long: "bytes= lines= quiet silent verbose zero-terminated", complete: true, dynamic: true, digits: true},
	"tail": {
		order: permutes,
		short: "c:fFn:qs:vz", long: "bytes= follow[=] lines= max-unchanged-stats= pid= quiet silent retry sleep-interval= verbose zero-terminated",
		complete: true, dynamic: true, digits: true,
	},
	"wc": {order: permutes, short: "cmlLw", long: "bytes chars lines files0-from= max-line-length words total=", complete: true, dynamic: true},
	"ls": {
		order: permutes,
		short: "aAbBcCdDfFgGhHiI:klLmnNopqQrRsStT:uUvw:xXZ1",
		long: "all almost-all author escape block-size= ignore-backups color[=] directory dired classify[=] file-type format= full-time " +
			"group-directories-first no-group human-readable si dereference-command-line dereference-command-line-symlink-to-dir " +
			"hide= hyperlink[=] indicator-style= inode ignore= kibibytes dereference literal hide-control-chars show-control-chars " +
			"quote-name quoting-style= reverse recursive size sort= time= time-style= tabsize= width= context zero numeric-uid-gid",
		complete: true, dynamic: true,
	},
	"cut": {order: permutes, short: "b:c:d:f:nszM", long: "bytes= characters= delimiter= fields= complement only-delimited output-delimiter= zero-terminated", complete: true, dynamic: true},
	"tr":  {order: stopsAtOperand, short: "cCdst", long: "complement delete squeeze-repeats truncate-set1", complete: true, dynamic: true},
	"nl": {
		order:    permutes,
		short:    "b:d:f:h:i:l:n:ps:v:w:",
		long:     "body-numbering= section-delimiter= footer-numbering= header-numbering= line-increment= join-blank-lines= number-format= no-renumber number-separator= starting-line-number= number-width=",
		complete: true, dynamic: true,
	},
	"fold":     {order: permutes, short: "bsw:", long: "bytes spaces width=", complete: true, dynamic: true, digits: true},
	"fmt":      {order: permutes, short: "cp:stuw:g:", long: "crown-margin prefix= split-only tagged-paragraph uniform-spacing width= goal=", complete: true, dynamic: true, digits: true},
	"paste":    {order: permutes, short: "d:sz", long: "delimiters= serial zero-terminated", complete: true, dynamic: true},
	"join":     {order: permutes, short: "a:e:ij:o:t:v:1:2:z", long: "check-order nocheck-order header ignore-case zero-terminated", complete: true, dynamic: true},
	"expand":   {order: permutes, short: "it:", long: "initial tabs=", complete: true, dynamic: true, digits: true},
	"unexpand": {order: permutes, short: "at:", long: "all first-only tabs=", complete: true, dynamic: true, digits: true},
	"base64":   {order: permutes, short: "diw:", long: "decode ignore-garbage wrap=", complete: true, dynamic: true},
	"comm":     {order: permutes, short: "123z", long: "check-order nocheck-order output-delimiter= total zero-terminated", complete: true, dynamic: true},
	"cmp":      {order: permutes, short: "bi:ln:sv", long: "print-bytes ignore-initial= verbose bytes= quiet silent", complete: true, dynamic: true},
	"diff": {
		order: permutes,
		short: "abBcC:dD:eEF:hiI:lnNpPqrsS:tTuU:vwW:x:X:yZ",
		long: "normal brief report-identical-files context[=] unified[=] ed rcs side-by-side width= left-column suppress-common-lines " +
			"show-c-function show-function-line= label= expand-tabs initial-tab tabsize= suppress-blank-empty paginate recursive " +
			"no-dereference new-file unidirectional-new-file ignore-file-name-case no-ignore-file-name-case exclude= exclude-from= " +
			"starting-file= from-file= to-file= ignore-case ignore-tab-expansion ignore-trailing-space ignore-space-change " +
			"ignore-all-space ignore-blank-lines ignore-matching-lines= text strip-trailing-cr ifdef= old-group-format= new-group-format= " +
			"unchanged-group-format= changed-group-format= line-format= old-line-format= new-line-format= unchanged-line-format= " +
			"minimal horizon-lines= speed-large-files color[=] palette=",
		complete: true, dynamic: true,
		// -l pipes the output through pr, a formatter that only reads; it is an
		// effect so that a call that names it is asked about.
		effects: map[string]v1alpha1.CommandCategory{"l": v1alpha1.CategoryUnknown, "paginate": v1alpha1.CategoryUnknown},
	},
	"stat":      {order: permutes, short: "Lfc:t", long: "dereference file-system cached= format= printf= terse", complete: true, dynamic: true},
	"du":        {order: permutes, short: "0aB:bcDd:hHklLmPSst:xX:", long: "null all apparent-size block-size= bytes total dereference-args max-depth= human-readable inodes si count-links dereference no-dereference separate-dirs summarize threshold= time[=] time-style= exclude-from= exclude= one-file-system files0-from=", complete: true, dynamic: true},
	"df":        {order: permutes, short: "aB:hHiklPt:Tx:v", long: "all block-size= human-readable si inodes local no-sync output[=] portability sync total type= print-type exclude-type=", complete: true, dynamic: true},
	"realpath":  {order: permutes, short: "emLPqsz", long: "canonicalize-existing canonicalize-missing logical physical quiet relative-to= relative-base= strip no-symlinks zero", complete: true, dynamic: true},
	"readlink":  {order: permutes, short: "femnqsvz", long: "canonicalize canonicalize-existing canonicalize-missing no-newline quiet silent verbose zero", complete: true, dynamic: true},
	"basename":  {order: stopsAtOperand, short: "as:z", long: "multiple suffix= zero", complete: true, dynamic: true},
	"dirname":   {order: permutes, short: "z", long: "zero", complete: true, dynamic: true},
	"md5sum":    checksumGrammar(),
	"sha1sum":   checksumGrammar(),
	"sha224sum": checksumGrammar(),
	"sha256sum": checksumGrammar(),
	"sha384sum": checksumGrammar(),
	"sha512sum": checksumGrammar(),
	"b2sum":     {order: permutes, short: "bcl:tzw", long: "binary check length= tag text zero ignore-missing quiet status strict warn", complete: true, dynamic: true},
	"cksum":     {order: permutes, short: "a:cl:zw", long: "algorithm= base64 check debug length= raw tag untagged zero ignore-missing quiet status strict warn", complete: true, dynamic: true},
	"sum":       {order: permutes, short: "rs", long: "sysv", complete: true, dynamic: true},
	"od": {
		order: permutes,
		short: "A:j:N:S::t:vabcdfilosxw::", long: "address-radix= endian= skip-bytes= read-bytes= strings[=] format= output-duplicates width[=] traditional",
		complete: true, dynamic: true,
	},
	"hexdump":  {order: permutes, short: "bcCde:f:n:os:vxL::", long: "one-byte-octal one-byte-char canonical two-bytes-decimal format= format-file= length= two-bytes-octal skip= no-squeezing two-bytes-hex color[=]", dynamic: true},
	"strings":  {order: permutes, short: "adfn:t:woT:e:U:s:hv", long: "all data print-file-name bytes= radix= include-all-whitespace target= encoding= unicode= output-separator=", complete: true, dynamic: true, digits: true},
	"column":   {order: permutes, short: "tnO:N:l:EdeH:R:T:W:LJr:i:p:c:o:s:x", long: "table table-name= table-order= table-columns= table-columns-limit= table-empty-lines table-noextreme table-noheadings table-header-repeat table-hide= table-right= table-truncate= table-wrap= keep-empty-lines json tree= tree-id= tree-parent= output-width= separator= output-separator= fillrows", dynamic: true},
	"seq":      {order: stopsAtOperand, short: "f:s:w", long: "format= separator= equal-width", complete: true, dynamic: true},
	"numfmt":   {order: permutes, short: "d:z", long: "debug delimiter= field= format= from= from-unit= grouping header[=] invalid= padding= round= suffix= unit-separator= to= to-unit= zero-terminated", complete: true, dynamic: true},
	"nproc":    {order: permutes, long: "all ignore=", complete: true, dynamic: true},
	"printenv": {order: stopsAtOperand, short: "0", long: "null", complete: true, dynamic: true},
	"uname":    {order: permutes, short: "asnrvmpio", long: "all kernel-name nodename kernel-release kernel-version machine processor hardware-platform operating-system", complete: true, dynamic: true},
	"arch":     {order: permutes, complete: true, dynamic: true},
	"id":       {order: permutes, short: "aZgGnruz", long: "context group groups name real user zero", complete: true, dynamic: true},
	"whoami":   {order: permutes, complete: true, dynamic: true},
	"groups":   {order: permutes, complete: true, dynamic: true},
	"tty":      {order: permutes, short: "s", long: "silent quiet", complete: true, dynamic: true},
	"uptime":   {order: permutes, short: "psV", long: "pretty since container raw", dynamic: true},
	"free":     {order: permutes, short: "bkmghltLsc:wv", long: "bytes kilo mega giga tera peta kibi mebi gibi tebi pebi human si lohi total line seconds= count= wide committed", dynamic: true},
	"locale":   {order: permutes, short: "acmkv", long: "all-locales charmaps category-name keyword-name verbose", dynamic: true},
	"grep":     grepGrammar(),
	"egrep":    grepGrammar(),
	"fgrep":    grepGrammar(),
	"zgrep":    grepGrammar(),
	"uniq": {
		order: permutes,
		short: "cdDf:is:uzw:", long: "count repeated all-repeated[=] group[=] skip-fields= ignore-case skip-chars= unique zero-terminated check-chars=",
		complete: true, digits: true,
		// uniq INPUT OUTPUT writes OUTPUT.
		operands: atMostOperands(1, v1alpha1.CategoryWrite, "uniq writes its second operand"),
	},
	"sort": {
		order: permutes,
		short: "bdfgiMhnRrVcCk:mo:sS:t:T:uz",
		long: "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort ignore-nonprinting month-sort human-numeric-sort " +
			"numeric-sort random-sort random-source= reverse sort= version-sort batch-size= check[=] compress-program= debug files0-from= " +
			"key= merge output= stable buffer-size= field-separator= temporary-directory= parallel= unique zero-terminated",
		complete: true,
		effects: map[string]v1alpha1.CommandCategory{
			"o": v1alpha1.CategoryWrite, "output": v1alpha1.CategoryWrite,
			"T": v1alpha1.CategoryWrite, "temporary-directory": v1alpha1.CategoryWrite,
			"compress-program": v1alpha1.CategoryUnknown,
		},
	},
	"date": {
		order: permutes,
		short: "d:f:I::Rr:s:u", long: "date= debug file= iso-8601[=] resolution rfc-email rfc-3339= reference= set= utc universal",
		complete: true,
		effects:  map[string]v1alpha1.CommandCategory{"s": v1alpha1.CategoryPrivilege, "set": v1alpha1.CategoryPrivilege},
		operands: func(ops []word) (v1alpha1.CommandCategory, string) {
			// date refuses a second operand before it does anything ("extra
			// operand"): date +%F -d "$day" as POSIXLY_CORRECT reads it. A word
			// that may split may also expand to no word at all.
			fails := len(ops) > 1
			for _, o := range ops {
				fails = fails && !o.split
			}
			if fails {
				return v1alpha1.CategoryReadOnly, ""
			}
			for _, o := range ops {
				if !o.static || !strings.HasPrefix(o.text, "+") {
					return v1alpha1.CategoryPrivilege, "an operand of date that is not a +FORMAT sets the clock"
				}
			}
			return v1alpha1.CategoryReadOnly, ""
		},
	},
	"file": {
		order: permutes,
		short: "vm:zZ0bcCe:f:F:hiklLnNpP:rsSd",
		long: "apple brief checking-printout compile debug dereference exclude= exclude-quiet= extension files-from= keep-going list " +
			"magic-file= mime mime-encoding mime-type no-buffer no-dereference no-pad no-sandbox parameter= preserve-date print0 raw " +
			"separator= special-files uncompress uncompress-noreport",
		complete: true,
		effects: map[string]v1alpha1.CommandCategory{
			// -C compiles magic files into the working directory; -z runs decompressors
			// on the files it reads.
			"C": v1alpha1.CategoryWrite, "compile": v1alpha1.CategoryWrite,
			// -p restores the access time of what it reads: a write.
			"p": v1alpha1.CategoryWrite, "preserve-date": v1alpha1.CategoryWrite,
			"z": v1alpha1.CategoryUnknown, "Z": v1alpha1.CategoryUnknown, "uncompress": v1alpha1.CategoryUnknown, "uncompress-noreport": v1alpha1.CategoryUnknown,
			"S": v1alpha1.CategoryUnknown, "no-sandbox": v1alpha1.CategoryUnknown,
		},
	},
	"jq": {
		order: permutes,
		short: "ncsrjaSCMeRf:L:0",
		long: "null-input compact-output slurp raw-output raw-output0 join-output ascii-output sort-keys color-output monochrome-output " +
			"tab indent= unbuffered stream stream-errors seq exit-status raw-input arg= argjson= slurpfile= rawfile= args jsonargs from-file=",
		// jq cannot run programs or write files: any filter only reads.
		dynamic: true,
	},
	"rg": {
		order: permutes,
		short: "A:B:C:cE:e:f:Fg:hHiIlLm:M:nNoOpqrsSt:T:uUvwxz0j:",
		long: "after-context= before-context= context= count count-matches encoding= regexp= file= fixed-strings glob= iglob= " +
			"heading no-heading ignore-case no-ignore no-ignore-vcs no-ignore-dot no-ignore-parent files files-with-matches " +
			"files-without-match max-count= max-columns= line-number no-line-number only-matching pretty quiet replace= " +
			"case-sensitive smart-case type= type-not= type-list unrestricted invert-match word-regexp line-regexp hidden " +
			"follow column json vimgrep null no-messages multiline multiline-dotall sort= sortr= stats trim color= max-depth= " +
			"max-filesize= threads= binary text passthru one-file-system no-config",
		// --pre and --pre-glob run a program on every file and -z runs decompressors:
		// --pre is not listed (unknown), -z is an effect. A config file named by
		// RIPGREP_CONFIG_PATH could add --pre; setting that variable is refused by
		// the environment check.
		effects: map[string]v1alpha1.CommandCategory{"z": v1alpha1.CategoryUnknown},
	},
	// gofmt and goimports parse options with Go's flag package: each option is a
	// word of its own, so a bundle such as -lw is unknown to them and to this, and
	// the first operand ends the options (gofmt x.go -w reads a file named -w).
	"gofmt":     {order: stopsAtOperand, short: "delsr:w", effects: map[string]v1alpha1.CommandCategory{"w": v1alpha1.CategoryWrite}},
	"goimports": {order: stopsAtOperand, short: "dlw", effects: map[string]v1alpha1.CommandCategory{"w": v1alpha1.CategoryWrite}},

	"which": {order: stopsAtOperand, short: "as", dynamic: true},
	"sleep": {order: permutes, dynamic: true},
	"expr":  {order: stopsAtOperand, dynamic: true},
	"yes":   {order: permutes, dynamic: true},
	"look":  {order: permutes, short: "adft:", dynamic: true},
	"tsort": {order: permutes, dynamic: true},
	"rev":   {order: permutes, dynamic: true},
	"ps":    {order: permutes, short: "AaedfFjlLmMTvwxXyZCG:g:p:q:s:t:U:u:o:O:k:", long: "forest headers no-headers sort= pid= ppid= format= cols= columns= lines= width= cumulative deselect", dynamic: true},
	"pgrep": {order: permutes, short: "lacdfg:G:inoP:s:t:u:U:vwxFr:", long: "delimiter= list-name list-full count full pgroup= group= ignore-case newest oldest parent= session= terminal= euid= uid= inverse lightweight exact pidfile= logpidfile ns= nslist= runstates=", dynamic: true},
	"zcat":  {order: permutes, short: "fhlLqrtvV", long: "force list license quiet recursive test verbose", dynamic: true},
	"bzcat": {order: permutes, short: "sv", long: "small verbose", dynamic: true},
	"xzcat": {order: permutes, short: "qvQT:", long: "quiet verbose no-warn threads= single-stream ignore-check", dynamic: true},
	"cal":   {order: permutes, short: "13yYjmvwhSsc:", long: "one three year twelve julian monday sunday week= span color[=] vertical reform= iso", dynamic: true, digits: true},
}

func checksumGrammar() *grammar {
	return &grammar{order: permutes, short: "bctzw", long: "binary check tag text zero ignore-missing quiet status strict warn", complete: true, dynamic: true}
}

// grepGrammar: GNU grep only reads (-f reads patterns from a file; nothing runs).
func grepGrammar() *grammar {
	return &grammar{
		order: permutes,
		short: "A:B:C:cD:d:e:EFGf:hHiIlLm:noPqrRsTUvVwxyzZab",
		long: "extended-regexp fixed-strings basic-regexp perl-regexp regexp= file= ignore-case no-ignore-case word-regexp line-regexp " +
			"null-data no-messages invert-match max-count= byte-offset line-number line-buffered with-filename no-filename label= " +
			"only-matching quiet silent binary-files= text directories= devices= recursive dereference-recursive include= exclude= " +
			"exclude-from= exclude-dir= files-without-match files-with-matches count initial-tab null before-context= after-context= " +
			"context= group-separator= no-group-separator color[=] colour[=] binary",
		complete: true, dynamic: true, digits: true,
	}
}

// atMostOperands makes more than n operands (or one that may split into several)
// category c.
func atMostOperands(n int, c v1alpha1.CommandCategory, reason string) func([]word) (v1alpha1.CommandCategory, string) {
	return func(ops []word) (v1alpha1.CommandCategory, string) {
		for _, o := range ops {
			if o.split {
				return v1alpha1.CategoryUnknown, fmt.Sprintf("%s cannot be counted before it runs", o.text)
			}
		}
		if len(ops) > n {
			return c, reason
		}
		return v1alpha1.CategoryReadOnly, ""
	}
}

// grammarCommand classifies a command of readOnlyGrammars.
func grammarCommand(g *grammar) handler {
	return func(c *classifier, w []word, _ int) {
		p := g.parse(w[1:])
		c.addWithReason(w, p.category, p.reason)
	}
}
