package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

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
