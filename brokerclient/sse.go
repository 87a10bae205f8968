package brokerclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// This file is a bounded parser for server-sent events (the WHATWG
// "event stream" format), shared by both sides of the broker: the worker
// reads streamed model answers and MCP answers with SSEReader, and the host
// may feed a copy of an upstream stream to an SSEParser (it is an
// io.Writer) to watch for error events. It lives here because the worker
// may import only the root package, jsonjs, brokerclient and the standard
// library; it uses the standard library only.
//
// The format, as parsed: lines end in CRLF, LF or CR (a CRLF split across
// two writes is one line end); a UTF-8 byte-order mark at the very start is
// skipped; a line starting with ':' is a comment; "field: value" strips one
// space after the colon, and a line without a colon is a field with an
// empty value; data lines are joined with "\n"; a blank line dispatches the
// event, unless it had no data line; an event with no event line has type
// "message"; the id persists across events (an id containing NUL is
// ignored); retry and unknown fields are ignored; an unfinished event at
// the end of the stream is discarded. Bytes are kept as received: invalid
// UTF-8 is not replaced.

// SSEWatchMaxEvent is the event bound of the broker's stream watcher
// (docs/protocol.md, "SSE"): with SkipOversize, an unfinished event longer than
// this is discarded rather than held.
const SSEWatchMaxEvent = 64 << 10

// Default SSE limits, used for the zero fields of SSELimits.
const (
	DefaultSSEMaxLine  = 1 << 20  // bytes of one line, without its end
	DefaultSSEMaxEvent = 4 << 20  // bytes of one event's type, id and data
	DefaultSSEMaxTotal = 50 << 20 // bytes of a whole stream, the broker's upstream cap
)

// ErrSSELimit marks a stream that broke one of its SSELimits.
var ErrSSELimit = errors.New("event stream over its limit")

// SSELimits bound what a parser holds and reads. Zero fields take the
// defaults above.
type SSELimits struct {
	MaxLine  int
	MaxEvent int
	MaxTotal int64
	// SkipOversize drops an event whose line or size is over the limit
	// and goes on with the next event, instead of failing with
	// ErrSSELimit. A watcher that must not disturb the stream wants it;
	// a client that needs every event does not.
	SkipOversize bool
}

func (l SSELimits) withDefaults() SSELimits {
	if l.MaxLine <= 0 {
		l.MaxLine = DefaultSSEMaxLine
	}
	if l.MaxEvent <= 0 {
		l.MaxEvent = DefaultSSEMaxEvent
	}
	if l.MaxTotal <= 0 {
		l.MaxTotal = DefaultSSEMaxTotal
	}
	return l
}

// SSEEvent is one dispatched event.
type SSEEvent struct {
	Type string // the event field, or "message"
	Data string // the data lines joined with "\n"
	ID   string // the last event id seen so far
}

// IsError reports an error event as the broker's stream watcher and the
// worker see it (docs/protocol.md, "SSE"): the type "error", or data that is a
// JSON object whose "type" is "error". Only data holding the JSON string
// "error" is decoded, so the check costs little on a stream of deltas.
func (ev SSEEvent) IsError() bool {
	if ev.Type == "error" {
		return true
	}
	if !strings.Contains(ev.Data, `"error"`) {
		return false
	}
	var v struct {
		Type string `json:"type"`
	}
	return json.Unmarshal([]byte(ev.Data), &v) == nil && v.Type == "error"
}

// SSEParser parses an event stream written to it in chunks of any size and
// calls emit for each event, in order. It is not safe for concurrent use.
type SSEParser struct {
	lim  SSELimits
	emit func(SSEEvent) error
	err  error // sticky: the first limit or emit error

	total     int64
	line      []byte
	started   bool // the first line end was seen (the BOM is checked there)
	afterCR   bool // the last byte written was a CR: skip one LF
	skipLine  bool // dropping the rest of an overlong line
	skipEvent bool // dropping the rest of an oversized event

	typ      []byte
	lastType string
	data     []byte
	hasData  bool
	id       string
}

// NewSSEParser returns a parser bounded by lim that hands events to emit.
// An error from emit stops the parser and is returned by Write.
func NewSSEParser(lim SSELimits, emit func(SSEEvent) error) *SSEParser {
	return &SSEParser{lim: lim.withDefaults(), emit: emit}
}

// Write parses b. It returns len(b), or the first error: ErrSSELimit
// (wrapped) when the stream breaks a limit, or emit's error. After an error
// every Write fails with it.
func (p *SSEParser) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n := len(b)
	// Parse what fits under the total, then fail: the events seen do not
	// depend on how the stream was cut into writes.
	over := p.total+int64(n) > p.lim.MaxTotal
	if over {
		b = b[:p.lim.MaxTotal-p.total]
	}
	p.total += int64(len(b))
	p.parse(b)
	if p.err == nil && over {
		p.err = fmt.Errorf("%w: more than %d bytes", ErrSSELimit, p.lim.MaxTotal)
	}
	if p.err != nil {
		return 0, p.err
	}
	return n, nil
}

// parse splits b into lines and processes each completed one.
func (p *SSEParser) parse(b []byte) {
	for len(b) > 0 && p.err == nil {
		if p.afterCR {
			p.afterCR = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := lineEnd(b)
		if i < 0 {
			p.appendLine(b)
			break
		}
		line := b[:i]
		if len(p.line) > 0 || p.skipLine {
			p.appendLine(line)
			line = p.line
		} else if len(line) > p.lim.MaxLine {
			p.oversize(fmt.Sprintf("a line longer than %d bytes", p.lim.MaxLine))
			p.skipLine = true
		}
		p.afterCR = b[i] == '\r'
		b = b[i+1:]
		if p.err == nil {
			p.err = p.endLine(line) // a whole line in b is parsed in place
		}
	}
}

// lineEnd is the index of the first CR or LF in b, or -1. Two IndexByte
// calls (vectorised) beat one IndexAny, and most streams have no CR.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	end := i
	if end < 0 {
		end = len(b)
	}
	if j := bytes.IndexByte(b[:end], '\r'); j >= 0 {
		return j
	}
	return i
}

// appendLine adds part of a line, or starts skipping an overlong one.
func (p *SSEParser) appendLine(b []byte) {
	if p.skipLine || len(b) == 0 {
		return
	}
	if len(p.line)+len(b) > p.lim.MaxLine {
		p.line = p.line[:0]
		p.oversize(fmt.Sprintf("a line longer than %d bytes", p.lim.MaxLine))
		p.skipLine = true
		return
	}
	p.line = append(p.line, b...)
}

// oversize skips the current event or fails the stream, as the limits say.
func (p *SSEParser) oversize(what string) {
	if !p.lim.SkipOversize {
		p.err = fmt.Errorf("%w: %s", ErrSSELimit, what)
		return
	}
	p.skipEvent = true
	p.typ, p.data, p.hasData = p.typ[:0], p.data[:0], false
}

// endLine processes the completed line, which p.line or the written
// buffer holds; it must not be kept.
func (p *SSEParser) endLine(line []byte) error {
	p.line = p.line[:0]
	if !p.started {
		p.started = true
		line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
	}
	if p.skipLine {
		p.skipLine = false
		return nil
	}
	if len(line) == 0 {
		return p.dispatch()
	}
	if p.skipEvent || line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], bytes.TrimPrefix(line[i+1:], []byte(" "))
	}
	switch string(field) {
	case "event":
		p.typ = append(p.typ[:0], value...)
	case "data":
		p.data = append(append(p.data, value...), '\n')
		p.hasData = true
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			p.id = string(value)
		}
	default:
		return nil
	}
	if len(p.typ)+len(p.data)+len(p.id) > p.lim.MaxEvent {
		p.oversize(fmt.Sprintf("an event larger than %d bytes", p.lim.MaxEvent))
	}
	return p.err
}

// dispatch emits the buffered event, if it has data, and resets it.
func (p *SSEParser) dispatch() error {
	skipped, hasData := p.skipEvent, p.hasData
	if string(p.typ) != p.lastType { // streams repeat a few types: reuse the string
		p.lastType = string(p.typ)
	}
	ev := SSEEvent{Type: p.lastType, Data: string(bytes.TrimSuffix(p.data, []byte("\n"))), ID: p.id}
	p.typ, p.data, p.hasData, p.skipEvent = p.typ[:0], p.data[:0], false, false
	if skipped || !hasData {
		return nil
	}
	if ev.Type == "" {
		ev.Type = "message"
	}
	return p.emit(ev)
}

// SSEReader reads events from a stream, one at a time.
type SSEReader struct {
	src   io.Reader
	p     *SSEParser
	buf   []byte
	queue []SSEEvent
	head  int
	err   error
}

// NewSSEReader returns a reader of the events of r, bounded by lim.
func NewSSEReader(r io.Reader, lim SSELimits) *SSEReader {
	sr := &SSEReader{src: r, buf: make([]byte, 32<<10)}
	sr.p = NewSSEParser(lim, func(ev SSEEvent) error {
		sr.queue = append(sr.queue, ev)
		return nil
	})
	return sr
}

// Next returns the next event. At the end of the stream it returns io.EOF
// (an unfinished last event is discarded); a broken limit gives an error
// wrapping ErrSSELimit, and a read error is returned as it is. Events
// parsed before an error are returned first.
func (r *SSEReader) Next() (SSEEvent, error) {
	for r.head == len(r.queue) {
		if r.err != nil {
			return SSEEvent{}, r.err
		}
		r.queue, r.head = r.queue[:0], 0
		n, err := r.src.Read(r.buf)
		if n > 0 {
			if _, werr := r.p.Write(r.buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			r.err = err
		}
	}
	ev := r.queue[r.head]
	r.head++
	return ev, nil
}
