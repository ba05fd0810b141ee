package policy

import (
	"regexp"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

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
