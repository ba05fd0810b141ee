// Package masktest holds the secrets toolgate's masking is tested with, for the
// tests of every package that writes text a person or a model reads: gitleaks' own
// true positives, read from the rule sources in its module, and fake secrets in
// the shapes toolgate's own patterns know. Only tests import it.
package masktest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/zricethezav/gitleaks/v8/cmd/generate/config/utils"
	"github.com/zricethezav/gitleaks/v8/cmd/generate/secrets"
)

// Fixture is a true positive of one of gitleaks' rules, as the rule's own source
// validates it.
type Fixture struct {
	// Rule is the gitleaks rule ID.
	Rule string
	// Text is the text the rule must find a secret in.
	Text string
}

// GitleaksFixtures reads gitleaks' true positives from the rule sources in the
// module (cmd/generate/config/rules): each rule's function builds a list of texts
// it must find (tps) and passes it to utils.Validate. The lists are built from
// literals and gitleaks' own generators (secrets.NewSecret, GenerateSampleSecrets,
// …), which this evaluates by calling them; a list it cannot evaluate is reported.
//
// It returns the fixtures, and the functions whose lists it could not evaluate.
func GitleaksFixtures() (fixtures []Fixture, skipped []string, err error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/zricethezav/gitleaks/v8").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("finding gitleaks' module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "cmd", "generate", "config", "rules")
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		return nil, nil, fmt.Errorf("no rule sources in %s: %v", dir, err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("parsing %s: %w", file, err)
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
							fixtures = append(fixtures, Fixture{Rule: rule, Text: tp})
						}
					}
				}
				return true
			})
		}
	}
	return fixtures, skipped, nil
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

// InRules returns the fixtures of the given rules (mask.Rules(): gitleaks keeps
// some rules in its sources that its default configuration leaves out).
func InRules(fixtures []Fixture, rules []string) []Fixture {
	in := map[string]bool{}
	for _, r := range rules {
		in[r] = true
	}
	var out []Fixture
	for _, f := range fixtures {
		if in[f.Rule] {
			out = append(out, f)
		}
	}
	return out
}

// ToolgateCases are the secrets of toolgate's own mask tests from before gitleaks
// (internal/mask TestSecrets and TestSecretsExact), in the shapes only toolgate's
// own patterns know or knew first.
var ToolgateCases = []Fixture{
	{Rule: "toolgate", Text: "curl -H 'Authorization: Bearer abcdefghijklmnop' https://x"},
	{Rule: "toolgate", Text: "sent bearer abcdefghijkl123 to server"},
	{Rule: "toolgate", Text: "GET https://api.example.com/v1?access_token=s3cr3tvalue&page=2"},
	{Rule: "toolgate", Text: "https://bucket.example.com/o?X-Amz-Signature=deadbeefcafe&X-Amz-Date=1"},
	{Rule: "toolgate", Text: "export GITHUB_TOKEN=abc123def456 && make"},
	{Rule: "toolgate", Text: `{"user":"bob","password":"hunter22"}`},
	{Rule: "toolgate", Text: "tool --api-key zzzzyyyyxxxx run"},
	{Rule: "toolgate", Text: "key is sk-proj-ABCDEFGH12345678"},
	{Rule: "toolgate", Text: "Incorrect API key provided: sk-proj-************xyz1."},
	{Rule: "toolgate", Text: "AKIAABCDEFGHIJKLMNOP in config"},
	{Rule: "toolgate", Text: "ghp_0123456789abcdefghijABCDEFGHIJ"},
	{Rule: "toolgate", Text: "git clone https://bob:pa55word@git.example.com/r.git"},
	{Rule: "toolgate", Text: "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"},
	{Rule: "toolgate", Text: "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.SflKxwRJSMeKKF2QT4fw"},
	{Rule: "toolgate", Text: "GET /v1?api_key=AAA&access_token=BBB"},
	{Rule: "toolgate", Text: `{"apiKey": "hunter22"}`},
	{Rule: "toolgate", Text: "x-api-key: abcdef"},
}

// Corpus is what the tests of the packages that write records mask: every nth of
// gitleaks' true positives of the given rules (mask.Rules()), in every rule's
// several syntaxes, and ToolgateCases. internal/mask masks all of them; a record's
// test is of its own path.
func Corpus(rules []string, nth int) ([]Fixture, error) {
	all, _, err := GitleaksFixtures()
	if err != nil {
		return nil, err
	}
	var corpus []Fixture
	for i, f := range InRules(all, rules) {
		if i%nth == 0 {
			corpus = append(corpus, f)
		}
	}
	if len(corpus) < 1000/nth {
		return nil, fmt.Errorf("the corpus has %d secrets; gitleaks' fixtures did not load", len(corpus))
	}
	return append(corpus, ToolgateCases...), nil
}
