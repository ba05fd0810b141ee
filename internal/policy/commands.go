package policy

import (
	"fmt"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// handler classifies one simple command; w[0] is the command's base name.
type handler func(c *classifier, w []word, depth int)

// commands is the curated table: every command toolgate knows. A command missing
// from it is unknown.
var commands = map[string]handler{}

// fixedCategory are the commands whose category does not depend on their
// arguments.
var fixedCategory = map[v1alpha1.CommandCategory][]string{
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

func init() {
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

func set(items ...string) map[string]bool {
	out := make(map[string]bool, len(items))
	for _, i := range items {
		out[i] = true
	}
	return out
}
