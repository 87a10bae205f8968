package upstream

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
)

// KeyForms made once decide every check as forms made per check do, tell
// their own key from another, hold back as much as the longest form of
// Forms needs, and never print the key.
func TestKeyFormsAgreeWithFormsMadePerCheck(t *testing.T) {
	for _, key := range append([]string{""}, refKeys...) {
		k := NewKeyForms(key)
		hold := 0
		if key != "" {
			for _, f := range Forms(key) {
				hold = max(hold, len(f)-1)
			}
		}
		if k.Hold() != hold {
			t.Errorf("NewKeyForms(%q).Hold() = %d, want %d", key, k.Hold(), hold)
		}
		if !k.For(key) || k.For(key+"x") || key != "" && k.For("") {
			t.Errorf("NewKeyForms(%q).For answers wrong", key)
		}
		for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%#v", k), fmt.Sprintf("%+v", k)} {
			if key != "" && strings.Contains(s, key) {
				t.Errorf("a print of KeyForms holds the key: %q", s)
			}
		}
		for _, body := range [][]byte{
			[]byte(`{"a":"` + jsonContent(key) + `"}`),
			[]byte(`{"a":"x` + strings.Repeat(`\\n`, 700) + jsonContent(key) + `"}`),
			answercorpus.Answer(answercorpus.Markdown, 70<<10),
		} {
			valid, hit := scanWith(body, k.matcher())
			wantValid, wantHit := scan(body, searchForms(key))
			if valid != wantValid || hit != wantHit {
				t.Errorf("scan with KeyForms(%q) = %v, %v; per check %v, %v", key, valid, hit, wantValid, wantHit)
			}
			if got, want := k.TextChecker().Check(string(body)), CheckText(string(body), key); got != want {
				t.Errorf("KeyForms(%q).TextChecker().Check = %v, CheckText = %v", key, got, want)
			}
		}
	}
}

// One KeyForms shared by concurrent checks (the calls of a session turn):
// the filters are built once, and under -race nothing is written twice.
func TestKeyFormsSharedByConcurrentChecks(t *testing.T) {
	k := NewKeyForms(formKey)
	clean := answercorpus.Answer(answercorpus.ToolCalls, 80<<10)
	reflected := []byte(`{"a":"` + strings.Repeat("filler ", 300) + jsonContent(formKey) + `"}`)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				if _, hit := scanWith(clean, k.matcher()); hit {
					t.Error("clean answer reflected")
				}
				if _, hit := scanWith(reflected, k.matcher()); !hit {
					t.Error("reflected answer passed")
				}
				if k.TextChecker().Check(string(reflected[i:])) == nil {
					t.Error("reflected text passed")
				}
			}
		})
	}
	wg.Wait()
}

// Event mode skips the decoded check of an event's data when revealing
// says decoding cannot reveal a form (StreamScanner.checkEvents): every
// data whose decoded check finds a form its raw bytes do not hold is
// revealing, for random JSON and escape-dense strings built from pieces of
// the forms, with every kind of key. Each key's revealer is kept across
// its texts, as a stream keeps it across events, so its verdicts on
// references are reused.
func TestRevealingCoversEveryDecodedMatch(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	n := 4000
	if testing.Short() {
		n = 600
	}
	revealed := 0
	kfs := make(map[string]*KeyForms)
	rvs := make(map[string]*revealer)
	for i := range n {
		key := blockKeys[i%len(blockKeys)]
		if kfs[key] == nil {
			kfs[key], rvs[key] = NewKeyForms(key), &revealer{}
		}
		k := kfs[key]
		var data string
		switch i % 3 {
		case 0:
			data = randomJSON(r, key, 0)
		case 1:
			data = `{"a":"` + escapeDense(r, key, 50+r.IntN(300)) + `"}`
		default:
			forms := Forms(key)
			data = `{"a":["` + escapeDense(r, key, r.IntN(100)) + hideForm(r, forms[r.IntN(len(forms))]) +
				escapeDense(r, key, r.IntN(100)) + `"]}`
		}
		m := k.matcher()
		if reflectedIn([]byte(data), m) && !m.contains([]byte(data)) {
			revealed++
			if !k.revealing([]byte(data), rvs[key]) {
				t.Fatalf("key %q: the decoded check of %.300q finds a form its raw bytes do not hold, but revealing says no", key, data)
			}
		}
	}
	if revealed < n/50 {
		t.Errorf("only %d of %d texts had a form that decoding revealed: the test proves little", revealed, n)
	}
}

// A bad escape reveals nothing: the decoded check stops at it, so a form
// whose pieces a bad escape (or a cut \u escape, or a final backslash)
// joins is found by neither check, and revealing, which lets such escapes
// pass for keys whose two-byte escapes are all barriers, stays false. A
// \u escape of a form byte after the bad one still counts.
func TestRevealingPassesBadEscapes(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	k := NewKeyForms(key)
	if !k.tab.uOnly {
		t.Fatal("the key's two-byte escapes are not all barriers: the test would not test revealingU")
	}
	for _, bad := range []string{`\q`, `\x41`, `\u00zz`, `\u1g`, `\'`} {
		data := `{"a":"` + key[:8] + bad + key[8:] + `"}`
		m := k.matcher()
		if reflectedIn([]byte(data), m) || m.contains([]byte(data)) {
			t.Fatalf("%s: a check found the key in %q", bad, data)
		}
		if k.revealing([]byte(data), &revealer{}) {
			t.Errorf("%s: revealing(%q) = true; a bad escape reveals nothing", bad, data)
		}
		after := data[:len(data)-2] + `\u0073"}` // an 's', which the key holds
		if !k.revealing([]byte(after), &revealer{}) {
			t.Errorf("%s: revealing(%q) = false; the \\u0073 after the bad escape counts", bad, after)
		}
	}
	if k.revealing([]byte(`{"a":"x\`), &revealer{}) {
		t.Error("revealing of data that ends in a backslash = true")
	}
}

// FuzzRevealingCoversDecodedMatch: for any data and any key of blockKeys,
// when the decoded check finds a form the raw bytes do not hold, revealing
// says so; the skip of the decoded check in event mode rests on it.
func FuzzRevealingCoversDecodedMatch(f *testing.F) {
	r := rand.New(rand.NewPCG(15, 16))
	for i := range 40 {
		key := blockKeys[i%len(blockKeys)]
		forms := Forms(key)
		f.Add(uint8(i), []byte(`{"a":"`+escapeDense(r, key, 40)+hideForm(r, forms[r.IntN(len(forms))])+`"}`))
	}
	f.Add(uint8(3), []byte(`{"a":"x\q\u0073k-"}`))
	kfs := make([]*KeyForms, len(blockKeys))
	for i, key := range blockKeys {
		kfs[i] = NewKeyForms(key)
	}
	f.Fuzz(func(t *testing.T, ki uint8, data []byte) {
		k := kfs[int(ki)%len(kfs)]
		m := k.matcher()
		if reflectedIn(data, m) && !m.contains(data) && !k.revealing(data, &revealer{}) {
			t.Fatalf("key %q: the decoded check of %q finds a form its raw bytes do not hold, but revealing says no", blockKeys[int(ki)%len(kfs)], data)
		}
	})
}

// hideForm writes form as JSON string content with some of its characters
// as escapes (short or \u) or HTML character references (their '&' raw
// or escaped).
func hideForm(r *rand.Rand, form string) string {
	var b strings.Builder
	for _, c := range form {
		switch r.IntN(7) {
		case 0:
			b.WriteString(escapeRune(c, r.IntN(2) == 0))
		case 1:
			fmt.Fprintf(&b, "&#%d;", c)
		case 2: // a reference whose '&' is escaped, as Go's encoder writes it
			fmt.Fprintf(&b, `\u0026#%d;`, c)
		default:
			b.WriteString(jsonContent(string(c)))
		}
	}
	return b.String()
}
