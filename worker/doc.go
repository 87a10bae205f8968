// Package worker is the agent that runs inside the container, in two
// modes that share one agent loop (agent.go), its model clients and its
// tool table.
//
// The sealed worker (Run) reads one turn on stdin, talks to the host
// broker over a Unix socket, and prints one reply on stdout. It opens no
// file: the host owns the channel's memory and history, passes them in the
// turn and takes them back in the reply. The protocol below is its.
//
// The session worker (RunSession, `rtsandbox-worker session`) is the
// long-lived agent of one channel (docs/session.md, "Process"): it long-polls the
// broker at /run/sandbox/broker.sock for turns (wire.SessionTurn),
// posts results (wire.ResultPacket), talks to MCP servers as a
// Streamable-HTTP client through the broker, and keeps its conversation
// as JSONL under /workspace/sessions. A session turn's images, and those
// its read_attachment tool shows from /workspace/attachments, reach the
// model as image parts (one docs/protocol.md, "Where the worker finds the broker" budget per turn); host tool images and
// the files its write_file tool saves come back as reply files from
// /workspace/outbox/<turn>. It projects
// every model request for the turn's reader (sessionprivacy.go, docs/session.md, "Privacy projection") and
// compacts the conversation into a summary as it outgrows its tiers
// (sessioncompact.go, docs/limits.md, "Sealed turns"). docs/session.md, "Session worker and
// conversation format", is its
// reference.
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
//	 "mcp": [{"server": name, "tools": [same tool specs]}],
//	 "modelApi": "openai"|"anthropic" (optional; default openai),
//	 "stream": boolean (optional), "thinking": "low"|"medium"|"high"|"xhigh" (optional)}
//
// Names of host tools and MCP servers match ^[a-z][a-z0-9_]{0,47}$, MCP
// tool names ^[a-zA-Z0-9_-]{1,128}$ (each declared to the model under the
// name mcpFunctionName gives it). The turn never contains a credential or
// an upstream URL.
//
// Stdout receives exactly one JSON object, followed on success (exit code 0)
// by one newline, the end mark the host takes the reply at:
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
//	POST /anthropic/v1/messages  with "modelApi":"anthropic", instead of
//	                      /model: a Messages request; the answer is a
//	                      Messages answer, or its event stream
//
// Any status other than 200 is a refusal, except that a Messages call
// retries an upstream 429 or 529 (below). /workspace is scratch space that
// dies with the container.
//
// # Model clients
//
// The agent loop keeps its conversation in the chat-completions shape and
// reads every answer as a chat-completions message; a modelClient per API
// translates (model.go), so tools, MCP, memory, history, the repair of tool
// calls and the context budget are one code path. The OpenAI client posts
// the conversation to /model, whole, as the sealed spec says; in session
// mode images go as image_url parts of base64 data URLs in user messages,
// the only place the session /model rule admits them.
//
// The Anthropic client (anthropic.go) builds a Messages request that the
// broker's docs/protocol.md, "Model calls" rebuild (session spec) accepts as it is: a string system;
// user and assistant messages of text, base64 image, tool_use (the
// arguments object) and tool_result blocks (text, and images a tool
// showed), one user message per run of results; the thinking
// blocks of the model's last tool-calling answer, replayed unchanged; custom
// tools with input_schema; max_tokens of 4,096 plus the thinking budget of
// the turn's level (rtsandbox.ThinkingBudget), and stream when the turn
// allows it. It reads a JSON answer (at most 1 MiB) or, when the answer is
// text/event-stream, assembles the stream (anthropicstream.go) through
// brokerclient.SSEReader, bounded and strict about block order. An error
// event, a cut or malformed stream fails the turn with class model_stream.
// An upstream 529, or a 429 with retry-after or a rate_limit_error, is
// retried after its retry-after (retry.go: at most 3 retries, 20 s each, 40
// s in all, within the context's deadline); spent retries fail with class
// model_overloaded. The broker's own 429 is not retried.
package worker
