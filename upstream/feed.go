package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/rtsandbox/rtsandbox"
)

// readChecked is readBody with the body scanned as it arrives (scanFrom)
// for one JSON text that does not reflect call.Key. The read goes on to
// the end of the body or to its limit whatever the scan decided, so the
// read's own failures are classified exactly as readBody does, and come
// first.
//
// A large body is read by a goroutine of its own while the scan runs on
// what has arrived, so the read's copying and the scan share the
// machine's cores; a small one is read by the scan itself as it needs
// more, which costs no goroutine.
func (c *Client) readChecked(ctx context.Context, resp *http.Response, call Call) (Answer, error) {
	limit := call.MaxBytes
	if limit < 1 {
		limit = MaxResponseBytes
	}
	if resp.ContentLength > int64(limit) {
		return Answer{Release: noRelease}, ErrTooLarge
	}
	var buf []byte
	release := noRelease
	if limit == MaxResponseBytes {
		bufp := c.bufs.Get().(*[]byte)
		buf = (*bufp)[:0]
		release = func() { c.bufs.Put(bufp) }
	} else {
		buf = make([]byte, 0, limit+1)
	}
	m := newMember(call.Member)
	body, err := readScanned(resp, buf, 0, call.keyForms(), limit, m)
	if err != nil {
		release()
		return Answer{Release: noRelease}, classifyRead(ctx, err)
	}
	return m.answer(body, release), nil
}

func noRelease() {}

// Answer is an answer PostJSON read and checked.
type Answer struct {
	// Body is the answer, in a buffer the client reuses: Release hands it
	// back, and Body (and Member) must not be touched after. Release is
	// never nil, and forgetting it only costs the reuse.
	Body    []byte
	Release func()
	// Member is the raw value of the top-level member Call.Member names,
	// found during the scan: the one member whose key matches the name
	// as encoding/json matches a field name, or nil when there is none.
	// MemberKnown is false when the scan could not be sure a decoder
	// would agree (a top-level key with an escape or a byte outside
	// ASCII, the name twice) or none was asked: decode Body then.
	Member      []byte
	MemberKnown bool
}

// readScanned reads resp's body into buf's spare capacity while scanning
// it, and returns the body or how reading or the scan failed.
// The body is resp.Body, of resp.ContentLength bytes when that is not
// negative; buf grows up to grow bytes when grow is set (and the read then
// stays on the calling goroutine). The key's forms are k.
func readScanned(resp *http.Response, buf []byte, grow int, k *KeyForms, limit int, m *member) ([]byte, error) {
	size := limit
	if resp.ContentLength >= 0 {
		size = int(resp.ContentLength)
	}
	forms := k.matcher()
	var got []byte
	var err error
	var valid, reflected bool
	if size >= asyncMin && grow == 0 {
		f := startFeed(resp.Body, buf)
		valid, reflected = scanFrom(buf, f.next, forms, size, m)
		got, err = f.wait()
	} else {
		f := feed{r: resp.Body, got: buf, grow: grow}
		valid, reflected = scanFrom(buf, f.read, forms, size, m)
		for f.err == nil {
			f.read(f.got)
		}
		got, err = f.got, f.err
	}
	switch {
	case errors.Is(err, errFull):
		return nil, ErrTooLarge // the buffer holds limit+1
	case len(got) > limit:
		// The last read filled the buffer and said EOF at once: one
		// byte over is still over.
		return nil, ErrTooLarge
	case !errors.Is(err, io.EOF):
		return nil, err
	case resp.ContentLength >= 0 && int64(len(got)) != resp.ContentLength:
		return nil, ErrNetwork // the body ended before its declared length
	case reflected:
		return nil, ErrReflect
	case !valid:
		return nil, ErrNotJSON
	}
	return got, nil
}

// classifyRead is classify for the read's own errors; the failure classes
// pass as they are.
func classifyRead(ctx context.Context, err error) error {
	if errors.Is(err, rtsandbox.ErrUpstream) {
		return err
	}
	return classify(ctx, err)
}

// ReadJSON reads r to its end, at most limit bytes, and checks it as
// CheckJSON does while it arrives, for an answer a caller opened itself
// (a model call that may stream and came whole): ErrTooLarge over limit,
// then ErrReflect or ErrNotJSON; a read that failed otherwise keeps its
// error. member is Call.Member (Answer.Member); the buffer grows as the
// answer arrives and is the caller's (Release does nothing).
func ReadJSON(r io.Reader, key string, limit int, name string) (Answer, error) {
	return ReadJSONFor(r, NewKeyForms(key), limit, name)
}

// ReadJSONFor is ReadJSON for a key whose forms the caller made ready.
func ReadJSONFor(r io.Reader, k *KeyForms, limit int, name string) (Answer, error) {
	m := newMember(name)
	resp := &http.Response{Body: io.NopCloser(r), ContentLength: -1}
	body, err := readScanned(resp, make([]byte, 0, min(limit+1, 64<<10)), limit+1, k, limit, m)
	if err != nil {
		return Answer{Release: noRelease}, err
	}
	return m.answer(body, noRelease), nil
}

// newMember is the member named name, or nil for "".
func newMember(name string) *member {
	if name == "" {
		return nil
	}
	return &member{name: name}
}

// answer is body as an Answer, with the member m found in it.
func (m *member) answer(body []byte, release func()) Answer {
	a := Answer{Body: body, Release: release}
	if m != nil && !m.unsure {
		a.MemberKnown = true
		if m.found == 1 {
			a.Member = body[m.start:m.end]
		}
	}
	return a
}

// asyncMin is the body size from which readChecked reads in a goroutine of
// its own (or a body of unknown length): below it, starting one costs more
// than the overlap saves.
const asyncMin = 128 << 10

// feed reads a body into the spare capacity of a buffer, for scanFrom.
// got is everything read so far; err the read's end: io.EOF, errFull
// when the buffer is full, or the reader's error. A full buffer is moved
// to one twice its size while it is smaller than grow (ReadJSON).
type feed struct {
	r    io.Reader
	got  []byte
	err  error
	grow int
}

var errFull = errors.New("buffer full")

// read appends at least one byte to b, read from f.r, and reports whether
// more may follow (see scanner.src).
func (f *feed) read(b []byte) ([]byte, bool) {
	for f.err == nil {
		if len(b) == cap(b) && cap(b) < f.grow {
			b = append(make([]byte, 0, min(2*cap(b)+512, f.grow)), b...)
		}
		if len(b) == cap(b) {
			f.err = errFull
			break
		}
		n, err := f.r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			f.err = err
			if errors.Is(err, io.ErrUnexpectedEOF) {
				f.err = io.EOF // readBody's io.ReadFull says the same
			}
		}
		if n > 0 {
			break
		}
	}
	f.got = b
	return b, f.err == nil
}

// asyncFeed is a feed read by its own goroutine. The goroutine alone
// writes the buffer, beyond the length it last published (n); the scan
// reads only below it, so the two never touch the same bytes.
type asyncFeed struct {
	buf  []byte
	n    atomic.Int64
	wake chan struct{} // a new length was published
	done chan struct{} // closed when the read ended; f.f.err is then set
	f    feed
}

func startFeed(r io.Reader, buf []byte) *asyncFeed {
	a := &asyncFeed{buf: buf, wake: make(chan struct{}, 1), done: make(chan struct{}), f: feed{r: r, got: buf}}
	go a.run()
	return a
}

func (a *asyncFeed) run() {
	defer close(a.done)
	for a.f.err == nil {
		a.f.read(a.f.got)
		a.n.Store(int64(len(a.f.got)))
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// next is the scan's source: b with what has arrived since, waiting for
// it, or false once the read ended and b holds all of it.
func (a *asyncFeed) next(b []byte) ([]byte, bool) {
	for {
		if n := int(a.n.Load()); n > len(b) {
			return a.buf[:n], true
		}
		select {
		case <-a.wake:
		case <-a.done:
			n := int(a.n.Load())
			return a.buf[:n], n > len(b)
		}
	}
}

// wait waits for the read to end and returns what it read and how it
// ended.
func (a *asyncFeed) wait() ([]byte, error) {
	<-a.done
	return a.f.got, a.f.err
}
