package policy

import (
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
		v1alpha1.CategoryReadOnly: {
			"cat", "ls", "grep", "egrep", "fgrep", "rg", "ag", "head", "tail", "wc", "echo", "printf",
			"pwd", "true", "false", "test", "[", "which", "type", "whoami", "id", "date", "printenv",
			"uname", "file", "stat", "du", "df", "tree", "less", "more", "uniq", "cut", "tr", "diff",
			"cmp", "comm", "md5sum", "sha1sum", "sha256sum", "sha512sum", "cksum", "b2sum", "basename",
			"dirname", "realpath", "readlink", "jq", "column", "nl", "od", "xxd", "hexdump", "strings",
			"seq", "sleep", "ps", "free", "uptime", "cd", "pushd", "popd", "dirs", "set", "unset",
			"shopt", "exit", "return", ":", "read", "getopts", "shift", "wait", "tac", "rev", "fold",
			"fmt", "paste", "join", "expand", "unexpand", "look", "locale", "nproc", "arch", "tput",
			"yes", "base64", "pgrep", "zcat", "zgrep", "bzcat", "xzcat", "cal", "expr", "numfmt",
			"hash", "ulimit", "umask", "man", "help", "lsof", "hostname", "groups", "break", "continue",
			"let", "bc", "tsort", "sum",
		},
		v1alpha1.CategoryTest: {
			"pytest", "py.test", "tox", "nox", "jest", "vitest", "mocha", "rspec", "ctest", "phpunit",
			"bats",
		},
		v1alpha1.CategoryWrite: {
			"cp", "mv", "touch", "mkdir", "ln", "install", "patch", "mktemp", "mkfifo", "rename",
			"split", "csplit", "kill", "pkill", "killall",
		},
		v1alpha1.CategoryDelete: {"rm", "rmdir", "shred", "unlink", "truncate", "wipe", "srm"},
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
			"capsh", "runuser", "setpriv", "mknod",
		},
	}
	for category, names := range fixedCategory {
		for _, name := range names {
			commands[name] = fixed(category)
		}
	}

	// Privilege wrappers: the wrapper is a privilege part, the wrapped command its own.
	commands["sudo"] = wrapper(v1alpha1.CategoryPrivilege, "ugCDhprtTU", nil)
	commands["doas"] = wrapper(v1alpha1.CategoryPrivilege, "uC", nil)
	// Transparent wrappers run their command unchanged.
	commands["nice"] = wrapper("", "n", nil)
	commands["ionice"] = wrapper("", "cnp", nil)
	commands["nohup"] = wrapper("", "", nil)
	commands["stdbuf"] = wrapper("", "ioe", nil)
	commands["builtin"] = wrapper("", "", nil)
	commands["exec"] = wrapper("", "a", nil)
	commands["time"] = wrapper("", "fo", nil)
	commands["watch"] = wrapper("", "nd", nil)
	commands["timeout"] = wrapper("", "sk", func(rest []word) []word {
		// The first operand is the duration.
		if len(rest) == 0 {
			return nil
		}
		return rest[1:]
	})
	commands["command"] = commandBuiltin
	commands["env"] = env
	commands["xargs"] = xargs
	for _, sh := range []string{"bash", "sh", "zsh", "dash", "ksh", "ash", "mksh"} {
		commands[sh] = shell
	}
	commands["eval"] = eval
	commands["trap"] = trap
	commands["source"] = fixed(v1alpha1.CategoryUnknown)
	commands["."] = fixed(v1alpha1.CategoryUnknown)
	commands["alias"] = alias

	commands["find"] = find
	commands["git"] = sensitive(git)
	commands["sed"] = sensitive(sed)
	commands["sort"] = sensitive(sortCmd)
	commands["tee"] = tee
	commands["chmod"] = sensitive(chmod)
	commands["tar"] = sensitive(tar)
	commands["dd"] = sensitive(dd)
	commands["yq"] = sensitive(flagged(v1alpha1.CategoryReadOnly, v1alpha1.CategoryWrite, "i", "inplace"))
	commands["gofmt"] = sensitive(flagged(v1alpha1.CategoryReadOnly, v1alpha1.CategoryWrite, "w"))
	commands["goimports"] = sensitive(flagged(v1alpha1.CategoryReadOnly, v1alpha1.CategoryWrite, "w"))
	commands["prettier"] = sensitive(flagged(v1alpha1.CategoryReadOnly, v1alpha1.CategoryWrite, "w", "write"))
	for _, z := range []string{"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd"} {
		commands[z] = sensitive(flagged(v1alpha1.CategoryWrite, v1alpha1.CategoryReadOnly, "lct", "list", "stdout", "test"))
	}
	commands["unzip"] = sensitive(flagged(v1alpha1.CategoryWrite, v1alpha1.CategoryReadOnly, "lvtZ", "list"))
	commands["zip"] = fixed(v1alpha1.CategoryWrite)
	for _, a := range []string{"awk", "gawk", "mawk", "nawk"} {
		commands[a] = awk
	}
	commands["go"] = sensitive(goCmd)
	for _, n := range []string{"npm", "pnpm", "yarn", "bun"} {
		commands[n] = sensitive(nodePackageManager)
	}
	for _, p := range []string{"pip", "pip3"} {
		commands[p] = sensitive(pip)
	}
	commands["uv"] = sensitive(runner(pip))
	commands["poetry"] = sensitive(runner(pip))
	for _, p := range []string{"python", "python3", "python2"} {
		commands[p] = sensitive(python)
	}
	commands["make"] = sensitive(makeCmd)
	commands["cargo"] = sensitive(cargo)
	commands["mvn"] = sensitive(javaBuild)
	commands["gradle"] = sensitive(javaBuild)
	commands["dpkg"] = sensitive(flagged(v1alpha1.CategoryInstall, v1alpha1.CategoryReadOnly, "lLsSp", "list", "listfiles", "status", "search"))
	commands["apt-cache"] = fixed(v1alpha1.CategoryReadOnly)
	for _, interp := range []string{"node", "deno", "ruby", "perl", "php", "lua", "Rscript", "osascript", "vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "expect", "script", "xdg-open", "open"} {
		// Interpreters and editors run arbitrary code; only their version query is known.
		commands[interp] = sensitive(flagged(v1alpha1.CategoryUnknown, v1alpha1.CategoryReadOnly, "", "version"))
	}
}

func fixed(category v1alpha1.CommandCategory) handler {
	return func(c *classifier, w []word, _ int) { c.add(w, category) }
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
	for _, a := range args {
		t := a.text
		if t == "--" {
			return false
		}
		if strings.HasPrefix(t, "--") {
			name, _, _ := strings.Cut(t[2:], "=")
			for _, l := range long {
				if name == l {
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
		out = append(out, a)
	}
	return out
}

// skipOptions returns the words after the leading options of a wrapper; valued lists
// the short options that take a separate value (sudo -u root).
func skipOptions(args []word, valued string) []word {
	i := 0
	for i < len(args) {
		t := args[i].text
		if !args[i].static || !strings.HasPrefix(t, "-") || t == "-" {
			break
		}
		i++
		if t == "--" {
			break
		}
		if !strings.HasPrefix(t, "--") && len(t) == 2 && strings.IndexByte(valued, t[1]) >= 0 {
			i++
		}
	}
	if i > len(args) {
		return nil
	}
	return args[i:]
}

// wrapper handles a command that runs another command. own is the wrapper's own
// category ("" when it is transparent); operands picks the wrapped command out of
// what follows the options.
func wrapper(own v1alpha1.CommandCategory, valued string, operands func([]word) []word) handler {
	return func(c *classifier, w []word, depth int) {
		rest := skipOptions(w[1:], valued)
		if operands != nil {
			rest = operands(rest)
		}
		if own != "" {
			c.add(w, own)
		}
		if len(rest) == 0 {
			if own == "" {
				// Nothing to run: nice or nohup alone only print or fail.
				c.add(w, v1alpha1.CategoryReadOnly)
			}
			return
		}
		c.command(rest, depth+1, true)
	}
}

func commandBuiltin(c *classifier, w []word, depth int) {
	if hasFlag(w[1:], "vV") {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	rest := skipOptions(w[1:], "")
	if len(rest) == 0 {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	c.command(rest, depth+1, true)
}

// env [-i] [-u NAME] [-C DIR] [NAME=value]... [command]
func env(c *classifier, w []word, depth int) {
	if hasFlag(w[1:], "S", "split-string") {
		// -S splits a string into a command line: not followed.
		c.add(w, v1alpha1.CategoryUnknown)
		return
	}
	rest := skipOptions(w[1:], "uC")
	for len(rest) > 0 && rest[0].static && strings.Contains(rest[0].text, "=") {
		name, _, _ := strings.Cut(rest[0].text, "=")
		if hijackingVariables[name] || strings.HasPrefix(name, "GIT_CONFIG_") {
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
		rest = rest[1:]
	}
	if len(rest) == 0 {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	c.command(rest, depth+1, true)
}

// xargs [options] [command [initial-arguments]]; without a command it runs echo.
func xargs(c *classifier, w []word, depth int) {
	rest := skipOptions(w[1:], "IinPLldEesa")
	if len(rest) == 0 {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	c.command(rest, depth+1, true)
}

// shell handles bash -c 'script' (parsed and followed); a script file or stdin is
// unknown.
func shell(c *classifier, w []word, depth int) {
	args := w[1:]
	hasC := false
	i := 0
	for i < len(args) {
		t := args[i].text
		if !args[i].static {
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
		if t == "--" || t == "-" {
			i++
			break
		}
		if !strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "+") {
			break
		}
		if t == "-o" || t == "+o" || t == "-O" || t == "+O" {
			i += 2
			continue
		}
		if !strings.HasPrefix(t, "--") && strings.Contains(t, "c") {
			hasC = true
		}
		i++
	}
	if !hasC || i >= len(args) {
		c.add(w, v1alpha1.CategoryUnknown)
		return
	}
	if !args[i].static {
		c.add(w, v1alpha1.CategoryUnknown)
		return
	}
	c.script(args[i].text, depth+1)
}

func eval(c *classifier, w []word, depth int) {
	var src []string
	for _, a := range w[1:] {
		if !a.static {
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
		src = append(src, a.text)
	}
	c.script(strings.Join(src, " "), depth+1)
}

// trap 'command' SIGNAL... runs command later; it is classified now.
func trap(c *classifier, w []word, depth int) {
	ops := operands(w[1:])
	if len(ops) < 2 {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	if !ops[0].static {
		c.add(w, v1alpha1.CategoryUnknown)
		return
	}
	c.script(ops[0].text, depth+1)
}

// alias NAME=VALUE can change what a later word runs; listing aliases is read-only.
func alias(c *classifier, w []word, _ int) {
	for _, a := range w[1:] {
		if strings.Contains(a.text, "=") || !a.static {
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// find is read-only unless it deletes, writes files, or runs commands (-exec, -ok),
// whose commands are classified as parts of their own.
func find(c *classifier, w []word, depth int) {
	category := v1alpha1.CategoryReadOnly
	var inner [][]word
	args := w[1:]
	for i := 0; i < len(args); i++ {
		if !args[i].static && strings.HasPrefix(args[i].text, "$") {
			// A variable in an expression could be -delete or -exec.
			category = v1alpha1.CategoryUnknown
		}
		switch args[i].text {
		case "-delete":
			category = strictestOf(category, v1alpha1.CategoryDelete)
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			if Stricter(v1alpha1.CategoryWrite, category) {
				category = v1alpha1.CategoryWrite
			}
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && args[j].text != ";" && args[j].text != "+" {
				j++
			}
			inner = append(inner, args[i+1:j])
			i = j
		}
	}
	c.add(w, category)
	for _, cmd := range inner {
		if len(cmd) == 0 {
			c.add(w, v1alpha1.CategoryUnknown)
			continue
		}
		c.command(cmd, depth+1, true)
	}
}

func tee(c *classifier, w []word, _ int) {
	for _, a := range operands(w[1:]) {
		if !a.static || !harmlessSinks[a.text] {
			c.add(w, v1alpha1.CategoryWrite)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

func sortCmd(c *classifier, w []word, _ int) {
	for _, a := range w[1:] {
		if strings.HasPrefix(a.text, "-o") || strings.HasPrefix(a.text, "--output") {
			c.add(w, v1alpha1.CategoryWrite)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// sedExecutes finds the GNU sed commands and flags that run programs or write files:
// the e and w commands and the e and w flags of s.
var sedExecutes = regexp.MustCompile(`(^|[;\n{}]|^\s*[0-9$,/]+)\s*[ewWrR]\b|s/([^/\\]|\\.)*/([^/\\]|\\.)*/[gpiImM0-9]*[ewW]`)

func sed(c *classifier, w []word, _ int) {
	args := w[1:]
	for i, a := range args {
		t := a.text
		if strings.HasPrefix(t, "--in-place") || (strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "--") && strings.Contains(t, "i")) {
			c.add(w, v1alpha1.CategoryWrite)
			return
		}
		if t == "-f" || strings.HasPrefix(t, "--file") {
			// A script file is not read here.
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
		isScript := (i > 0 && args[i-1].text == "-e") || (!strings.HasPrefix(t, "-") && i == firstOperand(args))
		if isScript && sedExecutes.MatchString(t) {
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

func firstOperand(args []word) int {
	for i := 0; i < len(args); i++ {
		if args[i].text == "-e" || args[i].text == "-l" {
			i++
			continue
		}
		if !strings.HasPrefix(args[i].text, "-") {
			return i
		}
	}
	return -1
}

// awk programs can run commands (system, |, getline) and write files (>); any sign of
// that makes the call unknown.
func awk(c *classifier, w []word, _ int) {
	for _, a := range w[1:] {
		if !a.static || a.text == "-f" || strings.HasPrefix(a.text, "--file") || a.text == "-i" || strings.HasPrefix(a.text, "--include") {
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
		if strings.Contains(a.text, "system") || strings.ContainsAny(a.text, "|>") || strings.Contains(a.text, "getline") {
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// setuidMode matches chmod modes that set the setuid or setgid bit.
var setuidMode = regexp.MustCompile(`^([ugoa]*[+=][rwxXt]*s|[0-7]*[2-7][0-7]{3})$`)

func chmod(c *classifier, w []word, _ int) {
	for _, a := range operands(w[1:]) {
		for _, m := range strings.Split(a.text, ",") {
			if setuidMode.MatchString(m) {
				c.add(w, v1alpha1.CategoryPrivilege)
				return
			}
		}
	}
	c.add(w, v1alpha1.CategoryWrite)
}

func tar(c *classifier, w []word, _ int) {
	args := w[1:]
	for _, a := range args {
		name, _, _ := strings.Cut(a.text, "=")
		switch name {
		case "--to-command", "--checkpoint-action", "--use-compress-program", "--info-script", "--new-volume-script", "-I", "-F":
			// These run programs.
			c.add(w, v1alpha1.CategoryUnknown)
			return
		}
	}
	list := hasFlag(args, "t", "list")
	if len(args) > 0 && !strings.HasPrefix(args[0].text, "-") && strings.Contains(args[0].text, "t") {
		list = true // old-style cluster: tar tf x.tar
	}
	if list {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	c.add(w, v1alpha1.CategoryWrite)
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
