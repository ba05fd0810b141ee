package policy

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

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
