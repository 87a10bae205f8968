package wire

import (
	"strings"
	"testing"
)

// TestCompactWireMembersExact pins what encoding/json's own struct
// decoding would change in the three compaction parsers: a member is
// matched by its exact name (a name equal to one only under case folding
// is an unknown member, dropped, never taken), a repeated member counts
// as its last value, null is no value of any type, and nothing may follow
// the object.
func TestCompactWireMembersExact(t *testing.T) {
	req := func(s string) string { return strings.Replace(compactBase, `"reason":"manual"`, s, 1) }
	end := func(s string) string {
		return `{"type":"end","reason":"manual",` + s + `"aborted":false,"willRetry":false}`
	}
	tests := []struct {
		name  string
		parse func([]byte) error
		body  string
		ok    bool
	}{
		{"request-folded-name-only", parseReq, req(`"Reason":"manual"`), false},
		{"request-folded-name-dropped", parseReq, req(`"REASON":1,"reason":"manual"`), true},
		{"request-folded-name-after-dropped", parseReq, req(`"reason":"manual","rEason":null`), true},
		{"request-repeated-last-wins", parseReq, req(`"reason":"later","reason":"manual"`), true},
		{"request-repeated-last-refused", parseReq, req(`"reason":"manual","reason":"later"`), false},
		{"request-repeated-last-null", parseReq, req(`"reason":"manual","reason":null`), false},
		{"request-files-null-item", parseReq, strings.Replace(compactBase, `["a.txt"]`, `["a.txt",null]`, 1), false},
		{"request-message-role-folded", parseReq, strings.Replace(compactBase, `{"role":"user","content":"hi"}`, `{"Role":"user","role":"user"}`, 1), true},
		{"request-message-role-repeated-null", parseReq, strings.Replace(compactBase, `{"role":"user","content":"hi"}`, `{"role":"user","role":null}`, 1), false},
		{"request-whitespace", parseReq, " \n" + strings.ReplaceAll(compactBase, ":", " : ") + "\t", true},
		{"report-folded-aborted", parseReport, `{"type":"end","reason":"manual","Aborted":false,"willRetry":false}`, false},
		{"report-folded-type", parseReport, `{"Type":"end","type":"bypass","reason":"x","tokensBefore":1}`, true},
		{"report-engine-repeated", parseReport, end(`"engine":"host","engine":"pi",`), true},
		{"report-bypass-tokens-null", parseReport, `{"type":"bypass","reason":"x","tokensBefore":null}`, false},
		{"report-bypass-end-members-dropped", parseReport, `{"type":"bypass","reason":"x","tokensBefore":1,"aborted":"no"}`, true},
		{"report-end-bypass-only-reason-checked", parseReport, end(`"error":null,`), false},
		{"response-folded-ok", parseResp, `{"OK":true,"ok":false,"fallback":"f"}`, true},
		{"response-folded-summary", parseResp, `{"ok":true,"compaction":{"Summary":"S","firstKeptEntryId":"e7","tokensBefore":5}}`, false},
		{"response-fallback-null", parseResp, `{"ok":false,"fallback":null}`, false},
		{"response-compaction-null", parseResp, `{"ok":true,"compaction":null}`, false},
		{"response-ok-compaction-ignored", parseResp, `{"ok":false,"fallback":"f","compaction":7}`, true},
		{"response-details-repeated", parseResp, `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"e7","tokensBefore":5,"details":[],"details":{"a":1}}}`, true},
		{"response-estimate-null", parseResp, `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"e7","tokensBefore":5,"estimatedTokensAfter":null}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.parse([]byte(tt.body)); (err == nil) != tt.ok {
				t.Fatalf("parse(%s) = %v; want ok %v", tt.body, err, tt.ok)
			}
		})
	}
}

func parseReq(b []byte) error    { _, err := ParseCompactRequest(b); return err }
func parseReport(b []byte) error { _, err := ParseCompactionReport(b); return err }
func parseResp(b []byte) error   { _, err := ParseCompactResponse(b); return err }
