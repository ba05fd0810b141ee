package policy

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// literalsOf finds every value of type typeName the package's code writes: a
// typeName{...} or &typeName{...}, and the elided values of a map[...]typeName{...}
// or map[...]*typeName{...}. Each is reported with the keys it sets, by file and
// line.
func literalsOf(t *testing.T, typeName string) map[string]map[string]ast.Expr {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]ast.Expr{}
	isGrammar := func(e ast.Expr) bool {
		if star, ok := e.(*ast.StarExpr); ok {
			e = star.X
		}
		id, ok := e.(*ast.Ident)
		return ok && id.Name == typeName
	}
	record := func(lit *ast.CompositeLit) {
		keys := map[string]ast.Expr{}
		for _, elt := range lit.Elts {
			if kv, ok := elt.(*ast.KeyValueExpr); ok {
				if id, ok := kv.Key.(*ast.Ident); ok {
					keys[id.Name] = kv.Value
				}
			}
		}
		out[fset.Position(lit.Pos()).String()] = keys
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if lit.Type != nil && isGrammar(lit.Type) {
				record(lit)
			}
			if m, ok := lit.Type.(*ast.MapType); ok && isGrammar(m.Value) {
				for _, elt := range lit.Elts {
					if kv, ok := elt.(*ast.KeyValueExpr); ok {
						if inner, ok := kv.Value.(*ast.CompositeLit); ok && inner.Type == nil {
							record(inner)
						}
					}
				}
			}
			return true
		})
	}
	return out
}

// TestEveryGrammarDeclaresItsOrder: whether a program reads options after its
// first operand is the program's own choice (sort notes.txt -o out writes out;
// gofmt x.go -w reads a file named -w), so no grammar may leave it to a default.
// bash's builtins all stop at their first operand.
func TestEveryGrammarDeclaresItsOrder(t *testing.T) {
	literals := literalsOf(t, "grammar")
	if len(literals) < 100 {
		t.Fatalf("found only %d grammars in the package's code; the search is broken", len(literals))
	}
	for where, keys := range literals {
		order, ok := keys["order"]
		if !ok {
			t.Errorf("%s: the grammar does not declare its order (permutes or stopsAtOperand)", where)
			continue
		}
		if strings.HasPrefix(filepath.Base(where), "builtins.go:") {
			if id, ok := order.(*ast.Ident); !ok || id.Name != "stopsAtOperand" {
				t.Errorf("%s: bash's builtins stop reading options at their first operand", where)
			}
		}
	}
}

// TestEveryWrapperDeclaresWhatItAdds: a wrapper or package manager that writes a
// file, changes PATH or runs the project's code says so; one that adds nothing says
// addsNothing, so that a new entry cannot leave it out.
func TestEveryWrapperDeclaresWhatItAdds(t *testing.T) {
	for _, typeName := range []string{"wrapperCommand", "nodeTool"} {
		literals := literalsOf(t, typeName)
		if len(literals) < 4 {
			t.Fatalf("found only %d %s values in the package's code; the search is broken", len(literals), typeName)
		}
		for where, keys := range literals {
			if _, ok := keys["adds"]; !ok {
				t.Errorf("%s: the %s does not declare what it adds (addsNothing when nothing)", where, typeName)
			}
		}
	}
}

// TestBashBuiltinsStopAtTheirFirstOperand checks what TestEveryGrammarDeclaresItsOrder
// holds builtins.go to against bash: NAME OPERAND --help does not print NAME's help.
func TestBashBuiltinsStopAtTheirFirstOperand(t *testing.T) {
	probes := map[string]string{
		"type": "true", "cd": "/", "pwd": "x", "jobs": "x", "umask": "022", "wait": "1", "read": "x",
		"mapfile": "a", "readarray": "a", "unset": "x", "command": "true", "exec": "true", "builtin": "true",
	}
	for name, operand := range probes {
		help := probeOutput(t, t.TempDir(), "bash", "-c", name+" --help")
		first, _, _ := strings.Cut(help, "\n")
		if !strings.Contains(first, name) {
			t.Fatalf("bash -c '%s --help' printed %q, not its help", name, first)
		}
		if got := probeOutput(t, t.TempDir(), "bash", "-c", name+" "+operand+" --help"); strings.Contains(got, first) {
			t.Errorf("bash's %s read --help after its operand %s as an option: %q", name, operand, got)
		}
	}
}

// TestUndeclaredOrderIsRefused: a grammar that does not say is no grammar.
func TestUndeclaredOrderIsRefused(t *testing.T) {
	p := (&grammar{short: "a", dynamic: true}).parse(static("-a", "f"))
	if p.category != v1alpha1.CategoryUnknown || !strings.Contains(p.reason, "options after operands") {
		t.Errorf("an undeclared order gave %s (%q), want unknown", p.category, p.reason)
	}
}

// probeOutput runs a program for a probe, in dir, with no input, without
// POSIXLY_CORRECT, for at most a few seconds (watch and yes do not end), and
// returns the start of what it printed.
func probeOutput(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	return probeOutputEnv(t, dir, nil, name, args...)
}

func probeOutputEnv(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"LC_ALL=C", "TERM=dumb", "HOME=" + dir, "PATH=" + os.Getenv("PATH")}, env...)
	out := &cappedBuffer{limit: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	_ = cmd.Run()
	return out.String()
}

// cappedBuffer keeps the first limit bytes written to it.
type cappedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// TestOptionsAfterTheFirstOperand: a program that permutes reads a later option
// (sort notes.txt -o out writes out); one that stops reads it as an operand
// (gofmt x.go -w formats nothing, seq 5 -1 1 counts down, awk's -F: after the
// program is a file). Under POSIXLY_CORRECT, which a command's environment may
// hold unseen, a program that permutes stops too, so operand checks hold for both
// readings: uniq notes.txt -c wrote a file named -c, and tee /dev/null -a one
// named -a.
func TestOptionsAfterTheFirstOperand(t *testing.T) {
	exactly(t, v1alpha1.CategoryWrite,
		"sort notes.txt -o owned.txt", "sort notes.txt --outp=owned.txt", "sort notes.txt -rnoowned.txt",
		"sed p notes.txt -i", "sed p notes.txt --in-pl=.bak", "uniq notes.txt -c owned.txt",
		"uniq notes.txt -c", "uniq notes.txt -- x", "tee /dev/null -a", "tee /dev/null -- /dev/null")
	exactly(t, v1alpha1.CategoryReadOnly,
		"gofmt x.go -w", "gofmt -l . -w", "seq 5 -1 1", "basename a.txt -s", "printenv HOME -0", "tr a-z A-Z -d",
		"date +%F -d yesterday", `date +%s -d "$day"`, "date -u +%Y", "uniq -c notes.txt", "tee /dev/null", "type ls -a", "expr 1 - 2",
		"nice ls -l --color=never")
	exactly(t, v1alpha1.CategoryPrivilege, "date 0101", "date -u 0101", "date +%s -s 2020-01-01")
	exactly(t, v1alpha1.CategoryUnknown, "date $when", "date +%s $extra", `date "$when"`)
	// POSIXLY_CORRECT set by the command itself is refused outright.
	exactly(t, v1alpha1.CategoryUnknown, "POSIXLY_CORRECT=1 uniq -c notes.txt", "env POSIXLY_CORRECT=1 sort notes.txt",
		"export POSIXLY_CORRECT=1; tee /dev/null", "POSIXLY_CORRECT= cat notes.txt")
}
