package policy

// The differential test: the classifier's reading of a command checked against bash's.
// The parser (mvdan.cc/sh) is not bash; where the two read the same text differently,
// the classifier judges a command bash does not run. Each case is run by a real bash in
// the oracle's bubblewrap sandbox, in a scratch copy of the oracle's workspace, and
// three things are compared:
//
//   - substitutions: a case's commands are `touch cN` canaries. Every canary bash ran
//     must be a part of the classification (or the classification is unknown, a
//     refusal, which is safe). A canary bash ran that the classifier never saw is the
//     failure this test exists for.
//   - words: a case may hold one probe, `printf '%s\0' =0= W1 =1= W2 =2= ... >&3`.
//     bash prints the words it passed between the markers; each word the classifier reads
//     as one word (not split) must be exactly one word, with the classifier's text when
//     static, and a word the classifier takes for an operand (operandOnly) must not
//     start with "-". That is what grammars count operands and options with.
//   - effects: a case the classifier calls read-only must leave its directory as it
//     was.
//
// The seeds (testdata/differential/seeds.txt) and a fixed set of generated cases run
// in `go test`; FuzzDifferential explores further.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// differentialSeed is one line of testdata/differential/seeds.txt.
type differentialSeed struct {
	line    int
	class   string
	command string
}

// differentialLoadSeeds reads the seed file: "CLASS | COMMAND" per line, '#' comments,
// \n for a newline inside the command as in the corpus.
func differentialLoadSeeds(t testing.TB) []differentialSeed {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "differential", "seeds.txt"))
	if err != nil {
		t.Fatalf("read seeds: %v", err)
	}
	var out []differentialSeed
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		class, command, ok := strings.Cut(line, " | ")
		if !ok {
			t.Fatalf("seeds.txt:%d: want CLASS | COMMAND, got %q", i+1, line)
		}
		out = append(out, differentialSeed{line: i + 1, class: strings.TrimSpace(class), command: oracleUnescape(command)})
	}
	return out
}

// differentialObservation is what bash did with one case.
type differentialObservation struct {
	// output is what the case printed on descriptor 3.
	output []byte
	// changes are the changes of its directory (oracleDiff), canaries included.
	changes []string
	// ran are the canaries (c1, c2, ...) bash created.
	ran map[string]bool
}

var differentialCanaryFile = regexp.MustCompile(`^workspace/(c[0-9]+) created`)

// differentialFixture is the directory each case runs in a copy of. With repository,
// it is the oracle's workspace (text files, a git repository, payloads), for seeds
// that run programs; without, a few files, for generated cases, which only expand
// words. Both hold a file named like an option ("-n", for globs that expand to one)
// and one named like a variable ("input", for "${!input@}").
func differentialFixture(t testing.TB, repository bool) string {
	t.Helper()
	fixture := filepath.Join(t.TempDir(), "fixture")
	if repository {
		if err := oracleCopyTree(filepath.Join(oracleTemplate(t), "ws"), fixture); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Mkdir(fixture, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"-n": "", "input": "alpha\nalpha\nbeta\n"}
	if !repository {
		files["notes.txt"], files["list.txt"] = "alpha\nbeta\n", "notes.txt\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(fixture, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oracleSetTimes(t, fixture)
	return fixture
}

// differentialDriver runs every case with bash -c in its own directory, standard input
// from /dev/null, descriptor 3 (where probes print) to a file, and a timeout.
const differentialDriver = `n=$1
for ((i = 0; i < n; i++)); do
	IFS= read -r -d '' c <"/cases/$i"
	(cd "/w/$i" && exec timeout -s KILL 5 /bin/bash -c "$c") </dev/null 3>"/out/$i" >/dev/null 2>&1
done
exit 0
`

// differentialRun runs commands in one sandbox and reports what each did.
func differentialRun(t testing.TB, fixture string, commands []string) []differentialObservation {
	t.Helper()
	scratch := t.TempDir()
	for _, dir := range []string{"w", "cases", "out", "home"} {
		if err := os.MkdirAll(filepath.Join(scratch, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	before := make([]map[string]string, len(commands))
	for i, c := range commands {
		dir := filepath.Join(scratch, "w", strconv.Itoa(i))
		if err := oracleCopyTree(fixture, dir); err != nil {
			t.Fatal(err)
		}
		if before[i], err = oracleSnapshot(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scratch, "cases", strconv.Itoa(i)), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	driver := filepath.Join(scratch, "driver.sh")
	if err := os.WriteFile(driver, []byte(differentialDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(oracleBwrapArgs(),
		"--bind", filepath.Join(scratch, "w"), "/w",
		"--bind", filepath.Join(scratch, "out"), "/out",
		"--bind", filepath.Join(scratch, "home"), oracleHome,
		"--ro-bind", filepath.Join(scratch, "cases"), "/cases",
		"--ro-bind", driver, "/driver.sh",
		"--remount-ro", "/",
		"--chdir", "/w",
		"--setenv", "HOME", oracleHome,
		"--setenv", "LANG", "C.UTF-8",
		"/bin/bash", "/driver.sh", strconv.Itoa(len(commands)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(commands))*6*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, oracleBwrapPath, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("the sandbox failed: %v\n%s", err, stderr.String())
	}
	t.Logf("ran %d cases in %s", len(commands), time.Since(start))
	out := make([]differentialObservation, len(commands))
	for i := range commands {
		o := &out[i]
		if o.output, err = os.ReadFile(filepath.Join(scratch, "out", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		after, err := oracleSnapshot(filepath.Join(scratch, "w", strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		o.changes = oracleDiff("workspace", before[i], after)
		o.ran = map[string]bool{}
		for _, ch := range o.changes {
			if m := differentialCanaryFile.FindStringSubmatch(ch); m != nil {
				o.ran[m[1]] = true
			}
		}
	}
	return out
}

// differentialMisreadings are the reasons the classifier gives for text it knows bash
// and the parser read differently; its reading of the words is not checked then.
var differentialMisreadings = []string{reasonQuotesInExpansion, reasonCommentBackslash, reasonProcessInExpansion, reasonDollarQuoteInExpansion, reasonDollarContinuation}

// differentialCheck compares the classifier's reading of command with what bash did.
// problems are failures; notes are disagreements on the safe side (the classifier saw
// a canary that bash did not run, as in an expansion's word bash did not expand).
func differentialCheck(command string, o differentialObservation) (problems, notes []string) {
	got := ClassifyCommand(command)
	seen := map[string]bool{}
	misread := false
	for _, p := range got.Parts {
		if len(p.Argv) == 2 && p.Argv[0] == "touch" {
			seen[p.Argv[1]] = true
		}
		for _, r := range differentialMisreadings {
			if p.Reason == r {
				misread = true
			}
		}
	}
	for name := range o.ran {
		if !seen[name] && got.Category != v1alpha1.CategoryUnknown {
			problems = append(problems, fmt.Sprintf("bash ran `touch %s`, which no part of the classification shows (classified %s)", name, oracleDescribe(got)))
		}
	}
	for name := range seen {
		if !o.ran[name] {
			notes = append(notes, fmt.Sprintf("the classifier shows `touch %s`, which bash did not run", name))
		}
	}
	if got.Category == v1alpha1.CategoryReadOnly && len(o.changes) > 0 {
		problems = append(problems, fmt.Sprintf("classified read-only, yet it changed its directory: %s", strings.Join(o.changes, "; ")))
	}
	if misread {
		return problems, notes
	}
	words, ok := differentialProbe(command)
	if !ok {
		return problems, notes
	}
	passed, ok := differentialSplit(o.output, len(words))
	if !ok {
		if got.Category != v1alpha1.CategoryUnknown {
			notes = append(notes, fmt.Sprintf("bash did not run the probe to its end (output %q)", o.output))
		}
		return problems, notes
	}
	for i, w := range words {
		bw := passed[i]
		switch {
		case !w.split && len(bw) != 1:
			problems = append(problems, fmt.Sprintf("word %d (%s) is one word to the classifier, bash passed %d: %q", i+1, w.text, len(bw), bw))
			continue
		case w.static && !w.split && bw[0] != w.text:
			problems = append(problems, fmt.Sprintf("word %d is %q to the classifier, bash passed %q", i+1, w.text, bw[0]))
		}
		if w.operandOnly() {
			for _, b := range bw {
				if strings.HasPrefix(b, "-") && b != "-" {
					problems = append(problems, fmt.Sprintf("word %d (%s) cannot be an option to the classifier, bash passed %q", i+1, w.text, b))
				}
			}
		}
	}
	return problems, notes
}

// differentialProbe finds the probe command, printf '%s\0' =0= W1 =1= ... >&3, and returns
// the classifier's words W1, W2, ...
func differentialProbe(command string) ([]word, bool) {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil {
		return nil, false
	}
	var probe *syntax.CallExpr
	syntax.Walk(file, func(n syntax.Node) bool {
		if call, ok := n.(*syntax.CallExpr); ok && probe == nil && len(call.Args) > 2 &&
			call.Args[0].Lit() == "printf" && call.Args[2].Lit() == "=0=" {
			probe = call
		}
		return probe == nil
	})
	if probe == nil {
		return nil, false
	}
	var words []word
	for i, a := range probe.Args[3:] {
		if i%2 == 0 {
			words = append(words, wordOf(a))
		} else if a.Lit() != fmt.Sprintf("=%d=", i/2+1) {
			return nil, false
		}
	}
	return words, true
}

// differentialSplit cuts the probe's output into the words passed between each pair
// of markers; ok is false when the output is not a whole probe's.
func differentialSplit(output []byte, n int) ([][]string, bool) {
	tokens := strings.Split(string(output), "\x00")
	if len(tokens) == 0 || tokens[len(tokens)-1] != "" {
		return nil, false
	}
	tokens = tokens[:len(tokens)-1]
	if len(tokens) == 0 || tokens[0] != "=0=" {
		return nil, false
	}
	out := make([][]string, 0, n)
	var current []string
	next := 1
	for _, tok := range tokens[1:] {
		if tok == fmt.Sprintf("=%d=", next) {
			out = append(out, current)
			current = nil
			next++
			continue
		}
		current = append(current, tok)
	}
	return out, len(out) == n && current == nil
}

// differentialPreamble sets what the generated words expand: s is set, u is not, the
// positional parameters start with an option, arr has two elements, pre1 and pre2 are
// names with a common prefix.
const differentialPreamble = "s=1; unset u; set -- -a b; arr=(x -y); pre1=p pre2=q\n"

// differentialGenerator turns bytes into a command of the shapes the parser and bash
// could read differently. The same bytes always give the same command.
type differentialGenerator struct {
	r        *oracleBytes
	canaries int
}

func differentialGenerate(data []byte) string {
	g := &differentialGenerator{r: &oracleBytes{data: data}}
	return differentialPreamble + g.command()
}

func (g *differentialGenerator) pick(list ...string) string { return list[g.r.next()%len(list)] }

// canary is a command that leaves the file cN behind.
func (g *differentialGenerator) canary() string {
	g.canaries++
	return fmt.Sprintf("touch c%d", g.canaries)
}

// sub fills every "@" of s with a new canary.
func (g *differentialGenerator) sub(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '@' {
			b.WriteString(g.canary())
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (g *differentialGenerator) command() string {
	switch g.r.next() % 10 {
	case 0, 1, 2:
		return g.probe()
	case 3:
		// A comment, maybe ending in backslashes, before a line that runs a canary.
		text := g.pick("", " c", " 'x", ` "x`, " `x", " $(x", " ${x")
		return g.probe() + " #" + text + g.pick("", `\`, `\\`, `\\\`, `\ `) + "\n" + g.canary()
	case 4:
		return g.heredoc()
	case 5:
		w := g.word(0)
		switch g.r.next() % 9 {
		case 0:
			return "[[ " + w + " == " + g.word(0) + " ]]"
		case 1:
			return "case " + w + " in " + g.word(0) + ") ;; esac"
		case 2:
			return "for v in " + w + "; do :; done"
		case 3:
			return "v=" + w
		case 4:
			return "declare v=" + w
		case 5:
			return "cat <<< " + w
		case 6:
			return "echo " + w + " >/dev/null"
		case 7:
			return "v=(" + w + ")"
		default:
			return ": " + w
		}
	case 6:
		// The probe inside a substitution, a subshell or a group.
		inner := g.probe()
		switch g.r.next() % 4 {
		case 0:
			return ": \"$(" + inner + ")\""
		case 1:
			return "(" + inner + ")"
		case 2:
			return "{ " + inner + "; }"
		default:
			return "cat <(" + inner + ") >/dev/null"
		}
	case 7, 8:
		return g.probe() + g.pick("; ", " && ", " | cat; ", "\n") + g.probe2()
	default:
		return g.sub(g.pick(differentialTemplates...))
	}
}

// differentialTemplates are constructs the parser could end or nest differently from
// bash; each @ is a canary.
var differentialTemplates = []string{
	"echo $((@) )", "echo $( (@) )", "echo $((@); (true))", "((@) )", "( (@) )", "echo $(( $(@) ))",
	"echo `echo \\`@\\``", "echo \"`echo \\\"$(@)\\\"`\"", "echo \"`@`\"", "v=`@`", "echo '`@`'",
	"echo $(case x in x) @;; esac)", "echo $(case x in (x) @;; esac)", "case x in x) @;& y) @;; esac",
	"echo \\\n@", "echo a\\\nb; @", "echo 'a\\\nb'; @", ": $'a\\\nb'; @", "echo ${u:-a\\\nb}; @",
	"echo \"${u:-$(@)}\"", "echo ${x[$(@)]}", "echo ${s:$(@)}", "[[ a =~ (a|b) ]] && @", "[[ -n $(@) ]]",
	"time @", "! @", "{ @; }", "echo {a,b}; @", "echo $\"$(@)\"", "echo ${u:-\"'\"}; @", "echo \"${u:-'}\"; @",
	"echo \"${u:-'}\"; @; echo \"'}\"", "echo ${u:-'}'}; @", "echo \"${u:-\\'}\"; @", "echo \"${u-\\\"}\"; @",
	"echo \"$(echo \")\"; @\"", "echo $(echo ')'); @", "echo $(echo \")\"); @", "echo $(# )\n@\n)",
	"echo $(echo a # )\n@)", "echo `# `; @", "echo $'\\''; @", "echo $'\\'' '; @'", "echo \"$'\"'; @",
	"cat <<< $'a\\nb'; @", "echo ${u:-$'\\''}; @", "echo \"${u:-$'\\''}\"; @", "echo ${u:+'}'}; @",
	"echo <<EOF; @\nEOF", "cat <<EOF; @\nEOF\n@", "cat <<'EOF'\n$(@)\nEOF\n@", "cat <<EOF\n${u:-'\n'}\nEOF\n@",
	"cat <<EOF\n\\\nEOF\n@\nEOF", "cat << \"EOF\"\n$(@)\nEOF", "echo $(cat <<EOF\n$(@)\nEOF\n)",
	"[[ $(@) == x ]]", "[[ x == $'\\x24(@)' ]]", "echo x{,$(@)}", "echo {$(@),x}", "echo ~$(@)", "a=~$(@)",
	"declare a=$(@)", "local a=$(@)", "export a=$(@)", "readonly a=$(@)", "a[1]=$(@)", "a=([1]=$(@))",
	"echo ${#u[$(@)]}", "echo $[ $(@) ]", "for ((i=0; i<$(@); i++)); do :; done", "select v in $(@); do break; done",
	"echo \"$(@)\"\"$(@)\"", "echo \"${u:-\"$(@)\"}\"", "echo \"${u:-`@`}\"", "echo ${u:-`@`}",
	"echo \"${u#$(@)}\"", "echo \"${s/1/$(@)}\"", "echo \"${s/$(@)/x}\"", "echo \"$(: \"${u-$'\\x24(@)'}\")\"",
	"echo \"$(: ${u-$'\\x24(@)'})\"", "echo \"$(: ${u-'$(@)'})\"", "echo \"`: ${u-$'\\x24(@)'}`\"",
	"echo ${u:-<(@)}", "echo \"${s,<(@)}\"", "echo ${s#>(@)}", "echo ${u:-a<(@)}", "echo $\"${u:-'$(@)'}\"",
	"echo $\\\n(@)", "echo \"$\\\n(@)\"", "echo <\\\n(@)", "echo $\\\n{u:-$(@)}", "echo ${u:-'\\\n$(@)'}",
	"echo \"${u:-'\\\n$(@)'}\"", "echo a \\\n# c\n@", "echo `@\\\n`", "echo $(\\\n@\\\n)", "echo '\\'; @",
	"echo \"\\\\\"; @", "a=(\"${u:-'$(@)'}\")", "for v in \"${u:-'$(@)'}\"; do :; done", "cat < \"${u:-'$(@)'}\"",
	"case a in \"${u:-'$(@)'}\") ;; esac", "[[ a == \"${u:-'$(@)'}\" ]]", "declare v=\"${u:-'$(@)'}\"",
	"echo \"${u:-'${s:-$(@)}'}\"", "echo \"${u:-'\"$(@)\"'}\"", "echo ${u:-\"'$(@)'\"}", "echo \"${u:-`echo '$(@)'`}\"",
}

// probe2 is a second command after a probe: a canary alone, or in a word.
func (g *differentialGenerator) probe2() string {
	return g.pick(": ", "echo ", "v=") + g.word(0)
}

func (g *differentialGenerator) probe() string {
	n := 1 + g.r.next()%3
	var b strings.Builder
	b.WriteString(`printf '%s\0' =0=`)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, " %s =%d=", g.word(0), i)
	}
	b.WriteString(" >&3")
	return b.String()
}

// heredoc is a here-document whose body holds substitutions in the forms bash reads
// as in double quotes.
func (g *differentialGenerator) heredoc() string {
	delim := g.pick("EOF", "'EOF'", `"EOF"`, `\EOF`, `E"O"F`, "$'EOF'", `EOF""`, `E\OF`)
	op := g.pick("<<", "<<-")
	var body []string
	for n := 1 + g.r.next()%3; n > 0; n-- {
		body = append(body, g.sub(g.pick(
			"$(@)", "`@`", "'$(@)'", `\$(@)`, `"$(@)"`, "${u:-'$(@)'}", "${u:-$(@)}", `${u:-"$(@)"}`,
			"${s:+'`@`'}", "${u-$'\\x24(@)'}", "${s#'$(@)'}", "text \\", "\tEOF", "$((1+2)) ${s}",
		)))
	}
	return "cat " + op + delim + " >/dev/null\n" + strings.Join(body, "\n") + "\nEOF"
}

// word is one shell word of one to three pieces.
func (g *differentialGenerator) word(depth int) string {
	n := 1 + g.r.next()%3
	var b strings.Builder
	for ; n > 0; n-- {
		b.WriteString(g.piece(depth))
	}
	return b.String()
}

// piece is a piece of a word outside quotes.
func (g *differentialGenerator) piece(depth int) string {
	if depth > 2 {
		return g.pick("a", "-n", "'b'")
	}
	switch g.r.next() % 12 {
	case 0, 1:
		return g.sub(g.pick("a", "-n", "--x=1", `x\ y`, `\$(@)`, "n*.txt", "[-]n", "*", "{a,b}", "{1..2}", "~", "~/x",
			`a\'`, "@(a|b)", "-", "--", "a#b", "{a,'-b'}", `\-n`, "=", "+x", "[n]otes.txt", "{-n,a}", "x{,}"))
	case 2:
		return "'" + g.sub(g.pick("a b", "$(@)", "`@`", `"`, `\`, "-x", "}", "${u}", "'\\''", "$'x'")) + "'"
	case 3:
		return "$'" + g.sub(g.pick(`\x24(@)`, `\x2d-x`, `\'`, `a\tb`, `\x60@\x60`, "$(@)", `\\`, "-n", `\"`, `\x27`)) + "'"
	case 4:
		n := 1 + g.r.next()%3
		var b strings.Builder
		b.WriteByte('"')
		for ; n > 0; n-- {
			b.WriteString(g.quotedPiece(depth))
		}
		b.WriteByte('"')
		return b.String()
	case 5, 6:
		return g.expansion(depth)
	case 7:
		return g.sub(g.pick("$(@)", "`@`", "$(printf %s -n)", `$(echo "$(@)")`, "`echo \\`@\\``", "$(printf '%s ' a -b)"))
	case 8:
		return g.sub(g.pick("$((1+2))", "$[1+2]", "$((s+1))", "$((a[$(@)]))", "$(( $(@) 1 ))"))
	case 9:
		return g.sub(g.pick("<(@)", ">(true)", "<(printf -- -n)"))
	case 10:
		return g.sub(g.pick(`$"a"`, `$"$(@)"`, `$"-n"`))
	default:
		return g.pick("$@", "${arr[@]}", "$*", "${!pre@}", "${!pre*}", "$1", "$s", "$u", "${@:2}", "${!arr[@]}")
	}
}

// quotedPiece is a piece of a double-quoted string.
func (g *differentialGenerator) quotedPiece(depth int) string {
	switch g.r.next() % 6 {
	case 0:
		return g.pick("a b", "'", `\"`, `\$`, `\\`, "-n", "$", "#", "}", "\\`", "{a,b}", "*", "~")
	case 1:
		return g.pick("$s", "$u", "${s}", "$@", "$*", "${arr[@]}", "${arr[*]}", "${!pre@}", "${!pre*}", "${@:2}",
			"${!arr[@]}", "${#arr[@]}", "$1", "${arr[@]@Q}", "${@:1:1}", "${arr[0]}")
	case 2:
		return g.sub(g.pick("$(@)", "`@`", `$(printf %s "a b")`, "$'$(@)'"))
	case 3, 4:
		return g.expansion(depth)
	default:
		return "$((1+2))"
	}
}

// expansion is ${NAME OP WORD} with WORD any word, quotes included.
func (g *differentialGenerator) expansion(depth int) string {
	name := g.pick("s", "u", "arr[@]", "@", "1", "arr", "pre1", "arr[*]", "*")
	op := g.pick("-", ":-", "+", ":+", "=", ":=", "#", "##", "%", "%%", "/a/", "//", "/#", "^", ",", "-", ":-", "+")
	if name != "s" && name != "u" && (op == "=" || op == ":=") {
		op = ":-" // bash refuses to assign to the others
	}
	return "${" + name + op + g.word(depth+1) + "}"
}

// differentialFails runs commands and reports every problem; it logs how many notes
// there were.
func differentialFails(t *testing.T, fixture string, commands []string, labels []string) {
	t.Helper()
	observations := differentialRun(t, fixture, commands)
	noted := 0
	for i, c := range commands {
		problems, notes := differentialCheck(c, observations[i])
		for _, p := range problems {
			t.Errorf("%s: %q: %s", labels[i], c, p)
		}
		noted += len(notes)
		if testing.Verbose() {
			for _, n := range notes {
				t.Logf("%s: %q: %s", labels[i], c, n)
			}
		}
	}
	t.Logf("%d cases, %d disagreements on the safe side", len(commands), noted)
}

// differentialGenerated is how many generated cases TestDifferentialGenerated runs.
const differentialGenerated = 200

// TestDifferentialSeeds runs the hand-written seeds: one or more per class of
// disagreement found so far, and per class of the classifier's known bypasses.
func TestDifferentialSeeds(t *testing.T) {
	oracleRequireSandbox(t)
	seeds := differentialLoadSeeds(t)
	commands := make([]string, len(seeds))
	labels := make([]string, len(seeds))
	for i, s := range seeds {
		commands[i], labels[i] = s.command, fmt.Sprintf("seeds.txt:%d (%s)", s.line, s.class)
	}
	differentialFails(t, differentialFixture(t, true), commands, labels)
}

// TestDifferentialGenerated runs every template once, then a fixed set of generated
// cases.
func TestDifferentialGenerated(t *testing.T) {
	oracleRequireSandbox(t)
	var commands, labels []string
	for i, tpl := range differentialTemplates {
		g := &differentialGenerator{r: &oracleBytes{}}
		commands = append(commands, differentialPreamble+g.sub(tpl))
		labels = append(labels, fmt.Sprintf("template %d", i))
	}
	rng := rand.New(rand.NewSource(37))
	for i := 0; i < differentialGenerated; i++ {
		data := make([]byte, 48)
		rng.Read(data)
		commands = append(commands, differentialGenerate(data))
		labels = append(labels, fmt.Sprintf("generated %d (%x)", i, data))
	}
	differentialFails(t, differentialFixture(t, false), commands, labels)
}

// FuzzDifferential explores generated cases one sandbox each; a failing input is kept
// under testdata/fuzz/FuzzDifferential and then runs in `go test`. Run it with
//
//	make fuzz-differential
//	go test -run '^$' -fuzz FuzzDifferential -fuzztime 10m ./internal/policy/
func FuzzDifferential(f *testing.F) {
	oracleRequireSandbox(f)
	for _, seed := range [][]byte{
		{0, 0, 4, 2},                // a probe with a single-quoted word
		{3, 0, 5, 3, 1, 1},          // a comment ending in a backslash
		{4, 0, 0, 5},                // a here-document
		{0, 1, 5, 0, 0, 4, 5, 2, 0}, // an expansion in double quotes
		{7, 0, 11, 3},               // two commands
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fixture is made per input, in the input's own temporary directory: the
		// fuzzing engine stops its workers without running the target's cleanups.
		command := differentialGenerate(data)
		o := differentialRun(t, differentialFixture(t, false), []string{command})[0]
		if problems, _ := differentialCheck(command, o); len(problems) > 0 {
			t.Fatalf("%q: %s", command, strings.Join(problems, "\n"))
		}
	})
}
