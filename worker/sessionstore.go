package worker

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file keeps the session worker's conversation in
// /workspace/sessions as JSONL (docs/session.md, "Conversation format": our
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
// summary. Version 2 adds privateTo (a tool result's only reader, docs/session.md, "Privacy projection") beside
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
// exchanges since its latest compaction and that compaction, and how many
// of its lines were dropped (corrupt, of a turn cut by a crash or broken,
// torn or too long), never silently.
type sessionLog struct {
	version   int
	exchanges []sessionExchange
	compacted *compaction
	dropped   int
}

// sessionLoad is what opening the conversation lost: the lines dropped
// from the file continued and the newer files not continued (unreadable,
// or not ours). The worker logs it and reports it to the host in its
// ready handshake (wire.SessionLoad) until one is accepted.
type sessionLoad struct {
	droppedLines int
	ignoredFiles int
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
	lines         int // records read of it while it is parsed
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
	// loaded is what opening it lost (sessionLoad).
	loaded sessionLoad
}

// sessionsDir is the session directory under workspace.
func sessionsDir(workspace string) string { return filepath.Join(workspace, "sessions") }

// openSessionStore continues the most recent session in dir: of the
// top-level regular *.jsonl files (symlinks and directories are never
// followed), the one modified last (then the greatest name) whose header
// line is ours. A file that cannot be read or is not ours is reported to
// ignored (nil: not reported) and skipped, and counted in the store's
// loaded report with the lines the continued file dropped. With none, the
// next turn starts a new file.
func openSessionStore(dir string, budget int, now func() time.Time, ignored func(name string, err error)) *sessionStore {
	s := &sessionStore{dir: dir, now: now, budget: budget}
	for _, name := range recentSessions(dir) {
		path := filepath.Join(dir, name)
		file, err := readSessionFile(path)
		var log sessionLog
		if err == nil {
			log, err = parseSessionFile(file)
		}
		if err != nil {
			s.loaded.ignoredFiles++
			if ignored != nil {
				ignored(name, err)
			}
			continue
		}
		if s.carry = log.version != sessionVersion; !s.carry {
			s.file = path
		}
		s.loaded.droppedLines = log.dropped
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

// parseSession reads a session file's bytes whole (tests and fuzzing;
// the worker reads a file with readSessionFile): its first line is the
// header, a last line without its newline is torn and dropped.
func parseSession(data []byte) (sessionLog, error) {
	header, rest, _ := bytes.Cut(data, []byte("\n"))
	f := sessionFile{header: header}
	if i := bytes.LastIndexByte(rest, '\n'); i+1 < len(rest) {
		f.torn, rest = true, rest[:i+1]
	}
	for line := range bytes.SplitSeq(rest, []byte("\n")) {
		if len(line) > 0 {
			f.lines = append(f.lines, line)
		}
	}
	return parseSessionFile(f)
}

// parseSessionFile reads what readSessionFile found: the header line
// must be ours (format, version 1 or 2); then every whole, ok turn
// becomes a sessionExchange, in file order, and a valid compaction
// record (a summary and keep ≥ 0) drops all but the last keep exchanges
// before it. Everything else is skipped and counted as dropped: lines
// that do not parse, records of unknown types, invalid compaction
// records, the records of a turn that is not a whole exchange, whose end
// record is missing (a turn cut by a crash, at the end of the file or
// before the next turn's reader record) or malformed, and records of no
// turn. A failed turn's records (its end says ok false) are a turn that
// failed, not a loss, and so are the exchanges a compaction summarised.
// When the read was cut, records before its first reader or compaction
// record belong to a turn begun before the lines read, and are neither
// kept nor counted. A version-1 file has no privateTo and no compaction:
// neither is read there.
func parseSessionFile(f sessionFile) (sessionLog, error) {
	var h sessionRecord
	if json.Unmarshal(f.header, &h) != nil || h.Type != recordSession || h.Format != sessionFormat ||
		(h.Version != sessionVersion && h.Version != sessionVersion1) {
		return sessionLog{}, fmt.Errorf("%w: no %s v%d header", errSessionFile, sessionFormat, sessionVersion)
	}
	p := sessionParser{log: sessionLog{version: h.Version, dropped: f.dropped()}, head: f.cut}
	for _, line := range f.lines {
		p.line(line)
	}
	p.log.dropped += p.cur.lines // a turn still open at the end: cut by a crash
	return p.log, nil
}

// sessionParser is parseSessionFile's state: the log so far, the turn
// being read and its record count, and head, set while the lines of a
// cut read have not reached a turn's start.
type sessionParser struct {
	log  sessionLog
	cur  sessionExchange
	head bool
}

// line reads one line (parseSessionFile).
func (p *sessionParser) line(line []byte) {
	var r sessionRecord
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	if json.Unmarshal(line, &r) != nil {
		p.drop(1)
		return
	}
	v1 := p.log.version == sessionVersion1
	switch {
	case r.Type == recordCompact:
		c, keep, ok := compactionOf(r)
		if !ok || v1 {
			p.drop(1)
			return
		}
		p.head = false
		p.log.exchanges = slices.Clone(p.log.exchanges[len(p.log.exchanges)-min(keep, len(p.log.exchanges)):])
		p.log.compacted = c
	case r.Type == recordReader:
		p.log.dropped += p.cur.lines // the turn before never ended
		p.head = false
		p.cur = sessionExchange{turnID: r.TurnID, reader: r.Reader, privateMemory: r.PrivateMemory != nil && *r.PrivateMemory, lines: 1}
	case r.TurnID != p.cur.turnID || (r.Type != recordMessage && r.Type != recordEnd) || (r.Type == recordMessage && r.Message == nil):
		p.drop(1) // a record of no turn read, of an unknown type, or empty
	case r.Type == recordMessage:
		m := *r.Message
		if !v1 && m.Role == "tool" {
			m.PrivateTo = r.PrivateTo
		}
		p.cur.messages = append(p.cur.messages, m)
		p.cur.lines++
	default: // the end record
		switch {
		case r.OK != nil && *r.OK && wholeExchange(p.cur.messages):
			p.cur.size = jsonjs.Size(p.cur.messages)
			p.cur.lines = 0
			p.log.exchanges = append(p.log.exchanges, p.cur)
		case r.OK == nil || *r.OK:
			p.log.dropped += p.cur.lines + 1 // not a whole exchange
		}
		p.cur = sessionExchange{}
	}
}

// drop counts n dropped lines, unless they precede the first turn of a
// cut read.
func (p *sessionParser) drop(n int) {
	if !p.head {
		p.log.dropped += n
	}
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
			if !rtsandbox.ValidToolCallID(c.ID) || !rtsandbox.ValidFunctionName(c.Function.Name) || c.Type != wire.FunctionType ||
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
// from a reader-less view (the ready body's privateHistory, docs/session.md, "Privacy projection").
func (s *sessionStore) privateHistory() bool { return privateHistory(s.exchanges) }

// begin records the turn's reader: its principal, else its author id,
// and whether it carries private prompt memory (docs/session.md, "Privacy projection"). It is written
// before the model is called, as the reference does.
func (s *sessionStore) begin(turn wire.SessionTurn) error {
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
// version-1 file, the exchanges it carries). The file stays whole lines:
// a torn tail (a write cut by a crash) is cut off before the records are
// appended, never merged with them, and a write that fails is cut back
// (a new file removed), so a full disk leaves no torn line either.
func (s *sessionStore) write(records ...sessionRecord) error {
	var buf bytes.Buffer
	flags := os.O_RDWR | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
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
	err = appendWhole(f, buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err == nil:
		s.file, s.carry = path, false
	case s.file == "":
		_ = os.Remove(path) // a new file whose first write failed
	}
	return err
}

// appendWhole writes data at the end of the regular file f after
// cutting a torn tail (cutTornTail), and cuts a failed write back.
func appendWhole(f *os.File, data []byte) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%w: not a regular file", errSessionFile)
	}
	end, err := cutTornTail(f, info.Size())
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, end); err != nil {
		return errors.Join(err, f.Truncate(end))
	}
	return nil
}

// cutTornTail truncates f (size bytes) after its last newline when its
// last byte is not one, and returns the size it keeps.
func cutTornTail(f *os.File, size int64) (int64, error) {
	if size == 0 || endsLine(f, size, 0) {
		return size, nil
	}
	nl, err := lastNewline(f, 0, size, make([]byte, scanChunk))
	if err != nil {
		return 0, err
	}
	return nl + 1, f.Truncate(nl + 1)
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
