package policy

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// celCostLimit bounds the work one rule's expression may do on one call. Typical
// expressions cost tens of units; the limit stops a pathological one (nested
// comprehensions over a long argv) from stalling the controller.
const celCostLimit = 100000

// celEnv declares the single variable rules see:
//
//	intent.tool        string             the tool name, e.g. "bash"
//	intent.input       map(string, dyn)   the normalized input
//	intent.categories  list(string)       the categories of the parts (distinct)
//	intent.parts       list(map)          each part as {"command": string, "category": string}
//	intent.argv        list(list(string)) each command part's argv
//	intent.task        string             the AgentTask's name
//	intent.namespace   string             the namespace
//	intent.mode        string             ReadOnly, Edit or Auto
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("intent", cel.MapType(cel.StringType, cel.DynType)))
})

// compileCEL type-checks an expression, requires it to be boolean, and plans it with
// a runtime cost limit.
func compileCEL(expr string) (cel.Program, error) {
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("expression must evaluate to a bool, not %s", ast.OutputType())
	}
	return env.Program(ast, cel.CostLimit(celCostLimit), cel.EvalOptions(cel.OptOptimize))
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
