package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
)

// Typed decoding of the protocol's objects where its rules are not
// encoding/json's (docs/protocol.md, "Decoding rules"). A wire struct names each member it reads
// with its json tag and types it with one of the field types below; fill
// (Fill, for the packages that read the protocol outside wire: the
// worker) decodes an object into it. Where encoding/json's struct decoding would
// differ from the protocol, fill does not use it:
//
//   - members are matched by their exact name: encoding/json matches a
//     field name case-insensitively, so {"Reason":…} would fill Reason;
//     here such a member is an unknown one, dropped;
//   - a repeated member counts as its last value, as before;
//   - a present member of the wrong type, null included, is refused:
//     encoding/json takes null as "leave it alone" (a NullTaker, such
//     as OptString, reads null itself);
//   - a member whose tag does not say omitempty is required.
//
// That is why the object is first read as a map of raw members (members):
// the map is the one place that sees which names came, exactly. Each
// field is then decoded from its raw value by its type's UnmarshalJSON,
// and the result checked by the domain type's one Validate. Go 1.26's
// encoding/json/v2, which matches names exactly, still needs
// GOEXPERIMENT=jsonv2.

// errWireType is a member of the wrong JSON type.
var errWireType = errors.New("wrong JSON type")

// ErrMember marks an object that Fill refused: not one JSON object, or a
// member missing or of the wrong type.
var ErrMember = errors.New("wire object: member missing or of the wrong type")

// MemberError is Fill's refusal; it wraps ErrMember and Err. Member is
// the first bad member in field order, "" when the data is not one JSON
// object; Err is why: errMissing, errWireType, or the error of the
// member type's UnmarshalJSON (a reader may tell its own errors apart).
type MemberError struct {
	Member string
	Err    error
}

func (e *MemberError) Error() string {
	if e.Member == "" {
		return ErrMember.Error() + ": not a JSON object"
	}
	return ErrMember.Error() + ": " + e.Member
}

func (e *MemberError) Unwrap() []error { return []error{ErrMember, e.Err} }

// errMissing is a required member that did not come.
var errMissing = errors.New("missing")

// Fill decodes data, one JSON object and nothing after it, into the wire
// struct *w by the rules above: the package's field types (String, Bool,
// Int, Messages, Strings, Object, or a type whose UnmarshalJSON calls
// Fill) with json tags, required unless omitempty. Packages that read the
// protocol's objects (the worker) decode with it; a refusal is a
// *MemberError.
func Fill(data []byte, w any) error {
	obj, ok := jsonMembers(data)
	if !ok {
		return &MemberError{}
	}
	return FillFrom(obj, w)
}

// FillFrom is Fill on an object already read into its members, exactly
// named (a map decode keeps each name as sent).
func FillFrom(obj map[string]json.RawMessage, w any) error {
	if name, err := badMember(obj, w); err != nil {
		return &MemberError{Member: name, Err: err}
	}
	return nil
}

// jsonMembers is members on data around which only JSON's whitespace
// (space, tab, CR, LF) may stand: members trims with bytes.TrimSpace,
// which also drops \v, \f, U+0085 and U+00A0, and JSON.parse refuses
// those. ParseReply and Fill read by it; the compaction parsers, which
// always read by members, keep their acceptance.
func jsonMembers(data []byte) (map[string]json.RawMessage, bool) {
	t := bytes.Trim(data, " \t\r\n")
	if len(t) == 0 || t[0] != '{' || t[len(t)-1] != '}' {
		return nil, false
	}
	return members(t)
}

// fill decodes the object data (one JSON object, nothing after it) into
// the wire struct *w, as the comment above says. It reports whether every
// required member came and every member read has its type.
func fill(data []byte, w any) bool {
	obj, ok := members(data)
	return ok && fillFrom(obj, w)
}

// fillFrom is fill on an object already read into its members.
func fillFrom(obj map[string]json.RawMessage, w any) bool {
	_, err := badMember(obj, w)
	return err == nil
}

// badMember fills *w from obj as fillFrom does and names the first member,
// in field order, that is missing or of the wrong type, with why; err is
// nil when there is none.
func badMember(obj map[string]json.RawMessage, w any) (name string, err error) {
	v := reflect.ValueOf(w).Elem()
	for i, f := range fieldsOf(v.Type()) {
		name := f.name
		raw, present := obj[name]
		switch {
		case !present && f.optional:
			continue
		case !present:
			return name, errMissing
		case string(raw) == "null" && !takesNull(v.Field(i)): // a pointer field would take null as absent
			return name, errWireType
		}
		if err := decodeMember(raw, v.Field(i).Addr().Interface()); err != nil {
			return name, err
		}
	}
	return "", nil
}

// wireField is a wire struct field as its json tag names it: the member
// name, and whether omitempty makes it optional.
type wireField struct {
	name     string
	optional bool
}

// wireFields caches each wire struct type's fields: reading the tags
// allocates, and the filler runs for every object of a message.
var wireFields sync.Map // reflect.Type → []wireField

func fieldsOf(t reflect.Type) []wireField {
	if fs, ok := wireFields.Load(t); ok {
		return fs.([]wireField)
	}
	fs := make([]wireField, t.NumField())
	for i := range fs {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		fs[i] = wireField{name: name, optional: opts == "omitempty"}
	}
	wireFields.Store(t, fs)
	return fs
}

// decodeMember decodes raw, one valid JSON value as a map decode keeps
// it, into p: a field type's UnmarshalJSON is called directly, since
// json.Unmarshal would only check again, at every level of a nested wire
// struct, what the map decode checked.
func decodeMember(raw json.RawMessage, p any) error {
	if u, ok := p.(json.Unmarshaler); ok {
		return u.UnmarshalJSON(raw)
	}
	if v := reflect.ValueOf(p).Elem(); v.Kind() == reflect.Pointer { // an optional *T member
		n := reflect.New(v.Type().Elem())
		if u, ok := n.Interface().(json.Unmarshaler); ok {
			if err := u.UnmarshalJSON(raw); err != nil {
				return err
			}
			v.Set(n)
			return nil
		}
	}
	return json.Unmarshal(raw, p)
}

// String is a JSON string.
type String string

func (s *String) UnmarshalJSON(b []byte) error {
	v, ok := jsonString(b)
	if !ok {
		return errWireType
	}
	*s = String(v)
	return nil
}

// OptString is a lenient member: its value when it is a JSON string,
// else absent (Set false), whatever else it is, null included. The
// protocol reads a few members so (a memory call's key, a worker
// failure's detail); fill admits null for it (a NullTaker).
type OptString struct {
	Value string
	Set   bool
}

func (s *OptString) UnmarshalJSON(b []byte) error {
	s.Value, s.Set = jsonString(b)
	return nil
}

// TakesNull marks OptString a NullTaker.
func (*OptString) TakesNull() {}

// NullTaker is a lenient field type, one that reads every present value
// itself, null included: fill passes it a present null, where it refuses
// null for any other type. OptString is one; the worker has others (a
// model answer's tool_calls, any value but an array being none).
type NullTaker interface {
	json.Unmarshaler
	TakesNull()
}

func takesNull(field reflect.Value) bool {
	_, ok := field.Addr().Interface().(NullTaker)
	return ok
}

// Checked is a member read by T's rules that records a bad value instead
// of refusing it (Bad), and leaves the verdict to its reader: one that
// names every bad member (the worker's config), or one that decodes with
// encoding/json, where a member repeated after a bad value must still
// count as its last value (ParseWorkerReady). Each decode starts afresh.
// *T is a json.Unmarshaler that refuses null (the types of this file, a
// wire struct). A Checked is a NullTaker: null is a bad value of T.
type Checked[T any] struct {
	Value   T
	Present bool
	Bad     bool
}

func (c *Checked[T]) UnmarshalJSON(b []byte) error {
	*c = Checked[T]{Present: true}
	c.Bad = any(&c.Value).(json.Unmarshaler).UnmarshalJSON(b) != nil
	return nil
}

// TakesNull makes Checked a NullTaker.
func (*Checked[T]) TakesNull() {}

// Bool is a JSON boolean.
type Bool bool

func (p *Bool) UnmarshalJSON(b []byte) error {
	v, ok := optBool(b)
	if !ok || len(b) == 0 {
		return errWireType
	}
	*p = Bool(v)
	return nil
}

// Int is a safe integer (SafeInteger); a pointer to one is nil when
// its optional member is absent.
type Int int64

func (n *Int) UnmarshalJSON(b []byte) error {
	v, ok := SafeInteger(b)
	if !ok {
		return errWireType
	}
	*n = Int(v)
	return nil
}

func (n *Int) ptr() *int64 {
	if n == nil {
		return nil
	}
	v := int64(*n)
	return &v
}

// Messages is an array of conversation messages (validMessage), each
// kept as received.
type Messages []json.RawMessage

func (m *Messages) UnmarshalJSON(b []byte) error {
	v, ok := jsonMessages(b)
	if !ok {
		return errWireType
	}
	*m = v
	return nil
}

// Strings is an array of strings.
type Strings []string

func (s *Strings) UnmarshalJSON(b []byte) error {
	v, ok := jsonStrings(b)
	if !ok {
		return errWireType
	}
	*s = v
	return nil
}

// Object is a JSON object kept as received: one whose members are
// not the protocol's (a compaction's details), read by its user.
type Object json.RawMessage

func (o *Object) UnmarshalJSON(b []byte) error {
	if !isJSONObject(b) {
		return errWireType
	}
	*o = append((*o)[:0], b...)
	return nil
}
