package upstream

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
)

// scanInPieces is scanFrom on body arriving in pieces of the given sizes,
// used in turn; a size of 0 is a read that returns nothing.
func scanInPieces(body []byte, key string, sizes []int) (valid, reflected bool) {
	k := 0
	src := func(b []byte) ([]byte, bool) {
		if len(b) == len(body) {
			return b, false
		}
		n := min(sizes[k%len(sizes)], len(body)-len(b))
		k++
		return append(b, body[len(b):len(b)+n]...), true
	}
	return scanFrom(make([]byte, 0, len(body)), src, newMatcher(searchForms(key)), len(body), nil)
}

// agreeInPieces fails t when the scan of body arriving in pieces decides
// otherwise than the scan of the whole body (which scan_ref_test.go holds
// to the reference).
func agreeInPieces(t *testing.T, body []byte, key string, sizes []int) {
	t.Helper()
	wantValid, wantHit := scan(body, searchForms(key))
	gotValid, gotHit := scanInPieces(body, key, sizes)
	if gotValid != wantValid || gotHit != wantHit {
		t.Fatalf("scan of %.200q (key %q) in pieces of %v = valid %v, reflected %v; whole: %v, %v",
			body, key, sizes, gotValid, gotHit, wantValid, wantHit)
	}
}

// pieceSizes are the ways a body arrives: a byte at a time, sizes that
// cut every escape and every 8-byte word somewhere, empty reads, network
// reads, all at once.
var pieceSizes = [][]int{{1}, {2}, {3}, {5, 0, 7}, {11}, {13, 1}, {64}, {1000, 3}, {4096}, {1 << 30}}

// A text scanned while it arrives is decided as the whole text is, cut at
// every byte: inside escapes, surrogate pairs, numbers, literals, key
// forms and character references.
func TestScanFromAgreesOnEveryCut(t *testing.T) {
	dense := `x\\\"\n\u00e9\ud83d\ude00` + jsonContent(formKey) + `\/\u002d&#45;\t`
	bodies := []string{
		`{"a":["` + dense + `"],"n":-12.5e+3,"t":true,"f":false,"z":null}`,
		`  [ 0 , 1.0 , "` + strings.Repeat("long run of prose ", 10) + dense + `" ]  `,
		`{"` + jsonContent(formKey) + `":1}`,
		`"` + strings.Repeat("&#x2d;", 30) + `"`,
		`{"a":"unterminated`, `[1,2`, `{"a":1}x`, `nul`, ``, `"\u12"`, `"\ud83d\u"`,
	}
	for _, key := range []string{formKey, "", "k"} {
		for _, body := range bodies {
			for _, sizes := range pieceSizes {
				agreeInPieces(t, []byte(body), key, sizes)
			}
			// Two pieces, cut at every byte.
			for cut := range len(body) + 1 {
				agreeInPieces(t, []byte(body), key, []int{cut, len(body)})
			}
		}
	}
}

// Random JSON (forms, escapes, references, cut or corrupted) and the
// corpora with forms inserted, in random pieces.
func TestScanFromAgreesOnRandomJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 1000 {
		key := refKeys[i%len(refKeys)]
		body := randomJSON(r, key, 0)
		if r.IntN(5) == 0 {
			body = body[:r.IntN(len(body)+1)]
		}
		agreeInPieces(t, []byte(body), key, []int{1 + r.IntN(17), r.IntN(3), 1 + r.IntN(300)})
	}
	forms := Forms(formKey)
	for _, kind := range answercorpus.Kinds() {
		body := answercorpus.Answer(kind, 64<<10)
		for _, sizes := range pieceSizes[2:] {
			agreeInPieces(t, body, formKey, sizes)
		}
		at := len(body) / 2
		for at < len(body) && !('a' <= body[at] && body[at] <= 'z') {
			at++
		}
		with := string(body[:at]) + jsonContent(forms[r.IntN(len(forms))]) + string(body[at:])
		agreeInPieces(t, []byte(with), formKey, []int{4093, 1, 17})
	}
}

// FuzzScanFromAgreesWithScan: any body and key, cut into pieces of any
// sizes, is decided as the whole.
func FuzzScanFromAgreesWithScan(f *testing.F) {
	f.Add(`{"a":"x\u002dy&#45;`+formKey+`"}`, formKey, uint64(1))
	f.Add(`["\ud83d\ude00",1e5,true]`, "k", uint64(77))
	f.Fuzz(func(t *testing.T, body, key string, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 9))
		sizes := []int{r.IntN(20), 1 + r.IntN(20), r.IntN(200)}
		agreeInPieces(t, []byte(body), key, sizes)
	})
}

// One TextChecker checking many texts in turn (short and long, with
// forms, escapes and references, as the preview tap's deltas come)
// decides each as CheckText does alone, and prints no form.
func TestTextCheckerReusedAgreesWithCheckText(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, key := range refKeys {
		c := NewTextChecker(key)
		if s := fmt.Sprintf("%v %+v %#v %s", c, c, c, c); strings.Contains(s, key) || strings.Contains(s, Forms(key)[0]) {
			t.Fatalf("a printed checker shows the key: %s", s)
		}
		for range 60 {
			text := randomContent(r, key)
			if r.IntN(6) == 0 {
				text += strings.Repeat("long filler ", 200+r.IntN(6000))
			}
			if got, want := c.Check(text), CheckText(text, key); got != want {
				t.Fatalf("checker of %q reused: Check(%.200q) = %v; CheckText says %v", key, text, got, want)
			}
		}
	}
}

// memberOf is the scan's view of body's top-level member name.
func memberOf(body []byte, name string) (raw []byte, known, valid bool) {
	m := &member{name: name}
	valid, _ = scanFrom(body, func(b []byte) ([]byte, bool) { return b, false }, newMatcher(nil), len(body), m)
	if m.unsure {
		return nil, false, valid
	}
	if m.found == 1 {
		raw = body[m.start:m.end]
	}
	return raw, true, valid
}

// decodedMember is encoding/json's view of the same member.
func decodedMember(body []byte) (json.RawMessage, error) {
	var v struct {
		Usage json.RawMessage `json:"usage"`
	}
	err := json.Unmarshal(body, &v)
	return v.Usage, err
}

// The member the scan finds is the one encoding/json decodes into a field
// of that name, or it says it is unsure.
func TestScanMemberAgreesWithDecoder(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		known bool
		want  string
	}{
		{"at-end", `{"choices":[],"usage":{"total_tokens":3}}`, true, `{"total_tokens":3}`},
		{"at-start", `{"usage" : [1, 2] ,"x":1}`, true, `[1, 2]`},
		{"absent", `{"choices":[{"usage":1}],"x":{"usage":2}}`, true, ``},
		{"case-folded", `{"USAGE":null}`, true, `null`},
		{"in-a-string", `{"content":"\"usage\":5"}`, true, ``},
		{"twice", `{"usage":1,"Usage":2}`, false, ``},
		{"escaped-key", `{"\u0075sage":1}`, false, ``},
		{"non-ascii-key", `{"uſage":1}`, false, ``},
		{"top-level-array", `[{"usage":1}]`, true, ``},
		{"string", `"usage"`, true, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, known, valid := memberOf([]byte(tt.body), "usage")
			if !valid || known != tt.known || string(raw) != tt.want {
				t.Fatalf("member = %q, known %v, valid %v; want %q, known %v", raw, known, valid, tt.want, tt.known)
			}
			if dec, err := decodedMember([]byte(tt.body)); known && err == nil && string(dec) != string(raw) {
				t.Errorf("encoding/json decodes %q; the scan found %q", dec, raw)
			}
		})
	}
}

// FuzzScanMemberAgreesWithDecoder: on any valid JSON object, a member the
// scan is sure of is what encoding/json decodes.
func FuzzScanMemberAgreesWithDecoder(f *testing.F) {
	f.Add(`{"id":"x","usage":{"prompt_tokens":1}}`)
	f.Add(`{"Usage":1,"usage":2}`)
	f.Fuzz(func(t *testing.T, body string) {
		raw, known, valid := memberOf([]byte(body), "usage")
		if !valid || !known {
			return
		}
		dec, err := decodedMember([]byte(body))
		if err != nil {
			return // not an object: no field to decode
		}
		if string(dec) != string(raw) {
			t.Fatalf("body %q: encoding/json decodes %q; the scan found %q", body, dec, raw)
		}
	})
}
