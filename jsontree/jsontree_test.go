package jsontree

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reference decodes data as the broker did before this package: one value
// through a json.Decoder with UseNumber, and nothing but whitespace after.
func reference(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the value")
	}
	return v, nil
}

// referenceSplit is json.Unmarshal into map[string]json.RawMessage, with
// null (which Unmarshal turns into a nil map) refused as a non-object.
func referenceSplit(data []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, ErrNotObject
	}
	return m, nil
}

// nest is n arrays, each inside the one before.
func nest(n int) string {
	return strings.Repeat("[", n) + strings.Repeat("]", n)
}

// cases are the tricky inputs of the table tests and the fuzz seeds; valid
// is encoding/json's decision on them as a single value.
var cases = []struct {
	name  string
	in    string
	valid bool
}{
	{"Empty", "", false},
	{"OnlySpace", " \t\r\n", false},
	{"Null", "null", true},
	{"True", "true", true},
	{"False", "false", true},
	{"ShortLiteral", "tru", false},
	{"LongLiteral", "truex", false},
	{"CapitalLiteral", "True", false},
	{"Zero", "0", true},
	{"NegativeZero", "-0", true},
	{"Integer", "1234567890", true},
	{"Fraction", "-12.50", true},
	{"Exponent", "1e5", true},
	{"ExponentSigns", `[1E+5,1e-5,0.0e0,-0E-0]`, true},
	{"HugeExponent", "1e999999999999", true},
	{"HugeInteger", "123456789012345678901234567890123456789", true},
	{"LeadingZero", "01", false},
	{"NegativeLeadingZero", "-01", false},
	{"TrailingDot", "1.", false},
	{"LeadingDot", ".5", false},
	{"LoneMinus", "-", false},
	{"EmptyExponent", "1e", false},
	{"SignOnlyExponent", "1e+", false},
	{"PlusSign", "+1", false},
	{"Hex", "0x10", false},
	{"NaN", "NaN", false},
	{"Infinity", "-Infinity", false},
	{"MinusSpace", "- 1", false},
	{"String", `"abc"`, true},
	{"Unterminated", `"abc`, false},
	{"Escapes", `"\"\\\/\b\f\n\r\t"`, true},
	{"SingleQuoteEscape", `"\'"`, false},
	{"UnknownEscape", `"\x41"`, false},
	{"TrailingBackslash", `"\`, false},
	{"UnicodeEscape", `"\u0041\u00e9\u4e2D"`, true},
	{"ShortUnicodeEscape", `"\u12"`, false},
	{"BadHexEscape", `"\u12G4"`, false},
	{"SurrogatePair", `"\ud83d\ude00"`, true},
	{"LoneHigh", `"\ud83dx"`, true},
	{"LoneHighAtEnd", `"\ud83d"`, true},
	{"LoneLow", `"\ude00"`, true},
	{"ReversedPair", `"\ude00\ud83d"`, true},
	{"HighHigh", `"\ud83d\ud83d\ude00"`, true},
	{"HighThenBMP", `"\ud83d\u0041"`, true},
	{"HighThenBadEscape", `"\ud83d\u00G1"`, false},
	{"HighThenNewline", `"\ud83d\n"`, true},
	{"UTF8", `"héllo 世界 😀"`, true},
	{"InvalidUTF8", "\"a\xffb\xc3\"", true},
	{"TruncatedUTF8", "\"\xe4\xb8\"", true},
	{"EncodedSurrogate", "\"\xed\xa0\x80\"", true},
	{"Overlong", "\"\xc0\xaf\"", true},
	{"ReplacementChar", "\"\xef\xbf\xbd\"", true},
	{"InvalidUTF8Key", "{\"\xff\":1}", true},
	{"InvalidUTF8Outside", "\xff", false},
	{"ControlByte", "\"a\x01b\"", false},
	{"RawNewline", "\"a\nb\"", false},
	{"RawTab", "\"a\tb\"", false},
	{"NulByte", "\"a\x00\"", false},
	{"DEL", "\"a\x7fb\"", true},
	{"LongEscapes", `"abcdefghijklmnop\"qrstuvwxyz0123456\\789ABCDEFGHIJ\u00e9KLMNOP"`, true},
	{"LongUTF8", "\"abcdefghij\u00e9klmnopqrstu\xffvwxyz0123456789世界abcdefgh\"", true},
	{"LongControl", "\"abcdefghijklmnopqrstuv\x1fwxyz\"", false},
	{"LongUnterminated", `"abcdefghijklmnopqrstuvwxyz\"`, false},
	{"EmptyArray", "[]", true},
	{"EmptyObject", "{}", true},
	{"SpacedArray", " [ 1 , 2 ] ", true},
	{"SpacedObject", "\r\n{ \"a\" : 1 ,\t\"b\":[ ] }\n", true},
	{"FormFeedSpace", "\f1", false},
	{"NBSPSpace", "\u00a01", false},
	{"VerticalTabSpace", "1\v", false},
	{"TrailingCommaArray", "[1,]", false},
	{"TrailingCommaObject", `{"a":1,}`, false},
	{"LeadingComma", "[,1]", false},
	{"MissingComma", "[1 2]", false},
	{"MissingColon", `{"a" 1}`, false},
	{"UnquotedKey", `{a:1}`, false},
	{"NumberKey", `{1:1}`, false},
	{"Unclosed", `{"a":[1,2`, false},
	{"Mismatched", `[1}`, false},
	{"DuplicateKeys", `{"a":1,"b":2,"a":{"c":3}}`, true},
	{"DuplicateEscapedKeys", `{"a":1,"\u0061":2}`, true},
	{"NestedDuplicates", `{"x":{"a":1,"a":[true,null]},"x":{"b":2}}`, true},
	{"Mixed", `{"m":[{"role":"user","content":[{"type":"text","text":"hi\n"}]}],"n":-1.5e3,"b":false,"z":null}`, true},
	{"TrailingGarbage", `{"a":1}x`, false},
	{"TrailingValue", "1 2", false},
	{"TrailingClose", "[1]]", false},
	{"TrailingNul", "1\x00", false},
	{"NumberThenLetter", "123abc", false},
	{"Depth10000", nest(10000), true},
	{"Depth10001", nest(10001), false},
	{"ObjectDepth10000", strings.Repeat(`{"a":`, 9999) + "{}" + strings.Repeat("}", 9999), true},
	{"ObjectDepth10001", strings.Repeat(`{"a":`, 10000) + "{}" + strings.Repeat("}", 10000), false},
	{"MixedDepth10001", "{\"a\":" + nest(10000) + "}", false},
	{"DeepUnclosed", strings.Repeat("[", 20000), false},
}

func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			if (json.Valid([]byte(tt.in))) != tt.valid {
				t.Fatalf("json.Valid(%q) = %v; the case says %v", short(tt.in), !tt.valid, tt.valid)
			}
			checkDecode(t, []byte(tt.in))
		})
	}
}

func TestSplitAgreesWithEncodingJSON(t *testing.T) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			checkSplit(t, []byte(tt.in))
		})
	}
}

func TestDecodeValues(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want any
	}{
		{"Numbers", `[0,-0,1.50,1E+5,1e999999999999]`, []any{json.Number("0"), json.Number("-0"), json.Number("1.50"), json.Number("1E+5"), json.Number("1e999999999999")}},
		{"SurrogatePair", `"\ud83d\ude00"`, "😀"},
		{"LoneHigh", `"\ud83dx"`, "\ufffdx"},
		{"ReversedPair", `"\ude00\ud83d"`, "\ufffd\ufffd"},
		{"HighHigh", `"\ud83d\ud83d\ude00"`, "\ufffd😀"},
		{"InvalidUTF8", "\"a\xffb\xed\xa0\x80\"", "a\ufffdb\ufffd\ufffd\ufffd"},
		{"Escapes", `"\"\\\/\b\f\n\r\t\u0000"`, "\"\\/\b\f\n\r\t\x00"},
		{"DuplicateKeys", `{"a":1,"a":2}`, map[string]any{"a": json.Number("2")}},
		{"Empty", `[{},[]]`, []any{map[string]any{}, []any{}}},
		{"Literals", `[true,false,null]`, []any{true, false, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("Decode(%q) error: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestSplitMembers(t *testing.T) {
	in := []byte(" {\"a\" : 1.50 ,\"n\":null,\"o\":{ \"x\" : [ ] },\"a\":\"\\u0041\"}\n")
	got, err := Split(in)
	if err != nil {
		t.Fatalf("Split(%q) error: %v", in, err)
	}
	want := map[string]json.RawMessage{"a": json.RawMessage(`"\u0041"`), "n": json.RawMessage("null"), "o": json.RawMessage(`{ "x" : [ ] }`)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Split(%q) mismatch (-want +got):\n%s", in, diff)
	}
	in[8] = '9' // the members are a copy: the input may change later
	if string(got["a"]) != `"\u0041"` || string(got["o"]) != `{ "x" : [ ] }` {
		t.Errorf("Split members changed with the input: %q", got)
	}
}

func TestSplitErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"Array", "[1]", ErrNotObject},
		{"Null", " null ", ErrNotObject},
		{"String", `"{}"`, ErrNotObject},
		{"InvalidArray", "[1", ErrSyntax},
		{"Empty", "", ErrSyntax},
		{"Trailing", "{} {}", ErrSyntax},
		{"BadMember", `{"a":01}`, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Split([]byte(tt.in)); !errors.Is(err, tt.want) {
				t.Errorf("Split(%q) error = %v; want %v", tt.in, err, tt.want)
			}
		})
	}
}

func FuzzTreeAgreesWithEncodingJSON(f *testing.F) {
	for _, tt := range cases {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}

func FuzzSplitAgreesWithEncodingJSON(f *testing.F) {
	for _, tt := range cases {
		f.Add([]byte(tt.in))
		f.Add([]byte(`{"k":` + tt.in + `}`))
		f.Add([]byte(`{"k":1,` + tt.in + `}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSplit(t, data)
	})
}

// checkDecode holds Decode to encoding/json on data: the same decision
// and, on success, the same tree.
func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := reference(data)
	got, err := Decode(data)
	if (err == nil) != (wantErr == nil) || (wantErr == nil) != json.Valid(data) {
		t.Fatalf("Decode(%q) error = %v; encoding/json: %v, json.Valid %v", short(string(data)), err, wantErr, json.Valid(data))
	}
	if err != nil && !errors.Is(err, ErrSyntax) {
		t.Fatalf("Decode(%q) error = %v; want ErrSyntax", short(string(data)), err)
	}
	if !reflect.DeepEqual(want, got) { // cmp.Diff is slow on 10000 levels
		t.Fatalf("Decode(%q) mismatch (-encoding/json +jsontree):\n%s", short(string(data)), cmp.Diff(want, got))
	}
}

// checkSplit holds Split to json.Unmarshal into map[string]json.RawMessage.
func checkSplit(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := referenceSplit(data)
	got, err := Split(data)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("Split(%q) error = %v; encoding/json: %v", short(string(data)), err, wantErr)
	}
	if err != nil {
		wantKind := ErrSyntax
		if json.Valid(data) {
			wantKind = ErrNotObject
		}
		if !errors.Is(err, wantKind) {
			t.Fatalf("Split(%q) error = %v; want %v", short(string(data)), err, wantKind)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Split(%q) mismatch (-encoding/json +jsontree):\n%s", short(string(data)), diff)
	}
}

func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
