package jsonjs

import (
	"encoding/json"
	"testing"
)

func TestMarshalMatchesJSONStringify(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"html-not-escaped", "<a&b>", `"<a&b>"`},
		{"line-separators-raw", "a\u2028b\u2029c", "\"a\u2028b\u2029c\""},
		{"escaped-backslash-before-u2028-text", `\u2028`, `"\\u2028"`},
		{"controls", "\n\t\r\x01", `"\n\t\r\u0001"`},
		{"quote-and-backslash", `"\`, `"\"\\"`},
		{"cjk-raw", "丁", `"丁"`},
		{"object", map[string]any{"text": "<x>"}, `{"text":"<x>"}`},
		{"number-kept", json.Number("1.50"), `1.50`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Marshal(tt.in)
			if err != nil {
				t.Fatalf("Marshal(%q) error: %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Marshal(%q) = %s; want %s", tt.in, got, tt.want)
			}
			if n := Size(tt.in); n != len(tt.want) {
				t.Errorf("Size(%q) = %d; want %d", tt.in, n, len(tt.want))
			}
		})
	}
}

func TestStringSizeCountsUTF8Bytes(t *testing.T) {
	if got := StringSize("丁丁"); got != 8 {
		t.Errorf(`StringSize("丁丁") = %d; want 8`, got)
	}
}

func TestEncodeURIComponent(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a b/c", "a%20b%2Fc"},
		{"AZaz09-_.!~*'()", "AZaz09-_.!~*'()"},
		{"real-model-key", "real-model-key"},
		{"k+y=?&#", "k%2By%3D%3F%26%23"},
		{"丁", "%E4%B8%81"},
		{"é", "%C3%A9"},
	}
	for _, tt := range tests {
		if got := EncodeURIComponent(tt.in); got != tt.want {
			t.Errorf("EncodeURIComponent(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzMarshalRoundTrip(f *testing.F) {
	for _, s := range []string{"<a&b>", "a\u2028b", `\u2028`, "\x00", "丁", `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Marshal(%q) = %s: not JSON: %v", s, b, err)
		}
		std, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(std, &want)
		if back != want {
			t.Fatalf("round trip of %q = %q; want %q", s, back, want)
		}
	})
}
