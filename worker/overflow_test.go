package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/brokerclient"
)

// The refusals of an over-long request in the worker's two dialects, as
// the upstreams write them.
const (
	anthropicTooLong = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`
	openaiTooLong    = `{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens. Please reduce the length of the messages.","param":"messages","type":"invalid_request_error"}}`
	anthropicInvalid = `{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate between \"user\" and \"assistant\""}}`
)

// The rule of contextOverflow: a 400 whose error's code or message says
// the request is over the context, in either dialect, case-insensitive,
// the message read within its bound; nothing else.
func TestContextOverflowRule(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"anthropic prompt is too long", 400, anthropicTooLong, true},
		{"anthropic input and max_tokens over the limit", 400,
			`{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 197626 + 8192 > 200000, decrease input length or ` + "`max_tokens`" + ` and try again"}}`, true},
		{"openai context_length_exceeded", 400, openaiTooLong, true},
		{"openai code alone", 400, `{"error":{"code":"context_length_exceeded","message":"","type":"invalid_request_error"}}`, true},
		{"openai code in capitals", 400, `{"error":{"code":"CONTEXT_LENGTH_EXCEEDED"}}`, true},
		{"openai-compatible message without a code", 400, `{"error":{"code":null,"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error"}}`, true},
		{"code in the message", 400, `{"error":{"code":400,"message":"Error: context_length_exceeded"}}`, true},
		{"message in capitals", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"PROMPT IS TOO LONG"}}`, true},
		{"another 400", 400, anthropicInvalid, false},
		{"another code", 400, `{"error":{"code":"invalid_value","message":"bad"}}`, false},
		{"not a 400", 413, anthropicTooLong, false},
		{"a 500 with the phrase", 500, openaiTooLong, false},
		{"not JSON", 400, `prompt is too long`, false},
		{"error a string", 400, `{"error":"prompt is too long"}`, false},
		{"phrase outside the error", 400, `{"message":"prompt is too long","error":{"message":"bad"}}`, false},
		{"message not a string", 400, `{"error":{"message":["prompt is too long"]}}`, false},
		{"phrase past the bound", 400, `{"error":{"message":"` + strings.Repeat("x", maxOverflowMessage) + `prompt is too long"}}`, false},
		{"phrase at the bound", 400, `{"error":{"message":"` + strings.Repeat("x", maxOverflowMessage-len("prompt is too long")) + `prompt is too long"}}`, true},
		{"empty body", 400, ``, false},
		{"truncated body", 400, anthropicTooLong[:60], false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := contextOverflow(tc.status, []byte(tc.body)); got != tc.want {
				t.Errorf("contextOverflow(%d, %.80s) = %v; want %v", tc.status, tc.body, got, tc.want)
			}
		})
	}
}

// A recognised refusal is errContextOverflow and still the refusal it
// was: the failure line and the turn's error keep their class and detail
// (broker_refused, status 400). Anything else passes unmarked.
func TestOverflowedKeepsTheRefusal(t *testing.T) {
	tests := []struct {
		name         string
		err          error
		wantOverflow bool
	}{
		{"anthropic body", &brokerclient.StatusError{Status: 400, Body: []byte(anthropicTooLong)}, true},
		{"openai body through post", fmt.Errorf("broker /model: %w", &brokerclient.StatusError{Status: 400, Body: []byte(openaiTooLong)}), true},
		{"another 400", &brokerclient.StatusError{Status: 400, Body: []byte(anthropicInvalid)}, false},
		{"a 400 without its body", &brokerclient.StatusError{Status: 400}, false},
		{"not a refusal", errModelResponse, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := overflowed(tc.err)
			if got := errors.Is(err, errContextOverflow); got != tc.wantOverflow {
				t.Errorf("errors.Is(overflowed(%v), errContextOverflow) = %v; want %v", tc.err, got, tc.wantOverflow)
			}
			gotClass, gotDetail := classify(err)
			wantClass, wantDetail := classify(tc.err)
			if gotClass != wantClass || gotDetail != wantDetail {
				t.Errorf("classify = %s %q; want %s %q as before", gotClass, gotDetail, wantClass, wantDetail)
			}
		})
	}
}

func FuzzContextOverflow(f *testing.F) {
	for _, s := range []string{anthropicTooLong, openaiTooLong, anthropicInvalid, `{"error":{"code":"CONTEXT_LENGTH_EXCEEDED"}}`, `{"error":"x"}`, ``} {
		f.Add(400, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if !contextOverflow(status, body) {
			return
		}
		if status != 400 || !json.Valid(body) {
			t.Fatalf("status %d, body %q recognised as an overflow", status, body)
		}
	})
}
