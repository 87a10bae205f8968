package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// compactBase is a valid compact request; tests replace one member.
const compactBase = `{"reason":"manual","tokensBefore":1200,"firstKeptEntryId":"e7","isSplitTurn":false,` +
	`"messagesToSummarize":[{"role":"user","content":"hi"}],"turnPrefixMessages":[],` +
	`"keptMessages":[{"role":"assistant","content":[{"type":"text","text":"ok"}]}],"readFiles":["a.txt"],"modifiedFiles":[]}`

// withMember replaces (or adds, or with value "" removes) one member of
// compactBase.
func withMember(t testing.TB, base, key, value string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(m, key)
	} else {
		m[key] = json.RawMessage(value)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

var compactRequestCases = []struct {
	name, key, value string
	ok               bool
}{
	{"valid", "reason", `"manual"`, true},
	{"threshold", "reason", `"threshold"`, true},
	{"overflow", "reason", `"overflow"`, true},
	{"unknown-reason", "reason", `"later"`, false},
	{"reason-missing", "reason", ``, false},
	{"tokens-zero", "tokensBefore", `0`, true},
	{"tokens-float-integral", "tokensBefore", `12.0`, true},
	{"tokens-exponent", "tokensBefore", `1e3`, true},
	{"tokens-max-safe", "tokensBefore", `9007199254740991`, true},
	{"tokens-over-safe", "tokensBefore", `9007199254740992`, false},
	{"tokens-rounds-over-safe", "tokensBefore", `9007199254740993`, false},
	{"tokens-fraction", "tokensBefore", `1.5`, false},
	{"tokens-negative", "tokensBefore", `-1`, false},
	{"tokens-string", "tokensBefore", `"12"`, false},
	{"tokens-null", "tokensBefore", `null`, false},
	{"tokens-huge", "tokensBefore", `1e400`, false},
	{"entry-256", "firstKeptEntryId", `"` + strings.Repeat("e", 256) + `"`, true},
	{"entry-257", "firstKeptEntryId", `"` + strings.Repeat("e", 257) + `"`, false},
	{"entry-astral-128", "firstKeptEntryId", `"` + strings.Repeat("😀", 128) + `"`, true},
	{"entry-astral-129", "firstKeptEntryId", `"` + strings.Repeat("😀", 129) + `"`, false},
	{"entry-empty", "firstKeptEntryId", `""`, false},
	{"split-not-bool", "isSplitTurn", `"no"`, false},
	{"split-missing", "isSplitTurn", ``, false},
	{"message-no-role", "messagesToSummarize", `[{"content":"x"}]`, false},
	{"message-role-number", "messagesToSummarize", `[{"role":1}]`, false},
	{"message-role-case", "messagesToSummarize", `[{"ROLE":"user"}]`, false},
	{"message-not-object", "keptMessages", `["user"]`, false},
	{"message-null", "turnPrefixMessages", `[null]`, false},
	{"messages-null", "keptMessages", `null`, false},
	{"messages-object", "keptMessages", `{}`, false},
	{"any-role", "turnPrefixMessages", `[{"role":"toolResult","toolCallId":"t1","content":[]}]`, true},
	{"previous-summary", "previousSummary", `"before"`, true},
	{"previous-summary-null", "previousSummary", `null`, false},
	{"instructions", "customInstructions", `"keep names"`, true},
	{"instructions-number", "customInstructions", `3`, false},
	{"read-files-number", "readFiles", `[1]`, false},
	{"modified-missing", "modifiedFiles", ``, false},
	{"unknown-member-dropped", "extra", `{"x":1}`, true},
}

func TestParseCompactRequest(t *testing.T) {
	for _, tc := range compactRequestCases {
		t.Run(tc.name, func(t *testing.T) {
			body := withMember(t, compactBase, tc.key, tc.value)
			r, err := ParseCompactRequest([]byte(body))
			if (err == nil) != tc.ok {
				t.Fatalf("ParseCompactRequest(%s) = %v; want ok %v", body, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrCompactRequest) {
				t.Errorf("error %v is not ErrCompactRequest", err)
			}
			if tc.ok && r.Validate() != nil {
				t.Errorf("parsed request fails Validate: %+v", r)
			}
		})
	}
}

func TestParseCompactRequestShape(t *testing.T) {
	r, err := ParseCompactRequest([]byte(compactBase))
	if err != nil {
		t.Fatal(err)
	}
	want := CompactRequest{
		Reason: CompactManual, TokensBefore: 1200, FirstKeptEntryID: "e7",
		MessagesToSummarize: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
		TurnPrefixMessages:  []json.RawMessage{},
		KeptMessages:        []json.RawMessage{json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"ok"}]}`)},
		ReadFiles:           []string{"a.txt"}, ModifiedFiles: []string{},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("ParseCompactRequest (-want +got):\n%s", diff)
	}
	for _, bad := range []string{``, `[]`, `null`, `{}`, compactBase + `{}`, `"x"`} {
		if _, err := ParseCompactRequest([]byte(bad)); err == nil {
			t.Errorf("ParseCompactRequest(%q) accepted", bad)
		}
	}
}

func TestCompactRequestMarshalEmptyLists(t *testing.T) {
	r := CompactRequest{Reason: CompactThreshold, FirstKeptEntryID: "a"}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"reason":"threshold","tokensBefore":0,"firstKeptEntryId":"a","isSplitTurn":false,"messagesToSummarize":[],` +
		`"turnPrefixMessages":[],"keptMessages":[],"readFiles":[],"modifiedFiles":[]}`
	if string(data) != want {
		t.Errorf("Marshal = %s\nwant %s", data, want)
	}
	if _, err := ParseCompactRequest(data); err != nil {
		t.Errorf("a marshalled request does not parse: %v", err)
	}
}

func TestCompactionValidate(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		c    Compaction
		ok   bool
	}{
		{"valid", Compaction{Summary: "s", FirstKeptEntryID: "e7", TokensBefore: 10}, true},
		{"with-estimate-details", Compaction{Summary: "s", FirstKeptEntryID: "e7", TokensBefore: 10,
			EstimatedTokensAfter: n(3), Details: map[string]any{"decisions": 3}}, true},
		{"empty-summary", Compaction{FirstKeptEntryID: "e7", TokensBefore: 10}, false},
		{"wrong-entry", Compaction{Summary: "s", FirstKeptEntryID: "e8", TokensBefore: 10}, false},
		{"tokens-over-safe", Compaction{Summary: "s", FirstKeptEntryID: "e7", TokensBefore: 1 << 53}, false},
		{"estimate-over-safe", Compaction{Summary: "s", FirstKeptEntryID: "e7", EstimatedTokensAfter: n(-(1 << 53))}, false},
		{"details-not-json", Compaction{Summary: "s", FirstKeptEntryID: "e7", Details: map[string]any{"f": func() {}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate("e7")
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrCompaction)) {
				t.Errorf("Validate = %v; want ok %v", err, tc.ok)
			}
		})
	}
}

var compactResponseCases = []struct {
	name, body string
	ok         bool
}{
	{"fallback", `{"ok":false,"fallback":"the host has no compactor"}`, true},
	{"compaction", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"e7","tokensBefore":5,"estimatedTokensAfter":2,"details":{"engine":"x","n":1.5}}}`, true},
	{"no-details", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"e7","tokensBefore":5}}`, true},
	{"details-array", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"e7","tokensBefore":5,"details":[]}}`, false},
	{"details-null", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"e7","tokensBefore":5,"details":null}}`, false},
	{"empty-summary", `{"ok":true,"compaction":{"summary":"","firstKeptEntryId":"e7","tokensBefore":5}}`, false},
	{"no-entry", `{"ok":true,"compaction":{"summary":"S","tokensBefore":5}}`, false},
	{"tokens-fraction", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"e7","tokensBefore":5.5}}`, false},
	{"fallback-missing", `{"ok":false}`, false},
	{"ok-string", `{"ok":"true"}`, false},
	{"not-object", `[]`, false},
}

func TestParseCompactResponse(t *testing.T) {
	for _, tc := range compactResponseCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseCompactResponse([]byte(tc.body))
			if (err == nil) != tc.ok {
				t.Fatalf("ParseCompactResponse(%s) = %+v, %v; want ok %v", tc.body, r, err, tc.ok)
			}
			if tc.ok {
				wantEncoding(t, r, tc.body)
			}
		})
	}
}

// wantEncoding checks that v encodes as body.
func wantEncoding(t *testing.T, v any, body string) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil || string(data) != body {
		t.Errorf("round trip = %s (%v); want %s", data, err, body)
	}
}

var reportCases = []struct {
	name, body string
	ok         bool
}{
	{"bypass", `{"type":"bypass","reason":"above the hard ceiling","tokensBefore":500001}`, true},
	{"bypass-reason-1000", `{"type":"bypass","reason":"` + strings.Repeat("r", 1000) + `","tokensBefore":1}`, true},
	{"bypass-reason-1001", `{"type":"bypass","reason":"` + strings.Repeat("r", 1001) + `","tokensBefore":1}`, false},
	{"bypass-no-tokens", `{"type":"bypass","reason":"x"}`, false},
	{"bypass-negative", `{"type":"bypass","reason":"x","tokensBefore":-1}`, false},
	{"bypass-reason-number", `{"type":"bypass","reason":1,"tokensBefore":1}`, false},
	{"end-full", `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"engine":"extension","tokensBefore":900,"tokensAfter":100,"contextAfter":120,"nextCompactionAt":300000}`, true},
	{"end-minimal", `{"type":"end","reason":"threshold","aborted":true,"willRetry":true}`, true},
	{"end-error", `{"type":"end","reason":"overflow","aborted":false,"willRetry":false,"error":"boom"}`, true},
	{"end-error-10000", `{"type":"end","reason":"overflow","aborted":false,"willRetry":false,"error":"` + strings.Repeat("e", 10000) + `"}`, true},
	{"end-error-10001", `{"type":"end","reason":"overflow","aborted":false,"willRetry":false,"error":"` + strings.Repeat("e", 10001) + `"}`, false},
	{"end-engine-pi", `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"engine":"pi"}`, true},
	{"end-engine-other", `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"engine":"host"}`, false},
	{"end-engine-empty", `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"engine":""}`, false},
	{"end-reason-free-text", `{"type":"end","reason":"because","aborted":false,"willRetry":false}`, false},
	{"end-aborted-missing", `{"type":"end","reason":"manual","willRetry":false}`, false},
	{"end-tokens-null", `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"tokensAfter":null}`, false},
	{"end-tokens-negative", `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"contextAfter":-5}`, false},
	{"end-tokens-fraction", `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"nextCompactionAt":0.5}`, false},
	{"other-type", `{"type":"start","reason":"manual"}`, false},
	{"no-type", `{"reason":"manual"}`, false},
	{"not-object", `"end"`, false},
	{"trailing", `{"type":"end","reason":"manual","aborted":false,"willRetry":false}{}`, false},
}

func TestParseCompactionReport(t *testing.T) {
	for _, tc := range reportCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseCompactionReport([]byte(tc.body))
			if (err == nil) != tc.ok {
				t.Fatalf("ParseCompactionReport = %+v, %v; want ok %v", r, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrCompactionReport) {
				t.Errorf("error %v is not ErrCompactionReport", err)
			}
			if err == nil {
				wantEncoding(t, r, tc.body)
			}
		})
	}
}

func TestDefaultCompactorTimeoutFor(t *testing.T) {
	for _, tc := range []struct {
		turn, want time.Duration
		fits       bool
	}{
		{600 * time.Second, 120 * time.Second, true},
		{300 * time.Second, 100 * time.Second, true},
		{70 * time.Second, 23333 * time.Millisecond, true}, // ⌊70000/3⌋ ms
		{3 * time.Second, time.Second, true},
		{2 * time.Second, time.Second, true},
		{time.Second, time.Second, false}, // 1 s is more than half of 1 s
		{time.Hour, 120 * time.Second, true},
	} {
		got := DefaultCompactorTimeoutFor(tc.turn)
		if got != tc.want || CompactorTimeoutFits(got, tc.turn) != tc.fits {
			t.Errorf("DefaultCompactorTimeoutFor(%v) = %v (fits %v); want %v (fits %v)", tc.turn, got,
				CompactorTimeoutFits(got, tc.turn), tc.want, tc.fits)
		}
	}
}

// roundTrip checks what a parser accepted: it passes validate (when
// given), and its marshalled form parses again to the same encoding.
func roundTrip[T any](t *testing.T, data []byte, parse func([]byte) (T, error), validate func(T) error) {
	t.Helper()
	v, err := parse(data)
	if err != nil {
		return
	}
	if validate != nil {
		if err := validate(v); err != nil {
			t.Fatalf("accepted %s fails Validate: %v", data, err)
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	again, err := parse(out)
	if err != nil {
		t.Fatalf("marshalled %s does not parse: %v", out, err)
	}
	if out2, _ := json.Marshal(again); string(out) != string(out2) {
		t.Fatalf("round trip differs:\n%s\n%s", out, out2)
	}
}

// FuzzParseCompactRequest: no panic; an accepted request passes Validate
// and survives a round trip.
func FuzzParseCompactRequest(f *testing.F) {
	for _, tc := range compactRequestCases {
		f.Add([]byte(withMember(f, compactBase, tc.key, tc.value)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, ParseCompactRequest, CompactRequest.Validate)
	})
}

// FuzzParseCompactionReport: no panic; an accepted report passes Validate
// and survives a round trip.
func FuzzParseCompactionReport(f *testing.F) {
	for _, tc := range reportCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, ParseCompactionReport, CompactionReport.Validate)
	})
}

// FuzzParseCompactResponse: no panic; an accepted answer survives a round
// trip.
func FuzzParseCompactResponse(f *testing.F) {
	for _, tc := range compactResponseCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, ParseCompactResponse, nil)
	})
}
