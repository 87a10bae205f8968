package wire

// The field-by-field ready parser the typed ready wire replaced, kept as
// the oracle of FuzzWorkerReadyAgreesWithFieldByField.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzWorkerReadyAgreesWithFieldByField holds ParseWorkerReady to the
// parser it replaced on whatever a session worker sends.
func FuzzWorkerReadyAgreesWithFieldByField(f *testing.F) {
	for _, tc := range readyMembersCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseWorkerReady(data)
		want, oldErr := oldParseWorkerReady(data)
		if err != oldErr || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: typed %+v, %v; field by field %+v, %v", data, got, err, want, oldErr)
		}
	})
}

// TestWorkerReadyMembersExact pins how a ready body is read: by
// encoding/json's struct decoding (names fold case, the last of repeated
// members counts), every present member of its type, null never one.
func TestWorkerReadyMembersExact(t *testing.T) {
	for _, tc := range readyMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseWorkerReady([]byte(tc.body)); (err == nil) != tc.ok {
				t.Fatalf("ParseWorkerReady(%s) = %v; want ok %v", tc.body, err, tc.ok)
			}
		})
	}
}

var readyMembersCases = []struct {
	name, body string
	ok         bool
}{
	{"blank", " \n", true},
	{"folded-private", `{"PrivateHistory":true}`, true},
	{"folded-private-null", `{"PRIVATEHISTORY":null}`, false},
	{"private-repeated-last-wins", `{"privateHistory":1,"privateHistory":true}`, true},
	{"private-null", `{"privateHistory":null}`, false},
	{"caps-null", `{"capabilities":null}`, false},
	{"caps-array", `{"capabilities":[]}`, false},
	{"caps-folded-member", `{"capabilities":{"PrivateTo":true}}`, true},
	{"caps-member-null", `{"capabilities":{"readerRecords":null}}`, false},
	{"caps-member-string", `{"capabilities":{"privateTo":"true"}}`, false},
	{"caps-spaced", `{"capabilities": { "privateTo" : true } }`, true},
	{"load-null", `{"sessionLoad":null}`, false},
	{"load-counts", `{"sessionLoad":{"droppedLines":3,"ignoredFiles":0}}`, true},
	{"load-count-null", `{"sessionLoad":{"droppedLines":null}}`, false},
	{"load-count-float", `{"sessionLoad":{"droppedLines":1.0}}`, false},
	{"load-count-leading-zero", `{"sessionLoad":{"droppedLines":01}}`, false},
	{"load-count-max", `{"sessionLoad":{"droppedLines":1073741824}}`, true},
	{"load-count-over", `{"sessionLoad":{"droppedLines":1073741825}}`, false},
	{"load-count-negative", `{"sessionLoad":{"ignoredFiles":-1}}`, false},
	{"load-empty", `{"sessionLoad":{}}`, true},
	{"caps-repeated-bad-first", `{"capabilities":{"privateTo":1},"capabilities":{}}`, true},
	{"caps-repeated-last-alone", `{"capabilities":{"privateTo":true},"capabilities":{"readerRecords":true}}`, true},
	{"caps-member-repeated-bad-first", `{"capabilities":{"privateTo":1,"privateTo":true}}`, true},
	{"caps-repeated-bad-last", `{"capabilities":{},"capabilities":7}`, false},
	{"load-repeated-bad-first", `{"sessionLoad":{"droppedLines":-1,"droppedLines":2}}`, true},
	{"leading-vt", "\v{}", true},
	{"trailing", `{}{}`, false},
}

func oldParseWorkerReady(data []byte) (WorkerReady, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return WorkerReady{}, nil
	}
	var raw struct {
		Capabilities   json.RawMessage `json:"capabilities"`
		PrivateHistory json.RawMessage `json:"privateHistory"`
		SessionLoad    json.RawMessage `json:"sessionLoad"`
	}
	if decodeObjectStrict(data, &raw) != nil {
		return WorkerReady{}, ErrReadyHandshake
	}
	var w WorkerReady
	var ok bool
	if w.PrivateHistory, ok = oldOptBool(raw.PrivateHistory); !ok {
		return WorkerReady{}, ErrReadyHandshake
	}
	if w.SessionLoad, ok = oldParseSessionLoad(raw.SessionLoad); !ok {
		return WorkerReady{}, ErrReadyHandshake
	}
	if raw.Capabilities == nil {
		return w, nil
	}
	var caps struct {
		PrivateTo     json.RawMessage `json:"privateTo"`
		ReaderRecords json.RawMessage `json:"readerRecords"`
	}
	if decodeObjectStrict(raw.Capabilities, &caps) != nil {
		return WorkerReady{}, ErrReadyHandshake
	}
	privateTo, ok1 := oldOptBool(caps.PrivateTo)
	readers, ok2 := oldOptBool(caps.ReaderRecords)
	if !ok1 || !ok2 {
		return WorkerReady{}, ErrReadyHandshake
	}
	w.Capabilities = &WorkerCapabilities{PrivateTo: privateTo, ReaderRecords: readers}
	return w, nil
}

func oldParseSessionLoad(raw json.RawMessage) (*SessionLoad, bool) {
	if raw == nil {
		return nil, true
	}
	var counts struct {
		DroppedLines json.RawMessage `json:"droppedLines"`
		IgnoredFiles json.RawMessage `json:"ignoredFiles"`
	}
	if decodeObjectStrict(raw, &counts) != nil {
		return nil, false
	}
	dropped, ok1 := oldOptCount(counts.DroppedLines)
	ignored, ok2 := oldOptCount(counts.IgnoredFiles)
	if !ok1 || !ok2 {
		return nil, false
	}
	return &SessionLoad{DroppedLines: dropped, IgnoredFiles: ignored}, true
}

func oldOptCount(raw json.RawMessage) (int, bool) {
	if raw == nil {
		return 0, true
	}
	if len(raw) == 0 || len(raw) > 10 || (raw[0] == '0' && len(raw) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= MaxSessionLoadCount
}

func oldOptBool(raw json.RawMessage) (value, ok bool) {
	switch string(raw) {
	case "":
		return false, true
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}
