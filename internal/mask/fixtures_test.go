package mask

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zricethezav/gitleaks/v8/cmd/generate/config/utils"
	"github.com/zricethezav/gitleaks/v8/cmd/generate/secrets"
)

// fixture is a true positive of one of gitleaks' rules, as the rule's own source
// validates it.
type fixture struct {
	rule, text string
}

// gitleaksFixtures reads gitleaks' true positives from the rule sources in the
// module (cmd/generate/config/rules): each rule's function builds a list of texts
// it must find (tps) and passes it to utils.Validate. The lists are built from
// literals and gitleaks' own generators (secrets.NewSecret, GenerateSampleSecrets,
// …), which this evaluates by calling them; a list it cannot evaluate is reported.
func gitleaksFixtures(t *testing.T) []fixture {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/zricethezav/gitleaks/v8").Output()
	if err != nil {
		t.Fatalf("finding gitleaks' module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "cmd", "generate", "config", "rules")
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule sources in %s: %v", dir, err)
	}
	var fixtures []fixture
	var skipped []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatalf("parsing %s: %v", file, err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			e := &evaluator{vars: map[string]any{}}
			rule := ""
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == "RuleID" {
						if v, ok := e.eval(n.Value).(string); ok && rule == "" {
							rule = v
						}
					}
				case *ast.AssignStmt:
					if len(n.Lhs) == 1 && len(n.Rhs) == 1 {
						if id, ok := n.Lhs[0].(*ast.Ident); ok {
							e.vars[id.Name] = e.eval(n.Rhs[0])
						}
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Validate" && len(n.Args) == 3 {
						tps, ok := e.eval(n.Args[1]).([]string)
						if !ok {
							skipped = append(skipped, fn.Name.Name)
							return false
						}
						for _, tp := range tps {
							fixtures = append(fixtures, fixture{rule: rule, text: tp})
						}
					}
				}
				return true
			})
		}
	}
	if len(skipped) > 0 {
		t.Logf("rules whose true positives are not plain lists, left out: %v", skipped)
	}
	return fixtures
}

// evaluator evaluates the expressions gitleaks' rule sources build true positives
// with; anything else evaluates to nil.
type evaluator struct {
	vars map[string]any
}

func (e *evaluator) eval(x ast.Expr) any {
	switch x := x.(type) {
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			s, err := strconv.Unquote(x.Value)
			if err == nil {
				return s
			}
		}
	case *ast.ParenExpr:
		return e.eval(x.X)
	case *ast.Ident:
		return e.vars[x.Name]
	case *ast.BinaryExpr:
		l, lok := e.eval(x.X).(string)
		r, rok := e.eval(x.Y).(string)
		if x.Op == token.ADD && lok && rok {
			return l + r
		}
	case *ast.CompositeLit:
		var list []string
		for _, elt := range x.Elts {
			s, ok := e.eval(elt).(string)
			if !ok {
				return nil
			}
			list = append(list, s)
		}
		return list
	case *ast.CallExpr:
		return e.call(x)
	}
	return nil
}

func (e *evaluator) call(x *ast.CallExpr) any {
	args := make([]any, len(x.Args))
	for i, a := range x.Args {
		args[i] = e.eval(a)
		if args[i] == nil {
			return nil
		}
	}
	str := func(i int) string { s, _ := args[i].(string); return s }
	if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "append" && len(args) >= 1 {
		list, ok := args[0].([]string)
		if !ok && args[0] != nil {
			return nil
		}
		for _, a := range args[1:] {
			switch a := a.(type) {
			case string:
				list = append(list, a)
			case []string:
				list = append(list, a...)
			}
		}
		return list
	}
	sel, ok := x.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil
	}
	pkg, _ := sel.X.(*ast.Ident)
	if pkg == nil {
		return nil
	}
	switch pkg.Name + "." + sel.Sel.Name {
	case "secrets.NewSecret":
		return secrets.NewSecret(str(0))
	case "utils.GenerateSampleSecrets":
		return utils.GenerateSampleSecrets(str(0), str(1))
	case "utils.GenerateSampleSecret":
		return utils.GenerateSampleSecret(str(0), str(1))
	case "utils.AlphaNumeric":
		return utils.AlphaNumeric(str(0))
	case "utils.AlphaNumericExtended":
		return utils.AlphaNumericExtended(str(0))
	case "utils.AlphaNumericExtendedShort":
		return utils.AlphaNumericExtendedShort(str(0))
	case "utils.AlphaNumericExtendedLong":
		return utils.AlphaNumericExtendedLong(str(0))
	case "utils.Hex":
		return utils.Hex(str(0))
	case "utils.Numeric":
		return utils.Numeric(str(0))
	case "utils.Hex8_4_4_4_12":
		return utils.Hex8_4_4_4_12()
	case "fmt.Sprintf":
		return fmt.Sprintf(str(0), args[1:]...)
	}
	return nil
}

// TestGitleaksFixturesAreMasked: every true positive gitleaks' own rules are
// validated with is masked by Secrets, and what is left holds nothing gitleaks
// finds.
func TestGitleaksFixturesAreMasked(t *testing.T) {
	d := gitleaks()
	if d == nil {
		t.Fatal("gitleaks' default configuration did not load")
	}
	var fixtures []fixture
	rules := map[string]bool{}
	notDefault := map[string]bool{}
	for _, f := range gitleaksFixtures(t) {
		if _, ok := d.lines.Config.Rules[f.rule]; !ok {
			if _, ok := d.whole.Config.Rules[f.rule]; !ok {
				// A rule gitleaks keeps in its sources but not in its
				// default configuration.
				notDefault[f.rule] = true
				continue
			}
		}
		fixtures = append(fixtures, f)
		rules[f.rule] = true
	}
	if len(notDefault) > 0 {
		t.Logf("rules not in gitleaks' default configuration, left out: %v", notDefault)
	}
	if len(rules) < 150 {
		t.Fatalf("read true positives of %d rules only; gitleaks' sources changed shape?", len(rules))
	}
	t.Logf("%d true positives of %d rules", len(fixtures), len(rules))
	missed := map[string]int{}
	for _, f := range fixtures {
		out, found := Find(f.text)
		if !strings.Contains(out, Masked) || len(found) == 0 {
			missed[f.rule]++
			if missed[f.rule] == 1 {
				t.Errorf("%s: nothing masked in %q", f.rule, f.text)
			}
			continue
		}
		if left := detectSecrets(out); len(left) > 0 {
			t.Errorf("%s: %q masked as %q still holds %s", f.rule, f.text, out, out[left[0].start:left[0].end])
		}
	}
	if len(missed) > 0 {
		t.Errorf("rules with true positives left unmasked (count): %v", missed)
	}
}
