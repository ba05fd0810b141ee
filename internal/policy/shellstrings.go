package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

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
