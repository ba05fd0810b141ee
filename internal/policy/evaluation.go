package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// arithmetic accepts expressions of literal numbers only: bash evaluates a variable's
// value inside arithmetic as an expression, and an array subscript in that value runs
// command substitutions (x='a[$(rm -rf .)]'; echo $((x))).
func (c *classifier) arithmetic(x syntax.ArithmExpr, where string) {
	literal := true
	syntax.Walk(x, func(n syntax.Node) bool {
		if w, ok := n.(*syntax.Word); ok {
			if !arithmeticLiteral(w) {
				literal = false
			}
			return false
		}
		return true
	})
	if !literal {
		c.note(where+" "+source(x), v1alpha1.CategoryUnknown, "arithmetic over anything but literal numbers can run command substitutions held in variables")
	}
}

// arithmeticLiteral accepts a literal number, or one of the special parameters that
// always hold a number ($#, $?, $$, $!).
func arithmeticLiteral(w *syntax.Word) bool {
	if isNumber(w.Lit()) {
		return true
	}
	if len(w.Parts) != 1 {
		return false
	}
	p, ok := w.Parts[0].(*syntax.ParamExp)
	return ok && p.Param != nil && p.Index == nil && p.Exp == nil && p.Slice == nil && p.Repl == nil && !p.Excl && !p.Length &&
		(p.Param.Value == "#" || p.Param.Value == "?" || p.Param.Value == "$" || p.Param.Value == "!")
}

// isNumber accepts bash integer literals: 42, 0x1f, 017, 2#101.
func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEFxX#", r) {
			return false
		}
	}
	return s[0] >= '0' && s[0] <= '9'
}

// parameter checks a parameter expansion: indirection (${!x}), prompt expansion
// (${x@P}) and subscripts or offsets that are not literal all evaluate what the
// variable holds.
func (c *classifier) parameter(p *syntax.ParamExp) {
	c.expansionWords(p)
	switch {
	case p.Excl && p.Names == 0:
		c.note(source(p), v1alpha1.CategoryUnknown, "indirect expansion evaluates the name a variable holds, subscripts included")
	case p.Exp != nil && p.Exp.Op == syntax.OtherParamOps && p.Exp.Word != nil && p.Exp.Word.Lit() == "P":
		c.note(source(p), v1alpha1.CategoryUnknown, "${x@P} expands a prompt string, which runs command substitutions")
	}
	if p.Exp != nil && (p.Exp.Op == syntax.AssignUnset || p.Exp.Op == syntax.AssignUnsetOrNull) && p.Param != nil {
		// ${NAME:=value} assigns NAME.
		c.binds(p.Param.Value, false)
	}
	if p.Index != nil {
		if w, ok := p.Index.(*syntax.Word); !ok || (w.Lit() != "@" && w.Lit() != "*" && !isNumber(w.Lit())) {
			c.arithmetic(p.Index, "${"+paramName(p)+"[...]}")
		}
	}
	if p.Slice != nil {
		for _, x := range []syntax.ArithmExpr{p.Slice.Offset, p.Slice.Length} {
			if x != nil {
				c.arithmetic(x, "${"+paramName(p)+":...}")
			}
		}
	}
}

func paramName(p *syntax.ParamExp) string {
	if p.Param != nil {
		return p.Param.Value
	}
	return "?"
}

// test checks a [[ ]] expression: -v and -R evaluate subscripts, and the arithmetic
// comparisons evaluate both sides as arithmetic.
func (c *classifier) test(clause *syntax.TestClause) {
	syntax.Walk(clause.X, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.UnaryTest:
			if n.Op == syntax.TsVarSet || n.Op == syntax.TsRefVar {
				c.note(source(clause), v1alpha1.CategoryUnknown, "[[ -v ]] evaluates the subscript of the name it tests")
			}
		case *syntax.BinaryTest:
			switch n.Op {
			case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
				for _, side := range []syntax.TestExpr{n.X, n.Y} {
					if w, ok := side.(*syntax.Word); !ok || !arithmeticLiteral(w) {
						c.note(source(clause), v1alpha1.CategoryUnknown, "an arithmetic comparison in [[ ]] evaluates its sides as arithmetic")
						break
					}
				}
			}
		}
		return true
	})
}
