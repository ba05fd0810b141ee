package argocd

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Health statuses a health script may return; they are Argo CD's.
const (
	HealthHealthy     = "Healthy"
	HealthProgressing = "Progressing"
	HealthSuspended   = "Suspended"
	HealthDegraded    = "Degraded"
	HealthMissing     = "Missing"
	HealthUnknown     = "Unknown"
)

// scriptTimeout is the limit Argo CD puts on one script run.
const scriptTimeout = time.Second

// HealthStatus is what a health script returns.
type HealthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// Action is one action a discovery script offers.
type Action struct {
	Name        string `json:"-"`
	Disabled    bool   `json:"disabled,omitempty"`
	IconClass   string `json:"iconClass,omitempty"`
	DisplayName string `json:"displayName,omitempty"`
}

// Health runs a health script on obj (an object as unstructured JSON).
func Health(script string, obj map[string]any) (HealthStatus, error) {
	out, err := runScript(script, obj)
	if err != nil {
		return HealthStatus{}, err
	}
	var hs HealthStatus
	if err := reencode(out, &hs); err != nil {
		return HealthStatus{}, fmt.Errorf("health script returned %v: %w", out, err)
	}
	switch hs.Status {
	case HealthHealthy, HealthProgressing, HealthSuspended, HealthDegraded, HealthMissing, HealthUnknown:
		return hs, nil
	}
	// Argo CD turns an invalid status into Unknown; a test wants to hear about it.
	return hs, fmt.Errorf("health script returned status %q, which Argo CD does not know", hs.Status)
}

// DiscoverActions runs an action discovery script on obj and returns the offered
// actions sorted by name.
func DiscoverActions(script string, obj map[string]any) ([]Action, error) {
	out, err := runScript(script, obj)
	if err != nil {
		return nil, err
	}
	if list, ok := out.([]any); ok && len(list) == 0 {
		return nil, nil // an empty Lua table: no actions
	}
	byName, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("discovery script must return a table of actions by name, got %v", out)
	}
	var actions []Action
	for name, v := range byName {
		a := Action{Name: name}
		if _, empty := v.([]any); !empty {
			if err := reencode(v, &a); err != nil {
				return nil, fmt.Errorf("action %q: %w", name, err)
			}
		}
		actions = append(actions, a)
	}
	sort.Slice(actions, func(i, j int) bool { return actions[i].Name < actions[j].Name })
	return actions, nil
}

// RunAction runs an action script on obj and returns the object it returns, with
// empty tables that stood for objects in obj put back as objects (Argo CD does the
// same before it patches the live object with the difference).
func RunAction(script string, obj map[string]any) (map[string]any, error) {
	out, err := runScript(script, obj)
	if err != nil {
		return nil, err
	}
	changed, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("action script must return the changed object, got %v", out)
	}
	return restoreEmptyObjects(changed, obj), nil
}

// runScript executes script with obj as the global obj and returns its result as JSON
// values.
func runScript(script string, obj map[string]any) (any, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return nil, fmt.Errorf("opening Lua library %s: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return nil, err
	}
	ret := l.Get(-1)
	if ret.Type() != lua.LTTable {
		return nil, fmt.Errorf("script must return a table, returned a %s", ret.Type())
	}
	return fromLua(ret)
}

// toLua converts a JSON value to Lua as Argo CD does (numbers become Lua numbers).
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetH(lua.LString(k), toLua(l, item))
		}
		return t
	}
	return lua.LNil
}

// fromLua converts a Lua value to JSON values the way Argo CD's JSON encoding does:
// a table whose keys are 1..n is an array, one with string keys an object, an empty
// table an empty array; mixed or sparse tables are errors.
func fromLua(v lua.LValue) (any, error) {
	switch v := v.(type) {
	case lua.LBool:
		return bool(v), nil
	case lua.LString:
		return string(v), nil
	case lua.LNumber:
		return float64(v), nil
	case *lua.LNilType:
		return nil, nil
	case *lua.LTable:
		key, _ := v.Next(lua.LNil)
		switch key.Type() {
		case lua.LTNil:
			return []any{}, nil
		case lua.LTNumber:
			var arr []any
			expected := lua.LNumber(1)
			for k, item := v.Next(lua.LNil); k != lua.LNil; k, item = v.Next(k) {
				if k != expected {
					return nil, fmt.Errorf("table mixes array and object keys or is sparse (key %v)", k)
				}
				x, err := fromLua(item)
				if err != nil {
					return nil, err
				}
				arr = append(arr, x)
				expected++
			}
			return arr, nil
		case lua.LTString:
			out := map[string]any{}
			for k, item := v.Next(lua.LNil); k != lua.LNil; k, item = v.Next(k) {
				s, ok := k.(lua.LString)
				if !ok {
					return nil, fmt.Errorf("table mixes object and array keys (key %v)", k)
				}
				x, err := fromLua(item)
				if err != nil {
					return nil, err
				}
				out[string(s)] = x
			}
			return out, nil
		}
		return nil, fmt.Errorf("table key of type %s cannot be converted to JSON", key.Type())
	}
	return nil, fmt.Errorf("a Lua value of type %s cannot be converted to JSON", v.Type())
}

// restoreEmptyObjects puts back objects of orig that came out of Lua as empty arrays.
func restoreEmptyObjects(changed, orig map[string]any) map[string]any {
	for k, newV := range changed {
		switch nv := newV.(type) {
		case map[string]any:
			if ov, ok := orig[k].(map[string]any); ok {
				changed[k] = restoreEmptyObjects(nv, ov)
			}
		case []any:
			if ov, ok := orig[k].(map[string]any); ok && len(nv) == 0 {
				changed[k] = ov
			}
		}
	}
	return changed
}

// reencode converts JSON values into out through JSON.
func reencode(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
