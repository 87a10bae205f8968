package wire

// The field-by-field compaction parsers the typed wire structs replaced
// (7bffc52), kept as the oracle of FuzzCompactWireAgreesWithFieldByField:
// the typed decoding accepts exactly what they accepted, with the same
// values.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// FuzzCompactWireAgreesWithFieldByField holds the three typed parsers to
// the field-by-field ones they replaced: the same verdict on every input,
// and the same value when accepted.
func FuzzCompactWireAgreesWithFieldByField(f *testing.F) {
	for _, tc := range compactRequestCases {
		f.Add([]byte(withMember(f, compactBase, tc.key, tc.value)))
	}
	for _, tc := range reportCases {
		f.Add([]byte(tc.body))
	}
	for _, tc := range compactResponseCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"Reason":"manual","reason":"manual","reason":"overflow"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		agree(t, "request", data, ParseCompactRequest, oldParseCompactRequest)
		agree(t, "response", data, ParseCompactResponse, oldParseCompactResponse)
		agree(t, "report", data, ParseCompactionReport, oldParseCompactionReport)
	})
}

func agree[T any](t *testing.T, what string, data []byte, parse, old func([]byte) (T, error)) {
	t.Helper()
	got, err := parse(data)
	want, oldErr := old(data)
	if (err == nil) != (oldErr == nil) || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %q: typed %+v, %v; field by field %+v, %v", what, data, got, err, want, oldErr)
	}
}

func oldParseCompactRequest(data []byte) (CompactRequest, error) {
	obj, isObj := members(data)
	if !isObj {
		return CompactRequest{}, ErrCompactRequest
	}
	var r CompactRequest
	var ok [11]bool
	r.Reason, ok[0] = jsonString(obj["reason"])
	r.TokensBefore, ok[1] = SafeInteger(obj["tokensBefore"])
	r.FirstKeptEntryID, ok[2] = jsonString(obj["firstKeptEntryId"])
	r.IsSplitTurn, ok[3] = oldJSONBool(obj["isSplitTurn"])
	r.MessagesToSummarize, ok[4] = jsonMessages(obj["messagesToSummarize"])
	r.TurnPrefixMessages, ok[5] = jsonMessages(obj["turnPrefixMessages"])
	r.KeptMessages, ok[6] = jsonMessages(obj["keptMessages"])
	r.PreviousSummary, ok[7] = oldOptString(obj["previousSummary"])
	r.CustomInstructions, ok[8] = oldOptString(obj["customInstructions"])
	r.ReadFiles, ok[9] = jsonStrings(obj["readFiles"])
	r.ModifiedFiles, ok[10] = jsonStrings(obj["modifiedFiles"])
	if slices.Contains(ok[:], false) {
		return CompactRequest{}, ErrCompactRequest
	}
	if r.ValidateScalars() != nil { // the messages were checked as they were read
		return CompactRequest{}, ErrCompactRequest
	}
	return r, nil
}

func oldParseCompactResponse(data []byte) (CompactResponse, error) {
	obj, isObj := members(data)
	if !isObj {
		return CompactResponse{}, ErrCompactResponse
	}
	ok, valid := oldJSONBool(obj["ok"])
	if !valid {
		return CompactResponse{}, ErrCompactResponse
	}
	if !ok {
		fallback, valid := jsonString(obj["fallback"])
		if !valid {
			return CompactResponse{}, ErrCompactResponse
		}
		return CompactResponse{Fallback: fallback}, nil
	}
	c, err := oldParseCompaction(obj["compaction"])
	if err != nil {
		return CompactResponse{}, ErrCompactResponse
	}
	return CompactResponse{OK: true, Compaction: &c}, nil
}

// parseCompaction reads a compaction object of a compact response.
func oldParseCompaction(raw json.RawMessage) (Compaction, error) {
	obj, isObj := members(raw)
	if !isObj {
		return Compaction{}, ErrCompaction
	}
	var c Compaction
	var ok [5]bool
	c.Summary, ok[0] = jsonString(obj["summary"])
	c.FirstKeptEntryID, ok[1] = jsonString(obj["firstKeptEntryId"])
	c.TokensBefore, ok[2] = SafeInteger(obj["tokensBefore"])
	c.EstimatedTokensAfter, ok[3] = oldOptSafeInt(obj["estimatedTokensAfter"])
	ok[4] = true
	if d, present := obj["details"]; present {
		dec := json.NewDecoder(bytes.NewReader(d))
		dec.UseNumber()
		ok[4] = isJSONObject(d) && dec.Decode(&c.Details) == nil
	}
	if slices.Contains(ok[:], false) {
		return Compaction{}, ErrCompaction
	}
	if !validEntryID(c.FirstKeptEntryID) || c.Validate(c.FirstKeptEntryID) != nil {
		return Compaction{}, ErrCompaction
	}
	return c, nil
}

func oldParseCompactionReport(data []byte) (CompactionReport, error) {
	obj, isObj := members(data)
	if !isObj {
		return CompactionReport{}, ErrCompactionReport
	}
	var r CompactionReport
	ok := make([]bool, 0, 10)
	add := func(v bool) { ok = append(ok, v) }
	var v bool
	r.Type, v = jsonString(obj["type"])
	add(v)
	r.Reason, v = jsonString(obj["reason"])
	add(v)
	switch r.Type {
	case ReportBypass:
		var n int64
		n, v = SafeInteger(obj["tokensBefore"])
		r.TokensBefore = &n
		add(v)
	case ReportEnd:
		r.Aborted, v = oldJSONBool(obj["aborted"])
		add(v)
		r.WillRetry, v = oldJSONBool(obj["willRetry"])
		add(v)
		r.Engine, v = oldOptString(obj["engine"])
		add(v && (!oldPresent(obj, "engine") || r.Engine != ""))
		for _, f := range []struct {
			key string
			to  **int64
		}{{"tokensBefore", &r.TokensBefore}, {"tokensAfter", &r.TokensAfter}, {"contextAfter", &r.ContextAfter}, {"nextCompactionAt", &r.NextCompactionAt}} {
			*f.to, v = oldOptSafeInt(obj[f.key])
			add(v)
		}
		r.Error, v = oldOptString(obj["error"])
		add(v)
	}
	if slices.Contains(ok[:], false) {
		return CompactionReport{}, ErrCompactionReport
	}
	if r.Validate() != nil {
		return CompactionReport{}, ErrCompactionReport
	}
	return r, nil
}

func oldPresent(obj map[string]json.RawMessage, key string) bool {
	_, ok := obj[key]
	return ok
}

// optString reads a member that is absent or a string.
func oldOptString(raw json.RawMessage) (string, bool) {
	if raw == nil {
		return "", true
	}
	return jsonString(raw)
}

// jsonBool reads a required JSON boolean.
func oldJSONBool(raw json.RawMessage) (value, ok bool) {
	if raw == nil {
		return false, false
	}
	return optBool(raw)
}

// optSafeInt reads a member that is absent or a safe integer ≥ 0.
func oldOptSafeInt(raw json.RawMessage) (*int64, bool) {
	if raw == nil {
		return nil, true
	}
	n, ok := SafeInteger(raw)
	if !ok {
		return nil, false
	}
	return &n, true
}
