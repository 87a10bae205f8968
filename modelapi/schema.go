package modelapi

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// MaxSchemaDepth bounds how many schema positions may nest inside each
// other; the root schema is level 1. The reference has no bound and
// recurses; a 256 KiB body could nest some 128k levels. Refusing deeper
// schemas is a deliberate, stricter deviation: no real tool needs 64 levels.
const MaxSchemaDepth = 64

// SchemaError reports the schema position that broke the local schema rule.
// It wraps rtsandbox.ErrRefused.
type SchemaError struct {
	Pointer string // JSON Pointer (RFC 6901) of the offending value; "" is the root
	Reason  string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("schema position %q: %s", e.Pointer, e.Reason)
}

// Unwrap makes errors.Is(err, rtsandbox.ErrRefused) hold.
func (e *SchemaError) Unwrap() error { return rtsandbox.ErrRefused }

// role says what the value at a position must be. A schema object's
// keywords give its members their roles; keywords not listed (enum, const,
// default, examples, required, type, $anchor, $comment, extensions, …) hold
// data, so a "$ref" inside enum is just a value.
type role int

const (
	roleData          role = iota
	roleSchema             // a boolean or a schema object
	roleLocalRef           // a string starting with "#"
	roleVocabulary         // an object whose every key starts with "#"
	roleSchemaMap          // an object of schemas
	roleSchemaOrArray      // one schema, or an array of schemas
	roleSchemaArray        // an array of schemas
	roleDependencies       // if an object, its non-array values are schemas
	roleDependency         // one value of dependencies: an array is data
)

var keywordRoles = map[string]role{
	// These can make a validator load a document by URI; only local
	// fragments keep the provider from fetching anything.
	"$ref": roleLocalRef, "$dynamicRef": roleLocalRef, "$recursiveRef": roleLocalRef,
	"$schema": roleLocalRef, "$id": roleLocalRef,
	"$vocabulary": roleVocabulary,

	"properties": roleSchemaMap, "patternProperties": roleSchemaMap, "$defs": roleSchemaMap,
	"definitions": roleSchemaMap, "dependentSchemas": roleSchemaMap,

	"items": roleSchemaOrArray, "contains": roleSchemaOrArray, "additionalProperties": roleSchemaOrArray,
	"unevaluatedProperties": roleSchemaOrArray, "unevaluatedItems": roleSchemaOrArray,
	"propertyNames": roleSchemaOrArray, "not": roleSchemaOrArray, "if": roleSchemaOrArray,
	"then": roleSchemaOrArray, "else": roleSchemaOrArray, "contentSchema": roleSchemaOrArray,
	"additionalItems": roleSchemaOrArray,

	"allOf": roleSchemaArray, "anyOf": roleSchemaArray, "oneOf": roleSchemaArray, "prefixItems": roleSchemaArray,

	"dependencies": roleDependencies,
}

// CheckSchema applies the local schema rule of docs/protocol.md, "Model calls" to a raw JSON schema
// value: nil when acceptable, else a *SchemaError (wrapping
// rtsandbox.ErrRefused) naming the JSON pointer of the offending position.
//
// Beyond docs/protocol.md, "Model calls" it also refuses, deliberately, because the schema is forwarded
// as raw bytes rather than re-serialised as the reference does: invalid
// UTF-8, and a key repeated within one object (an upstream parser that keeps
// the first copy would see a keyword this check never saw). It refuses
// schema positions nested deeper than MaxSchemaDepth.
//
// The check is one streaming pass over the tokens (jsontree.Budget.Scan)
// with an explicit stack of open containers, so its cost is linear in the
// size of the schema, it allocates only the key sets of the open objects,
// and a hostile nesting cannot exhaust the goroutine stack.
func CheckSchema(schema json.RawMessage) error {
	return checkSchema(nil, schema)
}

// checkSchema is CheckSchema under a guest body's budget: each key the
// check remembers (to catch a repeat) counts one value, and the scan looks
// at the budget's context as it reads. A refusal of the budget is its
// error, not a *SchemaError.
func checkSchema(b *jsontree.Budget, schema json.RawMessage) error {
	// Valid also refuses trailing data and nesting over 10000 levels.
	if !validUTF8(b, schema) || !b.Valid(schema) {
		if err := b.Err(); err != nil {
			return err
		}
		return &SchemaError{Reason: "not valid UTF-8 JSON"}
	}
	c := checker{b: b}
	b.Scan(schema, c.token)
	if c.err != nil {
		return c.err
	}
	return b.Err()
}

// validUTF8 is utf8.Valid in steps of jsontree.CheckBytes, looking at the
// budget between them.
func validUTF8(b *jsontree.Budget, s []byte) bool {
	for len(s) > jsontree.CheckBytes {
		cut := jsontree.CheckBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) { // never split a character
			cut--
		}
		if !utf8.Valid(s[:cut]) || b.Check() != nil {
			return false
		}
		s = s[cut:]
	}
	return utf8.Valid(s)
}

// frame is an open object or array and what its members must be.
type frame struct {
	role   role   // of the container itself
	level  int    // schema level of the schema this container belongs to
	tok    string // reference token of the container in its parent
	object bool
	key    string
	index  int
	keys   map[string]bool // made at the object's first key
}

type checker struct {
	stack   []frame
	b       *jsontree.Budget
	started bool
	err     error
}

// token takes the scan's next token; it stops the scan at the first
// refusal.
func (c *checker) token(tok jsontree.Token) bool {
	if !c.started {
		c.started = true
		c.err = c.value(tok, roleSchema, 1)
	} else {
		c.err = c.step(tok)
	}
	return c.err == nil
}

// step handles one token inside the innermost open container.
func (c *checker) step(tok jsontree.Token) error {
	top := len(c.stack) - 1
	f := &c.stack[top]
	switch tok.Kind {
	case '}', ']':
		c.stack = c.stack[:top]
		return nil
	case ':':
		return c.key(f, tok.String())
	}
	r, level := f.memberRole()
	err := c.value(tok, r, level) // may grow the stack: f is stale after
	if !c.stack[top].object {
		c.stack[top].index++
	}
	return err
}

// key records an object key. Keys arrive decoded, so an escaped "\u0024ref"
// is the keyword $ref, and two spellings of one key are a repeat.
func (c *checker) key(f *frame, k string) error {
	f.key = k
	if f.keys[k] {
		return c.fail("key repeated in one object")
	}
	if err := c.b.Take(1); err != nil {
		return err
	}
	if f.keys == nil {
		f.keys = make(map[string]bool)
	}
	f.keys[k] = true
	if f.role == roleVocabulary && !strings.HasPrefix(k, "#") {
		return c.fail("vocabulary URI is not a local fragment")
	}
	return nil
}

// memberRole is the role of the next member of f and the level it belongs to.
func (f *frame) memberRole() (role, int) {
	switch f.role {
	case roleSchema:
		return keywordRoles[f.key], f.level
	case roleSchemaMap, roleSchemaArray:
		return roleSchema, f.level + 1
	case roleDependencies:
		return roleDependency, f.level + 1
	}
	return roleData, f.level
}

// value checks the token that starts a value of role r and opens a frame
// when the value is a container.
func (c *checker) value(tok jsontree.Token, r role, level int) error {
	switch r {
	case roleSchema:
		if level > MaxSchemaDepth {
			return c.fail("nested deeper than " + strconv.Itoa(MaxSchemaDepth) + " schema levels")
		}
		if tok.Kind == 't' || tok.Kind == 'f' {
			return nil
		}
		return c.open(tok, '{', r, level, "not a boolean or an object")
	case roleLocalRef:
		if tok.Kind == '"' && strings.HasPrefix(tok.String(), "#") {
			return nil
		}
		return c.fail("not a local fragment (a string starting with #)")
	case roleVocabulary, roleSchemaMap:
		return c.open(tok, '{', r, level, "not an object")
	case roleSchemaArray:
		return c.open(tok, '[', r, level, "not an array")
	case roleSchemaOrArray:
		if tok.Kind == '[' {
			return c.open(tok, '[', roleSchemaArray, level, "")
		}
		return c.value(tok, roleSchema, level+1)
	case roleDependencies:
		if tok.Kind == '{' {
			return c.open(tok, '{', r, level, "")
		}
	case roleDependency:
		if tok.Kind != '[' {
			return c.value(tok, roleSchema, level)
		}
	}
	// Data, including what dependencies ignores: walk it only to match
	// brackets and to catch repeated keys.
	if tok.Kind == '{' || tok.Kind == '[' {
		return c.open(tok, tok.Kind, roleData, level, "")
	}
	return nil
}

// open pushes a frame when tok is the delimiter want, else fails with reason.
func (c *checker) open(tok jsontree.Token, want byte, r role, level int, reason string) error {
	if tok.Kind != want {
		return c.fail(reason)
	}
	c.stack = append(c.stack, frame{role: r, level: level, tok: c.here(), object: want == '{'})
	return nil
}

// here is the reference token of the value being read in the innermost
// open container ("" at the root).
func (c *checker) here() string {
	if len(c.stack) == 0 {
		return ""
	}
	f := c.stack[len(c.stack)-1]
	if f.object {
		return pointerToken(f.key)
	}
	return strconv.Itoa(f.index)
}

// fail reports reason at the value being read. The pointer is built only
// here, so deep data costs no quadratic string building.
func (c *checker) fail(reason string) error {
	var b strings.Builder
	for _, f := range c.stack[min(1, len(c.stack)):] {
		b.WriteString("/" + f.tok)
	}
	if len(c.stack) > 0 {
		b.WriteString("/" + c.here())
	}
	return &SchemaError{Pointer: b.String(), Reason: reason}
}
