package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

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
	for i := findExpression(args); i < len(args); i++ {
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

// findExpression is the index in args (find's words after its name) of the first
// word of its expression: the global options, then the starting points, come
// before it.
func findExpression(args []word) int {
	i := 0
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
	return i
}
