package fakemodel

// Step decides one reply from the request it answers.
type Step struct {
	respond func(Request) Response
}

// Func is a step computed by f.
func Func(f func(req Request) Response) Step { return Step{respond: f} }

// Reply answers a final assistant message with text.
func Reply(text string) Step {
	return Func(func(Request) Response { return Response{Content: text} })
}

// CallTools answers an assistant message that calls tools, in order.
// Build calls with Call; ids left empty are filled in by the server.
func CallTools(calls ...ToolCall) Step {
	return Func(func(Request) Response { return Response{ToolCalls: calls} })
}

// Status answers an error status with an error body in the request's
// dialect: {"error":{"message","type":"fakemodel"}} for chat completions,
// {"type":"error","error":{"type","message"}} for Messages, with the API's
// error type for the status (overloaded_error for 529, …).
func Status(code int) Step {
	return Func(func(req Request) Response {
		if req.IsAnthropic() {
			return Response{Status: code, Raw: anthropicError(code, "scripted failure")}
		}
		return Response{Status: code, Raw: []byte(`{"error":{"message":"scripted failure","type":"fakemodel"}}`)}
	})
}
