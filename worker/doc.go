// Package worker is the sealed agent that runs inside the turn container: it
// reads one turn on stdin, talks to the host broker over a Unix socket, keeps
// memory and history in the workspace, and prints one reply on stdout.
//
// # Protocol
//
// The protocol is public: any operator-built image whose entry point speaks
// it works with the host.
//
// Stdin carries one JSON object of at most 262,144 bytes (extra fields are
// ignored):
//
//	{"text": string, "speaker": {"id": string, "name": string},
//	 "model": string, "prompt": string, "timeZone": string,
//	 "reset": boolean (optional),
//	 "tools": [{"name", "description", "parameters": object}],
//	 "mcp": [{"server": name, "tools": [same tool specs]}]}
//
// Names of tools and MCP servers match ^[a-z][a-z0-9_]{0,47}$. The turn
// never contains a credential or an upstream URL.
//
// Stdout receives exactly one JSON object, with no trailing newline:
// {"ok":true,"text":…} or {"ok":false,"text":…} with exit code 0 when the
// turn ran, and {"ok":false,"text":"The sandbox worker failed."} with exit
// code 1 on any failure. Failure details go to stderr only.
//
// The broker listens on the Unix socket /broker/broker.sock. Every call is an
// HTTP/1.1 POST whose only headers are Host: broker, Content-Type:
// application/json, Content-Length and Authorization: Bearer
// sandbox-dummy-key (a placeholder; the broker swaps in real credentials).
// Routes:
//
//	POST /model           chat-completions payload {model, messages, tools};
//	                      the answer is a chat-completions response
//	POST /tools/<name>    the tool's arguments object; the answer is {"text": …}
//	POST /mcp/<server>    {"method":"tools/call","params":{"name","arguments"}};
//	                      the answer is the JSON-RPC response
//
// Any status other than 200 is a refusal. The worker keeps memory.json and
// history.json in /workspace, which persists per channel across turns.
package worker
