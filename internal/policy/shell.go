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
