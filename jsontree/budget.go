package jsontree

import (
	"context"
	"encoding/json"
	"errors"
	"math"
)

// What a request's decoding may cost. A guest's body can hold a value
// every two or three bytes (a 96 MiB body some 33 million empty arrays),
// and a decoded value costs tens of bytes or more (a small object's map
// over 300): decoded whole, such a body took the host to gigabytes before
// any rule could count it. A Budget is the cure for the values that are
// kept; rules that count (messages, blocks, tools) read arrays through
// Array, which stops at the count.
const (
	// NodeFloor is the values any request may keep, whatever its size:
	// about 14 MB of small objects at worst.
	NodeFloor = 1 << 15
	// NodeBytes is the body bytes that pay for one more value beyond
	// NodeFloor: at most about 3.4 bytes of trees per body byte.
	NodeBytes = 128
	// CheckBytes is how many bytes a scan reads between two looks at its
	// budget's context: some tens of microseconds.
	CheckBytes = 64 << 10
)

var (
	// ErrBudget is the error of a decode that would keep more values
	// than its Budget allows.
	ErrBudget = errors.New("jsontree: over the decoding budget")
	// ErrStopped is the error of a decode whose Budget's context ended.
	ErrStopped = errors.New("jsontree: decoding stopped")
	// ErrDuplicateKey is DecodeUnique's error for an object that repeats
	// a key.
	ErrDuplicateKey = errors.New("jsontree: a key repeated within an object")
)

// A Budget bounds the decoding of one request body, over every read of it
// (Decode, Split, Array, Fields, String, Valid, Compact, Scan): the values
// they keep together may not exceed its node count, and each stops within
// CheckBytes of reading once its context ends. The first refusal sticks:
// every later read under the Budget fails with the same error, which Err
// returns.
//
// A Budget belongs to one goroutine. A nil *Budget bounds nothing.
type Budget struct {
	ctx   context.Context
	nodes int
	err   error
	// since counts the bytes read since the last look at ctx, over all
	// the reads: many small reads look as seldom as one large one.
	since int
	// unique refuses a key repeated within one object (DecodeUnique).
	unique bool
	// strings holds the lengths of the long strings the views skipped,
	// by the address of their opening quote (view.go): at most one per
	// longString bytes of the body.
	strings map[*byte]int
}

// longString is the length from which a skipped string's end is
// remembered.
const longString = 1 << 10

// known is the remembered length of the string whose opening quote is at
// q.
func (b *Budget) known(q *byte) (int, bool) {
	if b == nil || b.strings == nil {
		return 0, false
	}
	n, ok := b.strings[q]
	return n, ok
}

// remember keeps the length n of the string whose opening quote is at q.
func (b *Budget) remember(q *byte, n int) {
	if b == nil {
		return
	}
	if b.strings == nil {
		b.strings = map[*byte]int{}
	}
	b.strings[q] = n
}

// NewBudget returns a Budget of nodes values that stops when ctx ends:
// the call's context. Its first read looks at ctx first.
func NewBudget(ctx context.Context, nodes int) *Budget {
	return &Budget{ctx: ctx, nodes: nodes, since: CheckBytes}
}

// NodesFor is the node budget of a body of size bytes: NodeFloor plus one
// value per NodeBytes.
func NodesFor(size int) int {
	return NodeFloor + max(size, 0)/NodeBytes
}

// Err returns the refusal that stopped the Budget (wrapping ErrBudget or
// ErrStopped), or nil while it holds.
func (b *Budget) Err() error {
	if b == nil {
		return nil
	}
	return b.err
}

// Check looks at the context between two reads: nil while the Budget
// holds. Callers that work long on what they read (a 20 MiB image's
// alphabet, a schema's tokens) call it between steps.
func (b *Budget) Check() error {
	if b == nil {
		return nil
	}
	return b.check()
}

// Take counts n values a caller keeps in structures of its own (a
// schema check's key sets) against the budget.
func (b *Budget) Take(n int) error {
	if b == nil {
		return nil
	}
	return b.spend(n)
}

// check returns the sticky refusal, first noting the end of the context.
func (b *Budget) check() error {
	b.since = 0
	if b.err == nil && b.ctx.Err() != nil {
		b.err = ErrStopped
	}
	return b.err
}

// spend takes n values from the budget.
func (b *Budget) spend(n int) error {
	if b.err != nil {
		return b.err
	}
	if n > b.nodes {
		b.err = ErrBudget
		return b.err
	}
	b.nodes -= n
	return nil
}

// Decode is the package's Decode under b: it fails with ErrBudget rather
// than keep more values than b has left, and with ErrStopped once b's
// signal comes. A nil b bounds nothing.
func (b *Budget) Decode(data []byte) (any, error) {
	return b.decode(data)
}

// DecodeUnique is Decode that also refuses, with ErrDuplicateKey, an
// object that repeats a key (after decoding escapes): arguments checked on
// their decoded value but forwarded as sent must not let an upstream that
// keeps the first copy see what the check never saw.
func (b *Budget) DecodeUnique(data []byte) (any, error) {
	if b == nil {
		b = NewBudget(context.Background(), math.MaxInt)
	}
	b.unique = true
	defer func() { b.unique = false }()
	return b.decode(data)
}

// Split is the package's Split under b, each member one value, but its
// values alias data rather than a copy: data must not change while they
// are used.
func (b *Budget) Split(data []byte) (map[string]json.RawMessage, error) {
	return b.split(data)
}
