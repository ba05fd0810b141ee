package policy

import (
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// TestGrammarTables checks that each grammar says what it means: no option listed
// twice (the first spelling would hide the second), every effect names an option
// the grammar has, and short specs hold only option letters and colons.
func TestGrammarTables(t *testing.T) {
	all := map[string]*grammar{}
	for name, g := range readOnlyGrammars {
		all[name] = g
	}
	for name, g := range gitReadGrammars {
		all["git "+name] = g
	}
	all["env"], all["xargs"], all["sed"], all["tar"], all["git"] = envGrammar, xargsGrammar, sedGrammar, tarGrammar, gitGlobal
	for name, g := range all {
		seen := map[string]bool{}
		for _, o := range g.longOptions() {
			if seen[o.name] {
				t.Errorf("%s: long option --%s is listed twice", name, o.name)
			}
			seen[o.name] = true
		}
		letters := map[rune]bool{}
		for _, r := range strings.ReplaceAll(g.short, ":", "") {
			if letters[r] {
				t.Errorf("%s: short option -%c is listed twice", name, r)
			}
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@", r) {
				t.Errorf("%s: %q is not an option letter", name, r)
			}
			letters[r] = true
		}
		for key := range g.effects {
			isLetter := len(key) == 1 && letters[rune(key[0])]
			if !seen[key] && !isLetter {
				t.Errorf("%s: effect %q names no option of the grammar", name, key)
			}
		}
	}
}

// longOptionInHelp finds the long options a GNU --help lists.
var longOptionInHelp = regexp.MustCompile(`(?:^|[\s,\[])--([a-z0-9][-a-zA-Z0-9]*)`)

// TestCompleteGrammarsMatchHelp holds every grammar marked complete to its claim
// against the real program on this machine: each long option its --help lists is in
// the table (safe ones as options, the rest as effects), so resolving an
// abbreviation here gives what the program would resolve. A program that is not
// installed is skipped by name.
func TestCompleteGrammarsMatchHelp(t *testing.T) {
	var names []string
	for name, g := range readOnlyGrammars {
		if g.complete {
			names = append(names, name)
		}
	}
	names = append(names, "env", "xargs", "sed")
	sort.Strings(names)
	grammars := map[string]*grammar{"env": envGrammar, "xargs": xargsGrammar, "sed": sedGrammar}
	checked := 0
	for _, name := range names {
		g := readOnlyGrammars[name]
		if g == nil {
			g = grammars[name]
		}
		bin, err := exec.LookPath(name)
		if err != nil {
			t.Logf("%s is not installed here; its table is not checked", name)
			continue
		}
		out, _ := exec.Command(bin, "--help").CombinedOutput()
		if !strings.Contains(string(out), "--help") {
			t.Logf("%s --help lists no long options (not GNU?); its table is not checked", name)
			continue
		}
		known := map[string]bool{}
		for _, o := range g.longOptions() {
			known[o.name] = true
		}
		for _, m := range longOptionInHelp.FindAllStringSubmatch(string(out), -1) {
			if !known[m[1]] {
				t.Errorf("%s --help lists --%s, which its complete grammar does not: an abbreviation could resolve to it", name, m[1])
			}
		}
		checked++
	}
	if checked < 20 {
		t.Errorf("only %d complete grammars were checked against --help; coreutils should be installed", checked)
	}
}

func static(words ...string) []word {
	out := make([]word, len(words))
	for i, w := range words {
		out[i] = word{text: w, static: true}
	}
	return out
}

// TestGetoptParse checks the option parser against getopt_long's rules.
func TestGetoptParse(t *testing.T) {
	sortG := readOnlyGrammars["sort"]
	head := readOnlyGrammars["head"]
	tests := []struct {
		name     string
		g        *grammar
		args     []string
		want     v1alpha1.CommandCategory
		reason   string
		operands []string
	}{
		{"bundled short options", sortG, []string{"-rn", "f"}, ro, "", []string{"f"}},
		{"a value attached to a short option", sortG, []string{"-k2", "f"}, ro, "", []string{"f"}},
		{"a value in the next word", sortG, []string{"-k", "2", "f"}, ro, "", []string{"f"}},
		{"a value at the end of a bundle", sortG, []string{"-rnk", "2", "f"}, ro, "", []string{"f"}},
		{"the output option bundled", sortG, []string{"-rno", "out", "f"}, wr, "option -o writes files", []string{"f"}},
		{"the output option attached", sortG, []string{"-oout", "f"}, wr, "option -o writes files", []string{"f"}},
		{"a long option with =", sortG, []string{"--output=x", "f"}, wr, "option --output writes files", []string{"f"}},
		{"a long option's value in the next word", sortG, []string{"--output", "x", "f"}, wr, "", []string{"f"}},
		{"an unambiguous prefix resolves", sortG, []string{"--compress-prog=sh", "f"}, unk, "option --compress-program runs a program", []string{"f"}},
		{"a short prefix resolves", sortG, []string{"--compr=sh"}, unk, "--compress-program", nil},
		{"an ambiguous prefix is refused", sortG, []string{"--c"}, unk, "option --c is ambiguous (--check, --compress-program)", nil},
		{"a prefix of a safe option resolves", sortG, []string{"--numeric", "f"}, ro, "", []string{"f"}},
		{"options after operands are options", sortG, []string{"f", "-o", "x"}, wr, "", []string{"f"}},
		{"-- ends the options", sortG, []string{"--", "-o", "x"}, ro, "", []string{"-o", "x"}},
		{"an unknown short option", sortG, []string{"-Q", "f"}, unk, "unknown option -Q", []string{"f"}},
		{"an unknown long option", sortG, []string{"--frobnicate"}, unk, "unknown option --frobnicate", nil},
		{"a value on an option that takes none", sortG, []string{"--reverse=yes"}, unk, "option --reverse takes no value", nil},
		{"a missing value", sortG, []string{"-k"}, unk, "option -k needs a value", nil},
		{"-NUM where the command takes it", head, []string{"-20", "f"}, ro, "", []string{"f"}},
		{"-NUM where it does not", sortG, []string{"-20", "f"}, unk, "unknown option -2", []string{"f"}},
		{"an incomplete table refuses prefixes", readOnlyGrammars["rg"], []string{"--pr", "sh"}, unk, "unknown option --pr", []string{"sh"}},
		{"a lone dash is an operand", sortG, []string{"-"}, ro, "", []string{"-"}},
		{"an optional value must be attached", readOnlyGrammars["ls"], []string{"--color", "always"}, ro, "", []string{"always"}},
		{"stop at the first operand", envGrammar, []string{"-u", "X", "ls", "-S", "x"}, ro, "", []string{"ls", "-S", "x"}},
		{"env -S in a bundle", envGrammar, []string{"-0S", "rm x"}, unk, "option -S runs a program", nil},
		{"env --split-string by prefix", envGrammar, []string{"--sp=rm x"}, unk, "--split-string", nil},
	}
	for _, tt := range tests {
		p := tt.g.parse(static(tt.args...))
		if p.category != tt.want {
			t.Errorf("%s: parse(%q) = %s (%s), want %s", tt.name, tt.args, p.category, p.reason, tt.want)
			continue
		}
		if tt.reason != "" && !strings.Contains(p.reason, tt.reason) {
			t.Errorf("%s: parse(%q) reason %q, want it to contain %q", tt.name, tt.args, p.reason, tt.reason)
		}
		if tt.operands != nil {
			var got []string
			for _, o := range p.operands {
				got = append(got, o.text)
			}
			if strings.Join(got, "\x00") != strings.Join(tt.operands, "\x00") {
				t.Errorf("%s: parse(%q) operands %q, want %q", tt.name, tt.args, got, tt.operands)
			}
		}
	}
}

// TestClassifyBypassClasses is one attack per class of bypass that once reached
// read-only through a denylist classifier (each fails on that classifier), with the
// category and reason the grammar gives instead.
func TestClassifyBypassClasses(t *testing.T) {
	tests := []struct {
		class, command string
		reason         string
	}{
		{"function defined after the call", "rm notes.txt calc.sh; rm() { :; }", "replaces the command"},
		{"function in a dead branch", "if false; then cat() { :; }; fi; cat notes.txt", "replaces the command"},
		{"function in a subshell", "(ls() { :; }); ls", "replaces the command"},
		{"function in nested bash -c", "bash -c 'cat() { rm -rf .; }; cat x'", "replaces the command"},
		{"function shadowing a builtin", "echo() { :; }; echo hi", "replaces the command"},
		{"fork bomb", ":(){ :|:& };:", "replaces the command"},
		{"function with a path as its name", "function /usr/bin/cat { :; }; /usr/bin/cat x", "replaces the command"},
		{"command_not_found_handle", "command_not_found_handle() { :; }; ls", "replaces the command"},
		{"a call of a defined function", "show() { ls; }; show", "calls the function show"},
		{"hash -p", "hash -p /bin/rm cat; cat notes.txt", "changes how bash finds"},
		{"BASH_CMDS", "BASH_CMDS[cat]=/bin/rm; cat notes.txt", "BASH_CMDS"},
		{"BASH_ALIASES", "BASH_ALIASES[ls]='rm -rf .'; ls", "BASH_ALIASES"},
		{"alias", "alias ls='rm -rf .'", "changes how bash finds"},
		{"enable", "enable -n echo", "changes how bash finds"},
		{"shopt", "shopt -s expand_aliases", "changes how bash finds"},
		{"trap", "trap 'rm -rf .' EXIT", "changes how bash finds"},
		{"let", "let 'x=a[$(rm -rf .)]'", "let evaluates arithmetic"},
		{"$(( )) over a variable", "read x < arith.txt; echo $((x))", "arithmetic over anything but literal numbers"},
		{"(( )) over a variable", "x=1; ((x++))", "arithmetic over anything but literal numbers"},
		{"[[ -eq ]] over a variable", "[[ $x -eq 1 ]] && ls", "arithmetic comparison"},
		{"[[ -v ]]", "[[ -v a[$(rm x)] ]]", "[[ -v ]]"},
		{"test -v", "test -v 'a[$(rm x)]'", "test -v"},
		{"a subscript over a variable", "echo ${a[$i]}", "arithmetic"},
		{"a substring offset over a variable", "echo ${s:$o}", "arithmetic"},
		{"indirect expansion", "echo ${!name}", "indirect expansion"},
		{"prompt expansion", "echo ${x@P}", "prompt string"},
		{"printf -v with a subscript", "printf -v 'a[$(rm x)]' 1", "printf -v"},
		{"printf whose first word may be -v", "printf $fmt x", "could expand to printf -v"},
		{"read into a subscript", "read 'a[$(rm x)]' < notes.txt", "not a plain variable name"},
		{"unset a subscript", "unset 'a[$(rm x)]'", "not a plain variable name"},
		{"mapfile -C callback", "mapfile -C 'rm x' -c 1 arr < notes.txt", "option -C"},
		{"declare with attributes", "declare -i x=1; x='a[$(rm x)]'", "attributes"},
		{"declare with a subscript", "declare 'a[$(rm x)]=1'", "declare"},
		{"local with nameref", "f() { local -n r=x; }", "attributes"},
		{"export -f", "export -f f", "attributes"},
		{"PS4 with set -x", "PS4='$(rm -rf .)'; set -x; ls", "PS4"},
		{"PROMPT_COMMAND", "PROMPT_COMMAND='rm x'", "PROMPT_COMMAND"},
		{"set -a exports", "set -a; TAR_OPTIONS=--to-command=sh; tar tf x.tar", "set -a"},
		{"set -o vi", "set -o vi", "set -o vi"},
		{"sed e command", "sed -n '1e touch pwned' notes.txt", "the sed command e"},
		{"sed e with a step address", "sed '1~1e touch pwned' notes.txt", "the sed command e"},
		{"sed e with a negated last line", "sed '$!e touch pwned' notes.txt", "the sed command e"},
		{"sed e in a block", "sed -n '/x/{e touch pwned\n}' notes.txt", "the sed command e"},
		{"sed e after a regex address", "sed '\\#x#e touch pwned' notes.txt", "the sed command e"},
		{"sed s///e", "sed 's/.*/touch pwned/e' notes.txt", "e flag"},
		{"sed s###e", "sed 's#.*#touch pwned#e' notes.txt", "e flag"},
		{"sed s with flags then e", "sed 's|a|b|gpe' notes.txt", "e flag"},
		{"sed w command", "sed -n 'w out.txt' notes.txt", "writes a file"},
		{"sed W command", "sed -n '1W out.txt' notes.txt", "writes a file"},
		{"sed s///w", "sed 's/a/b/w out.txt' notes.txt", "w flag"},
		{"sed -e with e", "sed -e p -e '1e touch pwned' notes.txt", "the sed command e"},
		{"sed --expression by prefix", "sed --expr='1e touch pwned' notes.txt", "the sed command e"},
		{"sed in place bundled", "sed -ni p notes.txt", "writes files"},
		{"sed script file", "sed -f script.sed notes.txt", "option -f"},
		{"env --split-string abbreviated", "env --sp='rm notes.txt'", "--split-string"},
		{"sort --compress-program abbreviated", "sort --compress-prog=./payload.sh notes.txt", "--compress-program"},
		{"sort --compress-program", "sort --compress-program=./payload.sh notes.txt", "--compress-program"},
		{"sort --output abbreviated", "sort --out=notes.txt list.txt", "--output"},
		{"tar --to-command with -t", "tar -tf archive.tar --to-command='touch pwned'", "unknown option --to-command"},
		{"tar --checkpoint-action with -t", "tar -t --checkpoint=1 --checkpoint-action=exec='touch pwned' -f archive.tar", "unknown option"},
		{"tar -I with -t", "tar -t -I ./payload.sh -f archive.tar", "unknown option -I"},
		{"git grep -O", "git grep -O./payload.sh alpha", "unknown option -O"},
		{"git grep --open-files-in-pager", "git grep --open-files-in-pager=./payload.sh alpha", "unknown option --open-files-in-pager"},
		{"git log --output", "git log --output=out.txt", "unknown option --output"},
		{"git diff --ext-diff", "git diff --ext-diff", "unknown option --ext-diff"},
		{"git show --textconv", "git show --textconv HEAD:x", "unknown option --textconv"},
		{"git log abbreviated --output", "git log --out=x", "unknown option --out"},
		{"git -c", "git -c core.pager=./payload.sh log", "unknown option -c"},
		{"git -p", "git -p log", "unknown option -p"},
		{"git --exec-path", "git --exec-path=. status", "unknown option --exec-path"},
		{"rg --pre", "rg --pre ./payload.sh alpha", "unknown option --pre"},
		{"rg -z", "rg -z alpha", "option -z"},
		{"ag --pager", "ag --pager ./payload.sh alpha", "toolgate does not know the command ag"},
		{"man -P", "man -P ./payload.sh ls", "-P"},
		{"less +!", "less '+!touch pwned' notes.txt", "+command"},
		{"less with a lesskey file", "less notes.txt", "lesskey"},
		{"sh -c read as dash", "sh -c " + shellQuote("echo $'\\' ; touch pwned\necho \\''"), "as a POSIX sh reads the command"},
		{"zsh -c", "zsh -c ls", "another language"},
		{"brace expansion across quotes", `find {".","-delete"}`, "could be -delete"},
		{"brace expansion in git", `git log {"--output=pwned",-1}`, ""},
		{"brace expansion in sed", `sed p {"-e",'1e touch pwned'} f`, ""},
		{"tilde as OLDPWD", "OLDPWD=-delete; find ~-", ""},
		{"tilde as PWD", "find ~+", ""},
		{"a glob bracket across quotes", `find ["-"]delete`, ""},
		{"unset PATH", "unset PATH; cat f", "PATH"},
		{"${PATH:=...}", "echo ${PATH:=.}; cat f", "PATH"},
		{"test with a variable operator", `x=-v; y='a[$(touch pwned)]'; [ "$x" "$y" ]`, "could be -v"},
		{"a sed label then e (GNU 4.9)", "sed -n ':a;e touch pwned' f", "the sed command e"},
		{"a sed label and e on one line", "sed -n ':a e touch pwned' f", "sed versions read it differently"},
		{"xargs --process-slot-var", "echo | xargs --process-slot-var=BASH_ENV bash -c ls", "--process-slot-var"},
		{"POSIXLY_CORRECT", "POSIXLY_CORRECT=1 sed '1e touch pwned' -e p f", "POSIXLY_CORRECT"},
		{"find -exec + not after {}", "find . -maxdepth 0 -exec sed s/x/PWNED/ + -iname victim.txt -size ';'", ""},
		{"python -c before -m", `python3 -c 'import os; os.system("touch pwned")' -m json.tool`, ""},
		{"python -m from the working directory", "python3 -m json.tool in.json", "working directory first"},
		{"go -C shifts the subcommand", "go -C version run .", "an option before the subcommand"},
		{"go list -toolexec", "go list -export -toolexec=./evil.sh .", "-toolexec=./evil.sh runs the program it names"},
		{"go env --w", "go env --w GOFLAGS=-toolexec=/tmp/evil", ""},
		{"go bug", "go bug", "not known to be read-only"},
		{"npm pack runs prepack", "npm pack", "not known to be read-only"},
		{"npm --prefix shifts the subcommand", "npm --prefix ls install", "an option before the subcommand"},
		{"npm help runs man", "npm help ls", "not known to be read-only"},
		{"cargo --config shifts the subcommand", "cargo --config version build", "an option before the subcommand"},
		{"pip config edit", "pip config edit --editor ./evil.sh", "not known to be read-only"},
		{"pip cache purge", "pip cache purge", "not known to be read-only"},
		{"uv run --with", "uv run --with=evil cat f", "options of run"},
		{"git diff -U swallowing --output", "git diff -U --output=pwned", "--output"},
		{"git shortlog -c", "git shortlog -c --output=pwned HEAD", "--output"},
		{"git fsck --lost-found", "git fsck --lost-found", "--lost-found"},
		{"git remote show", "git remote show origin", ""},
		{"git help topic", "git help log", ""},
		{"git log --help", "git log --help", ""},
		{"git --help topic", "git --help log", ""},
		{"git %G format", "git log '--format=%G?' -1", "%G"},
		{"git verify-commit", "git verify-commit HEAD", ""},
		{"git tag -v", "git tag -v v1", ""},
		{"tar from another host", "tar -tf localhost:archive.tar", "another machine"},
		{"xxd options after an operand", "xxd in -b", "second operand"},
		{"diff -l runs pr", "diff -l a b", "option -l"},
		{"file -S", "file -S x", "option -S"},
		{"ionice -p", "ionice -c 3 -p 1", "option -p"},
		{"CR LF line continuation", "echo hi \\\r\ntouch pwned", "carriage return"},
		{"sed s flags after a blank", "sed 's/.*/touch pwned/ ie' f", "e flag"},
		{"sed s w flag after a blank", "sed -n 's/x/y/ iw written' f", "w flag"},
		{"jobs -x", "jobs -x touch pwned", "unknown option -x"},
		{"a subscript in a compound assignment", "x='y[$(touch pwned)]'; a=([x]=1)", "arithmetic"},
		{"a subscript in a declared compound assignment", "declare a=([x]=1)", "arithmetic"},
		{"a {PATH} redirection", ": {PATH}</dev/null; ls", "PATH"},
		{"a {a[x]} redirection", ": {a[x]}</dev/null", "subscript"},
		{"env -i and a shell", `env -i bash -c "gofmt -l ."`, "option -i"},
		{"env -u PATH", "env -u PATH bash -c ls", "PATH"},
		{"exec -c", "exec -c bash -c ls", "option -c"},
		{"exec -l", "exec -l bash -c ls", "option -l"},
		{"timeout leaves its own process group", "timeout 999 sleep 999", "process group of its own"},
		{"timeout in a process substitution", ": <(timeout 999 sleep 999)", "process group of its own"},
		{"git stash -- list", "git stash -u -- list", ""},
		{"git stash -- show", "git stash -- show", ""},
		{"tree -o in a bundle", "tree -Lo 2 out.txt", "does not know the command tree"},
		{"go list -m -u", "go list -m -u all", "toolgate does not know the option -u"},
		{"go list -versions", "go list -m -versions m", "toolgate does not know the option -versions"},
		{"file -p", "file -p x", "option -p"},
		{"gawk /inet", `awk 'BEGIN{ARGV[1]="/inet/tcp/0/127.0.0.1/7777"}'`, "/inet"},
		{"file -z runs decompressors", "file -z archive.tar", "option -z"},
		{"xxd outfile", "xxd notes.txt out.txt", "second operand"},
		{"uniq outfile", "uniq notes.txt out.txt", "second operand"},
		{"date sets the clock", "date 010100002030", "sets the clock"},
		{"< /dev/tcp", "cat < /dev/tcp/127.0.0.1/7777", "/dev/tcp"},
		{"> /dev/tcp", "echo x > /dev/tcp/127.0.0.1/7777", "/dev/tcp"},
		{"/dev/udp", "echo x > /dev/udp/127.0.0.1/7777", "/dev/udp"},
		{"exec <> /dev/tcp", "exec 3<>/dev/tcp/127.0.0.1/7777", "/dev/tcp"},
		{"/dev/tcp through dots", "cat < /dev/./tcp/127.0.0.1/7777", "/dev/tcp"},
		{"a redirection to a variable", "cat notes.txt > $out", "known only when the command runs"},
		{"a brace expansion producing an option", "sort {--compress-program=./payload.sh,notes.txt}", "could expand to an option"},
		{"a glob matching an option-like file", "cd glob && sort *", "could expand to an option"},
		{"a bare glob", "sort *", "could expand to an option"},
		{"an unquoted variable", "sort $opts notes.txt", "could expand to an option"},
		{"a quoted variable that may start with -", `sort "$opt" notes.txt`, "could expand to an option"},
		{"xargs feeding options", "echo --output=notes.txt | xargs sort list.txt", "could expand to an option"},
		{"xargs -I", "echo x | xargs -I{} sort {}", "could expand to an option"},
		{"find -exec with {}", "find . -exec sort {} \\;", "could expand to an option"},
		{"find -fprint", "find . -fprint out.txt", "writes a file"},
		{"find with an unknown primary", "find . -frobnicate", "does not know the find expression"},
		{"find with a variable", "find . $expr", "could be -delete or -exec"},
		{"watch with a shell string", "watch -n 1 'ls; rm notes.txt'", ""},
		{"watch splitting", "watch ls '; rm notes.txt'", ""},
		{"an exported unknown variable", "FOO=1 ls", "sets FOO"},
		{"TAR_OPTIONS", "TAR_OPTIONS=--to-command=sh tar -tf archive.tar", "TAR_OPTIONS"},
		{"LESSOPEN", "LESSOPEN='|./payload.sh %s' less notes.txt", "LESSOPEN"},
		{"RIPGREP_CONFIG_PATH", "RIPGREP_CONFIG_PATH=x rg alpha", "RIPGREP_CONFIG_PATH"},
		{"HOME for git", "HOME=. git log", "HOME"},
		{"env with a hijacking variable", "env LESSOPEN='|x' less notes.txt", "LESSOPEN"},
		{"export", "export MANPAGER=./payload.sh", "MANPAGER"},
		{"a for loop binding IFS", "for IFS in x; do ls; done", "IFS"},
		{"background", "sleep 100 &", "background"},
		{"coproc", "coproc cat", "coproc"},
		{"bash -i reads startup files", "bash -ic ls", "reads startup files"},
		{"bash -l", "bash -lc ls", "reads startup files"},
		{"bash with a script file", "bash x.sh", "script file"},
		{"make -n runs $(shell)", "make -n", "make -n still runs"},
		{"a path-qualified program", "./cat notes.txt", "outside the system's bin directories"},
		{"a glob in the command name", "/bin/c[a]t notes.txt", "known only when it runs"},
		{"ANSI-C quoting in the command name", "$'\\x63at' notes.txt", "known only when it runs"},
		{"a variable command name", "$c notes.txt", "known only when it runs"},
		{"a substitution as command name", "$(echo cat) notes.txt", "known only when it runs"},
	}
	for _, tt := range tests {
		got := ClassifyCommand(tt.command)
		if got.Category == ro {
			t.Errorf("%s: %q is read-only; parts: %s", tt.class, tt.command, describeParts(got.Parts))
			continue
		}
		if tt.reason == "" {
			continue
		}
		found := false
		for _, p := range got.Parts {
			if strings.Contains(p.Reason, tt.reason) || strings.Contains(p.Command, tt.reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %q is %s, but no part's reason says %q; parts: %s", tt.class, tt.command, got.Category, tt.reason, describeReasons(got.Parts))
		}
	}
}

func describeReasons(parts []Part) string {
	var out []string
	for _, p := range parts {
		out = append(out, p.Command+" => "+string(p.Category)+" ("+p.Reason+")")
	}
	return "[" + strings.Join(out, "; ") + "]"
}

// TestClassifyReadOnlyForms are the forms of the grammar's commands that must stay
// read-only: the allowlist must not refuse what agents read with.
func TestClassifyReadOnlyForms(t *testing.T) {
	for _, command := range []string{
		"sort -rn -k2 data.txt | head -20", "sort -t, -k 2,2n f", "sort --numeric f", "LC_ALL=C sort -u f",
		"grep -rn --include='*.go' TODO .", "grep -c '' notes.txt", "grep -E 'a|b' f", "egrep -i x f",
		"sed -n '1,10p' f", "sed 's/a/b/g; s/c/d/2' f", "sed -E 's#(x)#\\1y#' f", "sed -n '/start/,/end/{p}' f",
		"sed '$d' f", "sed -n '$=' f", "sed '1i header' f", "sed 'y/abc/xyz/' f", "sed -e 's/a/b/' -e 's/c/d/' f",
		"tar -tzf a.tgz", "tar tf a.tar", "tar --list --file=a.tar", "git status --short", "git log --oneline --graph -20",
		"git diff --stat HEAD~1", "git diff --cached", "git show --stat HEAD", "git log -p -5 -- a.go", "git grep -n TODO",
		"git branch -a", "git tag -l", "git rev-parse --abbrev-ref HEAD", "git ls-files", "git blame -L 1,10 a.go",
		"git -C sub log -1", "git --no-pager log -1", "git stash list", "git config --get user.name", "git remote -v",
		"find . -name '*.go' -type f", "find . -maxdepth 2 -not -path './.git/*' -print", "find src -newer x -ls",
		"find . -name '*.go' -exec grep -n TODO {} +", "ls -la", "ls --color=auto -lh", "cat -n f", "head -n 5 f",
		"tail -f log.txt", "wc -l *.go", "du -sh .", "df -h", "stat -c %s f", "file f", "jq -r .name package.json",
		"awk '{print $1}' f", "awk -F: '{print $2}' /etc/passwd", "diff -u a b", "diff <(ls a) <(ls b)", "cmp a b",
		"uniq -c f", "cut -d: -f1 f", "tr a-z A-Z < f", "xxd -l 64 f", "od -c f", "base64 -d f", "md5sum f",
		"echo hi", "printf '%s\\n' a b", "pwd", "cd src && ls", "test -f x && cat x", "[ -d src ] || echo no",
		"[[ -f x && $y == z ]]", "[[ $# -eq 0 ]]", "echo $((1+2))", "for f in *.go; do wc -l \"$f\"; done",
		"while read -r l; do echo \"$l\"; done < f", "set -euo pipefail; ls", "x=$(ls); echo \"$x\"",
		"cat f | sort | uniq -c | sort -rn", "ls 2>/dev/null", "grep x f >/dev/null 2>&1", "cat <<'EOF'\nx\nEOF",
		"command -v go", "type ls", "which git", "env", "printenv PATH", "date +%Y", "date -u", "uname -a", "id -u",
		"realpath .", "basename a/b.go .go", "dirname a/b", "seq 1 5", "sleep 1", "true", "exit 0", "echo ${#a[@]}",
		"echo \"${x:-default}\"", "nice -n 5 ls", "timeout --foreground 5 cat f", "xargs < list", "find . -print0 | xargs -0 grep x",
		"echo a | xargs -I{} grep {} f", "gofmt -l .", "git log --format='%h %s' -n 3", "rg -n foo", "sed 's/a/b/ g' f", "jobs -l",
	} {
		got := ClassifyCommand(command)
		if got.Category != ro {
			t.Errorf("%q is %s, want read-only; parts: %s", command, got.Category, describeReasons(got.Parts))
		}
	}
}

// TestClassifyBadInputFailsClosed: what the parser and bash could read differently,
// or what is too big or deep to follow, is unknown with a reason, never a panic.
func TestClassifyBadInputFailsClosed(t *testing.T) {
	tests := []struct {
		name, command, reason string
	}{
		{"unparsable", "echo 'unterminated", "bash would read this command differently"},
		{"huge", "ls " + strings.Repeat("a", maxCommandBytes), "bytes; at most"},
		{"a NUL byte", "ls\x00; rm -rf .", "NUL byte"},
		{"invalid UTF-8", "ls \xff\xfe", "not valid UTF-8"},
		{"deep nesting of eval", strings.Repeat("eval ", 12) + "ls", "followed 8 levels deep"},
		{"deep nesting of bash -c", nestedBashC(9), "followed 8 levels deep"},
		{"deep nesting of substitutions", strings.Repeat("$(", 2000) + "ls" + strings.Repeat(")", 2000), ""},
		{"deep nesting of subshells", strings.Repeat("(", 5000) + "ls" + strings.Repeat(")", 5000), ""},
	}
	for _, tt := range tests {
		got := ClassifyCommand(tt.command)
		if tt.reason == "" {
			// Deep but well-formed: it must come back, whatever the category.
			continue
		}
		if got.Category != unk {
			t.Errorf("%s: category %s, want unknown", tt.name, got.Category)
			continue
		}
		found := false
		for _, p := range got.Parts {
			if strings.Contains(p.Reason, tt.reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no part's reason says %q: %s", tt.name, tt.reason, describeReasons(got.Parts))
		}
	}
}

func nestedBashC(n int) string {
	s := "ls"
	for i := 0; i < n; i++ {
		s = "bash -c " + shellQuote(s)
	}
	return s
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestDecisionSaysWhy: the person asked to approve an unknown call reads why it is
// unknown, in the decision's reason and on the part.
func TestDecisionSaysWhy(t *testing.T) {
	d := Decide(Request{Namespace: "ns", Task: "t", Mode: v1alpha1.ModeEdit, Tool: v1alpha1.ToolBash,
		Input: []byte(`{"command":"sort --compress-prog=./x.sh notes.txt"}`)}, nil, nil, nil)
	if d.Action != v1alpha1.DecisionAsk || d.Category != unk {
		t.Fatalf("decision = %s %s, want Ask unknown", d.Action, d.Category)
	}
	const why = "option --compress-program runs a program"
	if !strings.Contains(d.Reason, why) {
		t.Errorf("reason %q does not say %q", d.Reason, why)
	}
	if len(d.Parts) != 1 || !strings.Contains(d.Parts[0].Reason, why) {
		t.Errorf("parts %+v do not say %q", d.Parts, why)
	}
}

// TestRegisterRefusesANameTwice: a command registered twice would silently lose one
// of its rules (the grammar table and the builtins both had pwd, true and false).
func TestRegisterRefusesANameTwice(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering cat a second time did not panic")
		}
	}()
	register("cat", fixed(v1alpha1.CategoryReadOnly))
}
