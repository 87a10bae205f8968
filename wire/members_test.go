package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzMembersAgreesWithDecoder holds members, which every typed parser
// reads an object by, to decodeObjectStrict, the decoder it read by
// before (json.Unmarshal instead of a json.Decoder spares a copy of the
// data): the same verdict and members on every input.
func FuzzMembersAgreesWithDecoder(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1} `, "\v{\"a\":1}\f", `{"a":1}x`, `{"a":1}{}`, `{"a":1}]`, `{"a":1,"a":2}`, `null`, `[]`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `{"a":1} // c`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := members(data)
		var want map[string]json.RawMessage
		oldOK := decodeObjectStrict(data, &want) == nil
		if ok != oldOK || ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: members %v, %v; decoder %v, %v", data, got, ok, want, oldOK)
		}
	})
}
