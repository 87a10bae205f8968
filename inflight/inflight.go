// Package inflight is the host's record of the guest messages it took
// and has not answered yet, kept in a state file so that the next start
// can tell each of them, after a crash or a kill, that the host restarted
// and the message should be sent again (issue 22 item 3).
//
// The contract:
//
//   - A Journal holds the messages in flight: Begin records one (its
//     channel and its surface's message id), End forgets it. Both return
//     at once; a writer goroutine saves the set to <state_dir>/inflight.json
//     after every change, coalescing changes that come while it writes, so
//     the file lags the set by at most one write. Every save is atomic
//     (privdir.WriteFile: temp file, fsync, rename, fsync of the
//     directory): a kill leaves the old set or the new, never a torn file.
//   - The set is bounded: at most MaxEntries messages, a channel key of at
//     most rtsandbox.MaxChannelKey bytes, an id of 1 to MaxIDBytes bytes without control
//     characters. A message past a bound is not recorded (and gets no
//     restart notice); the operator log says so, once per run of refusals.
//   - Open reads the file a previous process left (at most MaxFileBytes,
//     never through a link, owned by the service) and returns its messages,
//     which stay recorded until End: a start that dies before it told them
//     tells them at the next. A file that cannot be read or does not parse
//     (Parse) is logged with its path and the rule it broke, and its
//     messages get no notice; it is replaced at the next save. Open never
//     fails: the record is a courtesy to guests, never a reason to refuse
//     to serve.
//   - Close stops the writer after a last save. A graceful stop settles
//     every message first (the router answers or refuses each), so the
//     file it leaves is empty.
package inflight

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// FileName is the record's file in the state directory.
const FileName = "inflight.json"

// Bounds of the record.
const (
	// MaxEntries bounds the messages recorded: the HTTP API's own bound
	// on the messages it awaits (4,096), and far more than a host's
	// channels queue (8 each) in practice.
	MaxEntries = 4096
	// MaxIDBytes bounds a recorded message id: surfaces' ids are short
	// (a Discord snowflake, the HTTP API's "m_" and 16 hex digits).
	MaxIDBytes = 256
	// MaxFileBytes bounds what Open reads: MaxEntries entries at both
	// bounds, escaped, fit.
	MaxFileBytes = MaxEntries * (rtsandbox.MaxChannelKey + MaxIDBytes + 64) * 6
	// fileVersion is the version of the file's format.
	fileVersion = 1
)

// ErrState marks a record file that does not parse or breaks a bound.
var ErrState = fmt.Errorf("%w: invalid in-flight record", rtsandbox.ErrInvalid)

// Entry is one message in flight: its channel and the id its surface
// gave it (router.Message.ID).
type Entry struct {
	Channel rtsandbox.ChannelKey `json:"channel"`
	ID      string               `json:"id"`
}

// valid reports whether e is within the bounds of the package doc.
func (e Entry) valid() bool {
	return e.Channel.Valid() && validID(e.ID)
}

// validID: 1 to MaxIDBytes bytes of UTF-8 without control characters.
func validID(id string) bool {
	if id == "" || len(id) > MaxIDBytes || !utf8.ValidString(id) {
		return false
	}
	return !slices.ContainsFunc([]rune(id), unicode.IsControl)
}

// file is the record's JSON.
type file struct {
	Version  int     `json:"version"`
	Messages []Entry `json:"messages"`
}

// Parse reads a record file: a JSON object {"version":1,"messages":[…]}
// with no other key and nothing after it, of at most MaxEntries entries,
// each within the bounds. Duplicates are dropped, the first kept. Errors
// wrap ErrState.
func Parse(data []byte) ([]Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the object", ErrState)
	}
	switch {
	case f.Version != fileVersion:
		return nil, fmt.Errorf("%w: version %d, want %d", ErrState, f.Version, fileVersion)
	case len(f.Messages) > MaxEntries:
		return nil, fmt.Errorf("%w: %d messages, more than %d", ErrState, len(f.Messages), MaxEntries)
	}
	out := make([]Entry, 0, len(f.Messages))
	for i, e := range f.Messages {
		if !e.valid() {
			return nil, fmt.Errorf("%w: message %d: a channel key of at most %d bytes and an id of 1 to %d bytes without control characters are required",
				ErrState, i, rtsandbox.MaxChannelKey, MaxIDBytes)
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Journal is the set of messages in flight and its writer. It is safe
// for concurrent use.
type Journal struct {
	path  string
	log   *slog.Logger
	dirty chan struct{} // cap 1: a save is due
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	seq     uint64
	set     map[Entry]uint64 // entry → order of Begin, for a stable file
	closed  bool
	refused bool // a Begin past a bound was logged, none recorded since
	failing bool // the last save failed (logged once per run)
}

// Open reads the record in dir (the state directory, private and locked
// by the channel store), logs a record it cannot use, and starts the
// journal's writer. The returned entries are the previous process's
// messages in flight, in the order they were taken; they stay in the
// journal until End.
func Open(dir string, log *slog.Logger) (*Journal, []Entry) {
	j := &Journal{path: filepath.Join(dir, FileName), log: log, dirty: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), set: map[Entry]uint64{}}
	prev := j.read()
	for _, e := range prev {
		j.seq++
		j.set[e] = j.seq
	}
	go j.write()
	return j, prev
}

// read returns the record's entries; none, logged, when it is unusable.
func (j *Journal) read() []Entry {
	data, err := privdir.ReadFile(j.path, MaxFileBytes, os.Geteuid())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var prev []Entry
	if err == nil {
		prev, err = Parse(data)
	}
	if err != nil {
		j.log.Error("in-flight record unusable: the messages it held get no restart notice; it is replaced at the next save",
			"file", j.path, "max_bytes", MaxFileBytes, "err", err)
		return nil
	}
	return prev
}

// Begin records a message in flight. A message past a bound is not
// recorded; the log says so once per run of such messages.
func (j *Journal) Begin(channel rtsandbox.ChannelKey, id string) {
	e := Entry{Channel: channel, ID: id}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	if _, ok := j.set[e]; ok {
		return
	}
	if !e.valid() || len(j.set) >= MaxEntries {
		if !j.refused {
			j.refused = true
			j.log.Warn("message not recorded in flight: it would get no restart notice after a crash",
				"channel", channel, "in_flight", len(j.set), "max_entries", MaxEntries)
		}
		return
	}
	j.refused = false
	j.seq++
	j.set[e] = j.seq
	j.due()
}

// End forgets a message: it was answered, refused or told.
func (j *Journal) End(channel rtsandbox.ChannelKey, id string) {
	e := Entry{Channel: channel, ID: id}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.set[e]; !ok || j.closed {
		return
	}
	delete(j.set, e)
	j.due()
}

// Len returns the messages in flight.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.set)
}

// due asks the writer for a save; under mu.
func (j *Journal) due() {
	select {
	case j.dirty <- struct{}{}:
	default: // one is due already; it will see this change
	}
}

// write is the writer goroutine: one save per due signal, a last one
// when Close stops it with a change unsaved.
func (j *Journal) write() {
	defer close(j.done)
	for {
		select {
		case <-j.dirty:
			j.save()
		case <-j.stop:
			select {
			case <-j.dirty:
				j.save()
			default:
			}
			return
		}
	}
}

// save writes the set as it is now, atomically.
func (j *Journal) save() {
	j.mu.Lock()
	entries := make([]Entry, 0, len(j.set))
	for e := range j.set {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return cmp.Compare(j.set[a], j.set[b]) })
	j.mu.Unlock()
	data, err := json.Marshal(file{Version: fileVersion, Messages: entries})
	if err == nil {
		err = privdir.WriteFile(j.path, data)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case err != nil && !j.failing:
		j.failing = true
		j.log.Error("in-flight record not saved: messages taken now may get no restart notice after a crash",
			"file", j.path, "err", err)
	case err == nil && j.failing:
		j.failing = false
		j.log.Info("in-flight record saved again", "file", j.path)
	}
}

// Close saves a change still unsaved and stops the writer. Later Begin
// and End calls change nothing. Close is idempotent.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		<-j.done
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.stop)
	<-j.done
	return nil
}
