package policy

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// handler classifies one simple command; w[0] is the command's base name.
type handler func(c *classifier, w []word, depth int)

// commands is the curated table: every command toolgate knows. A command missing
// from it is unknown.
var commands = map[string]handler{}

func init() {
	fixedCategory := map[v1alpha1.CommandCategory][]string{
		v1alpha1.CategoryTest: {
			"tox", "nox", "vitest", "mocha", "rspec", "phpunit",
			"bats",
		},
		v1alpha1.CategoryWrite: {
			"cp", "mv", "touch", "ln", "mktemp", "mkfifo",
			"csplit", "kill", "pkill", "killall",
		},
		// patch deletes a file whose diff ends at /dev/null (and with -E an emptied one).
		v1alpha1.CategoryDelete: {"rm", "rmdir", "shred", "unlink", "truncate", "wipe", "srm", "patch"},
		v1alpha1.CategoryInstall: {
			"apt", "apt-get", "aptitude", "yum", "dnf", "apk", "brew", "pacman", "zypper", "snap",
			"gem", "conda", "mamba", "micromamba", "npx", "pnpx", "bunx", "pipx", "easy_install",
		},
		v1alpha1.CategoryNetwork: {
			"curl", "wget", "ssh", "scp", "sftp", "rsync", "nc", "ncat", "netcat", "telnet", "ftp",
			"ping", "dig", "nslookup", "host", "nmap", "socat", "http", "https", "aria2c", "kubectl",
			"helm", "gh", "aws", "gcloud", "az", "ssh-keyscan", "whois", "traceroute", "tftp",
		},
		v1alpha1.CategoryPrivilege: {
			"su", "pkexec", "chown", "chgrp", "chroot", "setcap", "mount", "umount", "nsenter",
			"unshare", "insmod", "rmmod", "modprobe", "iptables", "ip6tables", "nft", "useradd",
			"userdel", "usermod", "groupadd", "passwd", "chpasswd", "visudo", "sysctl", "docker",
			"podman", "crictl", "ctr", "systemctl", "service", "shutdown", "reboot", "setfacl",
			"capsh", "runuser", "setpriv", "mknod", "hostname",
		},
		// Builtins that change how bash looks up or evaluates later words, and
		// programs that read instructions toolgate does not follow.
		v1alpha1.CategoryUnknown: {
			"hash", "enable", "shopt", "trap", "alias", "unalias", "let", "bind", "compgen", "complete", "compopt",
			"fc", "history", "disown", "suspend", "logout", "ulimit", "source", ".", "caller", "bc", "dc", "tput",
			"man", "help", "lsof", "getconf", "ldd", "rename",
			// Pagers read LESSOPEN and commands from a lesskey file in HOME, which the
			// agent can write.
			"less", "more", "most", "pg",
		},
	}
	for category, names := range fixedCategory {
		for _, name := range names {
			register(name, fixed(category))
		}
	}
	// The read-only commands, each checked against its grammar.
	for name, g := range readOnlyGrammars {
		register(name, grammarCommand(g))
	}
	for name, h := range builtinHandlers {
		register(name, h)
	}

	for name, wc := range wrappers {
		register(name, wrapper(wc))
	}
	register("timeout", timeout)
	register("watch", watch)
	register("command", commandBuiltin)
	register("env", env)
	register("xargs", xargs)
	for _, sh := range []string{"bash", "sh", "dash", "ash"} {
		register(sh, shell)
	}
	// Other shells read the same string as another language.
	for _, sh := range []string{"zsh", "ksh", "mksh", "csh", "tcsh", "fish"} {
		register(sh, fixed(v1alpha1.CategoryUnknown))
	}
	register("eval", eval)

	register("find", find)
	register("git", git)
	register("sed", sed)
	register("tee", tee)
	register("chmod", sensitive(chmod))
	register("tar", sensitive(tar))
	register("dd", sensitive(dd))
	register("xxd", xxd)
	register("yq", sensitive(flagged(v1alpha1.CategoryUnknown, v1alpha1.CategoryWrite, "i", "inplace")))
	register("prettier", sensitive(flagged(v1alpha1.CategoryUnknown, v1alpha1.CategoryWrite, "w", "write")))
	for _, z := range []string{"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd"} {
		register(z, sensitive(flagged(v1alpha1.CategoryWrite, v1alpha1.CategoryUnknown, "lct", "list", "stdout", "test")))
	}
	register("unzip", sensitive(flagged(v1alpha1.CategoryWrite, v1alpha1.CategoryUnknown, "lvtZ", "list")))
	register("zip", sensitive(zip))
	for _, name := range []string{"pytest", "py.test", "jest", "ctest"} {
		register(name, sensitive(testRunner))
	}
	register("install", sensitive(modeSetter))
	register("mkdir", sensitive(modeSetter))
	register("split", sensitive(split))
	for _, a := range []string{"awk", "gawk", "mawk", "nawk"} {
		register(a, awk)
	}
	register("go", sensitive(devTool(goCmd, goReadOnly)))
	for name, tool := range nodeTools {
		register(name, sensitive(tool.adds.wrap(devTool(nodePackageManager, tool.readOnly))))
	}
	for _, p := range []string{"pip", "pip3"} {
		register(p, sensitive(devTool(pip, pipReadOnly)))
	}
	register("uv", sensitive(devTool(runner(pip, adds{path: "uv run puts the project's .venv/bin first on PATH"}), pipReadOnly)))
	// poetry's virtualenv is the project's .venv when virtualenvs.in-project is set.
	register("poetry", sensitive(devTool(runner(pip, adds{path: "poetry run puts the project's virtualenv first on PATH"}), pipReadOnly)))
	for _, p := range []string{"python", "python3", "python2"} {
		register(p, sensitive(python))
	}
	register("make", sensitive(makeCmd))
	register("cargo", sensitive(devTool(cargo, cargoReadOnly)))
	register("mvn", sensitive(javaBuild))
	register("gradle", sensitive(javaBuild))
	register("dpkg", sensitive(flagged(v1alpha1.CategoryInstall, v1alpha1.CategoryUnknown, "lLsSp", "list", "listfiles", "status", "search")))
	register("apt-cache", fixed(v1alpha1.CategoryUnknown))
	for _, interp := range []string{"node", "deno", "ruby", "perl", "php", "lua", "Rscript", "osascript", "vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "expect", "script", "xdg-open", "open"} {
		// Interpreters and editors run arbitrary code.
		register(interp, fixed(v1alpha1.CategoryUnknown))
	}
}

// unknownReasons say why a command of the unknown list is there, where the general
// reason would mislead.
var unknownReasons = map[string]string{
	"less": "pagers run commands from +command operands, LESSOPEN and a lesskey file in HOME, which the agent can write",
	"more": "pagers run commands from +command operands, LESSOPEN and a lesskey file in HOME, which the agent can write",
	"man":  "man runs the pager and formatters that -P, -H, MANPAGER and its configuration name",
	"bc":   "bc reads a program, and BC_ENV_ARGS can load files",
	// Debian's rename is File::Rename, which evaluates its expression as Perl.
	"rename": "rename evaluates its expression as Perl code (s/a/b/e;system(...) runs any program)",
	"zsh":    "zsh reads the string as another language than bash",
	"ksh":    "ksh reads the string as another language than bash",
	"mksh":   "mksh reads the string as another language than bash",
}

// register adds a command's handler; a name registered twice is a table error (the
// second would silently replace the first), so it stops the program at start.
func register(name string, h handler) {
	if _, ok := commands[name]; ok {
		panic("policy: command " + name + " is registered twice")
	}
	commands[name] = h
}

func fixed(category v1alpha1.CommandCategory) handler {
	return func(c *classifier, w []word, _ int) {
		reason := ""
		if category == v1alpha1.CategoryUnknown {
			reason = unknownReasons[w[0].text]
			if reason == "" {
				reason = fmt.Sprintf("%s changes how bash finds or evaluates later commands, or runs code toolgate does not read", w[0].text)
			}
		}
		c.addWithReason(w, category, reason)
	}
}

// sensitive marks a command whose category depends on its arguments: a word the
// classifier cannot resolve (a variable could hold --hard or -i) makes it unknown.
func sensitive(h handler) handler {
	return func(c *classifier, w []word, depth int) {
		for _, a := range w[1:] {
			if !a.static {
				c.add(w, v1alpha1.CategoryUnknown)
				return
			}
		}
		h(c, w, depth)
	}
}

// flagged is base unless one of the short flags (letters in short) or long flags is
// given, then withFlag.
func flagged(base, withFlag v1alpha1.CommandCategory, short string, long ...string) handler {
	return func(c *classifier, w []word, _ int) {
		if hasFlag(w[1:], short, long...) {
			c.add(w, withFlag)
			return
		}
		c.add(w, base)
	}
}

// hasFlag reports whether any static argument is one of the short flags (each letter
// of short, also inside clusters such as -fdx) or long flags (--name or --name=value).
// Arguments after "--" are operands.
func hasFlag(args []word, short string, long ...string) bool {
	return findFlag(args, short, false, long)
}

// hasGitFlag is hasFlag for git's options, which git's parse-options takes by any
// unambiguous prefix too (--har is --hard, --del is --delete): a prefix of a listed
// name counts as it. Where git finds the prefix ambiguous it refuses to run.
func hasGitFlag(args []word, short string, long ...string) bool {
	return findFlag(args, short, true, long)
}

func findFlag(args []word, short string, prefixes bool, long []string) bool {
	for _, a := range args {
		t := a.text
		if t == "--" {
			return false
		}
		if strings.HasPrefix(t, "--") {
			name, _, _ := strings.Cut(t[2:], "=")
			for _, l := range long {
				if name == l || (prefixes && name != "" && strings.HasPrefix(l, name)) {
					return true
				}
			}
			continue
		}
		if strings.HasPrefix(t, "-") && len(t) > 1 && strings.ContainsAny(t[1:], short) && short != "" {
			return true
		}
	}
	return false
}

// operands returns the arguments that are not options. It does not know which
// options take values, so it is used only where that does not matter.
func operands(args []word) []word {
	var out []word
	for i, a := range args {
		if a.text == "--" {
			return append(out, args[i+1:]...)
		}
		if strings.HasPrefix(a.text, "-") && a.text != "-" {
			continue
		}
		if out == nil {
			out = make([]word, 0, len(args)-i)
		}
		out = append(out, a)
	}
	return out
}

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

// shellFlags are the options of bash -c that change nothing toolgate relies on;
// -i, -l, --rcfile and the like read startup files, which are unknown.
const shellFlags = "ceuxvfnC"

// shellOptions are the -o options allowed there and with set.
var shellOptions = set("errexit", "nounset", "pipefail", "xtrace", "verbose", "noglob", "noclobber", "noexec")

// shell handles bash -c 'script' (parsed and followed); a script file, stdin, or an
// option that reads startup files is unknown.
func shell(c *classifier, w []word, depth int) {
	args := w[1:]
	hasC := false
	i := 0
	for ; i < len(args); i++ {
		t := args[i].text
		if !args[i].static {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "a shell option known only when it runs")
			return
		}
		if t == "--" || t == "-" {
			i++
			break
		}
		if !strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "+") {
			break
		}
		if t == "-o" || t == "+o" {
			if i+1 >= len(args) || !shellOptions[args[i+1].text] {
				c.addWithReason(w, v1alpha1.CategoryUnknown, "a shell option toolgate does not know")
				return
			}
			i++
			continue
		}
		for _, r := range t[1:] {
			if !strings.ContainsRune(shellFlags, r) {
				c.addWithReason(w, v1alpha1.CategoryUnknown, fmt.Sprintf("shell option %c%c reads startup files or changes how the script is read", t[0], r))
				return
			}
			if r == 'c' {
				hasC = true
			}
		}
	}
	if !hasC || i >= len(args) {
		c.addWithReason(w, v1alpha1.CategoryUnknown, "a shell reading a script file or its input runs what toolgate cannot see")
		return
	}
	if !args[i].static {
		c.addWithReason(w, v1alpha1.CategoryUnknown, "the script is known only when it runs")
		return
	}
	// sh, dash and ash are POSIX shells (or bash as sh): both readings count.
	c.script(args[i].text, depth+1, w[0].text != "bash")
}

func eval(c *classifier, w []word, depth int) {
	var src []string
	for _, a := range w[1:] {
		if !a.static {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "eval of a string known only when it runs")
			return
		}
		src = append(src, a.text)
	}
	c.script(strings.Join(src, " "), depth+1, false)
}

// findReading are the parts of a find expression that only test or print, by how
// many arguments they take.
var findReading = map[string]int{
	"-name": 1, "-iname": 1, "-path": 1, "-ipath": 1, "-wholename": 1, "-iwholename": 1, "-regex": 1, "-iregex": 1,
	"-lname": 1, "-ilname": 1, "-type": 1, "-xtype": 1, "-size": 1, "-mtime": 1, "-mmin": 1, "-atime": 1, "-amin": 1,
	"-ctime": 1, "-cmin": 1, "-newer": 1, "-anewer": 1, "-cnewer": 1, "-perm": 1, "-user": 1, "-group": 1, "-uid": 1,
	"-gid": 1, "-links": 1, "-inum": 1, "-samefile": 1, "-used": 1, "-fstype": 1, "-context": 1, "-maxdepth": 1,
	"-mindepth": 1, "-regextype": 1, "-printf": 1, "-newermm": 1, "-newerct": 1, "-newerat": 1, "-newermt": 1,
	"-nouser": 0, "-nogroup": 0, "-empty": 0, "-readable": 0, "-writable": 0, "-executable": 0, "-true": 0,
	"-false": 0, "-depth": 0, "-mount": 0, "-xdev": 0, "-noleaf": 0, "-ignore_readdir_race": 0,
	"-noignore_readdir_race": 0, "-daystart": 0, "-follow": 0, "-warn": 0, "-nowarn": 0, "-prune": 0, "-quit": 0,
	"-print": 0, "-print0": 0, "-ls": 0, "(": 0, ")": 0, "!": 0, "-not": 0, "-a": 0, "-and": 0, "-o": 0, "-or": 0, ",": 0,
}

// find is read-only when every part of its expression is in findReading. -delete
// deletes, -fprint and its kind write, and -exec, -execdir, -ok and -okdir run
// commands that are classified as parts of their own, with {} a word known only
// when it runs.
func find(c *classifier, w []word, depth int) {
	category, reason := v1alpha1.CategoryReadOnly, ""
	raise := func(cat v1alpha1.CommandCategory, why string) {
		if Stricter(cat, category) {
			category, reason = cat, why
		}
	}
	var inner [][]word
	args := w[1:]
	i := 0
	// Global options, then starting points: anything up to the first word that
	// starts an expression.
	for ; i < len(args); i++ {
		t := args[i].text
		if !args[i].operandOnly() {
			if args[i].static && (t == "-H" || t == "-L" || t == "-P") {
				continue
			}
			if args[i].static && (t == "-D" || t == "-O" || strings.HasPrefix(t, "-O")) {
				if t == "-D" {
					i++
				}
				continue
			}
			break
		}
		if args[i].static && (t == "(" || t == "!" || t == ",") {
			break
		}
	}
	for ; i < len(args); i++ {
		a := args[i]
		if !a.static || a.split && !a.operandOnly() {
			raise(v1alpha1.CategoryUnknown, fmt.Sprintf("%s in a find expression could be -delete or -exec", a.text))
			continue
		}
		switch a.text {
		case "-delete":
			raise(v1alpha1.CategoryDelete, "-delete deletes what it finds")
			continue
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			raise(v1alpha1.CategoryWrite, a.text+" writes a file")
			i++
			if a.text == "-fprintf" {
				i++
			}
			continue
		case "-exec", "-execdir", "-ok", "-okdir":
			// The command ends at ";", or at "+" right after "{}" (find passes any
			// other "+" to the command as a word).
			j := i + 1
			for j < len(args) && args[j].text != ";" && (args[j].text != "+" || args[j-1].text != "{}") {
				j++
			}
			if j >= len(args) {
				raise(v1alpha1.CategoryUnknown, a.text+" without a terminating ; or +")
			}
			inner = append(inner, fromInput(args[i+1:min(j, len(args))], "{}"))
			i = j
			continue
		}
		n, ok := findReading[a.text]
		if !ok {
			raise(v1alpha1.CategoryUnknown, fmt.Sprintf("toolgate does not know the find expression %s", a.text))
			continue
		}
		for k := 0; k < n; k++ {
			i++
			if i < len(args) && args[i].split {
				raise(v1alpha1.CategoryUnknown, fmt.Sprintf("the argument %s of %s may become several words", args[i].text, a.text))
			}
		}
	}
	c.addWithReason(w, category, reason)
	for _, cmd := range inner {
		if len(cmd) == 0 {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "-exec with no command")
			continue
		}
		c.command(cmd, depth+1, true)
	}
}

var teeGrammar = &grammar{short: "aip", long: "append ignore-interrupts output-error[=]", complete: true, order: permutes}

// tee writes every operand; it is read-only only when each is a sink that keeps
// nothing, in both readings of its words (tee /dev/null -a writes a file named -a
// under POSIXLY_CORRECT).
func tee(c *classifier, w []word, _ int) {
	p := teeGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly {
		c.addWithReason(w, p.category, p.reason)
		return
	}
	for _, ops := range p.operandReadings() {
		for _, a := range ops {
			if !a.static || a.split || !harmlessSinks[a.text] {
				c.add(w, v1alpha1.CategoryWrite)
				return
			}
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// xxd [options] [infile [outfile]] writes outfile. Its options are words of their
// own (no bundling: -ps is -postscript), so they are matched whole.
func xxd(c *classifier, w []word, _ int) {
	flags := set("-a", "-autoskip", "-b", "-bits", "-C", "-capitalize", "-E", "-EBCDIC", "-e", "-i", "-include",
		"-p", "-ps", "-postscript", "-plain", "-u", "-uppercase", "-d", "-decimal")
	valued := set("-c", "-cols", "-g", "-groupsize", "-l", "-len", "-n", "-name", "-o", "-offset", "-s", "-seek", "-R")
	var ops []word
	args := w[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case !a.static || a.split:
			c.addWithReason(w, v1alpha1.CategoryUnknown, a.text+" is known only when it runs")
			return
		case a.text == "-r" || a.text == "-revert":
			c.addWithReason(w, v1alpha1.CategoryWrite, "xxd -r writes binary data")
			return
		case flags[a.text] && len(ops) == 0:
		case valued[a.text] && len(ops) == 0:
			i++
		case strings.HasPrefix(a.text, "-") && a.text != "-" && len(ops) == 0:
			c.addWithReason(w, v1alpha1.CategoryUnknown, "unknown option "+a.text)
			return
		default:
			// xxd stops reading options at its first operand.
			ops = append(ops, a)
		}
	}
	if len(ops) > 1 {
		c.addWithReason(w, v1alpha1.CategoryWrite, "xxd writes its second operand")
		return
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

var sedGrammar = &grammar{
	order:    permutes,
	short:    "nrsuzEe:f:l:i::",
	long:     "quiet silent debug expression= file= follow-symlinks in-place[=] line-length= null-data zero-terminated posix regexp-extended separate sandbox unbuffered",
	complete: true,
	effects: map[string]v1alpha1.CommandCategory{
		"i": v1alpha1.CategoryWrite, "in-place": v1alpha1.CategoryWrite,
		// A script file is not read here.
		"f": v1alpha1.CategoryUnknown, "file": v1alpha1.CategoryUnknown,
	},
}

// sed is read-only when its script uses only commands that print or edit the
// stream (see sedScriptReadOnly).
func sed(c *classifier, w []word, _ int) {
	p := sedGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly {
		c.addWithReason(w, p.category, p.reason)
		return
	}
	var scripts []word
	for _, o := range p.options {
		if o.name == "e" || o.name == "expression" {
			scripts = append(scripts, word{text: o.value, static: true})
		}
	}
	if len(scripts) == 0 {
		if len(p.operands) == 0 {
			c.add(w, v1alpha1.CategoryReadOnly)
			return
		}
		scripts = p.operands[:1]
	}
	for _, s := range scripts {
		if !s.static {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "the sed script is known only when it runs")
			return
		}
		if problem := sedScriptProblem(s.text); problem != "" {
			c.addWithReason(w, v1alpha1.CategoryUnknown, problem)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// awkGrammar: awk's options stop at its first operand, the program (mawk and gawk
// read awk '{print}' f -F: as a file named -F:); -f (a program file) and the
// options of one awk only (gawk -i, -l, -o, -p, -d load code or write files) are
// unknown.
var awkGrammar = &grammar{short: "F:v:", order: stopsAtOperand}

// awk is read-only when its program only reads (awkProgramProblem). The operands
// after the program are files it reads and var=value assignments, whatever they
// expand to.
func awk(c *classifier, w []word, _ int) {
	p := awkGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly {
		c.addWithReason(w, p.category, p.reason)
		return
	}
	if len(p.operands) == 0 || !p.operands[0].static {
		c.addWithReason(w, v1alpha1.CategoryUnknown, "the awk program is known only when it runs")
		return
	}
	category, reason := awkProgramProblem(p.operands[0].text)
	c.addWithReason(w, category, reason)
}

// octalSetID matches octal chmod modes that set the setuid or setgid bit.
var octalSetID = regexp.MustCompile(`^[0-7]*[2-7][0-7]{3}$`)

// setsID says whether a chmod mode clause sets the setuid or setgid bit: an octal
// mode with either, or a symbolic one with s after + or = wherever it stands
// (u+s, u+sx, u+s-w, g=rs).
func setsID(clause string) bool {
	if octalSetID.MatchString(clause) {
		return true
	}
	rest := strings.TrimLeft(clause, "ugoa")
	for rest != "" {
		op := rest[0]
		if op != '+' && op != '-' && op != '=' {
			return false
		}
		perms := rest[1:]
		if i := strings.IndexAny(perms, "+-="); i >= 0 {
			perms, rest = perms[:i], perms[i:]
		} else {
			rest = ""
		}
		if op != '-' && strings.ContainsRune(perms, 's') {
			return true
		}
	}
	return false
}

// chmod is a write, or privilege when it sets the setuid or setgid bit: by its mode,
// or with --reference, which copies another file's bits. A mode or option known only
// when it runs could be either.
func chmod(c *classifier, w []word, _ int) {
	for _, a := range w[1:] {
		switch {
		case !a.static:
			if !a.operandOnly() {
				c.addWithReason(w, v1alpha1.CategoryUnknown, a.text+" is known only when it runs, and could be a mode or option that sets the setuid bit")
				return
			}
			continue
		case a.split:
			// A glob names files (chmod +x *.sh). One matching a file named
			// --reference=F copies F's mode, which only a chmod this function calls
			// privilege can have given a setuid bit.
			continue
		}
		if strings.HasPrefix(a.text, "--ref") {
			c.addWithReason(w, v1alpha1.CategoryPrivilege, "chmod --reference copies the other file's mode, setuid and setgid bits included")
			return
		}
		for _, m := range strings.Split(a.text, ",") {
			if setsID(m) {
				c.add(w, v1alpha1.CategoryPrivilege)
				return
			}
		}
	}
	c.add(w, v1alpha1.CategoryWrite)
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

// modeSetter handles install and mkdir: a write, but privilege with a mode that sets
// the setuid or setgid bit or with an owner or group (as chmod and chown are), and
// install's --strip-program runs the program it names.
func modeSetter(c *classifier, w []word, _ int) {
	args := w[1:]
	mode := func(m string) bool {
		for _, clause := range strings.Split(m, ",") {
			if setsID(clause) {
				c.addWithReason(w, v1alpha1.CategoryPrivilege, "mode "+m+" sets the setuid or setgid bit")
				return true
			}
		}
		return false
	}
	owner := func() {
		c.addWithReason(w, v1alpha1.CategoryPrivilege, w[0].text+" -o/-g sets the files' owner or group")
	}
	for i := 0; i < len(args); i++ {
		t := args[i].text
		switch {
		case t == "--":
			c.add(w, v1alpha1.CategoryWrite)
			return
		case strings.HasPrefix(t, "--"):
			// GNU getopt takes any unambiguous prefix: --mo is --mode.
			name, value, hasValue := strings.Cut(t[2:], "=")
			switch {
			case name == "":
			case strings.HasPrefix("strip-program", name) && strings.HasPrefix(name, "strip-p"):
				c.addWithReason(w, v1alpha1.CategoryUnknown, "install --strip-program runs the program it names")
				return
			case strings.HasPrefix("owner", name) || strings.HasPrefix("group", name):
				owner()
				return
			case strings.HasPrefix("mode", name):
				if !hasValue && i+1 < len(args) {
					i++
					value = args[i].text
				}
				if mode(value) {
					return
				}
			}
		case strings.HasPrefix(t, "-") && len(t) > 1:
			for j := 1; j < len(t); j++ {
				switch t[j] {
				case 'o', 'g':
					owner()
					return
				case 'm', 't', 'S':
					// Each takes a value, attached or in the next word.
					value := t[j+1:]
					if value == "" && i+1 < len(args) {
						i++
						value = args[i].text
					}
					if t[j] == 'm' && mode(value) {
						return
					}
					j = len(t)
				}
			}
		}
	}
	c.add(w, v1alpha1.CategoryWrite)
}

// splitGrammar is split's options: the pieces are written; --filter runs a shell
// command on each.
var splitGrammar = &grammar{
	order: permutes,
	short: "a:b:C:del:n:t:ux",
	long: "suffix-length= additional-suffix= bytes= line-bytes= numeric-suffixes[=] hex-suffixes[=] " +
		"elide-empty-files lines= number= separator= unbuffered verbose filter=",
	effects: map[string]v1alpha1.CommandCategory{"filter": v1alpha1.CategoryUnknown},
}

func split(c *classifier, w []word, _ int) {
	p := splitGrammar.parse(w[1:])
	p.raise(v1alpha1.CategoryWrite, "split writes the pieces")
	c.addWithReason(w, p.category, p.reason)
}

// zip writes the archive, and -m (--move) deletes the files it adds. zip has many
// options, some of several letters (-T with -TT or --unzip-command runs a command),
// so only the common ones are known; any other is unknown.
func zip(c *classifier, w []word, _ int) {
	category, reason := v1alpha1.CategoryWrite, ""
	for _, a := range w[1:] {
		t := a.text
		switch {
		case !a.static || a.split:
			if !a.operandOnly() {
				c.addWithReason(w, v1alpha1.CategoryUnknown, t+" is known only when it runs, and could be a zip option that runs a command")
				return
			}
		case t == "--":
			c.addWithReason(w, category, reason)
			return
		case t == "-m" || t == "--move":
			category, reason = v1alpha1.CategoryDelete, "zip -m deletes the files it adds"
		case zipLong[t]:
		case strings.HasPrefix(t, "--"):
			c.addWithReason(w, v1alpha1.CategoryUnknown, "toolgate does not know the zip option "+t)
			return
		case strings.HasPrefix(t, "-") && len(t) > 1:
			for _, r := range t[1:] {
				switch {
				case r == 'm':
					category, reason = v1alpha1.CategoryDelete, "zip -m deletes the files it adds"
				case !strings.ContainsRune("rqjvufXyDx0123456789", r):
					c.addWithReason(w, v1alpha1.CategoryUnknown, fmt.Sprintf("toolgate does not know the zip option -%c (%s)", r, t))
					return
				}
			}
		}
	}
	c.addWithReason(w, category, reason)
}

var zipLong = set("--recurse-paths", "--quiet", "--junk-paths", "--verbose", "--update", "--freshen", "--exclude", "--no-extra", "--symlinks", "--no-dir-entries")

var tarGrammar = &grammar{
	order: permutes,
	short: "tvzjJaf:C:b:",
	long: "list file= verbose gzip gunzip bzip2 xz lzma zstd auto-compress directory= wildcards no-wildcards exclude= " +
		"anchored no-anchored ignore-case numeric-owner utc full-time blocking-factor= quiet show-transformed-names " +
		"ignore-zeros occurrence[=] strip-components=",
}

// tarChangeGrammar is tar's options that create, extract, append or update an
// archive: the mode is a write; an option that runs a program (GNU tar takes any
// unambiguous prefix of it too, and this table is not complete, so a prefix is
// refused) is unknown, and --remove-files deletes.
var tarChangeGrammar = &grammar{
	order: permutes,
	short: "cxruAtvzjJaf:C:b:T:X:pkhmoOSWI:F:",
	long: "create extract get append update catenate concatenate delete list file= directory= verbose " +
		"gzip gunzip bzip2 xz lzma zstd auto-compress exclude= exclude-from= exclude-vcs exclude-vcs-ignores exclude-caches " +
		"anchored no-anchored wildcards no-wildcards ignore-case strip-components= transform= xform= owner= group= mode= " +
		"mtime= sort= numeric-owner same-owner no-same-owner same-permissions preserve-permissions no-same-permissions " +
		"overwrite overwrite-dir keep-old-files skip-old-files keep-newer-files keep-directory-symlink one-file-system " +
		"dereference hard-dereference touch to-stdout sparse blocking-factor= quiet show-transformed-names ignore-zeros " +
		"occurrence[=] full-time utc format= posix null files-from= remove-files " +
		"to-command= checkpoint-action= use-compress-program= info-script= new-volume-script= rsh-command= rmt-command=",
	effects: map[string]v1alpha1.CommandCategory{
		"remove-files": v1alpha1.CategoryDelete,
		"to-command":   v1alpha1.CategoryUnknown, "checkpoint-action": v1alpha1.CategoryUnknown, "use-compress-program": v1alpha1.CategoryUnknown,
		"info-script": v1alpha1.CategoryUnknown, "new-volume-script": v1alpha1.CategoryUnknown, "rsh-command": v1alpha1.CategoryUnknown,
		"rmt-command": v1alpha1.CategoryUnknown, "I": v1alpha1.CategoryUnknown, "F": v1alpha1.CategoryUnknown,
	},
}

// tar lists read-only when every option is in tarGrammar; anything else changes
// files (create, extract, append), as tarChangeGrammar says. In every mode an
// archive named HOST:FILE is another machine's, reached through rsh.
func tar(c *classifier, w []word, _ int) {
	args := w[1:]
	if len(args) > 0 && !strings.HasPrefix(args[0].text, "-") {
		args = tarOldStyle(args)
	}
	p := tarGrammar.parse(args)
	listing := p.has("t", "list")
	if !listing {
		p = tarChangeGrammar.parse(args)
	}
	for _, o := range p.options {
		if (o.name == "f" || o.name == "file") && strings.Contains(o.value, ":") {
			p.raise(v1alpha1.CategoryNetwork, "tar reaches an archive named HOST:FILE on another machine")
		}
	}
	if !listing {
		p.raise(v1alpha1.CategoryWrite, "tar creates, extracts or changes an archive")
	}
	c.addWithReason(w, p.category, p.reason)
}

// tarOldStyle turns tar's old option style (tar tzf x.tgz: letters without a dash,
// their values in the words that follow, in order) into one option per word.
func tarOldStyle(args []word) []word {
	valued := "fbCgHIKLNTVX"
	out := []word{}
	rest := args[1:]
	for _, r := range args[0].text {
		out = append(out, word{text: "-" + string(r), static: true})
		if strings.ContainsRune(valued, r) && len(rest) > 0 {
			out = append(out, rest[0])
			rest = rest[1:]
		}
	}
	return append(out, rest...)
}

func dd(c *classifier, w []word, _ int) {
	for _, a := range w[1:] {
		if strings.HasPrefix(a.text, "of=") {
			c.add(w, v1alpha1.CategoryWrite)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// strictestOf returns the strictest of the categories.
func strictestOf(cs ...v1alpha1.CommandCategory) v1alpha1.CommandCategory {
	out := v1alpha1.CategoryReadOnly
	for _, c := range cs {
		if Stricter(c, out) {
			out = c
		}
	}
	return out
}
