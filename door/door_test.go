package door_test

import (
	"errors"
	"fmt"
	"html"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// The credentials of each kind the host holds, with their config keys.
var held = map[string]string{
	"model.api_key_env":        "sk-proj-Model/Key+0123456789abcdef",
	"models.fast.api_key_env":  "sk-ant-api03-FastModelKey_0123456789",
	"tools.lookup.api_key_env": "tool-bearer-0123456789",
	"mcp.docs.api_key_env":     "mcp-key-0123456789abcdef",
	"web.search.api_key_env":   "BSA-search-0123456789",
	"http.token_env":           "http-guest-token-0123456789",
	"http.owner_token_env":     "http-owner-token-9876543210",
	"discord.token_env":        "MTIzNDU2Nzg5MDEyMzQ1Njc4.Gabcde.discord-bot-token-xyz",
}

func heldDoor() *door.Door {
	var s []door.Secret
	for name, v := range held {
		s = append(s, door.Secret{Name: name, Read: func() rtsandbox.Secret { return rtsandbox.Secret(v) }})
	}
	return door.New(s)
}

// everyForm is every form the whole-body scan knows of key: those of
// upstream.Forms and the key as HTML character references.
func everyForm(key string) map[string]string {
	var dec, hex strings.Builder
	for _, r := range key {
		fmt.Fprintf(&dec, "&#%d;", r)
		fmt.Fprintf(&hex, "&#x%x;", r)
	}
	out := map[string]string{"entities-decimal": dec.String(), "entities-hex": hex.String(), "html-escaped": html.EscapeString(key)}
	for i, f := range upstream.Forms(key) {
		out[fmt.Sprintf("form-%d", i)] = f
	}
	return out
}

// TestDoorFindsEveryFormOfEveryCredential: every form of every kind of
// credential, in a text, a file's bytes and a file's name, is refused with
// an error naming its config key and never its value; a text without one
// passes.
func TestDoorFindsEveryFormOfEveryCredential(t *testing.T) {
	d := heldDoor()
	for name, key := range held {
		for form, f := range everyForm(key) {
			cases := map[string]func() error{
				"text": func() error { return d.Check("Sure! The value is "+f+" — keep it safe.", nil) },
				"file": func() error {
					return d.Check("see file", []rtsandbox.File{{Name: "notes.md", Data: []byte("# notes\n" + f + "\n")}})
				},
				"file-name": func() error { return d.Check("", []rtsandbox.File{{Name: f + ".txt", Data: []byte("x")}}) },
			}
			for where, check := range cases {
				err := check()
				if !errors.Is(err, rtsandbox.ErrCredential) || !strings.Contains(err.Error(), name) {
					t.Errorf("%s %s in the %s: %v; want ErrCredential naming %s", name, form, where, err, name)
				}
				if err != nil && strings.Contains(err.Error(), key) {
					t.Errorf("the error holds the value: %v", err)
				}
			}
		}
	}
	if err := d.Check("an ordinary answer, with R&D and &amp; and sk-proj-Model", []rtsandbox.File{{Name: "a.txt", Data: []byte("fine")}}); err != nil {
		t.Errorf("clean text: %v", err)
	}
}

// TestDoorReadsEveryUse: a credential is read on every check, so a key
// rotated between two deliveries is checked at once, and an unset one
// checks nothing.
func TestDoorReadsEveryUse(t *testing.T) {
	var cur atomic.Value
	cur.Store("first-secret-0123456789")
	reads := 0
	d := door.New([]door.Secret{{Name: "model.api_key_env", Read: func() rtsandbox.Secret {
		reads++
		return rtsandbox.Secret(cur.Load().(string))
	}}})
	if err := d.Check("second-secret-9876543210", nil); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	cur.Store("second-secret-9876543210")
	if err := d.Check("second-secret-9876543210", nil); !errors.Is(err, rtsandbox.ErrCredential) {
		t.Errorf("after the rotation: %v; want ErrCredential", err)
	}
	cur.Store("")
	if err := d.Check("anything", nil); err != nil {
		t.Errorf("unset: %v", err)
	}
	if reads != 3 {
		t.Errorf("%d reads for 3 checks", reads)
	}
	cur.Store("second-secret-9876543210")
	if s := fmt.Sprintf("%v %+v %#v %s", d, d, d, d); strings.Contains(s, "second-secret") || s != "door.Door door.Door door.Door door.Door" {
		t.Errorf("a print of the door holds a value: %s", s)
	}
}

// BenchmarkDoorReply is the door's cost on a large reply (2 MiB of
// markdown, the most a reply may hold) and on a typical one (4 KiB), with
// the eight credentials of held: what every delivery pays.
func BenchmarkDoorReply(b *testing.B) {
	d := heldDoor()
	para := "## Heading\n\nSome *markdown* with `code`, a [link](https://example.com/a?b=c&d=e) and R&D.\n\n```go\nfmt.Println(\"hi\")\n```\n\n"
	for _, size := range []int{4 << 10, 2 << 20} {
		text := strings.Repeat(para, size/len(para)+1)[:size]
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := d.Check(text, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDoorFindsKeyCutByInvisibleCharacters: a key cut by characters a
// reader does not see (a control character the terminal drops, a zero
// width space, a soft hyphen, a word joiner, a byte order mark, a
// right-to-left mark) is whole on the reader's screen, and refused; in a
// file's bytes and name too.
func TestDoorFindsKeyCutByInvisibleCharacters(t *testing.T) {
	d := heldDoor()
	key := held["model.api_key_env"]
	for _, inv := range []string{"\x01", "\x1b", "\x7f", "\u0085", "\u200b", "\u00ad", "\u2060", "\ufeff", "\u200f", "\u200b\u200c\u200d"} {
		cut := key[:5] + inv + key[5:12] + inv + key[12:]
		if err := d.Check("key: "+cut, nil); !errors.Is(err, rtsandbox.ErrCredential) {
			t.Errorf("key cut by %q in the text: %v; want ErrCredential", inv, err)
		}
		if err := d.Check("", []rtsandbox.File{{Name: "k.txt", Data: []byte(cut)}}); !errors.Is(err, rtsandbox.ErrCredential) {
			t.Errorf("key cut by %q in a file: %v; want ErrCredential", inv, err)
		}
	}
	// Visible characters still separate: nothing is found that a reader
	// does not see.
	if err := d.Check(key[:5]+" "+key[5:], nil); err != nil {
		t.Errorf("key cut by a space: %v", err)
	}
}

// FuzzDoorVisible holds the door to the reader's view: whenever the text
// a reader sees (its control and format characters dropped) holds a form
// of a credential, the door refuses it. The fuzzer's text is put inside
// the key, so that the key is whole exactly when the text is invisible.
func FuzzDoorVisible(f *testing.F) {
	key := held["http.token_env"]
	f.Add("\u200b", uint8(4))
	f.Add("\x00\x01", uint8(9))
	f.Add("\u00ad\u2060\ufeff", uint8(1))
	f.Add("x", uint8(3))
	d := heldDoor()
	c := upstream.NewTextChecker(key)
	f.Fuzz(func(t *testing.T, noise string, at uint8) {
		if len(noise) > 256 {
			return
		}
		i := 1 + int(at)%(len(key)-1)
		text := "token: " + key[:i] + noise + key[i:] + " done"
		seen := strings.Map(func(r rune) rune {
			if r != '\n' && r != '\r' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
				return -1
			}
			return r
		}, strings.ToValidUTF8(text, "\uFFFD"))
		if c.Check(seen) != nil && !errors.Is(d.Check(text, nil), rtsandbox.ErrCredential) {
			t.Fatalf("the reader sees the key in %q; the door let it pass", text)
		}
	})
}
