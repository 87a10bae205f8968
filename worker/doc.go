// Package worker is the sealed agent that runs inside the turn container: it
// reads one turn on stdin, talks to the host broker over a Unix socket, and
// prints one reply on stdout. It opens no file: the host owns the channel's
// memory and history, passes them in the turn and takes them back in the
// reply.
//
// # Protocol
//
// The protocol is public: any operator-built image whose entry point speaks
// it works with the host.
//
// Stdin carries one JSON object of at most 2 MiB (rtsandbox.MaxTurnBytes;
// the reference's 262,144 bytes carried no state). Extra fields are ignored:
//
//	{"text": string, "speaker": {"id": string, "name": string},
//	 "model": string, "prompt": string, "timeZone": string,
//	 "reset": boolean (optional),
//	 "memory": [{"scope", "key", "text"}]  (at most 256 entries),
//	 "history": [{"role": "user"|"assistant", "content"}]  (at most 20),
//	 "tools": [{"name", "description", "parameters": object}],
//	 "mcp": [{"server": name, "tools": [same tool specs]}]}
//
// Names of tools and MCP servers match ^[a-z][a-z0-9_]{0,47}$. The turn
// never contains a credential or an upstream URL.
//
// Stdout receives exactly one JSON object, with no trailing newline:
// {"ok":true,"text":…,"state":{"memory":[…],"history":[…]}} or the same with
// "ok":false (the model-call limit) and exit code 0 when the turn ran, and
// {"ok":false,"text":"The sandbox worker failed."} with exit code 1 on any
// failure. The state is the channel's whole memory after this turn's tool
// calls and its history with this exchange added (unchanged without a final
// answer; empty after a reset). A failed turn changes nothing: memory set
// during it is not kept. Failure details go to stderr only.
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
// Any status other than 200 is a refusal. /workspace is scratch space that
// dies with the container.
package worker
