package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox/jsonjs"
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

// formKey is the key of the form tables: realistic in length, with a '/'
// so that encodeURIComponent differs from raw, with '-' for the JSON
// escape, and with bytes whose base64 holds '+' and '/' at every
// alignment, so that the standard and URL alphabets differ in each core.
const formKey = "sk-live/model~key?>0123456789"

// attackForms are the ways an answer can carry formKey, one row per form
// the check knows. Each is placed in a JSON string (and, for CheckText, in
// text) between ordinary words. The rows marked new were passed on before
// the alignment cores and the character-reference view existed.
var attackForms = []struct {
	name string
	text string // the text carrying the key as the guest or model sees it
	json string // the same inside a JSON string as sent; "" means text as is
}{
	{name: "raw", text: formKey},
	{name: "encodeURIComponent", text: jsonjs.EncodeURIComponent(formKey)},
	{name: "base64-std-padded", text: base64.StdEncoding.EncodeToString([]byte(formKey))},
	{name: "base64url", text: base64.RawURLEncoding.EncodeToString([]byte(formKey))},
	{name: "lower-hex", text: hex.EncodeToString([]byte(formKey))},
	{name: "upper-hex", text: strings.ToUpper(hex.EncodeToString([]byte(formKey)))},
	{name: "json-escaped", text: formKey, json: strings.ReplaceAll(formKey, "-", `\u002d`)},
	// new: the key not at the start of its base64 text, or followed by more.
	{name: "base64-std-offset-0-followed", text: base64.StdEncoding.EncodeToString([]byte(formKey + "@example\r\n"))},
	{name: "base64-std-offset-1", text: base64.StdEncoding.EncodeToString([]byte("x" + formKey))},
	{name: "base64-std-offset-2", text: base64.StdEncoding.EncodeToString([]byte("xy" + formKey))},
	{name: "base64url-offset-1", text: base64.RawURLEncoding.EncodeToString([]byte("x" + formKey))},
	{name: "base64url-offset-2", text: base64.URLEncoding.EncodeToString([]byte("xy" + formKey + "!"))},
	{name: "bearer-base64", text: base64.StdEncoding.EncodeToString([]byte("Bearer " + formKey))},
	{name: "authorization-base64", text: base64.StdEncoding.EncodeToString([]byte("Authorization: Bearer " + formKey))},
	{name: "header-block-base64url", text: base64.RawURLEncoding.EncodeToString([]byte("POST /v1 HTTP/1.1\r\nauthorization: Bearer " + formKey + "\r\n\r\n"))},
	// new: character references a chat client or markdown renderer decodes.
	{name: "html-decimal-entities", text: numericEntities(formKey)},
	{name: "html-hex-entities-for-punctuation", text: strings.NewReplacer("-", "&#x2d;", "/", "&#x2F;", "~", "&#126;", "?", "&quest;", ">", "&gt;").Replace(formKey)},
	{name: "html-entity-without-semicolon", text: strings.ReplaceAll(formKey, ">", "&gt")},
}

// numericEntities writes every character of s as a decimal reference.
func numericEntities(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, "&#%d;", r)
	}
	return b.String()
}

// The reference's forms and beyond (docs/broker.md, "Credential reflection: the forms, and where each check runs"): every form is refused by the JSON scan and by the
// text check, in short answers and in long ones (the sampled matcher path).
func TestReflectionForms(t *testing.T) {
	filler := strings.Repeat("Ordinary words of an answer. ", sampleMin/29+1)
	for _, tt := range attackForms {
		t.Run(tt.name, func(t *testing.T) {
			inJSON := tt.json
			if inJSON == "" {
				inJSON = tt.text
			}
			for _, pad := range []string{"", filler} {
				body := `{"choices":[{"message":{"content":"` + pad + `see ` + inJSON + ` here"}}]}`
				if err := CheckJSON([]byte(body), formKey); !errors.Is(err, ErrReflect) {
					t.Errorf("CheckJSON(%d bytes) = %v; want ErrReflect", len(body), err)
				}
				if tt.json == "" {
					if err := CheckText(pad+"see "+tt.text+" here", formKey); !errors.Is(err, ErrReflect) {
						t.Errorf("CheckText(%d bytes) = %v; want ErrReflect", len(pad)+len(tt.text), err)
					}
				}
			}
		})
	}
}

// The reference's six forms come first; the rest are base64 cores, none
// shorter than minCore.
func TestForms(t *testing.T) {
	got := Forms("a b/c")
	want := []string{"a b/c", "a%20b%2Fc", "YSBiL2M=", "YSBiL2M", "6120622f63", "6120622F63"}
	if strings.Join(got[:6], "|") != strings.Join(want, "|") {
		t.Errorf("Forms(%q)[:6] = %q; want %q", "a b/c", got[:6], want)
	}
	for _, key := range []string{"k", "k1", "a b/c", "abcdef", "abcdefg", formKey} {
		for _, f := range Forms(key)[6:] {
			if len(f) < minCore {
				t.Errorf("Forms(%q) has the core %q, shorter than %d", key, f, minCore)
			}
		}
	}
	// The three cores at alignment 0, 1 and 2 of a 6-byte group.
	if got := Forms("abcdef")[6:]; strings.Join(got[:2], "|") != "YWJjZGVm|YWJjZGVm" {
		t.Errorf("alignment-0 cores of abcdef = %q", got[:2])
	}
}

// Every base64 text that holds the key, whatever precedes or follows it and
// in either alphabet, padded or not, holds one of the forms searched; for a
// key too short for its own cores, one that holds "Bearer <key>" does.
func TestCoresCoverEveryAlignment(t *testing.T) {
	encs := map[string]*base64.Encoding{
		"std": base64.StdEncoding, "raw-std": base64.RawStdEncoding,
		"url": base64.URLEncoding, "raw-url": base64.RawURLEncoding,
	}
	for _, key := range []string{"k", "k1", "abcdef", "abcdefg", "a b/c?>~", formKey, strings.Repeat("\xff~", 20)} {
		forms := searchForms(key)
		hidden := []byte(key)
		if len(key) < 7 {
			hidden = []byte("Bearer " + key)
		}
		for before := range 6 {
			for after := range 3 {
				text := append(append([]byte("\x00\x01\x02\x03\x04"[:before]), hidden...), "\xfe\xfd"[:after]...)
				for name, enc := range encs {
					if s := enc.EncodeToString(text); !naiveContains([]byte(s), forms) {
						t.Errorf("key %q after %d bytes, %d after, %s: %q holds no form", key, before, after, name, s)
					}
				}
			}
		}
	}
}

// A short key's cores are not looked for: ordinary words hold them.
func TestShortKeyCoresNotSearched(t *testing.T) {
	// The alignment-0 core of "k1" would be "az" (base64 "azE="), which
	// ordinary words hold.
	for _, text := range []string{"a lazy pizza", "hazard"} {
		if err := CheckText(text, "k1"); err != nil {
			t.Errorf("CheckText(%q, k1) = %v; want nil", text, err)
		}
	}
	if err := CheckText("x "+base64.StdEncoding.EncodeToString([]byte("Authorization: Bearer k1")), "k1"); !errors.Is(err, ErrReflect) {
		t.Errorf("CheckText(base64 of the bearer line, k1) = %v; want ErrReflect", err)
	}
}

// searchForms keeps exactly the matches of Forms: dropping duplicates and
// forms that contain another never changes whether a text holds one.
func TestSearchFormsMinimal(t *testing.T) {
	for _, key := range []string{"k1", "a b/c", "abcdefg", formKey} {
		all, min := Forms(key), searchForms(key)
		for _, f := range all {
			if !naiveContains([]byte(f), min) {
				t.Errorf("key %q: form %q holds no searched form", key, f)
			}
		}
		for i, f := range min {
			for j, g := range min {
				if i != j && bytes.Contains(f, g) {
					t.Errorf("key %q: searched form %q contains %q", key, f, g)
				}
			}
		}
	}
}

func TestCheckTextEntities(t *testing.T) {
	for _, tc := range []struct {
		text string
		want error
	}{
		{"nothing here", nil},
		{"R&D & more", nil},
		// One decoding only: "&#115;…" is what a reader of the text sees.
		{"&amp;#115;k-live/model~key?>0123456789", nil},
		{numericEntities(formKey), ErrReflect},
		{"sk-live/model~key?&gt;0123456789", ErrReflect},
		{"sk-live/model~key?&lt;0123456789", nil},
	} {
		if err := CheckText(tc.text, formKey); err != tc.want {
			t.Errorf("CheckText(%q) = %v; want %v", tc.text, err, tc.want)
		}
	}
	if err := CheckText(formKey, ""); err != nil {
		t.Errorf("CheckText with no key = %v; want nil", err)
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
		// Validity is the grammar's (json.Valid): a number too large for a
		// float64 is valid JSON that json.Unmarshal into any refuses. The
		// walk decodes numbers as json.Number for the same reason.
		valid := json.Valid([]byte(body))
		var v any
		if valid {
			d := json.NewDecoder(strings.NewReader(body))
			d.UseNumber()
			if d.Decode(&v) != nil {
				t.Fatalf("json.Valid(%.200q) but it does not decode", body)
			}
		}
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

// walkFinds reports whether a decoded string holds a form, as it is or
// with its character references decoded.
func walkFinds(v any, forms []string) bool {
	switch x := v.(type) {
	case string:
		return containsAny(x, forms) || containsAny(html.UnescapeString(x), forms)
	case []any:
		for _, e := range x {
			if walkFinds(e, forms) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if walkFinds(k, forms) || walkFinds(e, forms) {
				return true
			}
		}
	}
	return false
}

// FuzzCoresFindKey: whatever bytes surround the key and whichever base64
// alphabet and padding encode them, the text and the JSON string holding
// it are refused; for a key of up to 6 bytes, when the bytes encoded are
// its bearer line.
func FuzzCoresFindKey(f *testing.F) {
	f.Add("k1", "", "", uint8(0))
	f.Add(formKey, "Authorization: ", "\r\n", uint8(1))
	f.Add("abcdefg", "x", "yz", uint8(2))
	f.Add("\xff\xfe\xfd\xfc\xfb\xfa\xf9", "\x00", "\x01", uint8(3))
	encs := []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding}
	f.Fuzz(func(t *testing.T, key, before, after string, alphabet uint8) {
		if key == "" || len(key) > 256 || len(before) > 64 || len(after) > 64 {
			return
		}
		hidden := key
		if len(key) < 7 {
			hidden = "Bearer " + key
		}
		text := encs[int(alphabet)%len(encs)].EncodeToString([]byte(before + hidden + after))
		if err := CheckText("echo: "+text, key); !errors.Is(err, ErrReflect) {
			t.Fatalf("CheckText(%q, key %q) = %v; want ErrReflect", text, key, err)
		}
		if err := CheckJSON([]byte(`{"t":"`+text+`"}`), key); !errors.Is(err, ErrReflect) {
			t.Fatalf("CheckJSON(%q, key %q) = %v; want ErrReflect", text, key, err)
		}
	})
}
