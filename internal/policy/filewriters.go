package policy

import (
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

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

func dd(c *classifier, w []word, _ int) {
	for _, a := range w[1:] {
		if strings.HasPrefix(a.text, "of=") {
			c.add(w, v1alpha1.CategoryWrite)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}
