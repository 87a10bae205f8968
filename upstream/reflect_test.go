package upstream

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// reflectionCases are shared by the table test and the fuzz seeds.
var reflectionCases = []struct {
	name, key, body string
	want            error
}{
	{"clean", "real-model-key", `{"choices":[]}`, nil},
	{"raw-value", "real-model-key", `{"token":"real-model-key"}`, ErrReflect},
	{"escaped-value", "real-model-key", `{"token":"real\u002dmodel\u002dkey"}`, ErrReflect},
	{"object-key", "real-model-key", `{"real-model-key":1}`, ErrReflect},
	{"nested-array", "real-model-key", `{"a":[1,{"b":["xx real-model-key yy"]}]}`, ErrReflect},
	{"base64", "real-model-key", `{"t":"` + base64.StdEncoding.EncodeToString([]byte("real-model-key")) + `"}`, ErrReflect},
	{"base64url", "k?>~k?>~", `{"t":"` + base64.RawURLEncoding.EncodeToString([]byte("k?>~k?>~")) + `"}`, ErrReflect},
	{"lower-hex", "real-model-key", `{"t":"` + hex.EncodeToString([]byte("real-model-key")) + `"}`, ErrReflect},
	{"upper-hex", "real-model-key", `{"t":"` + strings.ToUpper(hex.EncodeToString([]byte("real-model-key"))) + `"}`, ErrReflect},
	{"url-encoded", "a b/c", `{"t":"x=a%20b%2Fc"}`, ErrReflect},
	{"duplicate-key-hides-nothing", "real-model-key", `{"t":"real-model-key","t":"x"}`, ErrReflect},
	{"numbers-ignored", "123", `{"n":123}`, nil},
	{"no-key-no-check", "", `{"t":"anything"}`, nil},
	{"top-level-string", "real-model-key", `"real-model-key"`, ErrReflect},
	{"not-json", "k", `{"a":`, ErrNotJSON},
	{"empty", "k", ``, ErrNotJSON},
	{"two-values", "k", `{} {}`, ErrNotJSON},
	{"trailing-garbage", "k", `{}]`, ErrNotJSON},
	{"html-text", "k", `<html>`, ErrNotJSON},
	{"lone-surrogate-then-key", "real-model-key", `{"t":"\ud800real-model-key"}`, ErrReflect},
	{"surrogate-pair", "😀k", `{"t":"\ud83d\ude00k"}`, ErrReflect},
	{"escaped-key-in-object-key", "real-model-key", `{"real\u002dmodel-key":1}`, ErrReflect},
	{"leading-zero", "k", `{"n":01}`, ErrNotJSON},
	{"bad-escape", "k", `{"t":"\x"}`, ErrNotJSON},
	{"control-in-string", "k", "{\"t\":\"a\nb\"}", ErrNotJSON},
	{"trailing-comma", "k", `[1,]`, ErrNotJSON},
	{"deep-nesting-at-limit", "k", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), nil},
	{"deep-nesting-over-limit", "k", `{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "}", ErrNotJSON},
}

func TestCheckJSON(t *testing.T) {
	for _, tt := range reflectionCases {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckJSON([]byte(tt.body), tt.key); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("CheckJSON(%.200s, %q) = %v; want %v", tt.body, tt.key, err, tt.want)
			}
		})
	}
}

func TestFormsAreSix(t *testing.T) {
	got := Forms("a b/c")
	want := []string{"a b/c", "a%20b%2Fc", "YSBiL2M=", "YSBiL2M", "6120622f63", "6120622F63"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Forms(%q) = %q; want %q", "a b/c", got, want)
	}
}

func FuzzCheckJSON(f *testing.F) {
	for _, tt := range reflectionCases {
		f.Add(tt.body, tt.key)
	}
	f.Fuzz(func(t *testing.T, body, key string) {
		// Keys are credentials read from the environment: valid UTF-8.
		// Inside answers, invalid UTF-8 is compared raw where a decoder
		// sees U+FFFD, which only a key holding U+FFFD could notice.
		if !utf8.ValidString(key) || strings.ContainsRune(key, utf8.RuneError) {
			return
		}
		err := CheckJSON([]byte(body), key)
		if err != nil && !errors.Is(err, ErrNotJSON) && !errors.Is(err, ErrReflect) {
			t.Fatalf("CheckJSON = %v; want a class", err)
		}
		var v any
		valid := json.Unmarshal([]byte(body), &v) == nil
		// Invalid JSON always fails (as ErrNotJSON, or ErrReflect when a
		// reflected key came first); valid JSON never fails as ErrNotJSON.
		if (!valid && err == nil) || (valid && errors.Is(err, ErrNotJSON)) {
			t.Fatalf("CheckJSON(%.200q) = %v; json.Unmarshal valid = %v", body, err, valid)
		}
		if err == nil && key != "" && walkFinds(v, Forms(key)) {
			t.Fatalf("CheckJSON(%.200q, %q) = nil; but a decoded string holds the key", body, key)
		}
	})
}

func walkFinds(v any, forms []string) bool {
	switch x := v.(type) {
	case string:
		return containsAny(x, forms)
	case []any:
		for _, e := range x {
			if walkFinds(e, forms) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if containsAny(k, forms) || walkFinds(e, forms) {
				return true
			}
		}
	}
	return false
}
