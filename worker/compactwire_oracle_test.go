package worker

// The field-by-field reads of a compactor's answer (declined,
// rawDetails) and of an upstream error body (contextOverflow) that typed
// structs replaced, kept as the oracles of
// FuzzCompactAnswerAgreesWithFieldByField and
// FuzzContextOverflowAgreesWithFieldByField.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// FuzzCompactAnswerAgreesWithFieldByField holds parseCompactAnswer to
// the one that read ok and details field by field.
func FuzzCompactAnswerAgreesWithFieldByField(f *testing.F) {
	for _, tc := range compactAnswerMembersCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseCompactAnswer(data, "k", "e")
		want, oldErr := oldParseCompactAnswer(data, "k", "e")
		if fmt.Sprint(err) != fmt.Sprint(oldErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: typed %+v, %v; field by field %+v, %v", data, got, err, want, oldErr)
		}
	})
}

// TestCompactAnswerMembersExact pins how a compactor's answer is read
// beyond wire.ParseCompactResponse: a refused answer whose ok (by exact
// name, its last value) is false is a fallback without a reason; the
// details kept are those received.
func TestCompactAnswerMembersExact(t *testing.T) {
	for _, tc := range compactAnswerMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCompactAnswer([]byte(tc.body), "k", "e")
			if fmt.Sprint(err) != tc.err || string(got.details) != tc.details {
				t.Fatalf("parseCompactAnswer(%s) = %s, %v; want %s, %s", tc.body, got.details, err, tc.details, tc.err)
			}
		})
	}
}

var compactAnswerMembersCases = []struct{ name, body, details, err string }{
	{"ok", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"k","tokensBefore":10,"details":{"engine":"e", "n" : 1}}}`, `{"engine":"e","n":1}`, "<nil>"},
	{"declined-bad-fallback", `{"ok":false,"fallback":7}`, "", "the broker gave no reason"},
	{"declined-folded-ok", `{"OK":false,"fallback":7}`, "", "the compactor's result is invalid"},
	{"declined-null-ok", `{"ok":null}`, "", "the compactor's result is invalid"},
	{"declined-repeated-ok", `{"ok":true,"ok":false,"fallback":null}`, "", "the broker gave no reason"},
	{"details-missing", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"k","tokensBefore":10}}`, "", "the compactor's result is invalid"},
	{"details-repeated", `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"k","tokensBefore":10,"details":[],"details":{"engine":"e"}}}`, `{"engine":"e"}`, "<nil>"},
}

func oldParseCompactAnswer(data []byte, firstKept, engine string) (hostSummary, error) {
	ans, err := wire.ParseCompactResponse(data)
	switch {
	case err != nil && oldDeclined(data):
		return hostSummary{}, compactFallback("")
	case err != nil:
		return hostSummary{}, errCompactAnswer
	case !ans.OK:
		return hostSummary{}, compactFallback(ans.Fallback)
	}
	c := ans.Compaction
	details := oldRawDetails(data)
	detailsEngine, _ := c.Details["engine"].(string)
	if rtsandbox.UTF16Len(c.Summary) > maxSummary || c.FirstKeptEntryID != firstKept || c.TokensBefore < 0 ||
		(c.EstimatedTokensAfter != nil && *c.EstimatedTokensAfter < 0) ||
		c.Details == nil || len(details) > maxCompactDetails || detailsEngine != engine {
		return hostSummary{}, errCompactAnswer
	}
	return hostSummary{summary: c.Summary, details: compact(details)}, nil
}

func oldDeclined(data []byte) bool {
	obj, _ := object(data)
	ok, isBool := boolean(obj["ok"])
	return isBool && !ok
}

func oldRawDetails(data []byte) json.RawMessage {
	obj, _ := object(data)
	c, _ := object(obj["compaction"])
	return c["details"]
}

// FuzzContextOverflowAgreesWithFieldByField holds contextOverflow to the
// one that read code and message as raw members.
func FuzzContextOverflowAgreesWithFieldByField(f *testing.F) {
	for _, s := range []string{anthropicTooLong, openaiTooLong, anthropicInvalid, `{"error":{"code":"CONTEXT_LENGTH_EXCEEDED"}}`, `{"error":"x"}`, ``,
		`{"error":{"Code":"context_length_exceeded"}}`, `{"error":{"code":null,"message":"prompt is too long"}}`, `{"ERROR":{"message":"prompt is too long"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := contextOverflow(http.StatusBadRequest, body), oldContextOverflow(http.StatusBadRequest, body); got != want {
			t.Fatalf("%q: typed %v; raw members %v", body, got, want)
		}
	})
}

func oldContextOverflow(status int, body []byte) bool {
	if status != http.StatusBadRequest {
		return false
	}
	var b struct {
		Error *struct {
			Code    json.RawMessage `json:"code"`
			Message json.RawMessage `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil || b.Error == nil {
		return false
	}
	if code, ok := str(b.Error.Code); ok && strings.EqualFold(code, overflowCode) {
		return true
	}
	msg, _ := str(b.Error.Message)
	msg = strings.ToLower(msg[:min(len(msg), maxOverflowMessage)])
	for _, p := range overflowPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
