package policy

import (
	"fmt"
	"path"
	"strings"
	"sync"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Part is one part of a shell command: one simple command (after unwrapping wrappers
// such as sudo, env, timeout or xargs), one redirection, or one shell construct that
// decides the category on its own (a function definition, an assignment).
type Part struct {
	// Argv is the command's words after quote removal. A word the classifier cannot
	// resolve statically (a variable, a substitution) keeps its source text.
	Argv []string
	// Command is what people read: argv joined with spaces, or "redirect > file".
	Command string
	// Category of this part.
	Category v1alpha1.CommandCategory
	// Reason says why a part is not read-only when that is not obvious from the
	// command alone ("unknown option --compress-program").
	Reason string
}

// Classification is the result of classifying a bash command.
type Classification struct {
	// Category is the strictest category of the parts; read-only for an empty command.
	Category v1alpha1.CommandCategory
	// Parts in source order; nested parts (substitutions, bash -c, find -exec) follow
	// the part that contains them.
	Parts []Part
}

const (
	// maxDepth bounds how deep strings run by bash -c, eval, watch or find -exec are
	// followed; anything deeper is unknown.
	maxDepth = 8
	// maxCommandBytes bounds what is parsed at all. The bash tool accepts 16 KiB
	// characters; anything longer did not come through it.
	maxCommandBytes = 64 << 10
)

// ClassifyCommand parses a bash command with a real shell parser and classifies every
// part of it: each simple command in lists, pipelines, &&/||, subshells, blocks,
// functions, command and process substitutions, the strings run by bash -c, sh -c,
// eval and watch, the commands run by wrappers (sudo, env, nice, timeout, xargs,
// command, exec, nohup, find -exec), and every redirection.
//
// A part is read-only only when it is a command of readOnlyGrammars whose every
// word fits that command's grammar, in a script that defines no function shadowing
// a command, sets no variable that changes what programs run, and evaluates no
// arithmetic over variables. What cannot be parsed or followed — a syntax error, a
// command name held in a variable, a script file, an option the grammar does not
// know — is unknown, never read-only.
func ClassifyCommand(command string) (out Classification) {
	c := &classifier{funcs: map[string]bool{}}
	defer func() {
		// The parser is third-party code fed untrusted input: a panic in it must
		// fail closed, not crash the controller.
		if r := recover(); r != nil {
			out = Classification{
				Category: v1alpha1.CategoryUnknown,
				Parts:    []Part{{Command: "unclassifiable", Category: v1alpha1.CategoryUnknown, Reason: fmt.Sprintf("the parser failed: %v", r)}},
			}
		}
	}()
	if problem := unparsableInput(command); problem != "" {
		c.note("unclassifiable input", v1alpha1.CategoryUnknown, problem)
	} else {
		c.script(command, 0, false)
	}
	c.applyEnvironment()
	out.Parts = c.parts
	out.Category = v1alpha1.CategoryReadOnly
	for _, p := range c.parts {
		if Stricter(p.Category, out.Category) {
			out.Category = p.Category
		}
	}
	return out
}

// unparsableInput refuses input that bash and the parser could read differently:
// bash drops NUL bytes, and the parser and bash disagree on invalid UTF-8 and on
// carriage returns.
func unparsableInput(command string) string {
	switch {
	case len(command) > maxCommandBytes:
		return fmt.Sprintf("the command is %d bytes; at most %d are classified", len(command), maxCommandBytes)
	case strings.IndexByte(command, 0) >= 0:
		return "the command contains a NUL byte"
	case strings.IndexByte(command, '\r') >= 0:
		// The parser drops a carriage return before a newline, bash keeps it: a
		// backslash before CR LF continues the line for one and not the other.
		return "the command contains a carriage return"
	case !utf8.ValidString(command):
		return "the command is not valid UTF-8"
	}
	return ""
}

// word is one shell word.
type word struct {
	// text is the word after quote removal when static, otherwise its source text.
	text string
	// static is true when the word holds only literals and quotes: its value is text.
	static bool
	// split is true when bash may turn the word into several words (or none) or into
	// other text than its source: an unquoted expansion, a glob, a brace expansion,
	// and quoted expansions that are not provably one word ("$@", "${!prefix@}"). An
	// operand counter counts such a word as several (atMostOperands refuses it).
	split bool
	// glob is true when the word is static text that pathname expansion may turn
	// into file names (split for that reason alone).
	glob bool
	// lead is the static text before the first expansion of a word that is not
	// static ("src/" of "src/$f"): when it does not start with "-", the word cannot
	// be an option.
	lead string
}

// operandOnly says the word cannot be an option, whatever it expands to.
func (w word) operandOnly() bool {
	switch {
	case w.static && !w.split:
		return !strings.HasPrefix(w.text, "-") || w.text == "-"
	case w.static && w.glob:
		// A file name matched by a pattern starts with the pattern's first
		// character when that is a literal one.
		return w.text != "" && strings.IndexByte("*?[-\\", w.text[0]) < 0
	case !w.static && !w.split:
		return w.lead != "" && !strings.HasPrefix(w.lead, "-")
	}
	return false
}

type classifier struct {
	parts []Part
	// funcs are the functions the command defines; calling one is unknown.
	funcs map[string]bool
	// environment is the first variable the script exports to the commands it runs
	// that is neither harmless nor known to hijack them; every read-only command
	// then becomes unknown.
	environment string
}

func (c *classifier) add(words []word, category v1alpha1.CommandCategory) {
	c.addWithReason(words, category, "")
}

func (c *classifier) addWithReason(words []word, category v1alpha1.CommandCategory, reason string) {
	argv := make([]string, len(words))
	for i, w := range words {
		argv[i] = w.text
	}
	c.parts = append(c.parts, Part{Argv: argv, Command: strings.Join(argv, " "), Category: category, Reason: reason})
}

func (c *classifier) note(text string, category v1alpha1.CommandCategory, reason string) {
	c.parts = append(c.parts, Part{Command: text, Category: category, Reason: reason})
}

// applyEnvironment: a read-only command run with an environment variable toolgate
// does not know could behave otherwise (TAR_OPTIONS, LESSOPEN and RIPGREP_CONFIG_PATH
// all make read-only tools run programs), so it is unknown.
func (c *classifier) applyEnvironment() {
	if c.environment == "" {
		return
	}
	for i, p := range c.parts {
		if p.Argv != nil && p.Category == v1alpha1.CategoryReadOnly {
			c.parts[i].Category = v1alpha1.CategoryUnknown
			c.parts[i].Reason = fmt.Sprintf("the command sets %s for the programs it runs, and toolgate does not know what %s changes", c.environment, c.environment)
		}
	}
}

// script parses src and classifies everything in it as bash reads it. With posix it
// is also read as a POSIX sh reads it: sh -c runs /bin/sh, which is dash, busybox ash
// or bash depending on the image, and a string such as echo $'\' ; touch x hides a
// command from one reading that the other runs. The parts the POSIX reading finds
// are added to those of the bash reading; the statements before a POSIX syntax error
// count, since sh runs them before it reaches the error.
func (c *classifier) script(src string, depth int, posix bool) {
	if depth > maxDepth {
		c.note("nested too deep to follow", v1alpha1.CategoryUnknown, fmt.Sprintf("strings run by bash -c, eval or find -exec are followed %d levels deep", maxDepth))
		return
	}
	if strings.Contains(src, "$\\\n") {
		c.note("$\\ and a newline", v1alpha1.CategoryUnknown, reasonDollarContinuation)
	}
	parser := bashParsers.Get().(*syntax.Parser)
	file, err := parser.Parse(strings.NewReader(src), "")
	bashParsers.Put(parser)
	if err != nil {
		c.note("unparsable: "+err.Error(), v1alpha1.CategoryUnknown, "bash would read this command differently or not at all")
		return
	}
	c.walk(file, src, depth)
	if !posix {
		return
	}
	sh := &classifier{funcs: c.funcs}
	posixParser := posixParsers.Get().(*syntax.Parser)
	for stmt, err := range posixParser.StmtsSeq(strings.NewReader(src)) {
		if err != nil {
			break
		}
		sh.walk(stmt, src, depth)
	}
	posixParsers.Put(posixParser)
	known := map[string]bool{}
	for _, p := range c.parts {
		known[string(p.Category)+"\x00"+p.Command] = true
	}
	for _, p := range sh.parts {
		if !known[string(p.Category)+"\x00"+p.Command] {
			if p.Reason == "" {
				p.Reason = "as a POSIX sh reads the command"
			} else {
				p.Reason += " (as a POSIX sh reads the command)"
			}
			c.parts = append(c.parts, p)
		}
	}
	if c.environment == "" {
		c.environment = sh.environment
	}
}

// Parsers and printers are reused across classifications: each holds buffers that
// cost more to allocate than a short command costs to parse. Parse and Print reset
// them; one that panicked is not put back.
var (
	// Comments are kept so that one the parser ends differently from bash can be
	// refused (see comment).
	bashParsers  = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true)) }}
	posixParsers = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangPOSIX), syntax.KeepComments(true)) }}
	printers     = sync.Pool{New: func() any { return syntax.NewPrinter(syntax.Minify(true)) }}
)

// walk classifies every part of a command parsed from src.
func (c *classifier) walk(root syntax.Node, src string, depth int) {
	syntax.Walk(root, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			if n.Background || n.Coprocess || n.Disown {
				c.note(source(n), v1alpha1.CategoryUnknown, "a command run in the background can outlive the call")
			}
		case *syntax.CallExpr:
			c.assigns(n.Assigns, len(n.Args) > 0)
			if len(n.Args) > 0 {
				words := make([]word, len(n.Args))
				for i, a := range n.Args {
					words[i] = wordOf(a)
				}
				c.command(words, depth, false)
			}
		case *syntax.DeclClause:
			c.declaration(n)
		case *syntax.FuncDecl:
			c.function(n)
		case *syntax.Redirect:
			c.redirect(n)
			if n.Op == syntax.Hdoc || n.Op == syntax.DashHdoc {
				c.heredoc(n, src)
			}
		case *syntax.ForClause:
			switch loop := n.Loop.(type) {
			case *syntax.WordIter:
				c.binds(loop.Name.Value, false)
			case *syntax.CStyleLoop:
				for _, x := range []syntax.ArithmExpr{loop.Init, loop.Cond, loop.Post} {
					if x != nil {
						c.arithmetic(x, "for (( ))")
					}
				}
			}
		case *syntax.ArithmCmd:
			c.arithmetic(n.X, "(( ))")
		case *syntax.ArithmExp:
			c.arithmetic(n.X, "$(( ))")
		case *syntax.LetClause:
			c.note(source(n), v1alpha1.CategoryUnknown, "let evaluates arithmetic, which runs command substitutions held in variables")
		case *syntax.ParamExp:
			c.parameter(n)
		case *syntax.DblQuoted:
			c.quotedInExpansion(n.Parts)
		case *syntax.Comment:
			c.comment(n)
		case *syntax.TestClause:
			c.test(n)
		case *syntax.CoprocClause:
			c.note(source(n), v1alpha1.CategoryUnknown, "coproc runs a command in the background")
		}
		// Keep walking: substitutions inside words, bodies of blocks and functions.
		return true
	})
}

// shellBuiltins are names bash resolves before looking up a program; a function of
// one of these names (or of a known command) changes what a later word runs.
var shellBuiltins = set("alias", "bg", "bind", "break", "builtin", "caller", "cd", "command", "compgen", "complete",
	"compopt", "continue", "declare", "dirs", "disown", "echo", "enable", "eval", "exec", "exit", "export", "false", "fc",
	"fg", "getopts", "hash", "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd", "printf",
	"pushd", "pwd", "read", "readarray", "readonly", "return", "set", "shift", "shopt", "source", "suspend", "test",
	"times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias", "unset", "wait", ":", ".", "[",
	"command_not_found_handle", "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until",
	"do", "done", "in", "function", "time", "coproc", "{", "}", "!", "[[", "]]")

// function records a function definition. Calling it is unknown (its body is
// classified where it is defined, but bash resolves the name at call time, so the
// definition that runs may not be the one read); a definition that takes the name of
// a command or builtin makes the whole command unknown.
func (c *classifier) function(fd *syntax.FuncDecl) {
	names := append([]*syntax.Lit{}, fd.Names...)
	if fd.Name != nil {
		names = append(names, fd.Name)
	}
	for _, n := range names {
		c.funcs[n.Value] = true
		_, known := commands[n.Value]
		if known || shellBuiltins[n.Value] || strings.Contains(n.Value, "/") {
			c.note("function "+n.Value, v1alpha1.CategoryUnknown, fmt.Sprintf("defines a function %s that replaces the command of that name", n.Value))
		}
	}
}

// hijackingVariables change which program runs, what a program loads, or which
// commands a read-only tool runs; setting one anywhere makes the command unknown.
var hijackingVariables = set(
	"PATH", "BASH_ENV", "ENV", "BASH_CMDS", "BASH_ALIASES", "BASHOPTS", "SHELLOPTS", "BASH_XTRACEFD", "PS0", "PS1", "PS2",
	"PS3", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "PWD", "OLDPWD", "POSIXLY_CORRECT", "GLOBIGNORE", "EXECIGNORE", "HOME", "XDG_CONFIG_HOME", "SHELL",
	"PAGER", "MANPAGER", "MANOPT", "MANPATH", "BROWSER", "EDITOR", "VISUAL", "LESS", "LESSOPEN", "LESSCLOSE", "LESSKEY",
	"LESSKEYIN", "LESSSECURE", "TAR_OPTIONS", "RIPGREP_CONFIG_PATH", "GZIP", "XZ_OPT", "BZIP2", "NODE_OPTIONS", "NODE_PATH",
	"PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "GEM_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
	"SSH_ASKPASS", "SUDO_ASKPASS", "GIT_ASKPASS", "TERMINFO", "INPUTRC", "HISTFILE", "MAIL", "MAILPATH", "FPATH",
)

// hijackingPrefixes are families of such variables.
var hijackingPrefixes = []string{"LD_", "GIT_", "PYTHON", "BASH_FUNC_", "DYLD_", "GCONV_", "NLSPATH"}

// harmlessVariables only change formatting; a command may set them for read-only
// commands. A name with a lower-case letter is a shell variable by convention and no
// program of readOnlyGrammars reads one.
var harmlessVariables = set("LANG", "LANGUAGE", "TZ", "COLUMNS", "LINES", "TERM", "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE",
	"FORCE_COLOR", "TIME_STYLE", "BLOCK_SIZE", "BLOCKSIZE", "DU_BLOCK_SIZE", "DF_BLOCK_SIZE", "LS_COLORS",
	"GREP_COLORS", "QUOTING_STYLE", "TABSIZE", "SIMPLE_BACKUP_SUFFIX")

func hijacks(name string) bool {
	if hijackingVariables[name] {
		return true
	}
	for _, p := range hijackingPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// binds checks a variable the script sets. exported says the programs it runs see
// it (an assignment before a command, export): then a name that is not harmless
// makes read-only commands unknown. A name bash would reject is left to bash.
func (c *classifier) binds(name string, exported bool) {
	switch {
	case hijacks(name):
		c.note(name+"=...", v1alpha1.CategoryUnknown, fmt.Sprintf("setting %s changes which programs later commands run or what they load", name))
	case strings.Contains(name, "["):
		c.note(name, v1alpha1.CategoryUnknown, "an array subscript in a variable name is evaluated as arithmetic, which runs command substitutions")
	case exported && c.environment == "" && !harmlessVariables[name] && !strings.HasPrefix(name, "LC_") && strings.ToLower(name) != name && strings.ToUpper(name) == name:
		c.environment = name
	}
}

// assigns checks the assignments of a simple command; before a command they are
// exported to it, alone they set shell variables.
func (c *classifier) assigns(assigns []*syntax.Assign, beforeCommand bool) {
	for _, a := range assigns {
		if a.Name == nil {
			continue
		}
		if pagerOff(a) {
			continue
		}
		c.binds(a.Name.Value, beforeCommand)
		c.subscripts(a)
	}
}

// subscripts checks the subscripts of an assignment, a[i]=x and a=([i]=x) alike.
func (c *classifier) subscripts(a *syntax.Assign) {
	if a.Index != nil {
		c.arithmetic(a.Index, a.Name.Value+"[...]")
	}
	if a.Array != nil {
		for _, e := range a.Array.Elems {
			if e.Index != nil {
				c.arithmetic(e.Index, a.Name.Value+"=([...]=...)")
			}
		}
	}
}

// declaration: declare, typeset, local, export, readonly. Attributes (-i makes every
// later assignment arithmetic, -n makes a name reference, -x exports, -f exports
// functions) and subscripts are unknown; plain assignments are checked like others.
func (c *classifier) declaration(d *syntax.DeclClause) {
	variant := d.Variant.Value
	for _, a := range d.Args {
		if a.Name == nil {
			// An option, or a word the parser could not read as a name.
			text := "?"
			if a.Value != nil {
				text = source(a.Value)
			}
			c.note(variant+" "+text, v1alpha1.CategoryUnknown, fmt.Sprintf("%s with attributes or with a name that is not static changes how later words are evaluated", variant))
			continue
		}
		if !pagerOff(a) {
			c.binds(a.Name.Value, variant == "export")
		}
		if a.Index != nil {
			c.note(variant+" "+a.Name.Value+"[...]", v1alpha1.CategoryUnknown, "a subscript in a declaration is evaluated as arithmetic, which runs command substitutions")
		}
		c.subscripts(a)
	}
}

// arithmetic accepts expressions of literal numbers only: bash evaluates a variable's
// value inside arithmetic as an expression, and an array subscript in that value runs
// command substitutions (x='a[$(rm -rf .)]'; echo $((x))).
func (c *classifier) arithmetic(x syntax.ArithmExpr, where string) {
	literal := true
	syntax.Walk(x, func(n syntax.Node) bool {
		if w, ok := n.(*syntax.Word); ok {
			if !arithmeticLiteral(w) {
				literal = false
			}
			return false
		}
		return true
	})
	if !literal {
		c.note(where+" "+source(x), v1alpha1.CategoryUnknown, "arithmetic over anything but literal numbers can run command substitutions held in variables")
	}
}

// arithmeticLiteral accepts a literal number, or one of the special parameters that
// always hold a number ($#, $?, $$, $!).
func arithmeticLiteral(w *syntax.Word) bool {
	if isNumber(w.Lit()) {
		return true
	}
	if len(w.Parts) != 1 {
		return false
	}
	p, ok := w.Parts[0].(*syntax.ParamExp)
	return ok && p.Param != nil && p.Index == nil && p.Exp == nil && p.Slice == nil && p.Repl == nil && !p.Excl && !p.Length &&
		(p.Param.Value == "#" || p.Param.Value == "?" || p.Param.Value == "$" || p.Param.Value == "!")
}

// isNumber accepts bash integer literals: 42, 0x1f, 017, 2#101.
func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEFxX#", r) {
			return false
		}
	}
	return s[0] >= '0' && s[0] <= '9'
}

// parameter checks a parameter expansion: indirection (${!x}), prompt expansion
// (${x@P}) and subscripts or offsets that are not literal all evaluate what the
// variable holds.
func (c *classifier) parameter(p *syntax.ParamExp) {
	c.expansionWords(p)
	switch {
	case p.Excl && p.Names == 0:
		c.note(source(p), v1alpha1.CategoryUnknown, "indirect expansion evaluates the name a variable holds, subscripts included")
	case p.Exp != nil && p.Exp.Op == syntax.OtherParamOps && p.Exp.Word != nil && p.Exp.Word.Lit() == "P":
		c.note(source(p), v1alpha1.CategoryUnknown, "${x@P} expands a prompt string, which runs command substitutions")
	}
	if p.Exp != nil && (p.Exp.Op == syntax.AssignUnset || p.Exp.Op == syntax.AssignUnsetOrNull) && p.Param != nil {
		// ${NAME:=value} assigns NAME.
		c.binds(p.Param.Value, false)
	}
	if p.Index != nil {
		if w, ok := p.Index.(*syntax.Word); !ok || (w.Lit() != "@" && w.Lit() != "*" && !isNumber(w.Lit())) {
			c.arithmetic(p.Index, "${"+paramName(p)+"[...]}")
		}
	}
	if p.Slice != nil {
		for _, x := range []syntax.ArithmExpr{p.Slice.Offset, p.Slice.Length} {
			if x != nil {
				c.arithmetic(x, "${"+paramName(p)+":...}")
			}
		}
	}
}

func paramName(p *syntax.ParamExp) string {
	if p.Param != nil {
		return p.Param.Value
	}
	return "?"
}

// test checks a [[ ]] expression: -v and -R evaluate subscripts, and the arithmetic
// comparisons evaluate both sides as arithmetic.
func (c *classifier) test(clause *syntax.TestClause) {
	syntax.Walk(clause.X, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.UnaryTest:
			if n.Op == syntax.TsVarSet || n.Op == syntax.TsRefVar {
				c.note(source(clause), v1alpha1.CategoryUnknown, "[[ -v ]] evaluates the subscript of the name it tests")
			}
		case *syntax.BinaryTest:
			switch n.Op {
			case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
				for _, side := range []syntax.TestExpr{n.X, n.Y} {
					if w, ok := side.(*syntax.Word); !ok || !arithmeticLiteral(w) {
						c.note(source(clause), v1alpha1.CategoryUnknown, "an arithmetic comparison in [[ ]] evaluates its sides as arithmetic")
						break
					}
				}
			}
		}
		return true
	})
}

// Reasons for refusing text that bash and the parser read differently.
const (
	// reasonQuotesInExpansion: "${x:-'$(cmd)'}" runs cmd in bash (quotedInExpansion).
	reasonQuotesInExpansion = "single quotes inside a ${...} expansion inside double quotes are literal characters to bash, which runs the substitutions they hold (the parser reads them as quotes and sees none); drop the single quotes or the double quotes"
	// reasonProcessInExpansion: ${x:-<(cmd)} runs cmd in bash (expansionWords).
	reasonProcessInExpansion = "a process substitution <(...) or >(...) inside a ${...} expansion runs in bash, while the parser reads it as text; use a variable or a plain word"
	// reasonDollarQuoteInExpansion: "${x:-$'\x24(cmd)'}" runs cmd (expansionWords).
	reasonDollarQuoteInExpansion = "bash decodes $'...' inside a ${...} expansion and, in double quotes or a substitution inside them, expands the result, which can run a command the parser does not see; use a variable or plain quotes"
	// reasonDollarContinuation: "$\" then "(cmd)" on the next line runs cmd
	// (script).
	reasonDollarContinuation = "a $ is followed by a backslash and a newline: bash joins the lines and expands what follows ($(...), ${...}, $@), the parser reads a plain $; join the lines"
	// reasonCommentBackslash: "# x \" then a line is a comment and a command to
	// bash, more words of the command before the comment to the parser (comment).
	reasonCommentBackslash = "a comment ends in a backslash: bash ends the comment at the newline and runs the next line, which the parser reads as part of the command before it; remove the backslash"
)

// quotedInExpansion refuses single quotes inside a parameter expansion inside double
// quotes (parts are those of a double-quoted string or of an unquoted here-document's
// body), where bash and the parser disagree. In "${x:-'$(cmd)'}" (and -, +, :+, =,
// :=) bash takes the single quotes as literal characters and expands what they hold,
// so cmd runs; the parser reads a quoted string and sees no command. A quoted string
// with nothing bash could expand is the same text to both, quotes aside, and stays.
//
// Every expansion operator is covered, not only those six: in pattern operators
// (${x#'...'}) bash reads the quotes as quotes, but an operator nested in one
// (${x#${y:-'...'}}) is expanded one way or the other depending on the outer one.
func (c *classifier) quotedInExpansion(parts []syntax.WordPart) {
	for _, part := range parts {
		pe, ok := part.(*syntax.ParamExp)
		if !ok || !hasWords(pe) {
			continue
		}
		syntax.Walk(pe, func(n syntax.Node) bool {
			switch n := n.(type) {
			case *syntax.CmdSubst, *syntax.ProcSubst:
				// A new quoting context, walked on its own.
				return false
			case *syntax.SglQuoted:
				// $'...' is refused in every context by expansionWords.
				if !n.Dollar && strings.ContainsAny(n.Value, "$`") {
					c.note(source(pe), v1alpha1.CategoryUnknown, reasonQuotesInExpansion)
					return false
				}
			}
			return true
		})
	}
}

// expansionWords refuses what bash runs inside a ${...} expansion's words and the
// parser reads as text, in every quoting context:
//   - a process substitution: the parser reads ${x:-<(cmd)} and "${x,<(cmd)}" as
//     the literal text "<(cmd)", bash runs cmd;
//   - $'...' holding an escape, a $ or a backquote: bash decodes it and, inside
//     double quotes, expands the result ("${x:-$'\x24(cmd)'}" runs cmd), and so
//     also inside a command substitution inside double quotes, where the
//     expansion itself is not quoted ("$(: ${x:-$'\x24(cmd)'})").
//
// Expansions nested in p are checked on their own; substitutions are walked on their
// own.
func (c *classifier) expansionWords(p *syntax.ParamExp) {
	if !hasWords(p) {
		return
	}
	syntax.Walk(p, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return false
		case *syntax.ParamExp:
			return n == p
		case *syntax.Lit:
			if strings.Contains(n.Value, "<(") || strings.Contains(n.Value, ">(") {
				c.note(source(p), v1alpha1.CategoryUnknown, reasonProcessInExpansion)
			}
		case *syntax.SglQuoted:
			if n.Dollar && strings.ContainsAny(n.Value, "\\$`") {
				c.note(source(p), v1alpha1.CategoryUnknown, reasonDollarQuoteInExpansion)
			}
		}
		return true
	})
}

// comment refuses a comment that ends in a backslash: bash ends every comment at the
// newline, while the parser takes the backslash and newline for a line continuation
// and reads the next line as more of the command before the comment, so that
// "echo a # \" followed by "touch x" is one echo to it and runs touch in bash.
func (c *classifier) comment(n *syntax.Comment) {
	if strings.HasSuffix(n.Text, "\\\n") {
		c.note("#"+strings.TrimSuffix(n.Text, "\\\n"), v1alpha1.CategoryUnknown, reasonCommentBackslash)
	}
}

// harmlessSinks are redirection targets that keep nothing.
var harmlessSinks = set("/dev/null", "/dev/stdout", "/dev/stderr")

func (c *classifier) redirect(r *syntax.Redirect) {
	if r.N != nil && strings.HasPrefix(r.N.Value, "{") {
		// {name}>file stores the descriptor's number in the variable name.
		name := strings.TrimSuffix(strings.TrimPrefix(r.N.Value, "{"), "}")
		if !variableName.MatchString(name) {
			c.note("redirect "+r.N.Value, v1alpha1.CategoryUnknown, "a {name} redirection with a subscript evaluates it as arithmetic")
		} else {
			c.binds(name, false)
		}
	}
	if r.Word == nil {
		return
	}
	target := wordOf(r.Word)
	text := "redirect " + r.Op.String() + " " + target.text
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		// The body is data; substitutions inside it are walked like any other word.
		return
	case syntax.DplIn, syntax.DplOut:
		// >&2, <&0, >&- duplicate or close descriptors; bash treats >&word with any
		// other word as a redirection to a file.
		if target.static && (target.text == "-" || isDigits(target.text)) {
			return
		}
	}
	if !target.static || target.split {
		c.note(text, v1alpha1.CategoryUnknown, "the target of the redirection is known only when the command runs")
		return
	}
	if clean := path.Clean(target.text); strings.HasPrefix(clean, "/dev/tcp/") || strings.HasPrefix(clean, "/dev/udp/") {
		c.note(text, v1alpha1.CategoryNetwork, "bash opens a network connection for /dev/tcp and /dev/udp")
		return
	}
	if r.Op == syntax.RdrIn || harmlessSinks[target.text] {
		c.note(text, v1alpha1.CategoryReadOnly, "")
		return
	}
	c.note(text, v1alpha1.CategoryWrite, "")
}

// heredoc refuses a here-document whose end bash could find elsewhere than the
// parser, which would make a command bash runs read as data:
//   - an unquoted one whose body continues a line with a backslash: bash joins
//     such lines before it compares a line with the delimiter, so "EO\" and "F"
//     end the body there (the parser does not join them);
//   - one with a body line that starts with the delimiter: inside $( ), <( ) or
//     backquotes bash ends the body at "EOF)" together with the substitution,
//     where the parser reads on to a plain "EOF".
//
// src is the text r was parsed from.
func (c *classifier) heredoc(r *syntax.Redirect, src string) {
	if r.Word == nil {
		return
	}
	delimiter, quoted := wordOf(r.Word), false
	for _, part := range r.Word.Parts {
		if lit, isLit := part.(*syntax.Lit); !isLit || strings.Contains(lit.Value, "\\") {
			quoted = true
		}
	}
	text := "here-document " + r.Op.String() + delimiter.text
	if !delimiter.static || delimiter.text == "" {
		c.note(text, v1alpha1.CategoryUnknown, "a here-document's delimiter must be a plain word: bash and the parser could end the body at different lines")
		return
	}
	if r.Hdoc == nil {
		return
	}
	if !quoted {
		// An unquoted body is expanded as if it were in double quotes.
		c.quotedInExpansion(r.Hdoc.Parts)
	}
	start, end := int(r.Hdoc.Pos().Offset()), int(r.Hdoc.End().Offset())
	if start < 0 || end > len(src) || start > end {
		c.note(text, v1alpha1.CategoryUnknown, "the here-document's body could not be located in the command")
		return
	}
	body := src[start:end]
	if !quoted && strings.Contains(body, "\\\n") {
		c.note(text, v1alpha1.CategoryUnknown, "a line of this here-document ends with a backslash: bash joins it with the next line before it looks for the delimiter, so the body could end elsewhere than it appears to; quote the delimiter (<<'"+delimiter.text+"') to keep the text as it is")
		return
	}
	lines := strings.Split(body, "\n")
	for i, line := range lines {
		if r.Op == syntax.DashHdoc {
			line = strings.TrimLeft(line, "\t")
		}
		if i == len(lines)-1 && line == delimiter.text {
			break // the line that ends the body (the parser's span includes it)
		}
		// A longer word (EOFError under <<EOF) is text to bash too; the
		// delimiter followed by anything else (")", "`", a space) may end it.
		if rest, found := strings.CutPrefix(line, delimiter.text); found && (rest == "" || !isWordByte(rest[0])) {
			c.note(text, v1alpha1.CategoryUnknown, fmt.Sprintf("a line of this here-document starts with its delimiter %q: inside a substitution bash could end the body there; choose a delimiter the text does not contain", delimiter.text))
			return
		}
	}
}

// isWordByte says whether b can continue a shell word of letters, digits and _.
func isWordByte(b byte) bool {
	return b == '_' || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// trustedBinDirs are the directories whose programs are looked up by base name, so
// /usr/bin/rm is rm; a program anywhere else (./build.sh) is unknown.
var trustedBinDirs = set("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin")

// command classifies one simple command. external is true when a wrapper runs the
// program directly (sudo, env, exec, command, xargs), bypassing shell functions.
func (c *classifier) command(words []word, depth int, external bool) {
	if len(words) == 0 {
		return
	}
	if depth > maxDepth {
		c.addWithReason(words, v1alpha1.CategoryUnknown, "wrapped too deep to follow")
		return
	}
	name := words[0]
	if !name.static || name.split {
		c.addWithReason(words, v1alpha1.CategoryUnknown, "the command's name is known only when it runs")
		return
	}
	if strings.Contains(name.text, "/") {
		if !trustedBinDirs[path.Dir(name.text)] {
			c.addWithReason(words, v1alpha1.CategoryUnknown, "a program outside the system's bin directories")
			return
		}
		words = append([]word{{text: path.Base(name.text), static: true}}, words[1:]...)
	}
	if !external && c.funcs[words[0].text] {
		c.addWithReason(words, v1alpha1.CategoryUnknown, fmt.Sprintf("calls the function %s the command defines", words[0].text))
		return
	}
	handle, ok := commands[words[0].text]
	if !ok {
		c.addWithReason(words, v1alpha1.CategoryUnknown, fmt.Sprintf("toolgate does not know the command %s", words[0].text))
		return
	}
	handle(c, words, depth)
}

// wordOf resolves a word statically when it holds only literals and quotes.
func wordOf(w *syntax.Word) word {
	var b pieces
	// skeleton is the word as brace and pathname expansion see it: the unquoted
	// text, with each quoted or expanded part standing in as one letter, so that
	// {".","-delete"} and ["-"]x are seen across their quotes.
	var skeleton pieces
	out := word{static: true}
	dynamic := func(split bool) {
		if out.static {
			out.lead = b.String()
		}
		out.static = false
		out.split = out.split || split
	}
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if i == 0 && strings.HasPrefix(p.Value, "~") {
				// ~ is $HOME, ~+ is $PWD and ~- is $OLDPWD: a variable's value.
				dynamic(false)
			}
			skeleton.WriteString(p.Value)
			b.WriteString(unescape(p.Value, false))
		case *syntax.SglQuoted:
			if p.Dollar && strings.Contains(p.Value, `\`) {
				// $'\x72m' is "rm": ANSI-C escapes are not resolved here.
				dynamic(false)
			}
			skeleton.WriteString("q")
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			skeleton.WriteString("q")
			if p.Dollar {
				// $"..." is translated by the locale's message catalogue.
				dynamic(false)
			}
			for _, inner := range p.Parts {
				lit, ok := inner.(*syntax.Lit)
				if !ok {
					dynamic(!oneWordInQuotes(inner))
					continue
				}
				b.WriteString(unescape(lit.Value, true))
			}
		case *syntax.ProcSubst:
			// <(cmd) becomes one /dev/fd/N path, never an option.
			skeleton.WriteString("q")
			if out.static && b.Len() == 0 {
				b.WriteString("/dev/fd/")
			}
			dynamic(false)
		default:
			skeleton.WriteString("q")
			dynamic(true)
		}
	}
	if hasBraceExpansion(skeleton.String()) {
		dynamic(true)
	}
	if hasGlob(skeleton.String()) {
		// Pathname expansion can turn the word into any file name, one spelled
		// like an option included.
		out.glob = out.static
		out.split = true
	}
	if !out.static {
		out.glob = false
		out.text = source(w)
		return out
	}
	out.text = b.String()
	return out
}

// oneWordInQuotes says whether a part of a double-quoted string always expands to
// exactly one word. "$@", "${a[@]}", "${!a[@]}", "${!prefix@}" and an indirect
// "${!x}" (x=@) expand to as many words as there are elements or names, none if there
// are none, and so do they nested in another expansion's word ("${x:-"$@"}",
// "${x+${a[@]}}"). The output of a substitution in quotes is one word.
func oneWordInQuotes(part syntax.WordPart) bool {
	switch p := part.(type) {
	case *syntax.CmdSubst, *syntax.ArithmExp:
		return true
	case *syntax.ParamExp:
		if !hasWords(p) {
			return !expandsToElements(p)
		}
	}
	one := true
	syntax.Walk(part, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return false
		case *syntax.ParamExp:
			if expandsToElements(n) {
				one = false
			}
		}
		return one
	})
	return one
}

// hasWords says whether a parameter expansion holds words of its own (an operator's
// word, a replacement, a subscript, an offset) rather than only a name ($x, ${x}).
func hasWords(p *syntax.ParamExp) bool {
	return p.Exp != nil || p.Repl != nil || p.Index != nil || p.Slice != nil
}

// expandsToElements says whether a parameter expansion yields one word per element
// (quoted) rather than one string; ${#a[@]}, a count, is one.
func expandsToElements(p *syntax.ParamExp) bool {
	if p.Length {
		return false
	}
	if w, ok := p.Index.(*syntax.Word); ok && w.Lit() == "@" {
		return true
	}
	return paramName(p) == "@" || (p.Excl && (p.Names == syntax.NamesPrefixWords || p.Names == 0))
}

// pieces builds a string from pieces, allocating only when there is more than one
// non-empty piece: most words are one literal, whose text is that literal's.
type pieces struct {
	one  string
	many strings.Builder
}

func (p *pieces) WriteString(s string) {
	switch {
	case s == "":
	case p.many.Len() > 0:
		p.many.WriteString(s)
	case p.one == "":
		p.one = s
	default:
		p.many.Grow(len(p.one) + len(s))
		p.many.WriteString(p.one)
		p.many.WriteString(s)
		p.one = ""
	}
}

func (p *pieces) String() string {
	if p.many.Len() > 0 {
		return p.many.String()
	}
	return p.one
}

func (p *pieces) Len() int { return len(p.one) + p.many.Len() }

// hasGlob reports an unescaped *, ? or [...] in an unquoted literal.
func hasGlob(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?':
			return true
		case '[':
			if strings.IndexByte(s[i+1:], ']') >= 0 {
				return true
			}
		}
	}
	return false
}

// hasBraceExpansion reports a {a,b} or {1..3} in a word's skeleton. Any such shape
// counts, escaped or nested, so this may refuse a word bash leaves alone, never the
// other way round.
func hasBraceExpansion(s string) bool {
	for open := strings.IndexByte(s, '{'); open >= 0; {
		rest := s[open:]
		closing := strings.LastIndexByte(rest, '}')
		if closing < 0 {
			return false
		}
		if strings.Contains(rest[:closing], ",") || strings.Contains(rest[:closing], "..") {
			return true
		}
		next := strings.IndexByte(rest[1:], '{')
		if next < 0 {
			return false
		}
		open += next + 1
	}
	return false
}

// unescape removes the backslashes bash removes: before any character outside
// quotes, and before $ ` " \ and newline inside double quotes. A backslash-newline
// pair disappears.
func unescape(s string, inDouble bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			next := s[i+1]
			if next == '\n' {
				i++
				continue
			}
			if !inDouble || strings.IndexByte("$`\"\\", next) >= 0 {
				b.WriteByte(next)
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func source(n syntax.Node) string {
	var b strings.Builder
	printer := printers.Get().(*syntax.Printer)
	err := printer.Print(&b, n)
	printers.Put(printer)
	if err != nil {
		return "?"
	}
	return b.String()
}
