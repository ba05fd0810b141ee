package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// awkNames are the names (and the text) an awk program only reads with when it has
// none of them: system runs a command, getline reads a command's output (and a
// file, or a network connection gawk opens for a /inet name built at run time),
// close and fflush only matter for those, ENVIRON and PROCINFO read the
// environment and gawk's internals, @ is gawk's @include, @load and indirect call
// (@f() calls the function f names, system included), "|&" a gawk coprocess, and
// /inet gawk's network files. They are looked for in the raw text, strings and
// comments included, so that no reading of the program can hide them.
var awkNames = []string{"system", "getline", "close", "fflush", "ENVIRON", "PROCINFO", "@", "|&", "/inet"}

// awkProgramProblem says why an awk program may do more than read its input and
// print to its output, with the category that gives (write for an output
// redirection, unknown for the rest), or "" when it cannot. awk writes a file only from an output
// redirection of print or printf (print > "f", print >> "f") and runs a command
// only from a pipe (print | "cmd", "cmd" | getline) or system(); everywhere else >
// is a comparison and || a logical or. The program is read as mawk and gawk read
// it: strings, regular expressions (a / after an operand divides), comments, and
// the statements of print and printf, which end at ; or } (a newline ends them
// only after an operand: print a,\n b > "f" is one statement). Inside one of those
// statements a > or | outside parentheses redirects; | anywhere else is a pipe
// into getline.
func awkProgramProblem(program string) (v1alpha1.CommandCategory, string) {
	for _, name := range awkNames {
		if strings.Contains(program, name) {
			return v1alpha1.CategoryUnknown, fmt.Sprintf("the awk program uses %q, which can run commands, reach the network or read the environment", name)
		}
	}
	var (
		// afterOperand says the last token ends an operand, so that / divides.
		afterOperand bool
		// parens are the parentheses open, each true when it holds the condition
		// of if, while, for or switch: after it a statement starts, and / starts a
		// regular expression (if (x) /re/), where after any other ) it divides.
		parens []bool
		// condition says the last word was if, while, for or switch.
		condition bool
		// inPrint says a print or printf statement is being read, and printDepth
		// is len(parens) where it started.
		inPrint    bool
		printDepth int
	)
	for i := 0; i < len(program); i++ {
		ch := program[i]
		wasCondition := condition
		condition = false
		switch {
		case ch == '\\' && i+1 < len(program) && program[i+1] == '\n':
			// A line continued: the newline is not there.
			i++
			condition = wasCondition
		case ch == ' ' || ch == '\t':
			condition = wasCondition
		case ch == '\n':
			if afterOperand && len(parens) == printDepth {
				inPrint = false
			}
			afterOperand = false
			condition = wasCondition
		case ch == '#':
			for i < len(program) && program[i] != '\n' {
				i++
			}
			i--
			condition = wasCondition
		case ch == '"':
			end, problem := awkStringEnd(program, i)
			if problem != "" {
				return v1alpha1.CategoryUnknown, problem
			}
			i, afterOperand = end, true
		case ch == '/' && !afterOperand:
			end, problem := awkRegexEnd(program, i)
			if problem != "" {
				return v1alpha1.CategoryUnknown, problem
			}
			i, afterOperand = end, true
		case isWordByte(ch) || ch == '.':
			// A name, a keyword or a number (1.5, .5, 1e3, 1.).
			start := i
			for i+1 < len(program) && (isWordByte(program[i+1]) || program[i+1] == '.') {
				i++
			}
			switch program[start : i+1] {
			case "print", "printf":
				inPrint, printDepth, afterOperand = true, len(parens), false
			case "if", "while", "for", "switch":
				condition, afterOperand = true, false
			case "return", "exit", "case", "else", "do", "in":
				// An expression, and so a regular expression, may follow.
				afterOperand = false
			default:
				afterOperand = true
			}
		case ch == '(':
			parens = append(parens, wasCondition)
			afterOperand = false
		case ch == ')':
			afterOperand = true
			if n := len(parens); n > 0 {
				afterOperand = !parens[n-1]
				parens = parens[:n-1]
			}
			if inPrint && len(parens) < printDepth {
				inPrint = false
			}
		case ch == ']':
			afterOperand = true
		case ch == ';' || ch == '{' || ch == '}':
			inPrint, afterOperand = false, false
		case ch == '|':
			if i+1 < len(program) && program[i+1] == '|' {
				i++
				afterOperand = false
				continue
			}
			return v1alpha1.CategoryUnknown, "the awk program pipes into or out of a command with |"
		case ch == '>':
			if inPrint && len(parens) == printDepth {
				return v1alpha1.CategoryWrite, "the awk program redirects print or printf to a file with >"
			}
			afterOperand = false
		case (ch == '+' || ch == '-') && i+1 < len(program) && program[i+1] == ch:
			// x++ / 2 divides; before an operand, ++ /re/ is an error either way.
			i++
			afterOperand = true
		case strings.IndexByte("+-*/%^!=<~?:,$[&", ch) >= 0:
			afterOperand = false
		default:
			return v1alpha1.CategoryUnknown, fmt.Sprintf("the awk program has a character toolgate does not read there: %q", ch)
		}
	}
	return v1alpha1.CategoryReadOnly, ""
}

// awkStringEnd returns the index of the quote that ends the string starting at
// program[start].
func awkStringEnd(program string, start int) (int, string) {
	for i := start + 1; i < len(program); i++ {
		switch program[i] {
		case '\\':
			i++
		case '"':
			return i, ""
		case '\n':
			return 0, "the awk program has a string that runs past the end of its line"
		}
	}
	return 0, "the awk program has a string that does not end"
}

// awkRegexEnd returns the index of the / that ends the regular expression starting
// at program[start]. Inside a bracket expression ([a/b], []/], [[:alpha:]/]) gawk
// and mawk read / as a character, and other awks may end the expression there, so
// a / inside brackets is refused rather than guessed. The brackets are read at
// least as long as any awk reads them (a ] first or after ^, a [:class:], and an
// escaped \] keep them open), so a / an awk reads inside them is never taken for
// the end.
func awkRegexEnd(program string, start int) (int, string) {
	inBracket := false
	for i := start + 1; i < len(program); i++ {
		ch := program[i]
		switch {
		case ch == '\n':
			return 0, "the awk program has a regular expression that runs past the end of its line"
		case ch == '\\':
			i++
		case !inBracket && ch == '[':
			inBracket = true
			if i+1 < len(program) && program[i+1] == '^' {
				i++
			}
			if i+1 < len(program) && program[i+1] == ']' {
				i++ // a ] first is a character
			}
		case inBracket && ch == '[' && i+1 < len(program) && strings.IndexByte(":.=", program[i+1]) >= 0:
			// [:alpha:], [.x.], [=x=]: up to the matching close.
			closing := strings.Index(program[i+2:], string(program[i+1])+"]")
			if closing < 0 {
				return 0, "the awk program has a bracket expression that does not end"
			}
			if strings.IndexByte(program[i+2:i+2+closing], '/') >= 0 {
				return 0, "the awk program has a / inside a bracket expression, where awks disagree whether the regular expression ends"
			}
			i += 2 + closing + 1
		case inBracket && ch == ']':
			inBracket = false
		case inBracket && ch == '/':
			return 0, "the awk program has a / inside a bracket expression, where awks disagree whether the regular expression ends"
		case ch == '/':
			return i, ""
		}
	}
	return 0, "the awk program has a regular expression that does not end"
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
