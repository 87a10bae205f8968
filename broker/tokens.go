package broker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/rtsandbox/rtsandbox/wire"
)

// A Token is a turn's credential on the broker's network listener: 256
// random bits, base64url without padding (TokenLen characters). It names
// one turn's handler (its binding) until it is revoked. It redacts itself
// in fmt and slog; Reveal gives its text, for the one place that delivers
// it to the worker (the engine, on the worker's stdin).
type Token struct{ text string }

// TokenLen is the length of a token's text: 32 bytes in base64url.
const TokenLen = 43

// TokenHeader carries the token on every request to the network
// listener: wire.BrokerTokenHeader, declared once for both sides. The
// listener removes it before the turn's handler sees the request, so the
// handler's header rules are the socket's.
const TokenHeader = wire.BrokerTokenHeader

func (Token) String() string             { return "[token]" }
func (Token) GoString() string           { return "[token]" }
func (Token) LogValue() slog.Value       { return slog.StringValue("[token]") }
func (Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[token]")) }

// Reveal is the token's text.
func (t Token) Reveal() string { return t.text }

// Tokens is the table of live tokens. The zero value is not usable; use
// NewTokens. It is safe for concurrent use.
//
// A presented token is hashed with SHA-256; the table is keyed by the
// digest's first half, and the whole digest of the entry found is compared
// with subtle.ConstantTimeCompare. The lookup's timing depends only on a
// digest, which tells an attacker nothing about a live token's text
// (finding a text with a chosen digest prefix is a preimage search), and
// the final comparison takes the same time whatever matches. Only digests
// are kept, never a token's text.
type Tokens struct {
	mu   sync.Mutex
	live map[[sha256.Size / 2]byte]tokenEntry
}

type tokenEntry struct {
	sum [sha256.Size]byte
	h   http.Handler
}

// NewTokens returns an empty table.
func NewTokens() *Tokens { return &Tokens{live: map[[sha256.Size / 2]byte]tokenEntry{}} }

func half(sum [sha256.Size]byte) (k [sha256.Size / 2]byte) {
	copy(k[:], sum[:])
	return k
}

// Issue makes a fresh token for h, the handler of one turn (the broker's
// Turn, bound to the turn's binding), live until ctx ends (the turn's
// context) or revoke is called, whichever comes first; a revoked token is
// refused like one never issued, for good.
func (t *Tokens) Issue(ctx context.Context, h http.Handler) (tok Token, revoke func()) {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (it crashes instead)
	text := base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(text))
	t.mu.Lock()
	t.live[half(sum)] = tokenEntry{sum: sum, h: h}
	t.mu.Unlock()
	var once sync.Once
	stop := context.AfterFunc(ctx, func() { t.revoke(sum) })
	revoke = func() {
		once.Do(func() {
			stop()
			t.revoke(sum)
		})
	}
	return Token{text: text}, revoke
}

func (t *Tokens) revoke(sum [sha256.Size]byte) {
	t.mu.Lock()
	if e, ok := t.live[half(sum)]; ok && e.sum == sum {
		delete(t.live, half(sum))
	}
	t.mu.Unlock()
}

// Live counts the live tokens.
func (t *Tokens) Live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// handler is the turn handler text names, or nil: one never issued, or
// revoked. The caller checks the text is wellFormed first (the gate),
// so only TokenLen bytes are ever hashed.
func (t *Tokens) handler(text string) http.Handler {
	sum := sha256.Sum256([]byte(text))
	t.mu.Lock()
	e, ok := t.live[half(sum)]
	t.mu.Unlock()
	if !ok || subtle.ConstantTimeCompare(sum[:], e.sum[:]) != 1 {
		return nil
	}
	return e.h
}

// wellFormed reports whether text is TokenLen base64url characters: the
// parse of the untrusted header, costing what its bytes cost.
func wellFormed(text string) bool {
	if len(text) != TokenLen {
		return false
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
