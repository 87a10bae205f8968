package modelapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// messagesCase is one /anthropic/v1/messages body under host parameters.
// Exactly one of want (the rebuilt body) and refusal (the guest's message,
// or its start when prefix is set) is set.
type messagesCase struct {
	name      string
	level     ThinkingLevel // "" means xhigh, the spec fixture's level
	maxOutput int64
	count     bool
	body      string
	want      string
	refusal   string
	prefix    bool
}

func (c messagesCase) params() MessagesParams {
	p := MessagesParams{Model: "host-model", MaxOutputTokens: c.maxOutput, Level: c.level, CountTokens: c.count}
	if p.Level == "" {
		p.Level = LevelXHigh
	}
	return p
}

const (
	hiUser     = `{"role":"user","content":"hi"}`
	png1       = `"AQID"` // three bytes of base64
	imageBlk   = `{"type":"image","source":{"type":"base64","data":` + png1 + `,"media_type":"image/png"}}`
	customTool = `{"name":"lookup","input_schema":{"type":"object","properties":{"url":{"type":"string"}}}}`
)

// body wraps extra top-level members around one user message.
func body(extra string) string {
	if extra == "" {
		return `{"messages":[` + hiUser + `]}`
	}
	return `{"messages":[` + hiUser + `],` + extra + `}`
}

// rebuilt is the expected body for one user message plus extra members,
// with the defaults of a /v1/messages call.
func rebuilt(extra string) string {
	s := `{"model":"host-model","messages":[` + hiUser + `],"max_tokens":16384,"stream":false`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// withMessages is a body of the given messages and nothing else.
func withMessages(msgs ...string) string {
	return `{"messages":[` + strings.Join(msgs, ",") + `]}`
}

func rebuiltMessages(msgs ...string) string {
	return `{"model":"host-model","messages":[` + strings.Join(msgs, ",") + `],"max_tokens":16384,"stream":false}`
}

// One case per rebuild rule of docs/protocol.md, "Model calls", named after the rule.
var acceptedMessagesCases = []messagesCase{
	{name: "model-fixed-and-max-tokens-capped", body: `{"model":"guest-choice","max_tokens":1000000,"messages":[]}`,
		want: `{"model":"host-model","messages":[],"max_tokens":128000,"stream":false}`},
	{name: "max-tokens-default", body: body(""), want: rebuilt("")},
	{name: "max-tokens-kept-below-ceiling", body: body(`"max_tokens":8192`), want: strings.Replace(rebuilt(""), "16384", "8192", 1)},
	{name: "max-tokens-zero-uses-default", body: body(`"max_tokens":0`), want: rebuilt("")},
	{name: "max-tokens-fraction-uses-default", body: body(`"max_tokens":1.5`), want: rebuilt("")},
	{name: "max-tokens-unsafe-integer-uses-default", body: body(`"max_tokens":9007199254740993`), want: rebuilt("")},
	{name: "max-tokens-string-uses-default", body: body(`"max_tokens":"100"`), want: rebuilt("")},
	{name: "max-tokens-integral-float-kept", body: body(`"max_tokens":2048.0`), want: strings.Replace(rebuilt(""), "16384", "2048", 1)},
	{name: "max-tokens-configured-ceiling", maxOutput: 4096, body: body(`"max_tokens":8192`), want: strings.Replace(rebuilt(""), "16384", "4096", 1)},
	{name: "max-tokens-above-thinking-budget", body: body(`"max_tokens":8192,"thinking":{"type":"enabled","budget_tokens":32000}`),
		want: strings.Replace(rebuilt(`"thinking":{"type":"enabled","budget_tokens":32000}`), "16384", "32001", 1)},
	{name: "bridge-shaped-stream-call", body: body(`"stream":true,"max_tokens":64000,"thinking":{"type":"enabled","budget_tokens":32000}`),
		want: `{"model":"host-model","messages":[` + hiUser + `],"thinking":{"type":"enabled","budget_tokens":32000},"max_tokens":64000,"stream":true}`},
	{name: "stream-true-kept", body: body(`"stream":true`), want: strings.Replace(rebuilt(""), "false", "true", 1)},
	{name: "stream-string-is-false", body: body(`"stream":"true"`), want: rebuilt("")},
	{name: "sampling-fields-copied", body: body(`"temperature":0.5,"top_p":0.9,"top_k":40`), want: rebuilt(`"temperature":0.5,"top_p":0.9,"top_k":40`)},
	{name: "sampling-non-finite-or-non-number-dropped", body: body(`"temperature":1e400,"top_p":"0.9","top_k":null`), want: rebuilt("")},
	{name: "stop-sequences-copied", body: body(`"stop_sequences":["\n\nHuman:","END"]`), want: rebuilt(`"stop_sequences":["\n\nHuman:","END"]`)},
	{name: "stop-sequences-17-dropped", body: body(`"stop_sequences":` + jsonList(`"s%d"`, 17)), want: rebuilt("")},
	{name: "stop-sequence-1001-chars-dropped", body: body(`"stop_sequences":["` + strings.Repeat("s", 1001) + `"]`), want: rebuilt("")},
	{name: "stop-sequence-not-string-dropped", body: body(`"stop_sequences":["a",1]`), want: rebuilt("")},
	{name: "other-fields-dropped", body: body(`"metadata":{"user_id":"u"},"service_tier":"priority","container":"c1","mcp_servers":[{"url":"https://x"}],"context_management":{},"betas":["x"]`),
		want: rebuilt("")},
	{name: "system-string-kept", body: body(`"system":"be brief"`), want: rebuilt(`"system":"be brief"`)},
	{name: "system-text-blocks-rebuilt", body: body(`"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"},"citations":[]}]`),
		want: rebuilt(`"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]`)},
	{name: "custom-tool-kept", body: body(`"tools":[{"type":"custom","name":"lookup","description":"Look.","input_schema":{"type":"object","properties":{"url":{"type":"string"}}},"cache_control":{"type":"ephemeral"},"strict":true}]`),
		want: rebuilt(`"tools":[{"name":"lookup","input_schema":{"type":"object","properties":{"url":{"type":"string"}}},"description":"Look.","cache_control":{"type":"ephemeral"}}]`)},
	{name: "tool-empty-description-dropped", body: body(`"tools":[{"name":"f","description":"","input_schema":{}}]`), want: rebuilt(`"tools":[{"name":"f","input_schema":{}}]`)},
	{name: "tool-local-ref-kept", body: body(`"tools":[{"name":"f","input_schema":{"$ref":"#/$defs/a","$defs":{"a":{"type":"string"}}}}]`),
		want: rebuilt(`"tools":[{"name":"f","input_schema":{"$ref":"#/$defs/a","$defs":{"a":{"type":"string"}}}}]`)},
	{name: "tool-duplicate-names-kept", body: body(`"tools":[` + customTool + `,` + customTool + `]`), want: rebuilt(`"tools":[` + customTool + `,` + customTool + `]`)},
	{name: "tools-empty-kept", body: body(`"tools":[]`), want: rebuilt(`"tools":[]`)},
	{name: "tools-128", body: body(`"tools":` + jsonList(`{"name":"f%d","input_schema":{}}`, 128)), want: rebuilt(`"tools":` + jsonList(`{"name":"f%d","input_schema":{}}`, 128))},
	{name: "tool-choice-tool-with-name", body: body(`"tool_choice":{"type":"tool","name":"lookup","extra":1}`), want: rebuilt(`"tool_choice":{"type":"tool","name":"lookup"}`)},
	{name: "tool-choice-auto-name-dropped", body: body(`"tool_choice":{"type":"auto","name":"lookup"}`), want: rebuilt(`"tool_choice":{"type":"auto"}`)},
	{name: "tool-choice-disable-parallel-only-if-true", body: body(`"tool_choice":{"type":"any","disable_parallel_tool_use":true}`),
		want: rebuilt(`"tool_choice":{"type":"any","disable_parallel_tool_use":true}`)},
	{name: "tool-choice-disable-parallel-false-dropped", body: body(`"tool_choice":{"type":"none","disable_parallel_tool_use":false}`), want: rebuilt(`"tool_choice":{"type":"none"}`)},
	{name: "thinking-adaptive-kept", level: LevelHigh, body: body(`"thinking":{"type":"adaptive","display":"x"}`), want: rebuilt(`"thinking":{"type":"adaptive"}`)},
	{name: "thinking-disabled-kept", body: body(`"thinking":{"type":"disabled","budget_tokens":5000}`), want: rebuilt(`"thinking":{"type":"disabled"}`)},
	{name: "thinking-non-object-dropped", body: body(`"thinking":"enabled"`), want: rebuilt("")},
	{name: "thinking-budget-capped-at-level", level: LevelMedium, body: body(`"thinking":{"type":"enabled","budget_tokens":120000}`),
		want: rebuilt(`"thinking":{"type":"enabled","budget_tokens":8192}`)},
	{name: "thinking-budget-capped-low", level: LevelLow, body: body(`"thinking":{"type":"enabled","budget_tokens":4096}`),
		want: rebuilt(`"thinking":{"type":"enabled","budget_tokens":2048}`)},
	{name: "thinking-budget-capped-high", level: LevelHigh, body: body(`"thinking":{"type":"enabled","budget_tokens":20000}`),
		want: strings.Replace(rebuilt(`"thinking":{"type":"enabled","budget_tokens":16384}`), "16384", "16385", 1)},
	{name: "thinking-budget-minimum-kept", level: LevelLow, body: body(`"thinking":{"type":"enabled","budget_tokens":1024}`),
		want: rebuilt(`"thinking":{"type":"enabled","budget_tokens":1024}`)},
	{name: "thinking-budget-below-max-output", maxOutput: 2000, body: body(`"thinking":{"type":"enabled","budget_tokens":5000}`),
		want: strings.Replace(rebuilt(`"thinking":{"type":"enabled","budget_tokens":1999}`), "16384", "2000", 1)},
	// The reference's effort capping.
	{name: "effort-low-adaptive-max-capped", level: LevelLow, body: body(`"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}`),
		want: rebuilt(`"thinking":{"type":"adaptive"},"output_config":{"effort":"low"}`)},
	{name: "effort-medium-adaptive-xhigh-capped", level: LevelMedium, body: body(`"thinking":{"type":"adaptive"},"output_config":{"effort":"xhigh"}`),
		want: rebuilt(`"thinking":{"type":"adaptive"},"output_config":{"effort":"medium"}`)},
	{name: "effort-xhigh-adaptive-xhigh-kept", body: body(`"thinking":{"type":"adaptive"},"output_config":{"effort":"xhigh"}`),
		want: rebuilt(`"thinking":{"type":"adaptive"},"output_config":{"effort":"xhigh"}`)},
	{name: "effort-xhigh-allows-max", body: body(`"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}`),
		want: rebuilt(`"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}`)},
	{name: "effort-high-asked-low-kept", level: LevelHigh, body: body(`"output_config":{"effort":"low"}`), want: rebuilt(`"output_config":{"effort":"low"}`)},
	{name: "effort-low-adaptive-none-forced", level: LevelLow, body: body(`"thinking":{"type":"adaptive"}`),
		want: rebuilt(`"thinking":{"type":"adaptive"},"output_config":{"effort":"low"}`)},
	{name: "effort-medium-adaptive-none-forced", level: LevelMedium, body: body(`"thinking":{"type":"adaptive"},"output_config":{"effort":"extreme"}`),
		want: rebuilt(`"thinking":{"type":"adaptive"},"output_config":{"effort":"medium"}`)},
	{name: "effort-high-adaptive-none-no-output-config", level: LevelHigh, body: body(`"thinking":{"type":"adaptive"}`), want: rebuilt(`"thinking":{"type":"adaptive"}`)},
	{name: "effort-low-enabled-none-no-output-config", level: LevelLow, body: body(`"thinking":{"type":"disabled"}`), want: rebuilt(`"thinking":{"type":"disabled"}`)},
	{name: "output-config-other-fields-dropped", level: LevelHigh, body: body(`"output_config":{"effort":"medium","format":{"type":"json_schema"},"task_budget":9}`),
		want: rebuilt(`"output_config":{"effort":"medium"}`)},
	// The reference's mid-conversation system messages at level low.
	{name: "system-message-rebuilt", level: LevelLow,
		body: withMessages(hiUser, `{"role":"system","content":[{"type":"text","text":"env","cache_control":{"type":"ephemeral","ttl":"1h"}}],"clear_at":"next_user_message","output_config":{"effort":"max"},"smuggled":true}`, `{"role":"system","content":"plain"}`, hiUser),
		want: rebuiltMessages(hiUser, `{"role":"system","content":[{"type":"text","text":"env","cache_control":{"type":"ephemeral","ttl":"1h"}}],"clear_at":"next_user_message","output_config":{"effort":"low"}}`, `{"role":"system","content":"plain"}`, hiUser)},
	{name: "system-message-clear-at-never-kept", body: withMessages(`{"role":"system","content":"x","clear_at":"never"}`), want: rebuiltMessages(`{"role":"system","content":"x","clear_at":"never"}`)},
	{name: "system-message-clear-at-other-dropped", body: withMessages(`{"role":"system","content":"x","clear_at":"later"}`), want: rebuiltMessages(`{"role":"system","content":"x"}`)},
	{name: "system-message-no-effort-no-output-config", level: LevelLow, body: withMessages(`{"role":"system","content":"x","output_config":{"effort":"huge"}}`),
		want: rebuiltMessages(`{"role":"system","content":"x"}`)},
	{name: "message-fields-dropped", body: withMessages(`{"role":"user","content":"hi","name":"alice","id":"m1"}`), want: rebuiltMessages(hiUser)},
	{name: "tool-use-and-tool-result-transcript",
		body: withMessages(`{"role":"assistant","content":[{"type":"text","text":"looking"},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{ "q" : "x" },"caller":"direct"}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"found"},`+imageBlk+`],"is_error":true}]}`),
		want: rebuiltMessages(`{"role":"assistant","content":[{"type":"text","text":"looking"},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"q":"x"}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"found"},`+imageBlk+`],"is_error":true}]}`)},
	{name: "tool-result-string-content-is-error-false-dropped", body: withMessages(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok","is_error":false}]}`),
		want: rebuiltMessages(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}`)},
	{name: "thinking-blocks-kept-without-cache-control",
		body: withMessages(`{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"sig","cache_control":{"type":"ephemeral"}},{"type":"redacted_thinking","data":"enc"}]}`),
		want: rebuiltMessages(`{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"redacted_thinking","data":"enc"}]}`)},
	{name: "image-base64-kept", body: withMessages(`{"role":"user","content":[` + strings.Replace(imageBlk, `"}}`, `","extra":1},"cache_control":{"type":"ephemeral"}}`, 1) + `]}`),
		want: rebuiltMessages(`{"role":"user","content":[` + strings.Replace(imageBlk, `}}`, `},"cache_control":{"type":"ephemeral"}}`, 1) + `]}`)},
	{name: "image-each-media-type-kept", body: withMessages(`{"role":"user","content":[` + strings.Join([]string{
		strings.Replace(imageBlk, "png", "jpeg", 1), strings.Replace(imageBlk, "png", "webp", 1), strings.Replace(imageBlk, "png", "gif", 1), strings.Replace(imageBlk, png1, `"AQ=="`, 1)}, ",") + `]}`),
		want: rebuiltMessages(`{"role":"user","content":[` + strings.Join([]string{
			strings.Replace(imageBlk, "png", "jpeg", 1), strings.Replace(imageBlk, "png", "webp", 1), strings.Replace(imageBlk, "png", "gif", 1), strings.Replace(imageBlk, png1, `"AQ=="`, 1)}, ",") + `]}`)},
	{name: "cache-control-ttl-1h-only", body: withMessages(`{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"other","ttl":"5m"}},{"type":"text","text":"b","cache_control":"ephemeral"}]}`),
		want: rebuiltMessages(`{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}]}`)},
	{name: "content-256-blocks", body: withMessages(`{"role":"user","content":` + jsonList(`{"type":"text","text":"t"}`, 256) + `}`),
		want: rebuiltMessages(`{"role":"user","content":` + jsonList(`{"type":"text","text":"t"}`, 256) + `}`)},
	{name: "messages-2000", body: withMessages(strings.Split(strings.Repeat(hiUser+"\x00", 2000), "\x00")[:2000]...),
		want: rebuiltMessages(strings.Split(strings.Repeat(hiUser+"\x00", 2000), "\x00")[:2000]...)},
	{name: "count-tokens-omits-generation-fields", count: true,
		body: body(`"max_tokens":9,"stream":true,"temperature":1,"stop_sequences":["x"],"thinking":{"type":"enabled","budget_tokens":2000},"system":"s"`),
		want: `{"model":"host-model","messages":[` + hiUser + `],"system":"s","thinking":{"type":"enabled","budget_tokens":2000}}`},
}

// One case per refusal of docs/protocol.md, "Model calls", named after the rule.
var refusedMessagesCases = []messagesCase{
	{name: "messages-absent", body: `{}`, refusal: RefuseMessages},
	{name: "messages-not-array", body: `{"messages":{}}`, refusal: RefuseMessages},
	{name: "messages-2001", body: withMessages(strings.Split(strings.Repeat(hiUser+"\x00", 2001), "\x00")[:2001]...), refusal: RefuseMessages},
	{name: "message-not-object", body: `{"messages":["hi"]}`, refusal: RefuseMessage},
	{name: "message-null", body: `{"messages":[null]}`, refusal: RefuseMessage},
	{name: "role-developer", body: withMessages(hiUser, `{"role":"developer","content":"x"}`),
		refusal: `messages.1: Unexpected role "developer": the input message role must be "user", "assistant" or "system"`},
	{name: "role-absent", body: withMessages(`{"content":"x"}`),
		refusal: `messages.0: Unexpected role "undefined": the input message role must be "user", "assistant" or "system"`},
	{name: "role-long-echo-cut", body: withMessages(`{"role":"` + strings.Repeat("r", 200) + `","content":"x"}`),
		refusal: `messages.0: Unexpected role "` + strings.Repeat("r", 128) + `…": the input message role must be "user", "assistant" or "system"`},
	{name: "role-long-echo-cut-at-a-character", body: withMessages(`{"role":"r` + strings.Repeat("é", 100) + `","content":"x"}`),
		refusal: `messages.0: Unexpected role "r` + strings.Repeat("é", 63) + `…": the input message role must be "user", "assistant" or "system"`},
	{name: "content-absent", body: withMessages(`{"role":"user"}`), refusal: RefuseContent},
	{name: "content-number", body: withMessages(`{"role":"user","content":1}`), refusal: RefuseContent},
	{name: "content-257-blocks", body: withMessages(`{"role":"user","content":` + jsonList(`{"type":"text","text":"t"}`, 257) + `}`), refusal: RefuseContent},
	{name: "block-not-object", body: withMessages(`{"role":"user","content":["hi"]}`), refusal: RefuseBlock},
	{name: "system-not-string-or-array", body: body(`"system":{"type":"text","text":"x"}`), refusal: RefuseContent},
	{name: "system-tool-use-block", body: body(`"system":[{"type":"tool_use","id":"t","name":"f","input":{}}]`), refusal: RefuseNativeBlock},
	{name: "tools-not-array", body: body(`"tools":{}`), refusal: RefuseTools},
	{name: "tools-null", body: body(`"tools":null`), refusal: RefuseTools},
	{name: "tools-129", body: body(`"tools":` + jsonList(`{"name":"f%d","input_schema":{}}`, 129)), refusal: RefuseTools},
	{name: "tool-native-web-search", body: body(`"tools":[{"type":"web_search_20250305","name":"web_search"}]`), refusal: RefuseTool},
	{name: "tool-native-bash", body: body(`"tools":[{"type":"bash_20250124","name":"bash","input_schema":{}}]`), refusal: RefuseTool},
	{name: "tool-not-object", body: body(`"tools":["f"]`), refusal: RefuseTool},
	{name: "tool-name-invalid", body: body(`"tools":[{"name":"a.b","input_schema":{}}]`), refusal: RefuseTool},
	{name: "tool-name-129-chars", body: body(`"tools":[{"name":"` + strings.Repeat("f", 129) + `","input_schema":{}}]`), refusal: RefuseTool},
	{name: "tool-description-not-string", body: body(`"tools":[{"name":"f","description":null,"input_schema":{}}]`), refusal: RefuseTool},
	{name: "tool-input-schema-absent", body: body(`"tools":[{"name":"f"}]`), refusal: RefuseTool},
	{name: "tool-input-schema-boolean", body: body(`"tools":[{"name":"f","input_schema":true}]`), refusal: RefuseTool},
	{name: "tool-schema-remote-ref", body: body(`"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"$ref":"https://internal.test/schema"}}}}]`), refusal: RefuseTool},
	{name: "tool-schema-https-schema", body: body(`"tools":[{"name":"f","input_schema":{"$schema":"https://json-schema.org/draft/2020-12/schema"}}]`), refusal: RefuseTool},
	{name: "tool-choice-web-search", body: body(`"tool_choice":{"type":"web_search"}`), refusal: RefuseToolChoice},
	{name: "tool-choice-tool-without-name", body: body(`"tool_choice":{"type":"tool"}`), refusal: RefuseToolChoice},
	{name: "tool-choice-tool-name-invalid", body: body(`"tool_choice":{"type":"tool","name":"a b"}`), refusal: RefuseToolChoice},
	{name: "tool-choice-not-object", body: body(`"tool_choice":"auto"`), refusal: RefuseToolChoice},
	{name: "thinking-enabled-budget-1023", body: body(`"thinking":{"type":"enabled","budget_tokens":1023}`), refusal: RefuseThinking},
	{name: "thinking-enabled-budget-absent", body: body(`"thinking":{"type":"enabled"}`), refusal: RefuseThinking},
	{name: "thinking-enabled-budget-fraction", body: body(`"thinking":{"type":"enabled","budget_tokens":2048.5}`), refusal: RefuseThinking},
	{name: "thinking-enabled-budget-unsafe", body: body(`"thinking":{"type":"enabled","budget_tokens":1e300}`), refusal: RefuseThinking},
	{name: "thinking-type-unknown", body: body(`"thinking":{"type":"extended"}`), refusal: RefuseThinking},
	{name: "image-url-source", body: withMessages(`{"role":"user","content":[{"type":"image","source":{"type":"url","url":"http://127.0.0.1"}}]}`), refusal: RefuseNativeBlock},
	{name: "image-file-source", body: withMessages(`{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}`), refusal: RefuseNativeBlock},
	{name: "image-media-type-text", body: withMessages(`{"role":"user","content":[` + strings.Replace(imageBlk, "image/png", "text/plain", 1) + `]}`), refusal: RefuseNativeBlock},
	{name: "image-data-not-base64", body: withMessages(`{"role":"user","content":[` + strings.Replace(imageBlk, png1, `"bad%"`, 1) + `]}`), refusal: RefuseNativeBlock},
	{name: "image-data-unpadded", body: withMessages(`{"role":"user","content":[` + strings.Replace(imageBlk, png1, `"AQ"`, 1) + `]}`), refusal: RefuseNativeBlock},
	{name: "image-data-empty", body: withMessages(`{"role":"user","content":[` + strings.Replace(imageBlk, png1, `""`, 1) + `]}`), refusal: RefuseNativeBlock},
	{name: "image-over-20-mib", body: withMessages(`{"role":"user","content":[` + strings.Replace(imageBlk, png1, `"`+strings.Repeat("A", maxImageChars+4)+`"`, 1) + `]}`), refusal: RefuseNativeBlock},
	{name: "document-block", body: withMessages(`{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://x/a.pdf"}}]}`), refusal: RefuseNativeBlock},
	{name: "search-result-block", body: withMessages(`{"role":"user","content":[{"type":"search_result","source":"s","title":"t","content":[]}]}`), refusal: RefuseNativeBlock},
	{name: "container-upload-block", body: withMessages(`{"role":"user","content":[{"type":"container_upload","file_id":"f"}]}`), refusal: RefuseNativeBlock},
	{name: "server-tool-use-block", body: withMessages(`{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}]}`), refusal: RefuseNativeBlock},
	{name: "web-search-tool-result-block", body: withMessages(`{"role":"user","content":[{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}]}`), refusal: RefuseNativeBlock},
	{name: "text-block-text-not-string", body: withMessages(`{"role":"user","content":[{"type":"text","text":null}]}`), refusal: RefuseNativeBlock},
	{name: "tool-use-id-empty", body: withMessages(`{"role":"assistant","content":[{"type":"tool_use","id":"","name":"f","input":{}}]}`), refusal: RefuseNativeBlock},
	{name: "tool-use-id-129-chars", body: withMessages(`{"role":"assistant","content":[{"type":"tool_use","id":"` + strings.Repeat("i", 129) + `","name":"f","input":{}}]}`), refusal: RefuseNativeBlock},
	{name: "tool-use-name-invalid", body: withMessages(`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f/g","input":{}}]}`), refusal: RefuseNativeBlock},
	{name: "tool-use-input-not-object", body: withMessages(`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{}"}]}`), refusal: RefuseNativeBlock},
	{name: "tool-result-id-absent", body: withMessages(`{"role":"user","content":[{"type":"tool_result","content":"x"}]}`), refusal: RefuseNativeBlock},
	{name: "tool-result-content-absent", body: withMessages(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}`), refusal: RefuseContent},
	{name: "tool-result-nested-tool-use", body: withMessages(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`), refusal: RefuseNativeBlock},
	{name: "tool-result-nested-document", body: withMessages(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{}}]}]}`), refusal: RefuseNativeBlock},
	{name: "thinking-block-signature-absent", body: withMessages(`{"role":"assistant","content":[{"type":"thinking","thinking":"hm"}]}`), refusal: RefuseNativeBlock},
	{name: "redacted-thinking-data-absent", body: withMessages(`{"role":"assistant","content":[{"type":"redacted_thinking"}]}`), refusal: RefuseNativeBlock},
	{name: "system-message-tool-addition", body: withMessages(hiUser, `{"role":"system","content":[{"type":"tool_addition","tool":{"name":"x"}}]}`),
		refusal: "messages.1.content.0: Input tag 'tool_addition' found using 'type' does not match any of the expected tags: 'text'"},
	{name: "system-message-tool-removal-prefix", body: withMessages(hiUser, `{"role":"system","content":[{"type":"tool_removal"}]}`),
		refusal: "messages.1.content.0: Input tag 'tool_removal'", prefix: true},
	{name: "system-message-string-block-typeof", body: withMessages(`{"role":"system","content":[{"type":"text","text":"a"},"x"]}`),
		refusal: "messages.0.content.1: Input tag 'string' found using 'type' does not match any of the expected tags: 'text'"},
	{name: "system-message-type-absent-undefined", body: withMessages(`{"role":"system","content":[{"text":"a"}]}`),
		refusal: "messages.0.content.0: Input tag 'undefined' found using 'type' does not match any of the expected tags: 'text'"},
	{name: "system-message-image-block", body: withMessages(`{"role":"system","content":[` + imageBlk + `]}`),
		refusal: "messages.0.content.0: Input tag 'image' found using 'type' does not match any of the expected tags: 'text'"},
	{name: "system-message-content-number", body: withMessages(`{"role":"system","content":5}`), refusal: RefuseContent},
	{name: "system-message-text-not-string", body: withMessages(`{"role":"system","content":[{"type":"text","text":5}]}`), refusal: RefuseNativeBlock},
	{name: "count-tokens-refuses-the-same", count: true, body: body(`"tool_choice":{"type":"web_search"}`), refusal: RefuseToolChoice},
}

func TestNormalizeMessages(t *testing.T) {
	for _, tt := range append(acceptedMessagesCases, refusedMessagesCases...) {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeMessages(decodeBody(t, tt.body), tt.params())
			if tt.refusal != "" {
				checkRefusal(t, tt, got, err)
				return
			}
			if err != nil {
				t.Fatalf("NormalizeMessages(%s) error: %v", short(tt.body), err)
			}
			out, err := jsonjs.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(decodeAny(t, tt.want), decodeAny(t, string(out))); diff != "" {
				t.Errorf("NormalizeMessages(%s) mismatch (-want +got):\n%s", short(tt.body), diff)
			}
		})
	}
}

func checkRefusal(t *testing.T, tt messagesCase, got *MessagesRequest, err error) {
	t.Helper()
	var r *Refusal
	if got != nil || !errors.As(err, &r) || !errors.Is(err, rtsandbox.ErrRefused) {
		t.Fatalf("NormalizeMessages(%s) = %v, %v; want a *Refusal", short(tt.body), got, err)
	}
	msg := r.Message
	if tt.prefix && strings.HasPrefix(msg, tt.refusal) {
		msg = tt.refusal
	}
	if diff := cmp.Diff(tt.refusal, msg); diff != "" {
		t.Errorf("refusal message mismatch (-want +got):\n%s", diff)
	}
}

func decodeAny(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s does not decode: %v", short(s), err)
	}
	return v
}

// The refusal renders as a 400 in the Anthropic error shape (the reference's tests).
func TestRefusalRender(t *testing.T) {
	_, err := NormalizeMessages(decodeBody(t, withMessages(hiUser, `{"role":"system","content":[{"type":"tool_addition"}]}`)), MessagesParams{Model: "m", Level: LevelLow})
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("NormalizeMessages error = %v; want a *Refusal", err)
	}
	status, raw := r.Render()
	want := map[string]any{"type": "error", "error": map[string]any{
		"type":    "invalid_request_error",
		"message": "messages.1.content.0: Input tag 'tool_addition' found using 'type' does not match any of the expected tags: 'text'",
	}}
	if status != 400 {
		t.Errorf("Render status = %d; want 400", status)
	}
	if diff := cmp.Diff(any(want), decodeAny(t, string(raw))); diff != "" {
		t.Errorf("Render body mismatch (-want +got):\n%s", diff)
	}
}

// Parameters are the host's: a bad one is a setup error, never a refusal.
func TestNormalizeMessagesParams(t *testing.T) {
	tests := []struct {
		name string
		p    MessagesParams
	}{
		{"no-model", MessagesParams{Level: LevelLow}},
		{"unknown-level", MessagesParams{Model: "m", Level: "max"}},
		{"empty-level", MessagesParams{Model: "m"}},
		{"max-output-1024", MessagesParams{Model: "m", Level: LevelLow, MaxOutputTokens: 1024}},
		{"max-output-200001", MessagesParams{Model: "m", Level: LevelLow, MaxOutputTokens: 200001}},
	}
	for _, tt := range tests {
		got, err := NormalizeMessages(decodeBody(t, body("")), tt.p)
		if got != nil || !errors.Is(err, rtsandbox.ErrInvalid) || errors.Is(err, rtsandbox.ErrRefused) {
			t.Errorf("%s: NormalizeMessages = %v, %v; want an error wrapping ErrInvalid only", tt.name, got, err)
		}
	}
}

// BenchmarkNormalizeMessagesImage rebuilds a body with one 20 MiB image,
// the largest a guest may send: the content is decoded once, not once per
// nesting level.
func BenchmarkNormalizeMessagesImage(b *testing.B) {
	data := strings.Repeat("A", maxImageChars-4) + "AA=="
	raw := decodeBody(b, withMessages(`{"role":"user","content":[`+strings.Replace(imageBlk, png1, `"`+data+`"`, 1)+`]}`))
	p := MessagesParams{Model: "m", Level: LevelLow}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := NormalizeMessages(raw, p); err != nil {
			b.Fatal(err)
		}
	}
}
