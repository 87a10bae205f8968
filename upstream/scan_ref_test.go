package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
)

// refCheckJSON is the obviously correct scan the optimised one is compared
// with: encoding/json validates the body and decodes its tokens, and every
// string value and object key (repeated keys too) is searched for every
// form of Forms with strings.Contains, as decoded and as
// html.UnescapeString decodes it.
func refCheckJSON(body []byte, key string) error {
	if !json.Valid(body) {
		return ErrNotJSON
	}
	if key == "" {
		return nil
	}
	forms := refForms(key)
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF: the body is valid
		}
		if s, ok := tok.(string); ok && (containsAny(s, forms) || containsAny(html.UnescapeString(s), forms)) {
			return ErrReflect
		}
	}
}

// refForms is Forms, remembered per key: the tests check hundreds of
// thousands of bodies against a few keys.
func refForms(key string) []string {
	formsMu.Lock()
	defer formsMu.Unlock()
	if f, ok := formsMemo[key]; ok {
		return f
	}
	f := Forms(key)
	formsMemo[key] = f
	return f
}

var (
	formsMu   sync.Mutex
	formsMemo = map[string][]string{}
)

// refCheckText is CheckText's reference.
func refCheckText(text, key string) error {
	if key == "" {
		return nil
	}
	forms := refForms(key)
	if containsAny(text, forms) || containsAny(html.UnescapeString(text), forms) {
		return ErrReflect
	}
	return nil
}

// comparable reports whether the reference decides body and key exactly
// as CheckJSON must. encoding/json turns invalid UTF-8 inside strings
// into U+FFFD where the scan compares the bytes raw (see scanner), which
// only a key holding U+FFFD could notice; keys are valid UTF-8.
func comparable(body []byte, key string) bool {
	return utf8.Valid(body) && utf8.ValidString(key) && !strings.ContainsRune(key, utf8.RuneError)
}

// agreeWithReference fails t when CheckJSON decides body and key otherwise
// than the reference. On invalid JSON the scan may stop at a reflected key
// before the error, so ErrReflect is as right as ErrNotJSON there.
func agreeWithReference(t *testing.T, body []byte, key string) {
	t.Helper()
	if !comparable(body, key) {
		return
	}
	got, want := CheckJSON(body, key), refCheckJSON(body, key)
	if errors.Is(want, ErrNotJSON) {
		if got == nil {
			t.Fatalf("CheckJSON(%.300q, %q) = nil; the reference finds invalid JSON", body, key)
		}
	} else if got != want {
		t.Fatalf("CheckJSON(%.300q, %q) = %v; the reference says %v", body, key, got, want)
	}
}

// textAgreesWithReference fails t when CheckText decides text and key
// otherwise than the reference.
func textAgreesWithReference(t *testing.T, text, key string) {
	t.Helper()
	if got, want := CheckText(text, key), refCheckText(text, key); got != want {
		t.Fatalf("CheckText(%.300q, %q) = %v; the reference says %v", text, key, got, want)
	}
}

// refKeys have every kind of byte a form can hold: base64 '+' and '/',
// characters a JSON encoder escapes, HTML reference characters, non-ASCII,
// and keys too short for base64 cores.
var refKeys = []string{
	formKey,
	"sk-proj-abcdefghijklmnop0123456789",
	"k1",
	"a b/c",
	"abcdefg",
	`sk-"quoted"\path-ключ-42`,
	"amp&lt;semi;#hash-0123456789",
	"line\nbreak\ttab-0123456789",
	"😀-emoji-key-0123456789",
}

// escapeRune writes r as a JSON escape: the short form where one exists
// and short is set, \uXXXX otherwise (a surrogate pair above U+FFFF).
func escapeRune(r rune, short bool) string {
	if short {
		switch r {
		case '"':
			return `\"`
		case '\\':
			return `\\`
		case '/':
			return `\/`
		case '\n':
			return `\n`
		case '\t':
			return `\t`
		}
	}
	if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
		return fmt.Sprintf(`\u%04x\u%04X`, r1, r2)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// jsonContent encodes s as the content of a JSON string with the escapes
// an encoder must write, leaving everything else as it is.
func jsonContent(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '"' || r == '\\' || r < 0x20 {
			b.WriteString(escapeRune(r, true))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// splitForm returns ways to write form (JSON string content) with its rune
// at byte offset k written otherwise: as each JSON escape, as an HTML
// reference (raw and with its '&' escaped), and cut in two by an escaped
// line break or quote, which no form survives.
func splitForm(form string, k int) []string {
	r, n := utf8.DecodeRuneInString(form[k:])
	before, after := jsonContent(form[:k]), jsonContent(form[k+n:])
	ref := fmt.Sprintf("&#%d;", r)
	return []string{
		before + escapeRune(r, true) + after,
		before + escapeRune(r, false) + after,
		before + ref + after,
		before + fmt.Sprintf("&#x%X", r) + `\u0020` + after,
		before + `\u0026` + ref[1:] + after,
		before + `\n` + jsonContent(form[k:]),
		before + `\"` + jsonContent(form[k:]),
		before + "&lt;" + jsonContent(form[k:]),
	}
}

// contexts place a piece of string content at the start, the middle and
// the end of strings, next to escapes and references, and in a long string
// (the sampled search) at an offset that varies with at.
func contexts(piece string, at int) []string {
	return []string{
		`"` + piece + `"`,
		`{"c":"x\n` + piece + `\tz"}`,
		`["&amp;` + piece + `&gt;", 1]`,
		`{"` + piece + `":null}`,
		`{"a":[1,{"b":"` + longContent + strings.Repeat("y", at%61) + piece + `\\"}]}`,
	}
}

// longContent is string content long enough for the sampled search.
var longContent = strings.Repeat("Ordinary words\\n of an \\\"answer\\\". ", sampleMin/30+1)

// Every form of every key, with each of its characters written as an
// escape or a reference, or cut there, in every context: the scan decides
// exactly as the reference.
func TestScanAgreesWithReferenceOnSplitForms(t *testing.T) {
	for _, key := range refKeys {
		t.Run(fmt.Sprintf("%.12q", key), func(t *testing.T) {
			t.Parallel()
			for _, form := range Forms(key) {
				for k := range form {
					if !utf8.RuneStart(form[k]) {
						continue
					}
					for _, piece := range splitForm(form, k) {
						for _, body := range contexts(piece, k) {
							agreeWithReference(t, []byte(body), key)
						}
						textAgreesWithReference(t, piece, key)
					}
				}
				// The whole form written as \u escapes and as references.
				var esc, ref strings.Builder
				for _, r := range form {
					esc.WriteString(escapeRune(r, false))
					fmt.Fprintf(&ref, "&#x%x;", r)
				}
				for _, body := range contexts(esc.String(), len(form)) {
					agreeWithReference(t, []byte(body), key)
				}
				for _, body := range contexts(ref.String(), len(form)+1) {
					agreeWithReference(t, []byte(body), key)
				}
				textAgreesWithReference(t, ref.String(), key)
			}
		})
	}
}

// Random JSON texts built from form fragments, escapes, references and
// ordinary text, some cut short or corrupted: the scan decides exactly as
// the reference.
func TestScanAgreesWithReferenceOnRandomJSON(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		key := refKeys[i%len(refKeys)]
		body := damage(r, randomJSON(r, key, 0), 10)
		agreeWithReference(t, []byte(body), key)
		textAgreesWithReference(t, body, key)
	}
}

// The corpora of the benchmarks hold no key, and with a form inserted
// anywhere in a string they hold one: the scan agrees on both.
func TestScanAgreesWithReferenceOnCorpora(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, kind := range answercorpus.Kinds() {
		body := answercorpus.Answer(kind, 64<<10)
		agreeWithReference(t, body, formKey)
		forms := Forms(formKey)
		for range 20 {
			// Insert after a letter: always inside a string, never
			// inside an escape.
			at := r.IntN(len(body))
			for at < len(body) && !('a' <= body[at] && body[at] <= 'z') {
				at++
			}
			with := string(body[:at]) + jsonContent(forms[r.IntN(len(forms))]) + string(body[at:])
			agreeWithReference(t, []byte(with), formKey)
		}
	}
}

// damage returns body cut short one time in n, with a control byte slipped
// in one time in n, and as it is otherwise.
func damage(r *rand.Rand, body string, n int) string {
	switch r.IntN(n) {
	case 0:
		return body[:r.IntN(len(body)+1)]
	case 1:
		at := r.IntN(len(body) + 1)
		return body[:at] + string(rune(r.IntN(0x20))) + body[at:]
	}
	return body
}

// randomJSON is a random value whose strings mix pieces of key's forms
// with escapes, references and text.
func randomJSON(r *rand.Rand, key string, depth int) string {
	switch k := r.IntN(10); {
	case k < 5 || depth > 3:
		return `"` + randomContent(r, key) + `"`
	case k < 7:
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, `"`+randomContent(r, key)+`":`+randomJSON(r, key, depth+1))
		}
		return "{" + strings.Join(parts, ",") + "}"
	case k < 9:
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, randomJSON(r, key, depth+1))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	default:
		return []string{"0", "-1.5e3", "true", "false", "null"}[r.IntN(5)]
	}
}

var randomPieces = []string{
	`\n`, `\n\n`, `\"`, `\\`, `\/`, `\t`, `\u0026`, `\u002d`, `\u002D`, `\u0041`, `\u4e16`, `\ud83d\ude00`,
	`\ud800`, `\udc00x`, `\ud800\u0041`, "&amp;", "&lt;", "&gt", "&#45;", "&#x2d;", "&#x2F;", "&nbsp;", "&#5",
	"&", ";", "#", " ", "R&D", "世界", "😀", "x", "0", "=", "+", "%2F", "-", "_",
}

func randomContent(r *rand.Rand, key string) string {
	forms := Forms(key)
	var b strings.Builder
	for range r.IntN(12) {
		switch r.IntN(4) {
		case 0:
			f := forms[r.IntN(len(forms))]
			i, j := r.IntN(len(f)+1), r.IntN(len(f)+1)
			if r.IntN(2) == 0 {
				i, j = 0, len(f)
			}
			if i <= j && utf8.ValidString(f[i:j]) {
				b.WriteString(jsonContent(f[i:j]))
			}
		case 1:
			if r.IntN(8) == 0 {
				b.WriteString(strings.Repeat("filler text ", sampleMin/12+r.IntN(40)))
			}
		default:
			b.WriteString(randomPieces[r.IntN(len(randomPieces))])
		}
	}
	return b.String()
}

// FuzzScanAgreesWithReference compares the optimised scan with the
// reference on any body and key the reference decides exactly.
func FuzzScanAgreesWithReference(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, key := range refKeys {
		form := Forms(key)[0]
		f.Add(contexts(splitForm(form, len(form)/2)[1], 0)[1], key)
		f.Add(randomJSON(r, key, 0), key)
	}
	for _, tt := range reflectionCases {
		f.Add(tt.body, tt.key)
	}
	for _, key := range blockKeys { // strings long and dense enough for scanner.block
		f.Add(`{"a":"`+escapeDense(r, key, 300)+`"}`, key)
	}
	f.Fuzz(func(t *testing.T, body, key string) {
		if !comparable([]byte(body), key) {
			return
		}
		agreeWithReference(t, []byte(body), key)
		textAgreesWithReference(t, body, key)
	})
}

// Every prefix of strings dense with escapes, cut at every byte (inside
// an escape, at a word's last byte, just before the closing quote): the
// scan never reads past the end and decides as the reference.
func TestScanAgreesWithReferenceOnEveryPrefix(t *testing.T) {
	dense := `x\\\"\n\u00e9\ud83d\ude00` + jsonContent(formKey) + `\/\u002d&#45;\t"`
	for _, key := range []string{formKey, ""} {
		for pad := range 9 {
			body := `{"a":["` + strings.Repeat("y", pad) + dense + `]}`
			for n := range len(body) + 1 {
				agreeWithReference(t, []byte(body[:n]), key)
			}
		}
	}
}
