package upstream

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// blockKeys have shortest forms of every length around a word (64
// bytes) and a half, and forms that hold '/', '"' or '\\'.
var blockKeys = func() []string {
	keys := append([]string{"k", "ab", "a/b"}, refKeys...)
	for _, n := range []int{16, 31, 32, 33, 47, 51, 63, 64, 65, 80} {
		keys = append(keys, strings.Repeat("Zq9-", n)[:n])
	}
	return keys
}()

// blockPieces are what escape-dense strings are made of: runs of
// backslashes, the escapes of code and of non-ASCII text, escapes that
// decode to bytes a form holds, and references.
var blockPieces = []string{
	`\\`, `\\\\`, `\\\\\\`, `\"`, `\\\"`, `\\\\\\\"`, `\n`, `\t`, `\r`, `\b`, `\f`, `\/`,
	`\u4e16`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ude00`, `\u002d`, `\u0041`, `\u003c`, `\u005c`, `\u0022`,
	"&#45;", "&amp;", "x", " ", "世界",
}

// escapeDense is the content of a long string of escapes and short runs
// of text, with pieces of key's forms (whole or cut) at random places.
func escapeDense(r *rand.Rand, key string, n int) string {
	forms := Forms(key)
	var b strings.Builder
	for b.Len() < n {
		switch r.IntN(12) {
		case 0:
			f := forms[r.IntN(len(forms))]
			i := r.IntN(len(f) + 1)
			if r.IntN(3) == 0 {
				i = 0
			}
			b.WriteString(jsonContent(f[i:]))
		case 1, 2:
			b.WriteString(strings.Repeat("p", r.IntN(90)))
		default:
			b.WriteString(blockPieces[r.IntN(len(blockPieces))])
		}
	}
	return b.String()
}

// Long strings dense with escapes, which the scan takes a word at a time
// where it can (scanner.block), with keys whose shortest form is shorter
// than, as long as and longer than a word, at every offset from the
// start of a word: the scan decides as the reference, whole and in
// pieces that cut the words.
func TestScanAgreesWithReferenceOnEscapeBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	n := 400
	if testing.Short() {
		n = 60
	}
	for i := range n {
		key := blockKeys[i%len(blockKeys)]
		content := escapeDense(r, key, 200+r.IntN(600))
		body := damage(r, `{"x":`+strings.Repeat(" ", i%64)+`["`+content+`","`+escapeDense(r, key, 100)+`"]}`, 8)
		agreeWithReference(t, []byte(body), key)
		agreeInPieces(t, []byte(body), key, pieceSizes[r.IntN(len(pieceSizes))])
	}
}

// The escaped bytes that scanner.block finds for a word at once are those
// a walk from escape to escape finds, for every word of backslashes and
// other bytes (random, and every pattern of the first 16 bits).
func TestBlockEscapesAgreeWithWalk(t *testing.T) {
	walk := func(bs uint64) (esc uint64, carry bool) {
		for i := 0; i < 64; i++ {
			if bs>>i&1 == 1 {
				if i == 63 {
					return esc, true
				}
				esc |= 1 << (i + 1)
				i++
			}
		}
		return esc, false
	}
	check := func(bs uint64) {
		gotEsc, gotCarry := escapedBy(bs)
		wantEsc, wantCarry := walk(bs)
		if gotEsc != wantEsc || gotCarry != wantCarry {
			t.Fatalf("escapedBy(%064b) = %064b, %v; want %064b, %v", bs, gotEsc, gotCarry, wantEsc, wantCarry)
		}
	}
	for bs := range uint64(1 << 16) {
		check(bs)
		check(bs << 48)
		check(bs<<40 | 0xffff)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 1 << 18 {
		check(r.Uint64())
		check(r.Uint64() | r.Uint64())
	}
}
