package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// argSchema validates tool arguments host-side against the operator's
// declared JSON Schema (draft 2020-12 unless the schema says otherwise,
// which the local schema rule only allows as a fragment).
type argSchema struct {
	schema *jsonschema.Schema
}

// refuseLoader fails every external load: operator schemas are local, and
// the compiler must never reach the network or the file system for one.
type refuseLoader struct{}

var errRemoteSchema = errors.New("schema references are local only")

func (refuseLoader) Load(string) (any, error) { return nil, errRemoteSchema }

// compileSchema compiles one operator schema under a private in-memory
// location named after the tool.
func compileSchema(name string, params []byte) (*argSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("parameters are not JSON: %w", err)
	}
	loc := "urn:rtsandbox:" + name
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, err
	}
	return &argSchema{schema: s}, nil
}

// validate checks raw JSON arguments against the schema. The error text
// names the failing keyword and location for the operator log.
func (a *argSchema) validate(raw []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("arguments are not JSON: %w", err)
	}
	return a.schema.Validate(inst)
}

// schemaDetail names the schema keyword that refused the arguments, for the
// operator log. It leaves out instance locations and values: those are
// guest data, and audit records are content-free.
func schemaDetail(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return "arguments refused by schema"
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	path := "/"
	if ve.ErrorKind != nil {
		for _, k := range ve.ErrorKind.KeywordPath() {
			path += k + "/"
		}
	}
	return "arguments refused by schema keyword " + path
}

// duplicateKeys reports whether any object in raw repeats a key (after
// decoding escapes). Arguments are validated on their decoded value but
// forwarded as sent, and decoders disagree on which duplicate wins: a
// schema check of the last value would not cover an upstream that reads
// the first. raw is already known to be valid JSON.
func duplicateKeys(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false // io.EOF; raw was valid
		}
		top := len(stack) - 1
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top >= 0 && stack[top].object {
					stack[top].key = true
				}
				stack = append(stack, frame{keys: map[string]bool{}, object: v == '{', key: v == '{'})
			default:
				stack = stack[:top]
			}
			continue
		case string:
			if top >= 0 && stack[top].object && stack[top].key {
				if stack[top].keys[v] {
					return true
				}
				stack[top].keys[v] = true
				stack[top].key = false
				continue
			}
		}
		if top >= 0 && stack[top].object {
			stack[top].key = true
		}
	}
}
