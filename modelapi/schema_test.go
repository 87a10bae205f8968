package modelapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

// schemaCase is one schema value; refusedAt is the JSON pointer the error
// must name, or nil when the schema is accepted.
type schemaCase struct {
	name      string
	schema    string
	refusedAt *string
}

func at(ptr string) *string { return &ptr }

// nestNot wraps inner in n levels of {"not": …}.
func nestNot(n int, inner string) string {
	return strings.Repeat(`{"not":`, n) + inner + strings.Repeat("}", n)
}

var schemaCases = []schemaCase{
	// The reference's tests Remote schema keywords, each at properties.example.
	{name: "remote-ref", schema: `{"type":"object","properties":{"example":{"$ref":"https://guest.example/s"}}}`, refusedAt: at("/properties/example/$ref")},
	{name: "remote-dynamic-ref", schema: `{"type":"object","properties":{"example":{"$dynamicRef":"https://guest.example/s"}}}`, refusedAt: at("/properties/example/$dynamicRef")},
	{name: "remote-recursive-ref", schema: `{"type":"object","properties":{"example":{"$recursiveRef":"https://guest.example/s"}}}`, refusedAt: at("/properties/example/$recursiveRef")},
	{name: "remote-schema", schema: `{"type":"object","properties":{"example":{"$schema":"https://guest.example/s"}}}`, refusedAt: at("/properties/example/$schema")},
	{name: "remote-id", schema: `{"type":"object","properties":{"example":{"$id":"https://guest.example/s"}}}`, refusedAt: at("/properties/example/$id")},
	{name: "remote-vocabulary", schema: `{"type":"object","properties":{"example":{"$vocabulary":{"https://guest.example/v":true}}}}`, refusedAt: at("/properties/example/$vocabulary/https:~1~1guest.example~1v")},
	// The reference's tests Data is not keywords.
	{name: "data-is-not-keywords", schema: `{"type":"object",
		"properties":{"$ref":{"type":"string"},"$schema":{"type":"string"}},
		"enum":[{"$ref":"https://guest.example/s"}],
		"$defs":{"item":{"type":"string"}},
		"allOf":[{"$ref":"#/$defs/item"}]}`},
	// The reference's tests: $schema with an absolute URI, even the draft's own.
	{name: "schema-absolute-uri", schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, refusedAt: at("/$schema")},
	// The rest of docs/protocol.md, "Model calls".
	{name: "true", schema: `true`},
	{name: "false", schema: `false`},
	{name: "empty-object", schema: `{}`},
	{name: "null", schema: `null`, refusedAt: at("")},
	{name: "number", schema: `1`, refusedAt: at("")},
	{name: "string", schema: `"#"`, refusedAt: at("")},
	{name: "array-at-root", schema: `[true]`, refusedAt: at("")},
	{name: "local-fragments", schema: `{"$id":"#root","$schema":"#","$ref":"#/$defs/a","$dynamicRef":"#meta","$recursiveRef":"#","$vocabulary":{"#core":true},"$defs":{"a":true}}`},
	{name: "ref-empty-string", schema: `{"$ref":""}`, refusedAt: at("/$ref")},
	{name: "ref-relative", schema: `{"$ref":"other.json#/a"}`, refusedAt: at("/$ref")},
	{name: "ref-null", schema: `{"$ref":null}`, refusedAt: at("/$ref")},
	{name: "ref-array", schema: `{"$ref":["#"]}`, refusedAt: at("/$ref")},
	{name: "ref-escaped-keyword", schema: `{"\u0024ref":"https://guest.example/s"}`, refusedAt: at("/$ref")},
	{name: "ref-repeated-key", schema: `{"$ref":"https://guest.example/s","$ref":"#"}`, refusedAt: at("/$ref")},
	{name: "ref-repeated-escaped-key", schema: `{"$ref":"#","\u0024ref":"https://guest.example/s"}`, refusedAt: at("/$ref")},
	// A parser keeping the first copy would see the remote ref.
	{name: "property-repeated", schema: `{"properties":{"a":{},"a":{"$ref":"https://guest.example/s"}}}`, refusedAt: at("/properties/a")},
	{name: "key-repeated-in-data", schema: `{"enum":[{"a":1,"a":2}]}`, refusedAt: at("/enum/0/a")},
	{name: "vocabulary-array", schema: `{"$vocabulary":["#a"]}`, refusedAt: at("/$vocabulary")},
	{name: "vocabulary-null", schema: `{"$vocabulary":null}`, refusedAt: at("/$vocabulary")},
	{name: "vocabulary-values-not-checked", schema: `{"$vocabulary":{"#a":"https://guest.example"}}`},
	{name: "properties-array", schema: `{"properties":[{}]}`, refusedAt: at("/properties")},
	{name: "properties-null", schema: `{"properties":null}`, refusedAt: at("/properties")},
	{name: "property-value-string", schema: `{"properties":{"a":"string"}}`, refusedAt: at("/properties/a")},
	{name: "property-name-escaped-in-pointer", schema: `{"properties":{"a/b~c":{"$ref":"https://guest.example/s"}}}`, refusedAt: at("/properties/a~1b~0c/$ref")},
	{name: "pattern-properties-remote", schema: `{"patternProperties":{"^x":{"$id":"https://guest.example/s"}}}`, refusedAt: at("/patternProperties/^x/$id")},
	{name: "definitions-remote", schema: `{"definitions":{"a":{"$ref":"https://guest.example/s"}}}`, refusedAt: at("/definitions/a/$ref")},
	{name: "dependent-schemas-remote", schema: `{"dependentSchemas":{"a":{"$ref":"https://guest.example/s"}}}`, refusedAt: at("/dependentSchemas/a/$ref")},
	{name: "items-single", schema: `{"items":{"type":"string"}}`},
	{name: "items-array", schema: `{"items":[true,{"type":"string"}]}`},
	{name: "items-array-remote", schema: `{"items":[true,{"$ref":"https://guest.example/s"}]}`, refusedAt: at("/items/1/$ref")},
	{name: "items-null", schema: `{"items":null}`, refusedAt: at("/items")},
	{name: "items-number", schema: `{"items":5}`, refusedAt: at("/items")},
	{name: "items-array-with-null", schema: `{"items":[null]}`, refusedAt: at("/items/0")},
	{name: "additional-properties-false", schema: `{"additionalProperties":false}`},
	{name: "not-array", schema: `{"not":[true,{}]}`},
	{name: "if-then-else-remote", schema: `{"if":true,"then":{},"else":{"$ref":"https://guest.example/s"}}`, refusedAt: at("/else/$ref")},
	{name: "content-schema-remote", schema: `{"contentSchema":{"$ref":"https://guest.example/s"}}`, refusedAt: at("/contentSchema/$ref")},
	{name: "all-of-object", schema: `{"allOf":{"type":"string"}}`, refusedAt: at("/allOf")},
	{name: "any-of-remote", schema: `{"anyOf":[{},{"$ref":"https://guest.example/s"}]}`, refusedAt: at("/anyOf/1/$ref")},
	{name: "one-of-null", schema: `{"oneOf":null}`, refusedAt: at("/oneOf")},
	{name: "prefix-items-single", schema: `{"prefixItems":{}}`, refusedAt: at("/prefixItems")},
	{name: "dependencies-not-object-ignored", schema: `{"dependencies":"https://guest.example/s"}`},
	{name: "dependencies-array-value-is-data", schema: `{"dependencies":{"a":["https://guest.example/s"]}}`},
	{name: "dependencies-schema-remote", schema: `{"dependencies":{"a":{"$ref":"https://guest.example/s"}}}`, refusedAt: at("/dependencies/a/$ref")},
	{name: "dependencies-schema-null", schema: `{"dependencies":{"a":null}}`, refusedAt: at("/dependencies/a")},
	{name: "data-keywords-not-visited", schema: `{"type":5,"required":{},"const":{"$ref":"https://x"},"default":{"$id":"https://x"},"examples":[{"$schema":"https://x"}],"$anchor":7,"$dynamicAnchor":null,"$comment":[],"x-ext":{"$ref":"https://x"}}`},
	{name: "first-violation-in-document-order", schema: `{"properties":{"b":{"$ref":"https://a"}},"$ref":"https://b"}`, refusedAt: at("/properties/b/$ref")},
	{name: "siblings-in-document-order", schema: `{"properties":{"b":{"$ref":"https://a"}},"items":{"$ref":"https://b"}}`, refusedAt: at("/properties/b/$ref")},
	{name: "depth-5000-refused-at-bound", schema: nestNot(5000, `true`), refusedAt: at(strings.Repeat("/not", 64))},
	{name: "depth-64-accepted", schema: nestNot(63, `true`)},
	{name: "depth-65-refused", schema: nestNot(64, `true`), refusedAt: at(strings.Repeat("/not", 64))},
	{name: "depth-100000-refused", schema: nestNot(100000, `{}`), refusedAt: at("")},
	{name: "depth-in-data-not-counted", schema: `{"enum":[` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `]}`},
	{name: "invalid-json", schema: `{"type":`, refusedAt: at("")},
	{name: "trailing-data", schema: `{} {"$ref":"https://x"}`, refusedAt: at("")},
	{name: "invalid-utf8", schema: "{\"description\":\"\xff\"}", refusedAt: at("")},
	{name: "empty", schema: ``, refusedAt: at("")},
}

func TestCheckSchema(t *testing.T) {
	for _, tt := range schemaCases {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSchema(json.RawMessage(tt.schema))
			if tt.refusedAt == nil {
				if err != nil {
					t.Errorf("CheckSchema(%s) = %v; want nil", short(tt.schema), err)
				}
				return
			}
			var se *SchemaError
			if !errors.As(err, &se) || !errors.Is(err, rtsandbox.ErrRefused) {
				t.Fatalf("CheckSchema(%s) = %v; want a *SchemaError wrapping ErrRefused", short(tt.schema), err)
			}
			if diff := cmp.Diff(*tt.refusedAt, se.Pointer); diff != "" {
				t.Errorf("CheckSchema(%s) pointer mismatch (-want +got):\n%s", short(tt.schema), diff)
			}
		})
	}
}
