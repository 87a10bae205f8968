package worker

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// This file keeps the session worker's conversation in
// /workspace/sessions as JSONL (session spec §7.1 item 3, option (b): our
// own format). docs/session.md, "Session worker and conversation format",
// is the reference; in short, one JSON object per line:
//
//	{"type":"session","format":"rtsandbox-session","version":2,"id":…,"created":…}   first line
//	{"type":"reader","turnId":…,"reader":…,"privateMemory":false}                      turn start
//	{"type":"message","turnId":…,"message":{role, content, tool_calls?, tool_call_id?},"privateTo"?:…}
//	                                                                                   one per message
//	{"type":"end","turnId":…,"ok":true}                                                turn end
//	{"type":"compaction","turnId":…,"summary":…,"firstKeptEntryId":…,"keep":n,…}     a compaction
//
// A compaction record replaces every exchange before it but its last keep
// with its summary (sessioncompact.go), so a restart continues from the
// summary. Version 2 adds privateTo (a tool result's only reader, §5.4) beside
// the message. Version-1 files still load; the worker does not append to
// one but copies its kept exchanges into a new version-2 file at its first
// write, so a worker that predates the privacy projection (and reads only
// version 1) never continues a conversation holding private results.
//
// Messages are in the chat-completions shape the agent loop keeps for
// either model API. A turn counts only once its end record says ok and its
// messages form a whole sessionExchange (a user message, tool calls each answered
// in order, a final assistant text); anything else (a torn line, a turn cut
// by a crash, a corrupt record) is skipped, never fatal.

// Session file format and bounds.
const (
	sessionFormat  = "rtsandbox-session"
	sessionVersion = 2
	// sessionVersion1 is the format before privateTo: read, never written.
	sessionVersion1 = 1
	// maxSessionRead bounds what the worker reads of a session file: the
	// header line, then at most this many bytes from the end. Exchanges
	// before that are on disk only; the model would not see them anyway.
	maxSessionRead = 32 << 20
	maxHeaderLine  = 64 << 10
	// sessionHistoryBudget bounds, in JSON bytes, the exchanges since the
	// last compaction that the worker keeps in memory: what a read of a
	// session file holds. Compaction keeps the conversation far under
	// it; past it (compactions failing turn after turn), whole exchanges
	// go, oldest first, unsummarised.
	sessionHistoryBudget = maxSessionRead
)

// Record types of a session file.
const (
	recordSession = "session"
	recordReader  = "reader"
	recordMessage = "message"
	recordEnd     = "end"
	recordCompact = "compaction"
)

// sessionRecord is one line, read or written; Type says which fields it
// uses. Field order is the wire order.
type sessionRecord struct {
	Type          string   `json:"type"`
	Format        string   `json:"format,omitempty"`
	Version       int      `json:"version,omitempty"`
	ID            string   `json:"id,omitempty"`
	Created       string   `json:"created,omitempty"`
	TurnID        string   `json:"turnId,omitempty"`
	Reader        string   `json:"reader,omitempty"`
	PrivateMemory *bool    `json:"privateMemory,omitempty"`
	Message       *message `json:"message,omitempty"`
	PrivateTo     string   `json:"privateTo,omitempty"`
	OK            *bool    `json:"ok,omitempty"`
	// A compaction record's fields (sessioncompact.go).
	Summary      string          `json:"summary,omitempty"`
	FirstKept    string          `json:"firstKeptEntryId,omitempty"`
	Keep         *int            `json:"keep,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	Engine       string          `json:"engine,omitempty"`
	TokensBefore int             `json:"tokensBefore,omitempty"`
	TokensAfter  int             `json:"tokensAfter,omitempty"`
	ContextAfter int             `json:"contextAfter,omitempty"`
	Details      json.RawMessage `json:"details,omitempty"`
}

// compaction is the latest compaction of the conversation: its summary,
// which stands in for every exchange before the kept ones, and what the
// tiers need of it.
type compaction struct {
	summary      string
	firstKept    string
	engine       string // engineHost or engineWorker
	contextAfter int
	details      json.RawMessage // the host compactor's, as it answered
}

// last is what the tiers need of c; nil without a compaction.
func (c *compaction) last() *lastCompaction {
	if c == nil {
		return nil
	}
	return &lastCompaction{engine: c.engine, contextAfter: c.contextAfter}
}

// sessionLog is what a session file holds: its version, its whole
// exchanges since its latest compaction and that compaction.
type sessionLog struct {
	version   int
	exchanges []sessionExchange
	compacted *compaction
}

// sessionExchange is one finished turn of the conversation: its reader
// record (for the privacy projection, sessionprivacy.go) and its messages,
// each tool result with its PrivateTo.
type sessionExchange struct {
	turnID        string
	reader        string
	privateMemory bool
	messages      []message
	size          int // JSON bytes of messages
}

// sessionStore is the conversation: the latest compaction's summary, the
// exchanges since it that the worker keeps in memory (the newest, within
// budget) and the file it appends to, created at the first turn when
// there is none to continue.
type sessionStore struct {
	dir       string
	now       func() time.Time
	budget    int    // JSON bytes of exchanges kept in memory
	file      string // path of the session file; "" until one exists
	compacted *compaction
	exchanges []sessionExchange
	pending   sessionExchange // the running turn's reader record
	// carry: the exchanges came from a version-1 file, which is not
	// appended to; the first write copies them into a new file.
	carry bool
}

// sessionsDir is the session directory under workspace.
func sessionsDir(workspace string) string { return filepath.Join(workspace, "sessions") }

// openSessionStore continues the most recent session in dir: of the
// top-level regular *.jsonl files (symlinks and directories are never
// followed), the one modified last (then the greatest name) whose header
// line is ours. A file that cannot be read or is not ours is reported to
// ignored and skipped. With none, the next turn starts a new file.
func openSessionStore(dir string, budget int, now func() time.Time, ignored func(name string, err error)) *sessionStore {
	s := &sessionStore{dir: dir, now: now, budget: budget}
	for _, name := range recentSessions(dir) {
		path := filepath.Join(dir, name)
		data, err := readSessionFile(path)
		var log sessionLog
		if err == nil {
			log, err = parseSession(data)
		}
		if err != nil {
			ignored(name, err)
			continue
		}
		if s.carry = log.version != sessionVersion; !s.carry {
			s.file = path
		}
		s.compacted = log.compacted
		s.exchanges = withinBudget(log.exchanges, s.budget)
		return s
	}
	return s
}

// recentSessions lists the candidate files, most recent first.
func recentSessions(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type candidate struct {
		name string
		mod  time.Time
	}
	var list []candidate
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		if info, err := e.Info(); err == nil {
			list = append(list, candidate{e.Name(), info.ModTime()})
		}
	}
	slices.SortFunc(list, func(a, b candidate) int {
		if c := b.mod.Compare(a.mod); c != 0 {
			return c
		}
		return strings.Compare(b.name, a.name)
	})
	names := make([]string, len(list))
	for i, c := range list {
		names[i] = c.name
	}
	return names
}

// errSessionFile marks a session file the worker does not continue.
var errSessionFile = errors.New("not a readable session file")

// readSessionFile reads a regular file without following a link: all of
// it up to maxSessionRead bytes, else its first line and its last
// maxSessionRead bytes from the next line start on.
func readSessionFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSessionFile, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: not a regular file", errSessionFile)
	}
	if info.Size() <= maxSessionRead {
		return io.ReadAll(io.LimitReader(f, maxSessionRead))
	}
	head := make([]byte, maxHeaderLine)
	n, _ := io.ReadFull(f, head)
	line, _, found := bytes.Cut(head[:n], []byte("\n"))
	if !found {
		return nil, fmt.Errorf("%w: header line too long", errSessionFile)
	}
	tail := make([]byte, maxSessionRead)
	if _, err := f.ReadAt(tail, info.Size()-maxSessionRead); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%w: %w", errSessionFile, err)
	}
	if _, rest, ok := bytes.Cut(tail, []byte("\n")); ok {
		tail = rest
	}
	return append(append(line, '\n'), tail...), nil
}

// parseSession reads a session file's bytes: the header line must be ours
// (format, version 1 or 2); then every whole, ok turn becomes a
// sessionExchange, in file order, and a valid compaction record (a
// summary and keep ≥ 0) drops all but the last keep exchanges before it.
// Lines that do not parse, records of unknown types, invalid compaction
// records and turns that are not whole exchanges are skipped. A version-1
// file has no privateTo and no compaction: neither is read there.
func parseSession(data []byte) (sessionLog, error) {
	header, rest, _ := bytes.Cut(data, []byte("\n"))
	var h sessionRecord
	if json.Unmarshal(header, &h) != nil || h.Type != recordSession || h.Format != sessionFormat ||
		(h.Version != sessionVersion && h.Version != sessionVersion1) {
		return sessionLog{}, fmt.Errorf("%w: no %s v%d header", errSessionFile, sessionFormat, sessionVersion)
	}
	log := sessionLog{version: h.Version}
	var out []sessionExchange
	var cur sessionExchange
	for line := range bytes.SplitSeq(rest, []byte("\n")) {
		var r sessionRecord
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &r) != nil {
			continue
		}
		switch {
		case r.Type == recordCompact:
			if c, keep, ok := compactionOf(r); ok && h.Version != sessionVersion1 {
				out = slices.Clone(out[len(out)-min(keep, len(out)):])
				log.compacted = c
			}
		case r.Type == recordReader:
			cur = sessionExchange{turnID: r.TurnID, reader: r.Reader, privateMemory: r.PrivateMemory != nil && *r.PrivateMemory}
		case r.TurnID != cur.turnID:
			// a record of a turn whose reader record is lost: skipped
		case r.Type == recordMessage && r.Message != nil:
			m := *r.Message
			if h.Version != sessionVersion1 && m.Role == "tool" {
				m.PrivateTo = r.PrivateTo
			}
			cur.messages = append(cur.messages, m)
		case r.Type == recordEnd:
			if r.OK != nil && *r.OK && wholeExchange(cur.messages) {
				cur.size = jsonjs.Size(cur.messages)
				out = append(out, cur)
			}
			cur = sessionExchange{}
		}
	}
	log.exchanges = out
	return log, nil
}

// compactionOf reads a compaction record: a summary of at most
// maxSummary units, keep ≥ 0, an engine of the two, a context after ≥ 0.
func compactionOf(r sessionRecord) (*compaction, int, bool) {
	if r.Summary == "" || rtsandbox.UTF16Len(r.Summary) > maxSummary || r.Keep == nil || *r.Keep < 0 ||
		(r.Engine != engineHost && r.Engine != engineWorker) || r.ContextAfter < 0 {
		return nil, 0, false
	}
	return &compaction{summary: r.Summary, firstKept: r.FirstKept, engine: r.Engine, contextAfter: r.ContextAfter, details: r.Details}, *r.Keep, true
}

// wholeExchange reports whether msgs is one sessionExchange the model APIs
// accept as history: a user message with text; then assistant messages,
// each with tool calls (valid ids and function names, arguments a string)
// answered by exactly one tool message per call in order, or with text;
// ending in an assistant message without tool calls.
func wholeExchange(msgs []message) bool {
	if len(msgs) < 2 || msgs[0].Role != "user" || msgs[0].ToolCallID != "" || len(msgs[0].ToolCalls) > 0 {
		return false
	}
	for i := 1; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role != "assistant" || m.ToolCallID != "" || len(m.ToolCalls) > rtsandbox.MaxToolCallsPerMessage {
			return false
		}
		if len(m.ToolCalls) == 0 {
			return i == len(msgs)-1
		}
		for _, c := range m.ToolCalls {
			i++
			if !rtsandbox.ValidToolCallID(c.ID) || !rtsandbox.ValidFunctionName(c.Function.Name) || c.Type != rtsandbox.FunctionType ||
				i >= len(msgs) || msgs[i].Role != "tool" || msgs[i].ToolCallID != c.ID || len(msgs[i].ToolCalls) > 0 {
				return false
			}
		}
	}
	return false
}

// withinBudget keeps the newest exchanges whose sizes add up to at most
// budget; the first that does not fit ends the window.
func withinBudget(xs []sessionExchange, budget int) []sessionExchange {
	total := 0
	for i := len(xs) - 1; i >= 0; i-- {
		if total += xs[i].size; total > budget {
			return slices.Clone(xs[i+1:])
		}
	}
	return xs
}

// history is the kept conversation as v may see it: the latest summary
// (summaryMessage), then the exchanges since (projectExchanges), oldest
// first.
func (s *sessionStore) history(v viewer) []message {
	return withSummary(s.compacted, projectExchanges(s.exchanges, v))
}

// withSummary puts the summary of c, if any, in front of msgs.
func withSummary(c *compaction, msgs []message) []message {
	if c == nil {
		return msgs
	}
	return append([]message{summaryMessage(c.summary)}, msgs...)
}

// compact records a compaction of the running turn: c's summary stands in
// for every exchange but the last keep. It is written before it is
// applied; a failed write is returned, and the compaction still holds in
// memory for the worker's life (as a turn's messages do).
func (s *sessionStore) compact(turnID string, c *compaction, keep int, reason string, tokensBefore, tokensAfter int) error {
	err := s.write(sessionRecord{Type: recordCompact, TurnID: turnID, Summary: c.summary, FirstKept: c.firstKept, Keep: &keep,
		Reason: reason, Engine: c.engine, TokensBefore: tokensBefore, TokensAfter: tokensAfter, ContextAfter: c.contextAfter, Details: c.details})
	s.exchanges = slices.Clone(s.exchanges[len(s.exchanges)-keep:])
	s.compacted = c
	return err
}

// privateHistory reports whether the kept conversation hides anything
// from a reader-less view (the ready body's privateHistory, §5.4).
func (s *sessionStore) privateHistory() bool { return privateHistory(s.exchanges) }

// begin records the turn's reader: its principal, else its author id,
// and whether it carries private prompt memory (§5.4). It is written
// before the model is called, as the reference does.
func (s *sessionStore) begin(turn rtsandbox.SessionTurn) error {
	reader := cmp.Or(turn.Author.PrincipalID, turn.Author.ID)
	private := turn.PrivateMemory()
	s.pending = sessionExchange{turnID: turn.TurnID, reader: reader, privateMemory: private}
	return s.write(sessionRecord{Type: recordReader, TurnID: turn.TurnID, Reader: reader, PrivateMemory: &private})
}

// finish appends the turn's messages and its end record, and keeps the
// sessionExchange in memory. ok false records a turn that failed: its messages
// are not kept.
func (s *sessionStore) finish(turnID string, ok bool, msgs []message) error {
	var lines []sessionRecord
	if ok {
		lines = messageRecords(turnID, msgs)
	}
	lines = append(lines, sessionRecord{Type: recordEnd, TurnID: turnID, OK: &ok})
	err := s.write(lines...)
	if ok && s.pending.turnID == turnID && wholeExchange(msgs) {
		x := s.pending
		x.messages, x.size = msgs, jsonjs.Size(msgs)
		s.exchanges = withinBudget(append(s.exchanges, x), s.budget)
	}
	s.pending = sessionExchange{}
	return err
}

// messageRecords are the message records of a turn's messages, each
// tool result with its privateTo.
func messageRecords(turnID string, msgs []message) []sessionRecord {
	out := make([]sessionRecord, len(msgs))
	for i := range msgs {
		out[i] = sessionRecord{Type: recordMessage, TurnID: turnID, Message: &msgs[i], PrivateTo: msgs[i].PrivateTo}
	}
	return out
}

// carried are the records of the exchanges a version-1 file held, for a
// new file to begin with.
func (s *sessionStore) carried() []sessionRecord {
	var out []sessionRecord
	ok := true
	for _, x := range s.exchanges {
		private := x.privateMemory
		out = append(out, sessionRecord{Type: recordReader, TurnID: x.turnID, Reader: x.reader, PrivateMemory: &private})
		out = append(out, messageRecords(x.turnID, x.messages)...)
		out = append(out, sessionRecord{Type: recordEnd, TurnID: x.turnID, OK: &ok})
	}
	return out
}

// write appends records, one line each, in one write; the first write of
// a new conversation creates its file with the header line (and, after a
// version-1 file, the exchanges it carries).
func (s *sessionStore) write(records ...sessionRecord) error {
	var buf bytes.Buffer
	flags := os.O_WRONLY | os.O_APPEND | syscall.O_NOFOLLOW
	path := s.file
	if path == "" {
		now := s.now().UTC()
		id := now.Format("2006-01-02T15-04-05.000Z") + "-" + randomHex(4)
		path = filepath.Join(s.dir, id+".jsonl")
		flags |= os.O_CREATE | os.O_EXCL
		head := []sessionRecord{{Type: recordSession, Format: sessionFormat, Version: sessionVersion, ID: id, Created: now.Format(time.RFC3339Nano)}}
		if s.carry {
			head = append(head, s.carried()...)
		}
		records = append(head, records...)
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return err
		}
	}
	for _, r := range records {
		line, err := jsonjs.Marshal(r)
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		s.file, s.carry = path, false
	}
	return err
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
