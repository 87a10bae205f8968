package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// Typed decoding of the protocol's objects where its rules are not
// encoding/json's (spec §4.5). A wire struct names each member it reads
// with its json tag and types it with one of the field types below; fill
// decodes an object into it. Where encoding/json's struct decoding would
// differ from the protocol, fill does not use it:
//
//   - members are matched by their exact name: encoding/json matches a
//     field name case-insensitively, so {"Reason":…} would fill Reason;
//     here such a member is an unknown one, dropped;
//   - a repeated member counts as its last value, as before;
//   - a present member of the wrong type, null included, is refused:
//     encoding/json takes null as "leave it alone";
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

// fill decodes the object data (one JSON object, nothing after it) into
// the wire struct *w, as the comment above says. It reports whether every
// required member came and every member read has its type.
func fill(data []byte, w any) bool {
	obj, ok := members(data)
	return ok && fillFrom(obj, w)
}

// fillFrom is fill on an object already read into its members.
func fillFrom(obj map[string]json.RawMessage, w any) bool {
	_, ok := badMember(obj, w)
	return ok
}

// badMember fills *w from obj as fillFrom does and names the first member,
// in field order, that is missing or of the wrong type; ok is true when
// there is none.
func badMember(obj map[string]json.RawMessage, w any) (name string, ok bool) {
	v := reflect.ValueOf(w).Elem()
	for i := range v.NumField() {
		name, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		raw, present := obj[name]
		switch {
		case !present && opts == "omitempty":
			continue
		case !present, string(raw) == "null": // a pointer field would take null as absent
			return name, false
		}
		if json.Unmarshal(raw, v.Field(i).Addr().Interface()) != nil {
			return name, false
		}
	}
	return "", true
}

// wireString is a JSON string.
type wireString string

func (s *wireString) UnmarshalJSON(b []byte) error {
	v, ok := jsonString(b)
	if !ok {
		return errWireType
	}
	*s = wireString(v)
	return nil
}

// wireBool is a JSON boolean.
type wireBool bool

func (p *wireBool) UnmarshalJSON(b []byte) error {
	v, ok := optBool(b)
	if !ok || len(b) == 0 {
		return errWireType
	}
	*p = wireBool(v)
	return nil
}

// wireInt is a safe integer (SafeInteger); a pointer to one is nil when
// its optional member is absent.
type wireInt int64

func (n *wireInt) UnmarshalJSON(b []byte) error {
	v, ok := SafeInteger(b)
	if !ok {
		return errWireType
	}
	*n = wireInt(v)
	return nil
}

func (n *wireInt) ptr() *int64 {
	if n == nil {
		return nil
	}
	v := int64(*n)
	return &v
}

// wireMessages is an array of conversation messages (validMessage), each
// kept as received.
type wireMessages []json.RawMessage

func (m *wireMessages) UnmarshalJSON(b []byte) error {
	v, ok := jsonMessages(b)
	if !ok {
		return errWireType
	}
	*m = v
	return nil
}

// wireStrings is an array of strings.
type wireStrings []string

func (s *wireStrings) UnmarshalJSON(b []byte) error {
	v, ok := jsonStrings(b)
	if !ok {
		return errWireType
	}
	*s = v
	return nil
}

// wireObject is a JSON object kept as received: one whose members are
// not the protocol's (a compaction's details), read by its user.
type wireObject json.RawMessage

func (o *wireObject) UnmarshalJSON(b []byte) error {
	if !isJSONObject(b) {
		return errWireType
	}
	*o = append((*o)[:0], b...)
	return nil
}
