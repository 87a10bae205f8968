package worker

// The field-by-field readers of a model's tool call (parseModelCall) and
// of a host tool's answer (parseToolResponse) that typed structs
// replaced, kept as the oracles of FuzzModelCallAgreesWithFieldByField
// and FuzzToolResponseAgreesWithFieldByField.

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// FuzzModelCallAgreesWithFieldByField holds parseModelCall to the reader
// it replaced on whatever a model sends as one tool call.
func FuzzModelCallAgreesWithFieldByField(f *testing.F) {
	for _, tc := range modelCallMembersCases {
		f.Add([]byte(tc.raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if got, want := parseModelCall(raw), oldParseModelCall(raw); got != want {
			t.Fatalf("%q: typed %+v; field by field %+v", raw, got, want)
		}
	})
}

// TestModelCallMembersExact pins how a model's tool call is read: exact
// names, the last of repeated members, each part a string or missing
// (null and other types included), a function that is not an object
// having no parts.
func TestModelCallMembersExact(t *testing.T) {
	for _, tc := range modelCallMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseModelCall(json.RawMessage(tc.raw)); got != tc.want {
				t.Fatalf("parseModelCall(%s) = %+v; want %+v", tc.raw, got, tc.want)
			}
		})
	}
}

var modelCallMembersCases = []struct {
	name, raw string
	want      modelCall
}{
	{"whole", `{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}`, modelCall{id: "c1", name: "f", args: "{}", idOK: true, nameOK: true, argsOK: true}},
	{"id-null", `{"id":null,"function":{"name":"f"}}`, modelCall{name: "f", nameOK: true}},
	{"id-number", `{"id":7}`, modelCall{}},
	{"id-folded", `{"ID":"c1"}`, modelCall{}},
	{"id-repeated-last-wins", `{"id":"a","id":"b"}`, modelCall{id: "b", idOK: true}},
	{"id-repeated-last-null", `{"id":"a","id":null}`, modelCall{}},
	{"function-null", `{"id":"a","function":null}`, modelCall{id: "a", idOK: true}},
	{"function-array", `{"function":[{"name":"f"}]}`, modelCall{}},
	{"function-string", `{"function":"f"}`, modelCall{}},
	{"function-folded", `{"Function":{"name":"f"}}`, modelCall{}},
	{"name-folded", `{"function":{"Name":"f","arguments":"x"}}`, modelCall{args: "x", argsOK: true}},
	{"arguments-object", `{"function":{"name":"f","arguments":{"a":1}}}`, modelCall{name: "f", nameOK: true}},
	{"function-repeated-last-wins", `{"function":{"name":"a"},"function":{"arguments":"b"}}`, modelCall{args: "b", argsOK: true}},
	{"not-object", `["id"]`, modelCall{}},
	{"null", `null`, modelCall{}},
}

func oldParseModelCall(raw json.RawMessage) modelCall {
	var c modelCall
	obj, ok := object(raw)
	if !ok {
		return c
	}
	c.id, c.idOK = str(obj["id"])
	if fn, ok := object(obj["function"]); ok {
		c.name, c.nameOK = str(fn["name"])
		c.args, c.argsOK = str(fn["arguments"])
	}
	return c
}

// FuzzToolResponseAgreesWithFieldByField holds parseToolResponse to the
// reader it replaced on whatever a host tool answers.
func FuzzToolResponseAgreesWithFieldByField(f *testing.F) {
	for _, tc := range toolResponseMembersCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"ok":true,"text":"t","image":{"data":"AQID","mimeType":"image/png"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseToolResponse(data)
		want, oldErr := oldParseToolResponse(data)
		if (err == nil) != (oldErr == nil) || err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: typed %+v, %v; field by field %+v, %v", data, got, err, want, oldErr)
		}
	})
}

// TestToolResponseMembersExact pins how a host tool's answer is read:
// exact names, the last of repeated members, no nulls, privateTo not
// empty, the image (read by encoding/json, whose names fold case) valid.
func TestToolResponseMembersExact(t *testing.T) {
	for _, tc := range toolResponseMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseToolResponse([]byte(tc.body)); (err == nil) != tc.ok {
				t.Fatalf("parseToolResponse(%s) = %v; want ok %v", tc.body, err, tc.ok)
			}
		})
	}
}

var toolResponseMembersCases = []struct {
	name, body string
	ok         bool
}{
	{"ok-folded", `{"OK":true}`, false},
	{"ok-null", `{"ok":null}`, false},
	{"ok-repeated-last-wins", `{"ok":1,"ok":true}`, true},
	{"text-null", `{"ok":true,"text":null}`, false},
	{"text-folded", `{"ok":true,"Text":1}`, true},
	{"error-number", `{"ok":false,"error":1}`, false},
	{"text-and-error-bad", `{"ok":false,"text":1,"error":2}`, false},
	{"private-empty", `{"ok":true,"privateTo":""}`, false},
	{"private-null", `{"ok":true,"privateTo":null}`, false},
	{"private-long", `{"ok":true,"privateTo":"` + repeatStr("a", rtsandbox.MaxSessionField+1) + `"}`, false},
	{"private-at-limit", `{"ok":true,"privateTo":"` + repeatStr("a", rtsandbox.MaxSessionField) + `"}`, true},
	{"image-null", `{"ok":true,"image":null}`, false},
	{"image-folded-members", `{"ok":true,"image":{"DATA":"AQID","MimeType":"image/png"}}`, true},
	{"image-bad-type", `{"ok":true,"image":{"data":"AQID","mimeType":"image/bmp"}}`, false},
	{"image-array", `{"ok":true,"image":[]}`, false},
	{"leading-vt", "\v{\"ok\":true}", false},
	{"trailing-object", `{"ok":true}{}`, false},
}

func repeatStr(s string, n int) string {
	b := make([]byte, 0, n*len(s))
	for range n {
		b = append(b, s...)
	}
	return string(b)
}

func oldParseToolResponse(data []byte) (wire.SessionToolResponse, error) {
	var r wire.SessionToolResponse
	obj, ok := object(data)
	if !ok {
		return r, errToolResponse
	}
	if r.OK, ok = boolean(obj["ok"]); !ok {
		return r, errToolResponse
	}
	for key, dst := range map[string]*string{"text": &r.Text, "error": &r.Error} {
		if raw, present := obj[key]; present {
			if *dst, ok = str(raw); !ok {
				return r, errToolResponse
			}
		}
	}
	if raw, present := obj["privateTo"]; present {
		owner, ok := str(raw)
		if !ok || owner == "" || rtsandbox.UTF16Len(owner) > rtsandbox.MaxSessionField {
			return r, errToolResponse
		}
		r.PrivateTo = owner
	}
	if raw, present := obj["image"]; present {
		var im wire.Image
		if _, ok := object(raw); !ok || json.Unmarshal(raw, &im) != nil || wire.ValidateImage(im) != nil {
			return r, errToolResponse
		}
		r.Image = &im
	}
	return r, nil
}
