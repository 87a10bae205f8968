package modelapi

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// Image limits of session spec §4.2, applied to each image block.
const (
	MaxImageBytes = 20 << 20                    // decoded bytes of one image
	maxImageChars = (MaxImageBytes + 2) / 3 * 4 // base64 characters of one image
)

var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/webp": true, "image/gif": true}

// tree decodes one raw JSON value in a single pass into maps, slices,
// strings, json.Number, bools and nil (jsontree: the tree encoding/json
// builds with UseNumber). Content is decoded this way, once, rather than
// level by level as raw JSON: a message holding a 20 MiB image is then
// scanned once, not once per nesting level. ok is false for an absent
// (empty) or invalid value.
func tree(raw json.RawMessage) (v any, ok bool) {
	if len(raw) == 0 {
		return nil, false
	}
	v, err := jsontree.Decode(raw)
	return v, err == nil
}

func anthropicMessages(raw json.RawMessage, level ThinkingLevel) ([]AnthropicMessage, error) {
	v, _ := tree(raw)
	items, ok := v.([]any)
	if !ok || len(items) > MaxAnthropicMessages {
		return nil, refuse(RefuseMessages)
	}
	msgs := make([]AnthropicMessage, 0, len(items))
	for i, item := range items {
		m, err := anthropicMessage(i, item, level)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func anthropicMessage(i int, item any, level ThinkingLevel) (AnthropicMessage, error) {
	obj, ok := item.(map[string]any)
	if !ok {
		return AnthropicMessage{}, refuse(RefuseMessage)
	}
	rawRole, present := obj["role"]
	role, ok := rawRole.(string)
	switch {
	case ok && role == "system":
		return systemMessage(i, obj, level)
	case ok && (role == "user" || role == "assistant"):
		content, err := blocks(obj["content"], true)
		return AnthropicMessage{Role: role, Content: content}, err
	}
	if !ok {
		role = jsString(rawRole, present)
	}
	// Clients match on "Unexpected role" and "input message role".
	return AnthropicMessage{}, refuse(fmt.Sprintf(`messages.%d: Unexpected role "%s": the input message role must be "user", "assistant" or "system"`, i, echo(role)))
}

// systemMessage rebuilds a mid-conversation system message: text blocks
// only (tool_addition, tool_removal and every other tag get the API's own
// wording), clear_at when valid, and a capped effort.
func systemMessage(i int, obj map[string]any, level ThinkingLevel) (AnthropicMessage, error) {
	m := AnthropicMessage{Role: "system", OutputConfig: cappedEffort(obj["output_config"], level)}
	if at, _ := obj["clear_at"].(string); at == "next_user_message" || at == "never" {
		m.ClearAt = at
	}
	switch content := obj["content"].(type) {
	case string:
		m.Content = content
		return m, nil
	case []any:
		if len(content) > MaxAnthropicBlocks {
			break
		}
		out := make([]any, 0, len(content))
		for j, item := range content {
			if tag := blockTag(item); tag != "text" {
				return m, refuse(fmt.Sprintf("messages.%d.content.%d: Input tag '%s' found using 'type' does not match any of the expected tags: 'text'", i, j, echo(tag)))
			}
			b, err := block(item, false)
			if err != nil {
				return m, err
			}
			out = append(out, b)
		}
		m.Content = out
		return m, nil
	}
	return m, refuse(RefuseContent)
}

// blockTag is a block's type as the API's tag error names it: the type
// string, or the JavaScript typeof of a non-object or of a non-string type.
func blockTag(item any) string {
	obj, ok := item.(map[string]any)
	if !ok {
		return jsTypeof(item, true)
	}
	typ, present := obj["type"]
	if s, ok := typ.(string); ok {
		return s
	}
	return jsTypeof(typ, present)
}

// jsTypeof is JavaScript's typeof of a decoded JSON value.
func jsTypeof(v any, present bool) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	}
	if !present {
		return "undefined"
	}
	return "object" // objects, arrays and null
}

// jsString renders a non-string role for the refusal: "undefined" when
// absent, else its JSON text.
func jsString(v any, present bool) string {
	if !present {
		return "undefined"
	}
	b, _ := jsonjs.Marshal(v) // a decoded value always encodes
	return string(b)
}

// blocks rebuilds content: a string as it is, or an array of blocks. top
// admits the top-level-only types (tool_use, tool_result, thinking,
// redacted_thinking); nested content (system, tool_result.content) allows
// text and image only.
func blocks(v any, top bool) (any, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	items, ok := v.([]any)
	if !ok || len(items) > MaxAnthropicBlocks {
		return nil, refuse(RefuseContent)
	}
	out := make([]any, 0, len(items))
	for _, item := range items {
		b, err := block(item, top)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// block rebuilds one content block. Any other type, or a failed condition,
// refuses the request: server_tool_use, web_search_tool_result, document,
// search_result, URL and file images, container uploads and so on.
func block(item any, top bool) (any, error) {
	obj, ok := item.(map[string]any)
	if !ok {
		return nil, refuse(RefuseBlock)
	}
	typ, _ := obj["type"].(string)
	var b any
	switch {
	case typ == "text":
		b, ok = textBlock(obj)
	case typ == "image":
		b, ok = imageBlock(obj)
	case top && typ == "tool_use":
		b, ok = toolUseBlock(obj)
	case top && typ == "tool_result":
		return toolResultBlock(obj)
	case top && typ == "thinking":
		b, ok = thinkingBlock(obj)
	case top && typ == "redacted_thinking":
		b, ok = redactedThinkingBlock(obj)
	default:
		ok = false
	}
	if !ok {
		return nil, refuse(RefuseNativeBlock)
	}
	return b, nil
}

func textBlock(obj map[string]any) (any, bool) {
	text, ok := obj["text"].(string)
	return TextBlock{Type: "text", Text: text, CacheControl: cacheControl(obj["cache_control"])}, ok
}

// imageBlock admits base64 sources only; url and file sources fail.
func imageBlock(obj map[string]any) (any, bool) {
	src, ok := obj["source"].(map[string]any)
	if !ok {
		return nil, false
	}
	typ, _ := src["type"].(string)
	data, okData := src["data"].(string)
	mediaType, okType := src["media_type"].(string)
	if typ != "base64" || !okData || !okType || !validImage(data, mediaType) {
		return nil, false
	}
	return ImageBlock{
		Type:         "image",
		Source:       ImageSource{Type: "base64", Data: data, MediaType: mediaType},
		CacheControl: cacheControl(obj["cache_control"]),
	}, true
}

// validImage applies §4.2 to one image: an allowed media type and padded
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

// toolUseBlock rebuilds a tool_use block. Its input is re-encoded from the
// decoded object: numbers stay as written, keys come out sorted, and a
// repeated key keeps its last value, as JSON.parse does.
func toolUseBlock(obj map[string]any) (any, bool) {
	id, okID := obj["id"].(string)
	name, okName := obj["name"].(string)
	input, okInput := obj["input"].(map[string]any)
	if !okID || !rtsandbox.ValidToolCallID(id) || !okName || !anthropicNameRE.MatchString(name) || !okInput {
		return nil, false
	}
	raw, err := jsonjs.Marshal(input)
	if err != nil {
		return nil, false
	}
	return ToolUseBlock{Type: "tool_use", ID: id, Name: name, Input: raw, CacheControl: cacheControl(obj["cache_control"])}, true
}

func toolResultBlock(obj map[string]any) (any, error) {
	id, ok := obj["tool_use_id"].(string)
	if !ok || !rtsandbox.ValidToolCallID(id) {
		return nil, refuse(RefuseNativeBlock)
	}
	content, err := blocks(obj["content"], false)
	if err != nil {
		return nil, err
	}
	isError, _ := obj["is_error"].(bool)
	return ToolResultBlock{
		Type: "tool_result", ToolUseID: id, Content: content,
		IsError: isError, CacheControl: cacheControl(obj["cache_control"]),
	}, nil
}

func thinkingBlock(obj map[string]any) (any, bool) {
	text, okText := obj["thinking"].(string)
	sig, okSig := obj["signature"].(string)
	return ThinkingBlock{Type: "thinking", Thinking: text, Signature: sig}, okText && okSig
}

func redactedThinkingBlock(obj map[string]any) (any, bool) {
	data, ok := obj["data"].(string)
	return RedactedThinkingBlock{Type: "redacted_thinking", Data: data}, ok
}
