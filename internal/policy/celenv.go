package policy

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// celEnvironment is what a policy's match.cel expressions are compiled against: the
// variables a ToolCall rule sees (toolCall) and those a Completion rule sees
// (completion), and with them the values the expressions compare with (the
// categories, actions and outcomes of that API version).
type celEnvironment struct {
	toolCall   *cel.Env
	completion *cel.Env
	result     *cel.Env
}

// celEnvironments holds one environment per policy apiVersion. An expression is text
// that no conversion can rewrite: a policy keeps meaning what its author wrote only
// if it is compiled against the environment of the apiVersion it was written for. A
// new API version adds its own entry, declaring whatever variables and values it
// likes; it never changes an existing one.
var celEnvironments = map[string]func() (celEnvironment, error){
	v1alpha1.GroupVersion.String(): sync.OnceValues(v1alpha1CELEnvironment),
}

// celEnvironmentFor returns the environment of a policy apiVersion, or an error
// that names the version and the versions that have one.
func celEnvironmentFor(apiVersion string) (celEnvironment, error) {
	build, ok := celEnvironments[apiVersion]
	if !ok {
		known := make([]string, 0, len(celEnvironments))
		for v := range celEnvironments {
			known = append(known, v)
		}
		slices.Sort(known)
		return celEnvironment{}, fmt.Errorf("apiVersion %q has no CEL environment, so its rules cannot be compiled; write the policy for %s", apiVersion, strings.Join(known, " or "))
	}
	return build()
}

// v1alpha1CELEnvironment declares what toolgate.dev/v1alpha1 rules see.
//
// A ToolCall rule sees one variable:
//
//	intent.tool        string             the tool name, e.g. "bash"
//	intent.input       map(string, dyn)   the normalized input
//	intent.categories  list(string)       the categories of the parts (distinct), e.g. "ReadOnly"
//	intent.parts       list(map)          each part as {"command": string, "category": string}
//	intent.argv        list(list(string)) each command part's argv
//	intent.task        string             the AgentTask's name
//	intent.namespace   string             the namespace
//	intent.mode        string             ReadOnly, Edit or Auto
//
// A Completion rule sees:
//
//	history    list(map)  the task's calls in order, each:
//	  .tool       string  the tool name
//	  .input      map     the input as proposed
//	  .category   string  the decision's category ("" when it was never decided)
//	  .action     string  the decision's action ("" when it was never decided)
//	  .outcome    string  the observation's outcome ("" while the call is open)
//	  .executed   bool    whether anything ran
//	  .exitCode   int     the tool's exit code, -1 when it did not exit
//	  .turn, .index, .position   int   turn, index in the turn, place in history
//	answer     string     the final answer's text
//	task       string     the AgentTask's name
//	namespace  string     its namespace
//
// A Result rule sees intent, as a ToolCall rule does, and:
//
//	result.outcome     string        Succeeded, Failed, TimedOut or Aborted
//	result.exitCode    int           the tool's exit code, -1 when it did not exit
//	result.output      string        the text the model would see (the summary)
//	result.fullOutput  string        the output the Execution kept, up to the task's cap
//	result.truncated   bool          whether output was cut (see the summary's notice)
//	result.files       list(string)  the workspace paths a write_file or edit_file changed
//
// and CEL's string extensions (ext.Strings: lowerAscii, indexOf, split, ...).
//
// Categories, actions, outcomes and modes are the v1alpha1 enum values (CamelCase).
func v1alpha1CELEnvironment() (celEnvironment, error) {
	toolCall, err := cel.NewEnv(cel.Variable("intent", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		return celEnvironment{}, err
	}
	completion, err := cel.NewEnv(
		cel.Variable("history", cel.ListType(cel.MapType(cel.StringType, cel.DynType))),
		cel.Variable("answer", cel.StringType),
		cel.Variable("task", cel.StringType),
		cel.Variable("namespace", cel.StringType),
	)
	if err != nil {
		return celEnvironment{}, err
	}
	// Result rules read text: they get CEL's string extensions (lowerAscii,
	// indexOf, split, ...), which the older environments do not declare.
	result, err := cel.NewEnv(
		cel.Variable("intent", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("result", cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(),
	)
	if err != nil {
		return celEnvironment{}, err
	}
	return celEnvironment{toolCall: toolCall, completion: completion, result: result}, nil
}
