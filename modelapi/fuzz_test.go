package modelapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// maxSeed caps the table entries used as fuzz seeds. The few larger ones
// (deep nesting, at or past the broker's 256 KiB body limit) are covered by
// the unit tests; as seeds they cost milliseconds per run and the fuzzer
// spends its time minimising them instead of exploring.
const maxSeed = 16 << 10

// toolBody wraps a schema as the parameters of one function tool.
func toolBody(schema string) string {
	return `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":` + schema + `}}]}`
}

func FuzzNormalizeChat(f *testing.F) {
	for _, tt := range slices.Concat(refusedChatCases, acceptedChatCases) {
		if len(tt.body) <= maxSeed {
			f.Add(tt.body)
		}
	}
	for _, tt := range schemaCases {
		if len(tt.schema) <= maxSeed {
			f.Add(toolBody(tt.schema))
		}
	}
	f.Fuzz(func(t *testing.T, body string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &m) != nil {
			return // the broker refuses non-objects before NormalizeChat
		}
		checkNormalizeChat(t, body, m)
	})
}

// checkNormalizeChat asserts the properties of one decoded body: a refusal
// wraps ErrRefused; an accepted body builds a request with only allowed keys
// that normalises again to the same bytes.
func checkNormalizeChat(t *testing.T, body string, m map[string]json.RawMessage) {
	checkNormalizeChatWith(t, body, m, ChatOptions{})
}

// checkNormalizeChatWith is checkNormalizeChat under opts.
func checkNormalizeChatWith(t *testing.T, body string, m map[string]json.RawMessage, opts ChatOptions) {
	in, err := NormalizeChatWith(m, opts)
	if err != nil {
		if in != nil || !errors.Is(err, rtsandbox.ErrRefused) {
			t.Fatalf("NormalizeChat(%s) = %+v, %v; want nil and an error wrapping ErrRefused", body, in, err)
		}
		return
	}
	out := build(t, in)
	checkAllowedKeys(t, out)
	var again map[string]json.RawMessage
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatalf("BuildChatRequest output %s does not decode: %v", out, err)
	}
	in2, err := NormalizeChatWith(again, opts)
	if err != nil {
		t.Fatalf("NormalizeChat(%s) = %v; want the rebuilt body accepted again", out, err)
	}
	if out2 := build(t, in2); !bytes.Equal(out, out2) {
		t.Fatalf("NormalizeChat(%s) = %s; want %s (idempotent)", out, out2, out)
	}
}

func build(t *testing.T, in *ChatInput) []byte {
	t.Helper()
	out, err := jsonjs.Marshal(BuildChatRequest("test-model", in, 4096))
	if err != nil {
		t.Fatalf("jsonjs.Marshal(BuildChatRequest(%+v)) error: %v", in, err)
	}
	return out
}

// checkAllowedKeys walks a built request and checks that every object the
// package builds has only its allowed keys, in wire order.
func checkAllowedKeys(t *testing.T, out []byte) {
	t.Helper()
	top := mustMembers(t, out)
	wantKeys(t, "request", top, "model", "messages", "tools", "stream", "max_tokens")
	for _, mm := range top {
		switch mm.key {
		case "messages":
			for _, msg := range mustArray(t, mm.val) {
				checkMessageKeys(t, msg)
			}
		case "tools":
			for _, tool := range mustArray(t, mm.val) {
				fn := wantKeys(t, "tool", mustMembers(t, tool), "type", "function")
				wantKeys(t, "tool function", mustMembers(t, fn["function"]), "name", "description", "parameters")
			}
		}
	}
}

func checkMessageKeys(t *testing.T, msg json.RawMessage) {
	t.Helper()
	got := wantKeys(t, "message", mustMembers(t, msg), "role", "content", "tool_calls", "tool_call_id")
	if kind(got["content"]) == '[' {
		for _, part := range mustArray(t, got["content"]) {
			p := wantKeys(t, "content part", mustMembers(t, part), "type", "text", "image_url")
			if p["image_url"] != nil {
				wantKeys(t, "image_url", mustMembers(t, p["image_url"]), "url")
			}
		}
	}
	for _, call := range mustArray(t, got["tool_calls"]) {
		c := wantKeys(t, "tool call", mustMembers(t, call), "id", "type", "function")
		wantKeys(t, "tool call function", mustMembers(t, c["function"]), "name", "arguments")
	}
}

// wantKeys fails unless the keys of ms appear in allowed, in that order,
// and returns the members by key.
func wantKeys(t *testing.T, what string, ms []member, allowed ...string) map[string]json.RawMessage {
	t.Helper()
	byKey := make(map[string]json.RawMessage, len(ms))
	next := 0
	for _, m := range ms {
		i := slices.Index(allowed[next:], m.key)
		if i < 0 {
			t.Fatalf("%s key %q: want only %v in that order", what, m.key, allowed)
		}
		next += i + 1
		byKey[m.key] = m.val
	}
	return byKey
}

// member is one key of a built JSON object with its raw value.
type member struct {
	key string
	val json.RawMessage
}

// mustMembers decodes a built JSON object in document order.
func mustMembers(t *testing.T, raw json.RawMessage) []member {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("built JSON %s is not an object", raw)
	}
	var ms []member
	for dec.More() {
		var m member
		tok, err := dec.Token()
		if err == nil {
			m.key = tok.(string)
			err = dec.Decode(&m.val)
		}
		if err != nil {
			t.Fatalf("built JSON %s does not decode: %v", raw, err)
		}
		ms = append(ms, m)
	}
	return ms
}

func mustArray(t *testing.T, raw json.RawMessage) []json.RawMessage {
	t.Helper()
	if raw == nil {
		return nil
	}
	var a []json.RawMessage
	if kind(raw) != '[' || json.Unmarshal(raw, &a) != nil {
		t.Fatalf("built JSON %s is not an array", raw)
	}
	return a
}

func FuzzCheckSchema(f *testing.F) {
	for _, tt := range schemaCases {
		if len(tt.schema) <= maxSeed {
			f.Add(tt.schema)
		}
	}
	f.Fuzz(func(t *testing.T, schema string) {
		err := CheckSchema(json.RawMessage(schema))
		var se *SchemaError
		if err != nil && (!errors.As(err, &se) || !errors.Is(err, rtsandbox.ErrRefused)) {
			t.Fatalf("CheckSchema(%s) = %v; want a *SchemaError wrapping ErrRefused", schema, err)
		}
		if se != nil && se.Pointer != "" && !strings.HasPrefix(se.Pointer, "/") {
			t.Fatalf("CheckSchema(%s) pointer %q; want a JSON pointer", schema, se.Pointer)
		}
		checkAgainstOracle(t, schema, err == nil)
		if err == nil && kind(json.RawMessage(schema)) == '{' {
			body := toolBody(schema)
			checkNormalizeChat(t, body, decodeBody(t, body))
		}
	})
}

// checkAgainstOracle compares CheckSchema with oracleSchema, a direct,
// recursive transcription of docs/protocol.md, "Model calls". CheckSchema must never accept what the
// rule refuses, and must accept what the rule accepts unless one of its
// documented extra refusals applies (invalid UTF-8, a repeated key).
func checkAgainstOracle(t *testing.T, schema string, accepted bool) {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(schema))
	dec.UseNumber()
	if dec.Decode(&v) != nil || dec.Decode(new(any)) != io.EOF {
		if accepted {
			t.Fatalf("CheckSchema(%s) = nil; want invalid JSON refused", schema)
		}
		return
	}
	want := oracleSchema(v, 1)
	if accepted && !want {
		t.Fatalf("CheckSchema(%s) = nil; the local schema rule refuses it", schema)
	}
	if !accepted && want && utf8.ValidString(schema) && !hasRepeatedKey(schema) {
		t.Fatalf("CheckSchema(%s) refused; the local schema rule accepts it", schema)
	}
}

func oracleSchema(v any, depth int) bool {
	if depth > MaxSchemaDepth {
		return false
	}
	switch s := v.(type) {
	case bool:
		return true
	case map[string]any:
		return oracleObject(s, depth)
	}
	return false
}

func oracleObject(s map[string]any, depth int) bool {
	ok := func(v any) bool { return oracleSchema(v, depth+1) }
	all := func(a []any) bool { return !slices.ContainsFunc(a, func(v any) bool { return !ok(v) }) }
	for _, k := range []string{"$ref", "$dynamicRef", "$recursiveRef", "$schema", "$id"} {
		if x, present := s[k]; present {
			if str, isStr := x.(string); !isStr || !strings.HasPrefix(str, "#") {
				return false
			}
		}
	}
	if x, present := s["$vocabulary"]; present {
		m, isObj := x.(map[string]any)
		if !isObj {
			return false
		}
		for k := range m {
			if !strings.HasPrefix(k, "#") {
				return false
			}
		}
	}
	for _, k := range []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"} {
		if x, present := s[k]; present {
			m, isObj := x.(map[string]any)
			if !isObj {
				return false
			}
			for _, v := range m {
				if !ok(v) {
					return false
				}
			}
		}
	}
	for _, k := range []string{"items", "contains", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "not", "if", "then", "else", "contentSchema", "additionalItems"} {
		if x, present := s[k]; present {
			if a, isArr := x.([]any); isArr && !all(a) || !isArr && !ok(x) {
				return false
			}
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf", "prefixItems"} {
		if x, present := s[k]; present {
			if a, isArr := x.([]any); !isArr || !all(a) {
				return false
			}
		}
	}
	if m, isObj := s["dependencies"].(map[string]any); isObj {
		for _, v := range m {
			if _, isArr := v.([]any); !isArr && !ok(v) {
				return false
			}
		}
	}
	return true
}

// hasRepeatedKey reports whether any object in the JSON text repeats a key.
func hasRepeatedKey(text string) bool {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber() // so 1e400 does not end the scan early
	type frame struct {
		keys    map[string]bool // nil for an array
		wantKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch {
		case tok == json.Delim('}') || tok == json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		case top != nil && top.keys != nil && top.wantKey:
			k := tok.(string)
			if top.keys[k] {
				return true
			}
			top.keys[k], top.wantKey = true, false
			continue
		}
		if top != nil && top.keys != nil {
			top.wantKey = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		}
	}
}
