package modelapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// Image limits of session spec §4.2, applied to each image block.
const (
	MaxImageBytes = 20 << 20                    // decoded bytes of one image
	maxImageChars = (MaxImageBytes + 2) / 3 * 4 // base64 characters of one image
)

var (
	imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/webp": true, "image/gif": true}
	// base64RE is the standard, padded alphabet; the length checks are
	// separate so that the regexp never sees more than maxImageChars.
	base64RE = regexp.MustCompile(`^[A-Za-z0-9+/]*={0,2}$`)
)

func anthropicMessages(raw json.RawMessage, level ThinkingLevel) ([]AnthropicMessage, error) {
	items, ok := asArray(raw)
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

func anthropicMessage(i int, raw json.RawMessage, level ThinkingLevel) (AnthropicMessage, error) {
	obj, ok := asObject(raw)
	if !ok {
		return AnthropicMessage{}, refuse(RefuseMessage)
	}
	role, ok := asString(obj["role"])
	switch {
	case ok && role == "system":
		return systemMessage(i, obj, level)
	case ok && (role == "user" || role == "assistant"):
		content, err := blocks(obj["content"], true)
		return AnthropicMessage{Role: role, Content: content}, err
	}
	if !ok {
		role = jsString(obj["role"])
	}
	// Clients match on "Unexpected role" and "input message role".
	return AnthropicMessage{}, refuse(fmt.Sprintf(`messages.%d: Unexpected role "%s": the input message role must be "user", "assistant" or "system"`, i, echo(role)))
}

// systemMessage rebuilds a mid-conversation system message: text blocks
// only (tool_addition, tool_removal and every other tag get the API's own
// wording), clear_at when valid, and a capped effort.
func systemMessage(i int, obj map[string]json.RawMessage, level ThinkingLevel) (AnthropicMessage, error) {
	m := AnthropicMessage{Role: "system", OutputConfig: cappedEffort(obj["output_config"], level)}
	if at, _ := asString(obj["clear_at"]); at == "next_user_message" || at == "never" {
		m.ClearAt = at
	}
	raw := obj["content"]
	if s, ok := asString(raw); ok {
		m.Content = s
		return m, nil
	}
	items, ok := asArray(raw)
	if !ok || len(items) > MaxAnthropicBlocks {
		return m, refuse(RefuseContent)
	}
	out := make([]any, 0, len(items))
	for j, item := range items {
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

// blockTag is a block's type as the API's tag error names it: the type
// string, or the JavaScript typeof of a non-object or of a non-string type.
func blockTag(raw json.RawMessage) string {
	obj, ok := asObject(raw)
	if !ok {
		return jsTypeof(raw)
	}
	if s, ok := asString(obj["type"]); ok {
		return s
	}
	return jsTypeof(obj["type"])
}

// jsTypeof is JavaScript's typeof of a decoded JSON value; an absent value
// is "undefined".
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

// jsString renders a non-string role as JavaScript's template string would
// for the simple cases; objects are named by their JSON text.
func jsString(raw json.RawMessage) string {
	if kind(raw) == 0 {
		return "undefined"
	}
	return string(raw)
}

// blocks rebuilds content: a string as it is, or an array of blocks. top
// admits the top-level-only types (tool_use, tool_result, thinking,
// redacted_thinking); nested content (system, tool_result.content) allows
// text and image only.
func blocks(raw json.RawMessage, top bool) (any, error) {
	if s, ok := asString(raw); ok {
		return s, nil
	}
	items, ok := asArray(raw)
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
func block(raw json.RawMessage, top bool) (any, error) {
	obj, ok := asObject(raw)
	if !ok {
		return nil, refuse(RefuseBlock)
	}
	typ, _ := asString(obj["type"])
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

func textBlock(obj map[string]json.RawMessage) (any, bool) {
	text, ok := asString(obj["text"])
	return TextBlock{Type: "text", Text: text, CacheControl: cacheControl(obj["cache_control"])}, ok
}

// imageBlock admits base64 sources only; url and file sources fail.
func imageBlock(obj map[string]json.RawMessage) (any, bool) {
	src, ok := asObject(obj["source"])
	if !ok {
		return nil, false
	}
	typ, _ := asString(src["type"])
	data, okData := asString(src["data"])
	mediaType, okType := asString(src["media_type"])
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
	if !imageTypes[mediaType] || len(data) > maxImageChars || len(data)%4 != 0 || !base64RE.MatchString(data) {
		return false
	}
	size := len(data)/4*3 - strings.Count(data, "=") // the regexp allows = only at the end

	return size >= 1 && size <= MaxImageBytes
}

func toolUseBlock(obj map[string]json.RawMessage) (any, bool) {
	id, okID := asString(obj["id"])
	name, okName := asString(obj["name"])
	input := obj["input"]
	if !okID || !rtsandbox.ValidToolCallID(id) || !okName || !anthropicNameRE.MatchString(name) || kind(input) != '{' {
		return nil, false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, input) != nil {
		return nil, false
	}
	return ToolUseBlock{Type: "tool_use", ID: id, Name: name, Input: buf.Bytes(), CacheControl: cacheControl(obj["cache_control"])}, true
}

func toolResultBlock(obj map[string]json.RawMessage) (any, error) {
	id, ok := asString(obj["tool_use_id"])
	if !ok || !rtsandbox.ValidToolCallID(id) {
		return nil, refuse(RefuseNativeBlock)
	}
	content, err := blocks(obj["content"], false)
	if err != nil {
		return nil, err
	}
	return ToolResultBlock{
		Type: "tool_result", ToolUseID: id, Content: content,
		IsError: kind(obj["is_error"]) == 't', CacheControl: cacheControl(obj["cache_control"]),
	}, nil
}

func thinkingBlock(obj map[string]json.RawMessage) (any, bool) {
	text, okText := asString(obj["thinking"])
	sig, okSig := asString(obj["signature"])
	return ThinkingBlock{Type: "thinking", Thinking: text, Signature: sig}, okText && okSig
}

func redactedThinkingBlock(obj map[string]json.RawMessage) (any, bool) {
	data, ok := asString(obj["data"])
	return RedactedThinkingBlock{Type: "redacted_thinking", Data: data}, ok
}
