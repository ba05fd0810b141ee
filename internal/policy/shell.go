package policy

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Part is one part of a shell command: one simple command (after unwrapping wrappers
// such as sudo, env, timeout or xargs), or one redirection.
type Part struct {
	// Argv is the command's words after quote removal. A word the classifier cannot
	// resolve statically (a variable, a substitution) keeps its source text.
	Argv []string
	// Command is what people read: argv joined with spaces, or "redirect > file".
	Command string
	// Category of this part.
	Category v1alpha1.CommandCategory
}

// Classification is the result of classifying a bash command.
type Classification struct {
	// Category is the strictest category of the parts; read-only for an empty command.
	Category v1alpha1.CommandCategory
	// Parts in source order; nested parts (substitutions, bash -c, find -exec) follow
	// the part that contains them.
	Parts []Part
}

// maxDepth bounds how deep strings run by bash -c, eval, trap or find -exec are
// followed; anything deeper is unknown.
const maxDepth = 8

// ClassifyCommand parses a bash command with a real shell parser and classifies every
// part of it: each simple command in lists, pipelines, &&/||, subshells, blocks,
// functions, command and process substitutions, the strings run by bash -c, sh -c and
// eval, the commands run by wrappers (sudo, env, nice, timeout, xargs, command, exec,
// nohup, find -exec), and every redirection. What cannot be parsed or followed — a
// syntax error, a command name held in a variable, a script file — is unknown, never
// read-only.
func ClassifyCommand(command string) (out Classification) {
	c := &classifier{funcs: map[string]bool{}}
	defer func() {
		// The parser is third-party code fed untrusted input: a panic in it must
		// fail closed, not crash the controller.
		if r := recover(); r != nil {
			out = Classification{
				Category: v1alpha1.CategoryUnknown,
				Parts:    []Part{{Command: fmt.Sprintf("unclassifiable: %v", r), Category: v1alpha1.CategoryUnknown}},
			}
		}
	}()
	c.script(command, 0)
	out.Parts = c.parts
	out.Category = v1alpha1.CategoryReadOnly
	for _, p := range c.parts {
		if Stricter(p.Category, out.Category) {
			out.Category = p.Category
		}
	}
	return out
}

// word is one shell word: its value when it is static (only literals and quotes),
// otherwise its source text.
type word struct {
	text   string
	static bool
}

type classifier struct {
	parts []Part
	// funcs are the functions the command defines; calling one runs its body, which
	// is classified where it is defined.
	funcs map[string]bool
}

func (c *classifier) add(words []word, category v1alpha1.CommandCategory) {
	argv := make([]string, len(words))
	for i, w := range words {
		argv[i] = w.text
	}
	c.parts = append(c.parts, Part{Argv: argv, Command: strings.Join(argv, " "), Category: category})
}

func (c *classifier) note(text string, category v1alpha1.CommandCategory) {
	c.parts = append(c.parts, Part{Command: text, Category: category})
}

// script parses src and classifies everything in it.
func (c *classifier) script(src string, depth int) {
	if depth > maxDepth {
		c.note("nested too deep to follow", v1alpha1.CategoryUnknown)
		return
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		c.note("unparsable: "+err.Error(), v1alpha1.CategoryUnknown)
		return
	}
	syntax.Walk(file, func(n syntax.Node) bool {
		if fd, ok := n.(*syntax.FuncDecl); ok && fd.Name != nil {
			c.funcs[fd.Name.Value] = true
		}
		return true
	})
	syntax.Walk(file, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			c.assigns(n.Assigns)
			if len(n.Args) > 0 {
				words := make([]word, len(n.Args))
				for i, a := range n.Args {
					words[i] = wordOf(a)
				}
				c.command(words, depth, false)
			}
		case *syntax.DeclClause:
			c.assigns(n.Args)
		case *syntax.Redirect:
			c.redirect(n)
		}
		// Keep walking: substitutions inside words, bodies of blocks and functions.
		return true
	})
}

// hijackingVariables change which program runs or what it loads; setting one makes
// every later command unpredictable.
var hijackingVariables = map[string]bool{
	"PATH": true, "LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "LD_AUDIT": true,
	"BASH_ENV": true, "ENV": true, "IFS": true, "PROMPT_COMMAND": true, "SHELLOPTS": true,
	"BASHOPTS": true, "GIT_SSH_COMMAND": true, "GIT_SSH": true, "GIT_EXTERNAL_DIFF": true,
	"GIT_PAGER": true, "GIT_EDITOR": true, "GIT_CONFIG_PARAMETERS": true, "GIT_CONFIG_GLOBAL": true,
	"GIT_EXEC_PATH": true, "PAGER": true, "EDITOR": true, "VISUAL": true, "PYTHONSTARTUP": true,
	"PYTHONPATH": true, "NODE_OPTIONS": true, "PERL5OPT": true, "RUBYOPT": true,
}

func (c *classifier) assigns(assigns []*syntax.Assign) {
	for _, a := range assigns {
		if a.Name != nil && (hijackingVariables[a.Name.Value] || strings.HasPrefix(a.Name.Value, "GIT_CONFIG_")) {
			c.note(a.Name.Value+"=... (changes what later commands run)", v1alpha1.CategoryUnknown)
		}
	}
}

// harmlessSinks are redirection targets that keep nothing.
var harmlessSinks = map[string]bool{"/dev/null": true, "/dev/stdout": true, "/dev/stderr": true}

func (c *classifier) redirect(r *syntax.Redirect) {
	if r.Word == nil {
		return
	}
	target := wordOf(r.Word)
	text := "redirect " + r.Op.String() + " " + target.text
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		// The body is data; substitutions inside it are walked like any other word.
		return
	case syntax.RdrIn:
		c.note(text, v1alpha1.CategoryReadOnly)
		return
	case syntax.DplIn, syntax.DplOut:
		// >&2, <&0, >&- duplicate or close descriptors; bash treats >&word with any
		// other word as a redirection to a file.
		if target.static && (target.text == "-" || isDigits(target.text)) {
			return
		}
	}
	if target.static && harmlessSinks[target.text] {
		c.note(text, v1alpha1.CategoryReadOnly)
		return
	}
	c.note(text, v1alpha1.CategoryWrite)
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
var trustedBinDirs = map[string]bool{
	"/bin": true, "/usr/bin": true, "/usr/local/bin": true, "/sbin": true, "/usr/sbin": true, "/usr/local/sbin": true,
}

// command classifies one simple command. external is true when a wrapper runs the
// program directly (sudo, env, exec, command, xargs), bypassing shell functions.
func (c *classifier) command(words []word, depth int, external bool) {
	if len(words) == 0 {
		return
	}
	if depth > maxDepth {
		c.add(words, v1alpha1.CategoryUnknown)
		return
	}
	name := words[0]
	if !name.static {
		c.add(words, v1alpha1.CategoryUnknown)
		return
	}
	if strings.Contains(name.text, "/") {
		if !trustedBinDirs[path.Dir(name.text)] {
			c.add(words, v1alpha1.CategoryUnknown)
			return
		}
		words = append([]word{{text: path.Base(name.text), static: true}}, words[1:]...)
	}
	if !external && c.funcs[words[0].text] {
		// The function's body was classified where it was defined.
		c.add(words, v1alpha1.CategoryReadOnly)
		return
	}
	handle, ok := commands[words[0].text]
	if !ok {
		c.add(words, v1alpha1.CategoryUnknown)
		return
	}
	handle(c, words, depth)
}

// wordOf resolves a word statically when it holds only literals and quotes.
func wordOf(w *syntax.Word) word {
	var b strings.Builder
	static := true
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(p.Value, false))
		case *syntax.SglQuoted:
			if p.Dollar && strings.Contains(p.Value, `\`) {
				// $'\x72m' is "rm": ANSI-C escapes are not resolved here.
				static = false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, inner := range p.Parts {
				lit, ok := inner.(*syntax.Lit)
				if !ok {
					static = false
					break
				}
				b.WriteString(unescape(lit.Value, true))
			}
		default:
			static = false
		}
	}
	if !static {
		return word{text: source(w), static: false}
	}
	return word{text: b.String(), static: true}
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
	if err := syntax.NewPrinter(syntax.Minify(true)).Print(&b, n); err != nil {
		return "?"
	}
	return b.String()
}
