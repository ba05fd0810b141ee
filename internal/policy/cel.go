package policy

import (
	"fmt"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
)

// celCostLimit bounds the work one rule's expression may do on one call. Typical
// expressions cost tens of units; the limit stops a pathological one (nested
// comprehensions over a long argv) from stalling the controller.
const celCostLimit = 100000

// celFields is a set of the fields of intent, so that a decision builds only the
// fields its expressions read (intent.parts and intent.argv cost an allocation per
// part).
type celFields uint8

const (
	celTool celFields = 1 << iota
	celInput
	celCategories
	celParts
	celArgv
	celTask
	celNamespace
	celMode
	celAllFields = celTool | celInput | celCategories | celParts | celArgv | celTask | celNamespace | celMode
)

var celFieldNames = map[string]celFields{
	"tool": celTool, "input": celInput, "categories": celCategories, "parts": celParts,
	"argv": celArgv, "task": celTask, "namespace": celNamespace, "mode": celMode,
}

// compileCEL type-checks an expression against a ToolCall rule's environment
// (celEnvironment.toolCall), requires it to be boolean, and plans it with a runtime
// cost limit. It also says which fields of intent the expression reads.
func compileCEL(env *cel.Env, expr string) (cel.Program, celFields, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, 0, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, 0, fmt.Errorf("expression must evaluate to a bool, not %s", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(celCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, 0, err
	}
	return prg, fieldsRead(ast.NativeRep().Expr()), nil
}

// fieldsRead lists the fields of intent an expression reads. Only intent.NAME (and
// has(intent.NAME)) names a field; an expression that uses intent in any other way
// (intent["parts"], size(intent), a macro over intent's keys) reads all of them.
func fieldsRead(expr celast.Expr) celFields {
	var fields celFields
	idents, selected := 0, 0
	celast.PreOrderVisit(expr, celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.IdentKind:
			if e.AsIdent() == "intent" {
				idents++
			}
		case celast.SelectKind:
			sel := e.AsSelect()
			if op := sel.Operand(); op.Kind() == celast.IdentKind && op.AsIdent() == "intent" {
				selected++
				fields |= celFieldNames[sel.FieldName()]
			}
		}
	}))
	if idents != selected {
		return celAllFields
	}
	return fields
}

// evalCEL runs a compiled expression. A result that is not a bool is an error.
func evalCEL(prg cel.Program, activation map[string]any) (bool, error) {
	out, _, err := prg.Eval(activation)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("expression evaluated to %s, not a bool", out.Type().TypeName())
	}
	return bool(b), nil
}
