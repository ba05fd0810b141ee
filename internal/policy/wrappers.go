package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// adds is what a wrapper or a tool does besides running the command (or the
// subcommand) it is given, as each declares it (addsNothing for none).
type adds struct {
	// writes says why the wrapper writes a file itself ("" when it writes none):
	// nohup appends to nohup.out. The wrapper's part is then a write.
	writes string
	// path says why the wrapper puts a directory the workspace can hold first on
	// PATH ("" when it changes no PATH): uv run puts .venv/bin there. Every program
	// run by name under it, by the command or by the commands that command runs,
	// may then be a file of the workspace, so a part under it that would be
	// read-only runs the project's code: build.
	path string
	// projectCode says why every command of the tool, --version included, first runs
	// code that a file of the project names ("" when none does): yarn runs the
	// release yarnPath names, pnpm loads .pnpmfile.cjs. The tool's parts that would
	// be read-only are then build.
	projectCode string
}

// addsNothing declares a wrapper that runs its command unchanged and does nothing
// else.
var addsNothing = adds{}

// apply raises the parts the wrapper w added from index n on by what it adds.
func (a adds) apply(c *classifier, w []word, n int) {
	if a.path != "" || a.projectCode != "" {
		for i := n; i < len(c.parts); i++ {
			p := &c.parts[i]
			// Only what would be read-only: a test or a build runs the project's
			// code already.
			if p.Argv == nil || p.Category != v1alpha1.CategoryReadOnly {
				continue
			}
			switch {
			case a.path != "":
				p.Category, p.Reason = v1alpha1.CategoryBuild, fmt.Sprintf("%s: %s may be a program of the workspace", a.path, p.Argv[0])
			case p.Argv[0] == w[0].text:
				p.Category, p.Reason = v1alpha1.CategoryBuild, a.projectCode
			}
		}
	}
	if a.writes != "" {
		c.addWithReason(w, v1alpha1.CategoryWrite, a.writes)
	}
}

// wrap makes h's parts carry what a adds.
func (a adds) wrap(h handler) handler {
	if a == addsNothing {
		return h
	}
	return func(c *classifier, w []word, depth int) {
		n := len(c.parts)
		h(c, w, depth)
		a.apply(c, w, n)
	}
}

// wrapperCommand is a command that runs the command it is given, as its operands.
type wrapperCommand struct {
	// own is the wrapper's own category, "" when it is transparent.
	own v1alpha1.CommandCategory
	// grammar is the grammar of its own options.
	grammar *grammar
	// adds declares what it does besides running the command.
	adds adds
}

// wrappers are the wrappers that do nothing but run their command (and what they
// declare they add). timeout, watch, env, xargs, command, the package managers' run
// and uv run, which do more, have handlers of their own.
var wrappers = map[string]wrapperCommand{
	"sudo": {own: v1alpha1.CategoryPrivilege, adds: addsNothing, grammar: &grammar{
		short: "ABbEHiKknPSsVvg:C:D:h:p:R:r:t:T:U:u:", long: "user= group= login shell preserve-env[=] chdir= non-interactive", order: stopsAtOperand,
	}},
	"doas": {own: v1alpha1.CategoryPrivilege, adds: addsNothing, grammar: &grammar{short: "nsLu:C:", order: stopsAtOperand}},
	"nice": {adds: addsNothing, grammar: &grammar{short: "n:", long: "adjustment=", complete: true, digits: true, order: stopsAtOperand}},
	"ionice": {adds: addsNothing, grammar: &grammar{
		short: "c:n:p:P:u:t", long: "class= classdata= pid= pgid= uid= ignore", order: stopsAtOperand,
		// -p, -P and -u change other processes.
		effects: map[string]v1alpha1.CommandCategory{
			"p": v1alpha1.CategoryPrivilege, "P": v1alpha1.CategoryPrivilege, "u": v1alpha1.CategoryPrivilege,
			"pid": v1alpha1.CategoryPrivilege, "pgid": v1alpha1.CategoryPrivilege, "uid": v1alpha1.CategoryPrivilege,
		},
	}},
	"nohup": {
		grammar: &grammar{complete: true, order: stopsAtOperand},
		adds:    adds{writes: "nohup appends the command's output to nohup.out in the working directory (or in HOME) when its output is a terminal, which toolgate cannot see"},
	},
	// stdbuf preloads its library from the system's directories.
	"stdbuf":  {adds: addsNothing, grammar: &grammar{short: "i:o:e:", long: "input= output= error=", complete: true, order: stopsAtOperand}},
	"builtin": {adds: addsNothing, grammar: &grammar{order: stopsAtOperand}},
	// exec -c empties the environment (a shell then falls back to a PATH ending in
	// "."), -l and -a -NAME make a login shell that reads profile files.
	"exec": {adds: addsNothing, grammar: &grammar{short: "cla:", order: stopsAtOperand, effects: map[string]v1alpha1.CommandCategory{
		"c": v1alpha1.CategoryUnknown, "l": v1alpha1.CategoryUnknown, "a": v1alpha1.CategoryUnknown,
	}}},
	// time as a program (command time, /usr/bin/time) writes -o FILE.
	"time": {adds: addsNothing, grammar: &grammar{
		short: "af:o:pqv", long: "append format= output= portability quiet verbose", order: stopsAtOperand,
		effects: map[string]v1alpha1.CommandCategory{"o": v1alpha1.CategoryWrite, "output": v1alpha1.CategoryWrite},
	}},
}

// wrapper handles a command of wrappers: its operands are the command it runs.
func wrapper(wc wrapperCommand) handler {
	return wc.adds.wrap(func(c *classifier, w []word, depth int) {
		p := wc.grammar.parse(w[1:])
		rest := p.operands
		if wc.own != "" {
			c.add(w, wc.own)
		} else if p.category != v1alpha1.CategoryReadOnly || len(rest) == 0 {
			// An option it does not know, or nothing to run: nice or nohup alone
			// only print or fail.
			c.addWithReason(w, p.category, p.reason)
		}
		if len(rest) == 0 {
			return
		}
		c.command(rest, depth+1, true)
	})
}

var timeoutGrammar = &grammar{
	short: "k:s:v", long: "foreground kill-after= preserve-status signal= verbose", complete: true, order: stopsAtOperand,
}

// timeout DURATION COMMAND runs COMMAND in a process group of its own unless
// --foreground is given, so the runner's kill of the call's group misses it: a
// read-only command under it could outlive the call. Its command is classified as
// usual; without --foreground a call that would be read-only is unknown.
func timeout(c *classifier, w []word, depth int) {
	p := timeoutGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly || len(p.operands) < 2 {
		c.addWithReason(w, p.category, p.reason)
		if len(p.operands) < 2 {
			return
		}
	}
	n := len(c.parts)
	c.command(p.operands[1:], depth+1, true)
	if p.has("foreground") {
		return
	}
	for _, part := range c.parts[n:] {
		if part.Category != v1alpha1.CategoryReadOnly {
			return
		}
	}
	c.addWithReason(w, v1alpha1.CategoryUnknown, "timeout runs the command in a process group of its own, which can outlive the call; timeout --foreground keeps it in the call's")
}

var commandGrammar = &grammar{short: "pvV", order: stopsAtOperand}

// command [-pvV] name [args]: -v and -V only say what name is.
func commandBuiltin(c *classifier, w []word, depth int) {
	p := commandGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly || p.has("v", "V") || len(p.operands) == 0 {
		c.addWithReason(w, p.category, p.reason)
		return
	}
	c.command(p.operands, depth+1, true)
}

var envGrammar = &grammar{
	short: "i0u:C:S:v", long: "ignore-environment null unset= chdir= split-string= block-signal[=] default-signal[=] ignore-signal[=] list-signal-handling debug",
	complete: true, order: stopsAtOperand,
	// -S splits a string into a command line: not followed. -i empties the
	// environment, and a shell without PATH looks commands up in ".".
	effects: map[string]v1alpha1.CommandCategory{
		"S": v1alpha1.CategoryUnknown, "split-string": v1alpha1.CategoryUnknown,
		"i": v1alpha1.CategoryUnknown, "ignore-environment": v1alpha1.CategoryUnknown,
	},
}

// env [-i] [-u NAME] [-C DIR] [NAME=value]... [command]
func env(c *classifier, w []word, depth int) {
	p := envGrammar.parse(w[1:])
	for _, o := range p.options {
		if o.name == "u" || o.name == "unset" {
			// env -u PATH is unset PATH.
			c.binds(o.value, true)
		}
	}
	rest := p.operands
	for len(rest) > 0 && rest[0].static && strings.Contains(rest[0].text, "=") {
		name, _, _ := strings.Cut(rest[0].text, "=")
		c.binds(name, true)
		rest = rest[1:]
	}
	if p.category != v1alpha1.CategoryReadOnly || len(rest) == 0 {
		c.addWithReason(w, p.category, p.reason)
	}
	if len(rest) == 0 {
		return
	}
	c.command(rest, depth+1, true)
}

var xargsGrammar = &grammar{
	short: "0a:d:E:e::I:i::L:l::n:oP:prs:tx",
	long: "arg-file= delimiter= eof[=] exit interactive max-args= max-chars= max-lines[=] max-procs= no-run-if-empty null " +
		"open-tty process-slot-var= replace[=] show-limits verbose",
	complete: true, order: stopsAtOperand,
	// --process-slot-var sets a variable of the commands xargs runs (BASH_ENV, PATH).
	effects: map[string]v1alpha1.CommandCategory{"process-slot-var": v1alpha1.CategoryUnknown},
}

// xargs [options] [command [initial-arguments]] runs command with words read from
// its input appended (or put in place of {} with -I): those words are unknown
// until it runs, so the command gets a word that may be anything. Without a command
// it runs echo.
func xargs(c *classifier, w []word, depth int) {
	p := xargsGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly {
		c.addWithReason(w, p.category, p.reason)
	}
	if len(p.operands) == 0 {
		return
	}
	replace := ""
	for _, o := range p.options {
		switch o.name {
		case "I", "replace", "i":
			replace = o.value
			if replace == "" {
				replace = "{}"
			}
		}
	}
	rest := fromInput(p.operands, replace)
	if replace == "" {
		rest = append(rest, word{text: "{input}", split: true})
	}
	c.command(rest, depth+1, true)
}

// fromInput marks the words of a command that contain placeholder (find -exec's {},
// xargs -I's string) as words known only when it runs.
func fromInput(words []word, placeholder string) []word {
	out := make([]word, len(words))
	for i, w := range words {
		out[i] = w
		if placeholder != "" && w.static && strings.Contains(w.text, placeholder) {
			out[i] = word{text: w.text}
		}
	}
	return out
}

var watchGrammar = &grammar{
	short: "bcCd::egn:ptxwrq", long: "beep color no-color differences[=] errexit chgexit interval= precise no-title exec no-wrap no-rerun equexit=",
	order: stopsAtOperand,
}

// watch runs its operands joined as a string by sh -c, unless -x runs them as a
// command; either way they are followed.
func watch(c *classifier, w []word, depth int) {
	p := watchGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly || len(p.operands) == 0 {
		c.addWithReason(w, p.category, p.reason)
		if len(p.operands) == 0 {
			return
		}
	}
	if p.has("x", "exec") {
		c.command(p.operands, depth+1, true)
		return
	}
	var src []string
	for _, o := range p.operands {
		if !o.static {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "watch runs its words as a shell string, and this one is known only when it runs")
			return
		}
		src = append(src, o.text)
	}
	// watch runs the string with sh -c.
	c.script(strings.Join(src, " "), depth+1, true)
}
