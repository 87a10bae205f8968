package modelapi

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// Image limits of docs/protocol.md, "Images and files", applied to each image block.
const (
	MaxImageBytes = 20 << 20                    // decoded bytes of one image
	maxImageChars = (MaxImageBytes + 2) / 3 * 4 // base64 characters of one image
)

var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/webp": true, "image/gif": true}

// Message content is read from the body's bytes through views
// (jsontree.Budget's Fields, Array and String), keeping nothing but what
// is rebuilt: a block's other members, however many, cost a scan, and an
// array longer than its rule's count is refused at the count, before the
// rest of it is read. A 20 MiB image is scanned once per nesting level
// (message, content, block, source) and decoded once. Only a tool_use
// input, which is re-encoded, and a non-string role quoted in a refusal
// are decoded into trees, against the budget's node count.

// The members the rules read, by index.
const (
	msgRole = iota
	msgContent
	msgClearAt
	msgOutputConfig
	msgCount
)

const (
	blkType = iota
	blkText
	blkCacheControl
	blkSource
	blkID
	blkName
	blkInput
	blkToolUseID
	blkContent
	blkIsError
	blkThinking
	blkSignature
	blkData
	blkCount
)

var (
	messageFields = [msgCount]string{msgRole: "role", msgContent: "content", msgClearAt: "clear_at",
		msgOutputConfig: "output_config"}
	blockFields = [blkCount]string{blkType: "type", blkText: "text", blkCacheControl: "cache_control",
		blkSource: "source", blkID: "id", blkName: "name", blkInput: "input", blkToolUseID: "tool_use_id",
		blkContent: "content", blkIsError: "is_error", blkThinking: "thinking", blkSignature: "signature",
		blkData: "data"}
	sourceFields = []string{"type", "data", "media_type"}
	ttlFields    = []string{"ttl"}
	effortFields = []string{"effort"}
)

func anthropicMessages(b *jsontree.Budget, raw json.RawMessage, level ThinkingLevel) ([]AnthropicMessage, error) {
	items, n, ok := b.Array(raw, MaxAnthropicMessages)
	if !ok || n > MaxAnthropicMessages {
		return nil, refuse(RefuseMessages)
	}
	msgs := make([]AnthropicMessage, 0, len(items))
	for i, item := range items {
		m, err := anthropicMessage(b, i, item, level)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func anthropicMessage(b *jsontree.Budget, i int, item json.RawMessage, level ThinkingLevel) (AnthropicMessage, error) {
	var obj [msgCount]json.RawMessage
	if kind(item) != '{' {
		return AnthropicMessage{}, refuse(RefuseMessage)
	}
	if _, _, ok := b.Fields(item, messageFields[:], obj[:]); !ok {
		return AnthropicMessage{}, refuse(RefuseMessage)
	}
	rawRole := obj[msgRole]
	role, ok := asString(b, rawRole)
	switch {
	case ok && role == "system":
		return systemMessage(b, i, obj[:], level)
	case ok && (role == "user" || role == "assistant"):
		content, err := blocks(b, obj[msgContent], true)
		return AnthropicMessage{Role: role, Content: content}, err
	}
	if !ok {
		role = jsString(b, rawRole)
	}
	// Clients match on "Unexpected role" and "input message role".
	return AnthropicMessage{}, refuse(fmt.Sprintf(`messages.%d: Unexpected role "%s": the input message role must be "user", "assistant" or "system"`, i, echo(role)))
}

// systemMessage rebuilds a mid-conversation system message: text blocks
// only (tool_addition, tool_removal and every other tag get the API's own
// wording), clear_at when valid, and a capped effort.
func systemMessage(b *jsontree.Budget, i int, obj []json.RawMessage, level ThinkingLevel) (AnthropicMessage, error) {
	m := AnthropicMessage{Role: "system", OutputConfig: cappedEffort(b, obj[msgOutputConfig], level)}
	if at, _ := asString(b, obj[msgClearAt]); at == "next_user_message" || at == "never" {
		m.ClearAt = at
	}
	content := obj[msgContent]
	switch kind(content) {
	case '"':
		s, ok := b.String(content)
		if !ok {
			break
		}
		m.Content = s
		return m, nil
	case '[':
		items, n, ok := b.Array(content, MaxAnthropicBlocks)
		if !ok || n > MaxAnthropicBlocks {
			break
		}
		out := make([]any, 0, len(items))
		for j, item := range items {
			if tag := blockTag(b, item); tag != "text" {
				return m, refuse(fmt.Sprintf("messages.%d.content.%d: Input tag '%s' found using 'type' does not match any of the expected tags: 'text'", i, j, echo(tag)))
			}
			blk, err := block(b, item, false)
			if err != nil {
				return m, err
			}
			out = append(out, blk)
		}
		m.Content = out
		return m, nil
	}
	return m, refuse(RefuseContent)
}

// blockTag is a block's type as the API's tag error names it: the type
// string, or the JavaScript typeof of a non-object or of a non-string type.
func blockTag(b *jsontree.Budget, item json.RawMessage) string {
	if kind(item) != '{' {
		return jsTypeof(item)
	}
	var typ [1]json.RawMessage
	b.Fields(item, blockFields[blkType:blkType+1], typ[:])
	if s, ok := asString(b, typ[0]); ok {
		return s
	}
	return jsTypeof(typ[0])
}

// jsTypeof is JavaScript's typeof of a JSON value, "undefined" when absent.
func jsTypeof(raw json.RawMessage) string {
	switch c := kind(raw); {
	case c == 0:
		return "undefined"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == '-' || c >= '0' && c <= '9':
		return "number"
	}
	return "object" // objects, arrays and null
}

// jsString renders a non-string role for the refusal: "undefined" when
// absent, else its JSON text as JSON.stringify writes it. A number or a
// literal is its own text, of which echo keeps the start; an object or an
// array is decoded against the budget and encoded, keys sorted.
func jsString(b *jsontree.Budget, raw json.RawMessage) string {
	switch kind(raw) {
	case 0:
		return "undefined"
	case '{', '[':
	default:
		return string(raw[:min(len(raw), maxEchoedTag+1)])
	}
	v, err := b.Decode(raw)
	if err != nil {
		return "" // the budget's refusal wins (budgetError)
	}
	out, _ := jsonjs.Marshal(v) // a decoded value always encodes
	return string(out)
}

// blocks rebuilds content: a string as it is, or an array of blocks. top
// admits the top-level-only types (tool_use, tool_result, thinking,
// redacted_thinking); nested content (system, tool_result.content) allows
// text and image only.
func blocks(b *jsontree.Budget, raw json.RawMessage, top bool) (any, error) {
	if kind(raw) == '"' {
		if s, ok := b.String(raw); ok {
			return s, nil
		}
	}
	items, n, ok := b.Array(raw, MaxAnthropicBlocks)
	if !ok || n > MaxAnthropicBlocks {
		return nil, refuse(RefuseContent)
	}
	out := make([]any, 0, len(items))
	for _, item := range items {
		blk, err := block(b, item, top)
		if err != nil {
			return nil, err
		}
		out = append(out, blk)
	}
	return out, nil
}

// block rebuilds one content block. Any other type, or a failed condition,
// refuses the request: server_tool_use, web_search_tool_result, document,
// search_result, URL and file images, container uploads and so on.
func block(b *jsontree.Budget, item json.RawMessage, top bool) (any, error) {
	var obj [blkCount]json.RawMessage
	if kind(item) != '{' {
		return nil, refuse(RefuseBlock)
	}
	if _, _, ok := b.Fields(item, blockFields[:], obj[:]); !ok {
		return nil, refuse(RefuseBlock)
	}
	typ, _ := asString(b, obj[blkType])
	var blk any
	var ok bool
	switch {
	case typ == "text":
		blk, ok = textBlock(b, obj[:])
	case typ == "image":
		blk, ok = imageBlock(b, obj[:])
	case top && typ == "tool_use":
		blk, ok = toolUseBlock(b, obj[:])
	case top && typ == "tool_result":
		return toolResultBlock(b, obj[:])
	case top && typ == "thinking":
		blk, ok = thinkingBlock(b, obj[:])
	case top && typ == "redacted_thinking":
		blk, ok = redactedThinkingBlock(b, obj[:])
	}
	if !ok {
		return nil, refuse(RefuseNativeBlock)
	}
	return blk, nil
}

func textBlock(b *jsontree.Budget, obj []json.RawMessage) (any, bool) {
	text, ok := asString(b, obj[blkText])
	return TextBlock{Type: "text", Text: text, CacheControl: cacheControl(b, obj[blkCacheControl])}, ok
}

// imageBlock admits base64 sources only; url and file sources fail.
func imageBlock(b *jsontree.Budget, obj []json.RawMessage) (any, bool) {
	var src [3]json.RawMessage
	if kind(obj[blkSource]) != '{' {
		return nil, false
	}
	if _, _, ok := b.Fields(obj[blkSource], sourceFields, src[:]); !ok {
		return nil, false
	}
	typ, _ := asString(b, src[0])
	data, okData := asString(b, src[1])
	mediaType, okType := asString(b, src[2])
	if typ != "base64" || !okData || !okType || !validImage(data, mediaType) {
		return nil, false
	}
	return ImageBlock{
		Type:         "image",
		Source:       ImageSource{Type: "base64", Data: data, MediaType: mediaType},
		CacheControl: cacheControl(b, obj[blkCacheControl]),
	}, true
}

// validImage applies docs/protocol.md, "Images and files" to one image: an allowed media type and padded
// standard base64 of 1 byte to MaxImageBytes decoded. Like the reference,
// the decoded size is counted from the length; trailing bits are not
// checked.
func validImage(data, mediaType string) bool {
	if !imageTypes[mediaType] || len(data) > maxImageChars || len(data)%4 != 0 {
		return false
	}
	body := strings.TrimRight(data, "=")
	pad := len(data) - len(body)
	if pad > 2 || strings.IndexFunc(body, notBase64) >= 0 {
		return false
	}
	size := len(data)/4*3 - pad
	return size >= 1 && size <= MaxImageBytes
}

// notBase64 reports a rune outside the standard base64 alphabet.
func notBase64(r rune) bool {
	return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '/')
}

// toolUseBlock rebuilds a tool_use block. Its input is decoded (against
// the budget) and re-encoded: numbers stay as written, keys come out
// sorted, and a repeated key keeps its last value, as JSON.parse does.
func toolUseBlock(b *jsontree.Budget, obj []json.RawMessage) (any, bool) {
	id, okID := asString(b, obj[blkID])
	name, okName := asString(b, obj[blkName])
	if !okID || !rtsandbox.ValidToolCallID(id) || !okName || !anthropicNameRE.MatchString(name) || kind(obj[blkInput]) != '{' {
		return nil, false
	}
	input, err := b.Decode(obj[blkInput])
	if err != nil {
		return nil, false
	}
	raw, err := jsonjs.Marshal(input)
	if err != nil {
		return nil, false
	}
	return ToolUseBlock{Type: "tool_use", ID: id, Name: name, Input: raw, CacheControl: cacheControl(b, obj[blkCacheControl])}, true
}

func toolResultBlock(b *jsontree.Budget, obj []json.RawMessage) (any, error) {
	id, ok := asString(b, obj[blkToolUseID])
	if !ok || !rtsandbox.ValidToolCallID(id) {
		return nil, refuse(RefuseNativeBlock)
	}
	content, err := blocks(b, obj[blkContent], false)
	if err != nil {
		return nil, err
	}
	return ToolResultBlock{
		Type: "tool_result", ToolUseID: id, Content: content,
		IsError: kind(obj[blkIsError]) == 't', CacheControl: cacheControl(b, obj[blkCacheControl]),
	}, nil
}

func thinkingBlock(b *jsontree.Budget, obj []json.RawMessage) (any, bool) {
	text, okText := asString(b, obj[blkThinking])
	sig, okSig := asString(b, obj[blkSignature])
	return ThinkingBlock{Type: "thinking", Thinking: text, Signature: sig}, okText && okSig
}

func redactedThinkingBlock(b *jsontree.Budget, obj []json.RawMessage) (any, bool) {
	data, ok := asString(b, obj[blkData])
	return RedactedThinkingBlock{Type: "redacted_thinking", Data: data}, ok
}
