package worker

import (
	"encoding/json"
	"strconv"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

const (
	// maxArgumentsJSON bounds the arguments shown in context, measured as
	// the JSON encoding of the arguments string.
	maxArgumentsJSON = 2048
)

// omittedArguments replaces arguments that are not a string or too large
// in the context. The call still runs with the original arguments.
const omittedArguments = `{"omitted":"Invalid or large arguments omitted from context."}`

// modelCall is what the model sent for one call, each part with whether
// it was present as a JSON string.
type modelCall struct {
	id, name, args       string
	idOK, nameOK, argsOK bool
}

// parseModelCall reads {id, function:{name, arguments}}; anything that is
// not an object, or a member that is not a string, counts as missing.
func parseModelCall(raw json.RawMessage) modelCall {
	var w modelCallWire
	if wire.Fill(raw, &w) != nil {
		return modelCall{}
	}
	return modelCall{
		id: w.ID.Value, idOK: w.ID.Set,
		name: w.Function.Name.Value, nameOK: w.Function.Name.Set,
		args: w.Function.Arguments.Value, argsOK: w.Function.Arguments.Set,
	}
}

// modelCallWire is one tool call as the model sent it: every member
// lenient, so wire.Fill refuses only a call that is not an object.
type modelCallWire struct {
	ID       wire.OptString   `json:"id,omitempty"`
	Function callFunctionWire `json:"function,omitempty"`
}

// callFunctionWire is a call's function: its name and arguments when it
// is an object, nothing when it is anything else, null included.
type callFunctionWire struct {
	Name      wire.OptString `json:"name,omitempty"`
	Arguments wire.OptString `json:"arguments,omitempty"`
}

func (f *callFunctionWire) UnmarshalJSON(b []byte) error {
	type plain callFunctionWire
	_ = wire.Fill(b, (*plain)(f)) // an object fills; anything else leaves f empty
	return nil
}

// TakesNull makes callFunctionWire a wire.NullTaker.
func (*callFunctionWire) TakesNull() {}

// repairToolCalls normalizes the model's calls of one step so the context
// stays valid for the upstream API whatever the model sent:
//   - ids must be 1..128 UTF-16 units and unique within the turn; others
//     become call_<step>_<i>, then call_<step>_<i>_<k> (k = 1, 2, …) while
//     taken. used records every id handed out.
//   - names must be valid function names in the table (known); others
//     become invalid_tool.
//   - arguments must be a string of at most 2,048 JSON bytes; others are
//     shown as omittedArguments.
//   - type is always "function", even when the model left it out.
func repairToolCalls(calls []json.RawMessage, step int, used map[string]bool, known func(string) bool) []wire.ToolCall {
	out := make([]wire.ToolCall, len(calls))
	for i, raw := range calls {
		c := parseModelCall(raw)
		out[i] = wire.ToolCall{
			ID:       repairID(c, step, i, used),
			Type:     wire.FunctionType,
			Function: wire.FunctionCall{Name: invalidToolName, Arguments: omittedArguments},
		}
		if c.nameOK && rtsandbox.ValidFunctionName(c.name) && known(c.name) {
			out[i].Function.Name = c.name
		}
		if c.argsOK && jsonjs.StringSize(c.args) <= maxArgumentsJSON {
			out[i].Function.Arguments = c.args
		}
	}
	return out
}

func repairID(c modelCall, step, i int, used map[string]bool) string {
	id := c.id
	if !c.idOK || !rtsandbox.ValidToolCallID(id) || used[id] {
		id = "call_" + strconv.Itoa(step) + "_" + strconv.Itoa(i)
	}
	for k := 1; used[id]; k++ {
		id = "call_" + strconv.Itoa(step) + "_" + strconv.Itoa(i) + "_" + strconv.Itoa(k)
	}
	used[id] = true
	return id
}

// callInput parses the original arguments of a call; ok is false when they
// are missing, not JSON or not an object, which refuses the call.
func callInput(c modelCall) (toolInput, bool) {
	if !c.argsOK {
		return toolInput{}, false
	}
	fields, ok := object(json.RawMessage(c.args))
	if !ok {
		return toolInput{}, false
	}
	return toolInput{raw: compact(json.RawMessage(c.args)), fields: fields}, true
}
