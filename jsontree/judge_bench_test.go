package jsontree_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/internal/heappeak"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// Does jsontree earn its place (issue 23, item 5)? The benchmarks below
// read the same request bodies the way the Messages rules read them (the
// messages array counted, each message's role and content, each content
// block's type and text), three ways:
//
//   - Tree: jsontree as modelapi uses it, one validating Split under a
//     Budget of the body's size, then views (Array, Fields, String) that
//     alias the body and stop an array at its rule's count;
//   - StdRaw: the candidate replacement, encoding/json behind a budget
//     checked before decoding: a json.Decoder token pass counts the values
//     the body would materialise (refusing past jsontree.NodesFor, looking
//     at the context every jsontree.CheckBytes), then json.Unmarshal level
//     by level into map[string]json.RawMessage and []json.RawMessage, as
//     the hand-written decoders before jsontree did;
//   - StdTyped: the same token pass, then one json.Unmarshal into typed
//     structs (a message's content kept raw, since it is a string or an
//     array, then decoded into typed blocks);
//   - StdTypedNoBudget: StdTyped without the token pass, what the pass
//     costs; it bounds nothing (a flood of empty arrays is 33 million
//     elements: the seal issue's 2.1 GB), so it does not read the flood.
//
// Each reports beside time and allocations the longest stretch in which
// it did not look at the call's context (gap-ms: the bound is that all
// parsing stops within 100 ms of the turn's end), and the peak heap per
// body byte while it ran (peak/byte, sampled as broker's
// BenchmarkDecodePeak samples it; the bound is rtsandbox.DecodeFactor = 5
// for the whole call, decode and rebuild). docs/benchmarks.md, "Does
// jsontree earn its place?", has the figures.

// maxMessages and maxBlocks are the Messages rules' counts
// (modelapi.MaxAnthropicMessages, MaxAnthropicBlocks), which jsontree may
// not import.
const (
	maxMessages = 100_000
	maxBlocks   = 256
)

// judgeBodies are the bodies judged: production-like conversations (the
// corpus of modelapi's BenchmarkNormalizeConversation) and the hostile
// shapes of the seal issue: 96 MiB of empty arrays in messages (the body
// that took serve to 7 GB) and one 64 MiB text (BenchmarkDecodePeak's
// kept shape), only when large.
func judgeBodies(large bool) []judgeBody {
	bodies := []judgeBody{
		{"Conversation16KiB", conversationBody(16 << 10)},
		{"Conversation200KiB", conversationBody(200 << 10)},
	}
	if large {
		bodies = append(bodies,
			judgeBody{"EmptyArrays96MiB", []byte(`{"messages":[` + strings.Repeat("[],", 96<<20/3) + `[]]}`)},
			judgeBody{"OneText64MiB", []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("a", 64<<20) + `"}]}]}`)})
	}
	return bodies
}

type judgeBody struct {
	name string
	body []byte
}

// conversationBody is modelapi's (normalize_bench_test.go): a Messages
// request body of about size bytes, markdown from answercorpus in text
// blocks of about 4000 bytes, user and assistant in turn.
func conversationBody(size int) []byte {
	var msgs []string
	var text strings.Builder
	role := "user"
	for _, piece := range answercorpus.Stream(answercorpus.Markdown, size) {
		text.WriteString(piece)
		if text.Len() <= 4000 {
			continue
		}
		msgs = append(msgs, `{"role":"`+role+`","content":[{"type":"text","text":"`+text.String()+`"}]}`)
		text.Reset()
		if role == "user" {
			role = "assistant"
		} else {
			role = "user"
		}
	}
	if role == "user" {
		msgs = msgs[:len(msgs)-1]
	}
	return []byte(`{"max_tokens":1000,"stream":true,"messages":[` + strings.Join(msgs, ",") + `]}`)
}

var errRefused = errors.New("refused")

// readers are the three ways of reading a body; each returns the bytes
// of text it read (so that nothing is optimised away) or an error for a
// body the rules refuse.
var readers = []struct {
	name string
	read func(ctx context.Context, body []byte) (int, error)
}{
	{"Tree", readTree},
	{"StdRaw", readStdRaw},
	{"StdTyped", readStdTyped},
	{"StdTypedNoBudget", readStdTypedNoBudget},
}

func readTree(ctx context.Context, body []byte) (int, error) {
	b := jsontree.NewBudget(ctx, jsontree.NodesFor(len(body)))
	top, err := b.Split(body)
	if err != nil {
		return 0, err
	}
	msgs, n, ok := b.Array(top["messages"], maxMessages)
	if !ok || n > maxMessages {
		return 0, errRefused
	}
	total := 0
	var msg, blk [2]json.RawMessage
	for _, m := range msgs {
		if _, _, ok := b.Fields(m, []string{"role", "content"}, msg[:]); !ok {
			return 0, errRefused
		}
		role, ok := b.String(msg[0])
		if !ok {
			return 0, errRefused
		}
		total += len(role)
		blocks, n, ok := b.Array(msg[1], maxBlocks)
		if !ok || n > maxBlocks {
			return 0, errRefused
		}
		for _, bl := range blocks {
			if _, _, ok := b.Fields(bl, []string{"type", "text"}, blk[:]); !ok {
				return 0, errRefused
			}
			typ, ok1 := b.String(blk[0])
			text, ok2 := b.String(blk[1])
			if !ok1 || !ok2 || typ != "text" {
				return 0, errRefused
			}
			total += len(text)
		}
	}
	return total, b.Err()
}

// prescan is the candidate's budget, checked before decoding: it counts
// the values (and keys) data would materialise, refusing once they pass
// nodes, and looks at ctx every jsontree.CheckBytes of input.
func prescan(ctx context.Context, data []byte, nodes int) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	n, next := 0, int64(0)
	for {
		if off := d.InputOffset(); off >= next {
			if err := ctx.Err(); err != nil {
				return err
			}
			next = off + jsontree.CheckBytes
		}
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if dl, ok := tok.(json.Delim); ok && (dl == ']' || dl == '}') {
			continue
		}
		if n++; n > nodes {
			return jsontree.ErrBudget
		}
	}
}

func readStdRaw(ctx context.Context, body []byte) (int, error) {
	if err := prescan(ctx, body, jsontree.NodesFor(len(body))); err != nil {
		return 0, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return 0, err
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil || len(msgs) > maxMessages {
		return 0, errRefused
	}
	total := 0
	for _, m := range msgs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var msg map[string]json.RawMessage
		var role string
		var blocks []json.RawMessage
		if json.Unmarshal(m, &msg) != nil || json.Unmarshal(msg["role"], &role) != nil ||
			json.Unmarshal(msg["content"], &blocks) != nil || len(blocks) > maxBlocks {
			return 0, errRefused
		}
		total += len(role)
		for _, bl := range blocks {
			var blk map[string]json.RawMessage
			var typ, text string
			if json.Unmarshal(bl, &blk) != nil || json.Unmarshal(blk["type"], &typ) != nil ||
				json.Unmarshal(blk["text"], &text) != nil || typ != "text" {
				return 0, errRefused
			}
			total += len(text)
		}
	}
	return total, nil
}

func readStdTyped(ctx context.Context, body []byte) (int, error) {
	if err := prescan(ctx, body, jsontree.NodesFor(len(body))); err != nil {
		return 0, err
	}
	return readStdTypedNoBudget(ctx, body)
}

func readStdTypedNoBudget(ctx context.Context, body []byte) (int, error) {
	var top struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &top); err != nil || len(top.Messages) > maxMessages {
		return 0, errRefused
	}
	total := 0
	for _, m := range top.Messages {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var blocks []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil || len(blocks) > maxBlocks {
			return 0, errRefused
		}
		total += len(m.Role)
		for _, bl := range blocks {
			if bl.Type != "text" {
				return 0, errRefused
			}
			total += len(bl.Text)
		}
	}
	return total, nil
}

// gapContext is a context that never ends and records the longest time
// between two looks at it (Err), from the start to the end of a read.
type gapContext struct {
	context.Context
	last time.Time
	gap  time.Duration
}

func newGapContext() *gapContext {
	return &gapContext{Context: context.Background(), last: time.Now()}
}

func (c *gapContext) Err() error {
	c.look()
	return nil
}

func (c *gapContext) look() {
	now := time.Now()
	c.gap = max(c.gap, now.Sub(c.last))
	c.last = now
}

// BenchmarkJudgeRead: time, allocations and the longest stretch without
// a look at the context (gap-ms, the worst of the runs) of each reader
// on each body.
func BenchmarkJudgeRead(b *testing.B) {
	for _, c := range judgeBodies(true) {
		for _, r := range readers {
			if unbounded(c, r.name) {
				continue
			}
			b.Run(c.name+"/"+r.name, func(b *testing.B) {
				wantErr := strings.HasPrefix(c.name, "EmptyArrays")
				b.SetBytes(int64(len(c.body)))
				b.ReportAllocs()
				var gap time.Duration
				for b.Loop() {
					ctx := newGapContext()
					_, err := r.read(ctx, c.body)
					ctx.look()
					gap = max(gap, ctx.gap)
					if (err != nil) != wantErr {
						b.Fatalf("err %v", err)
					}
				}
				b.ReportMetric(float64(gap.Microseconds())/1000, "gap-ms")
			})
		}
	}
}

// BenchmarkJudgePeak: the most the heap grew per body byte while each
// reader read each large body (peak/byte, the worst of the runs).
func BenchmarkJudgePeak(b *testing.B) {
	for _, c := range judgeBodies(true)[2:] {
		for _, r := range readers {
			if unbounded(c, r.name) {
				continue
			}
			b.Run(c.name+"/"+r.name, func(b *testing.B) {
				var worst float64
				for b.Loop() {
					worst = max(worst, heappeak.Of(func() { _, _ = r.read(context.Background(), c.body) })/float64(len(c.body)))
				}
				b.ReportMetric(worst, "peak/byte")
			})
		}
	}
}

// unbounded reports the reader that is not run on a flood.
func unbounded(c judgeBody, reader string) bool {
	return reader == "StdTypedNoBudget" && strings.HasPrefix(c.name, "EmptyArrays")
}

// TestJudgeReadersAgree: the three readers of the judgement read the same
// text from the production-like bodies, so their figures compare the
// same work, and refuse a flood of empty arrays.
func TestJudgeReadersAgree(t *testing.T) {
	flood := []byte(`{"messages":[` + strings.Repeat("[],", jsontree.NodeFloor) + `[]]}`)
	for _, c := range judgeBodies(false) {
		want := -1
		for _, r := range readers {
			if _, err := r.read(context.Background(), flood); err == nil && r.name != "StdTypedNoBudget" {
				t.Errorf("%s: read a flood of %d empty arrays", r.name, jsontree.NodeFloor+1)
			}
			n, err := r.read(context.Background(), c.body)
			if err != nil || want >= 0 && n != want {
				t.Errorf("%s/%s: %d bytes, %v; want %d", c.name, r.name, n, err, want)
			}
			want = n
		}
	}
}
