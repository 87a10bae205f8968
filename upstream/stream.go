package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/rtsandbox/rtsandbox"
)

// This file is the streamed side of the client: Open makes one call and
// hands back the answer at any status with its body unread, and
// StreamScanner passes a body on piece by piece while looking for the
// credential across piece boundaries (docs/protocol.md, "SSE").

// MaxStreamBytes bounds the upstream bytes of one streamed answer (50 MiB,
// docs/protocol.md, "SSE").
const MaxStreamBytes = rtsandbox.MaxStreamedAnswer

// streamReadSize is how much one read of a streamed body asks for.
const streamReadSize = 32 << 10

// Response is an answer opened by Open: its status and headers as the
// upstream sent them, and its body unread. The caller must Close it.
type Response struct {
	Status int
	Header http.Header
	Body   io.ReadCloser
}

// Close closes the body.
func (r *Response) Close() error { return r.Body.Close() }

// Open makes one POST attempt of call under the client's rules (headers
// built from scratch, no redirect, no proxy, no decompression) and returns
// the answer whatever its status, its body unread: a streamed answer is
// passed on as it arrives, and an error status keeps its body. It never
// retries: a streamed answer cannot be repeated once begun, and the
// Anthropic client of the worker retries 429 and 529 itself, honouring
// retry-after. Errors wrap one of the failure classes, like Post's.
func (c *Client) Open(ctx context.Context, call Call) (*Response, error) {
	if call.URL.IsZero() {
		return nil, fmt.Errorf("%w: no endpoint", ErrNetwork)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, call.URL.String(), bytes.NewReader(call.Body))
	if err != nil {
		return nil, fmt.Errorf("%w: cannot build request", ErrNetwork)
	}
	req.Header = header(http.MethodPost, call)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, classify(ctx, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: resp.Body}, nil
}

// StreamScanner reads a body in pieces and returns what may be passed on:
// everything read, except a tail that could be the start of one of the
// credential's forms, which it holds back until the next read shows that it
// is not (or the body ends). Each read is searched together with the tail
// held from the one before, so a form split across reads, at any offset
// and across any number of reads, is found as if the body were whole. The
// forms are those of Forms (searched through the reduced set of
// searchForms, which finds a text holding any of them), searched as raw
// bytes as the reference's filter does; in event mode (Events) each
// event's JSON data is also checked decoded, as the whole-body scan of
// CheckJSON checks a non-streamed answer. The total read is capped.
//
// Holding back only a possible form prefix, rather than always the last
// longest-form-minus-one bytes as the reference does, keeps the stream as
// live as the upstream's: an SSE event ends in a blank line, which no form
// starts with, so an event is passed on as soon as it has arrived.
//
// Next returns ErrReflect on a match and ErrTooLarge past the cap; the
// caller must then cut the answer off, never pass on what it holds.
type StreamScanner struct {
	r     io.Reader
	m     *matcher
	max   int64
	total int64
	buf   []byte
	held  int // bytes at the start of buf held from the last read
	off   int // start of the held bytes in buf before they are moved
	eof   bool
	// stopped is sticky: a scanner that found a form (or could not
	// check) passes on nothing more.
	stopped error
	// events is the event mode (Events): whole events only, each
	// event's JSON data checked as decoded too.
	events  bool
	reveal  revealer // event mode's verdicts on references, kept across events
	longest int      // the longest form's length
	// fields are event mode's assembled fields (fields.go): the text a
	// client builds from the events, checked as it grows, and the
	// preview text of the events of each piece (CollectText).
	fields *streamFields
	// begun is set once checkEvents saw the stream's first bytes, the
	// only place a byte-order mark is read as one (leadingMark).
	begun bool
	// keep records the events of each piece in evs (KeepEvents); arena
	// holds what of them is not in the piece (joined data, types).
	keep  bool
	evs   []StreamEvent
	arena []byte
}

// StreamEvent is one event of the piece Next returned, as the scanner
// read it for its checks (KeepEvents): a reader of the stream that needs
// the events (the broker's error and usage watcher) takes them from here
// rather than parsing the piece again. Its slices are valid until the
// next call of Next.
type StreamEvent struct {
	// Name is the value of the event's "event" line, nil without one.
	Name []byte
	// Data is the event's data lines joined with "\n".
	Data []byte
	// JSON reports whether Data was read as one JSON value (by the
	// reader of the assembled fields, fields.go); the members below are
	// known only then.
	JSON bool
	// Type is the top-level "type" member, decoded (nil when absent).
	Type []byte
	// Usage and MessageUsage are the raw values of the top-level
	// "usage" member and of "message"."usage" (nil when absent), matched
	// as encoding/json matches a field name.
	Usage, MessageUsage []byte
	// Whole is false for an event the body ended inside (no blank line
	// after it): a client that parses events never sees it.
	Whole bool
}

// MaxStreamEvent bounds one server-sent event in event mode (4 MiB): the
// scanner holds an event until it is complete, so its size is bounded.
const MaxStreamEvent = 4 << 20

// Events switches s to event mode, for a text/event-stream body: a piece
// ends only where an event ends (a blank line), and each event's data,
// when it is JSON, is also checked as CheckJSON checks a whole body, with
// every string decoded, so a form hidden by a JSON escape (\u0041 for A)
// inside an event is found as it is in a non-streamed answer. The text a
// client assembles from the events (each choice's content, thinking and
// tool-call arguments, each content block's text, thinking, partial JSON
// and signature: see fields.go) is checked too, as it grows, so a key cut
// into deltas of any size is found where the client would hold it whole;
// an answer that text cannot be read from as every client reads it fails
// with ErrUncheckable. An event is held until its end (or the body's), at
// most MaxStreamEvent bytes: a longer one fails with ErrTooLarge. Call it
// before the first Next.
func (s *StreamScanner) Events() {
	s.events = true
	if len(s.m.forms) > 0 {
		s.fields = newStreamFields(s.m.kf, s.m)
	}
}

// CollectText makes Text report the preview text of each piece, in event
// mode: the text a guest may watch grow. Call it after Events, before the
// first Next.
func (s *StreamScanner) CollectText() {
	if s.fields == nil {
		s.fields = newStreamFields(s.m.kf, s.m)
	}
	s.fields.collect = true
}

// KeepEvents makes Parsed report the events of each piece, in event
// mode. Call it after Events, before the first Next. Without a key to
// look for or a preview to collect, the events are still read, but an
// event the check could not read as every client does (ErrUncheckable)
// does not stop the stream, as it would not without KeepEvents: it is
// reported with JSON false.
func (s *StreamScanner) KeepEvents() {
	if s.fields == nil {
		s.fields = newStreamFields(s.m.kf, s.m)
	}
	s.keep = true
}

// Parsed returns the events of the piece the last Next returned, in
// order, valid until the next call, when KeepEvents was called.
func (s *StreamScanner) Parsed() []StreamEvent { return s.evs }

// Text returns the preview text of the events in the piece the last Next
// returned (a chat completion's choice 0 content, a Messages answer's text
// blocks), valid until the next call, when CollectText was called.
func (s *StreamScanner) Text() []byte {
	if s.fields == nil {
		return nil
	}
	return s.fields.visible
}

// NewStreamScanner returns a scanner of r for key's forms that fails once r
// yields more than limit bytes (MaxStreamBytes when limit < 1). An empty
// key finds nothing; the cap still holds.
func NewStreamScanner(r io.Reader, key string, limit int64) *StreamScanner {
	return NewStreamScannerFor(r, NewKeyForms(key), limit)
}

// NewStreamScannerFor is NewStreamScanner for a key whose forms the caller
// made ready.
func NewStreamScannerFor(r io.Reader, k *KeyForms, limit int64) *StreamScanner {
	if limit < 1 {
		limit = MaxStreamBytes
	}
	m := k.matcher()
	// The pieces are small but the stream is long: the large filter, whose
	// false hits are rarer, pays for itself (see matcher).
	m.build(largeText)
	return &StreamScanner{r: r, m: m, max: limit, longest: k.longest,
		buf: make([]byte, 0, streamReadSize+k.longest)}
}

// Total is the number of body bytes read so far.
func (s *StreamScanner) Total() int64 { return s.total }

// Next returns the next piece to pass on, which stays valid until the next
// call, or an error: io.EOF once the body ended and everything was
// returned, ErrReflect, ErrTooLarge, or the read's error as it is. It
// returns a non-empty piece or an error, never both.
func (s *StreamScanner) Next() ([]byte, error) {
	if s.fields != nil {
		s.fields.visible = s.fields.visible[:0]
	}
	s.evs, s.arena = s.evs[:0], s.arena[:0]
	for {
		if s.total > s.max {
			return nil, ErrTooLarge
		}
		if s.eof {
			if s.held == 0 {
				return nil, io.EOF
			}
			out := s.buf[s.off : s.off+s.held]
			s.held = 0
			if err := s.checkEvents(out); err != nil {
				return nil, err
			}
			return out, nil
		}
		// Move the held tail to the front (into a larger buffer when an
		// event held in event mode fills it); read after it.
		if cap(s.buf)-s.held < streamReadSize {
			grown := make([]byte, 0, 2*(s.held+streamReadSize))
			s.buf = append(grown, s.buf[s.off:s.off+s.held]...)
		} else {
			s.buf = s.buf[:copy(s.buf[:cap(s.buf)], s.buf[s.off:s.off+s.held])]
		}
		s.off = 0
		n, err := s.r.Read(s.buf[s.held:cap(s.buf)])
		s.total += int64(n)
		if s.total > s.max {
			return nil, ErrTooLarge
		}
		out, serr := s.scan(n)
		switch {
		case serr != nil:
			return nil, serr
		case err == io.EOF:
			s.eof = true
		case err != nil:
			return nil, err
		}
		if len(out) > 0 {
			return out, nil
		}
	}
}

// scan searches the held tail and the n bytes just read, and returns the
// part that can be passed on; the rest stays held. After a match every
// later call fails too.
func (s *StreamScanner) scan(n int) ([]byte, error) {
	if s.stopped != nil {
		return nil, s.stopped
	}
	if n == 0 {
		return nil, nil
	}
	w := s.buf[:s.held+n]
	// The held bytes were searched already: a new match ends in the bytes
	// just read, so it starts at most longest−1 bytes before them.
	if s.m.contains(w[max(0, s.held-s.longest+1):]) {
		s.stopped, s.held = ErrReflect, 0
		return nil, ErrReflect
	}
	keep := s.partial(w)
	if s.events {
		keep = max(keep, len(w)-eventsEnd(w))
		if keep > MaxStreamEvent {
			return nil, ErrTooLarge
		}
	}
	s.off, s.held = len(w)-keep, keep
	out := w[:len(w)-keep]
	if err := s.checkEvents(out); err != nil {
		return nil, err
	}
	return out, nil
}

// reflectedIn reports whether a string of the JSON text data, decoded,
// holds a form of m.
func reflectedIn(data []byte, m *matcher) bool {
	_, reflected := scanWith(data, m)
	return reflected
}

// eventsEnd is the length of the longest prefix of w made of whole events:
// just after its last blank line (LF LF, CR LF CR LF or CR CR), 0 when w
// has none. It walks back from the end line by line, so it costs the
// length of the trailing unfinished event, not of w.
func eventsEnd(w []byte) int {
	for end := len(w); ; {
		i := bytes.LastIndexByte(w[:end], '\n')
		switch {
		case i < 0:
			if bytes.IndexByte(w, '\n') < 0 { // a stream of CR line ends
				if k := bytes.LastIndex(w, []byte("\r\r")); k >= 0 {
					return k + 2
				}
			}
			return 0
		case i >= 1 && w[i-1] == '\n', i >= 3 && w[i-1] == '\r' && w[i-2] == '\n' && w[i-3] == '\r':
			return i + 1
		}
		end = i
	}
}

// checkEvents checks, in event mode, the data of every event in out as
// CheckJSON checks a body; data that is not JSON (such as [DONE]) has had
// its raw check. After a match every later call fails too.
func (s *StreamScanner) checkEvents(out []byte) error {
	if !s.events || len(s.m.forms) == 0 && s.fields == nil || len(out) == 0 {
		return nil
	}
	if !s.begun {
		s.begun = true
		var err error
		if out, err = s.leadingMark(out); err != nil {
			s.stopped, s.held = err, 0
			return err
		}
	}
	if bytes.IndexByte(out, '\r') >= 0 { // CR LF and lone CR end lines too
		out = bytes.ReplaceAll(bytes.ReplaceAll(out, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
	}
	// data is the event's data: its one data line in place, or the lines
	// joined (rare) in joined; name is its event line's value.
	var data, joined, name []byte
	lines := 0
	flush := func(whole bool) error {
		if lines > 1 {
			data = joined
		}
		// Decoding can only reveal a form the raw search missed where a
		// string holds a character reference or an escape that is no
		// barrier (revealing).
		rev := len(s.m.forms) > 0 && len(data) > 0 && (data[0] == '{' || data[0] == '[') && s.m.kf.revealing(data, &s.reveal)
		if rev && reflectedIn(data, s.m) {
			s.stopped, s.held = ErrReflect, 0
			return ErrReflect
		}
		read := false
		if s.fields != nil && len(data) > 0 {
			var err error
			if read, err = s.fields.event(data, rev); err != nil && !s.lenient(err) {
				s.stopped, s.held = err, 0
				return err
			}
		}
		if s.keep && lines > 0 {
			s.record(name, data, read, whole, lines > 1)
		}
		data, joined, name, lines = nil, joined[:0], nil, 0
		return nil
	}
	for len(out) > 0 {
		line := out
		if i := bytes.IndexByte(out, '\n'); i >= 0 {
			line, out = out[:i], out[i+1:]
		} else {
			out = nil
		}
		if len(line) == 0 {
			if err := flush(true); err != nil {
				return err
			}
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
				name = bytes.TrimPrefix(v, []byte(" "))
			}
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		lines++
		if lines == 1 {
			data = v
		}
		if lines == 2 {
			joined = append(joined, data...)
		}
		if lines >= 2 {
			joined = append(append(joined, '\n'), v...)
		}
	}
	return flush(false)
}

// byteOrderMark is UTF-8's byte-order mark.
var byteOrderMark = []byte("\xEF\xBB\xBF")

// errLeadingMark fails an answer that begins with a byte-order mark.
var errLeadingMark = fmt.Errorf("%w (it begins with a byte-order mark)", ErrUncheckable)

// leadingMark reads a byte-order mark at the start of the stream (first,
// the first bytes checkEvents sees: a piece in event mode ends where an
// event ends, so it holds the whole mark). Clients disagree on it: the
// SSE specification's parser (EventSource) strips one, so the first line
// is a field; the SDKs' line readers keep it, so the first line's field
// name is "\uFEFFdata", which they skip, and the event's data is its
// other data lines. No one reading of the first event is every client's,
// so an answer checked for a key or previewed fails with errLeadingMark,
// before any byte of it is passed on. Without either (the watcher reads
// only usage) the mark is stripped as the specification strips it.
func (s *StreamScanner) leadingMark(first []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(first, byteOrderMark)
	switch {
	case !ok:
		return first, nil
	case !s.lenient(ErrUncheckable):
		return nil, errLeadingMark
	}
	return rest, nil
}

// lenient reports whether err of an event's read is no failure: the
// fields are read only for KeepEvents (no key, no preview), and an
// uncheckable event stops nothing then.
func (s *StreamScanner) lenient(err error) bool {
	return errors.Is(err, ErrUncheckable) && len(s.m.forms) == 0 && !s.fields.collect
}

// record keeps one event of the piece for Parsed, with what the fields'
// reader found in its data when read. Data, and what the reader found in
// it, stay in the piece; what may be in a buffer the next event reuses
// (data joined from several lines, a type decoded from escapes) is
// copied to the piece's arena.
func (s *StreamScanner) record(name, data []byte, read, whole, joined bool) {
	ev := StreamEvent{Name: name, Data: data, Whole: whole, JSON: read}
	if read {
		fe := &s.fields.rd.ev
		ev.Type, ev.Usage, ev.MessageUsage = fe.typ, fe.usage, fe.msgUsage
		if joined || fe.typDecoded {
			ev.Type = s.keepBytes(fe.typ)
		}
	}
	if joined {
		ev.Data, ev.Usage, ev.MessageUsage = s.keepBytes(data), s.keepBytes(ev.Usage), s.keepBytes(ev.MessageUsage)
	}
	s.evs = append(s.evs, ev)
}

// keepBytes copies b to the piece's arena; nil stays nil.
func (s *StreamScanner) keepBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	from := len(s.arena)
	s.arena = append(s.arena, b...)
	return s.arena[from:len(s.arena):len(s.arena)]
}

// partial returns the length of the longest tail of w that is the start
// of some form (shorter than the form): the bytes a match spanning the
// next read would begin with.
func (s *StreamScanner) partial(w []byte) int {
	keep := 0
	for _, f := range s.m.forms {
		lo := max(0, len(w)-len(f)+1)
		// The earliest start whose tail is a prefix of f wins for f.
		for i := lo; i < len(w)-keep; {
			j := bytes.IndexByte(w[i:len(w)-keep], f[0])
			if j < 0 {
				break
			}
			i += j
			if bytes.HasPrefix(f, w[i:]) {
				keep = len(w) - i
				break
			}
			i++
		}
	}
	return keep
}
