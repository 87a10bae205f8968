package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
)

// The session-mode protocol (docs/session.md, "Routes and statuses"; docs/protocol.md, "The session protocol"): the long-lived
// worker of a channel and its broker share these declarations, as the
// sealed worker and broker share protocol.go. The worker long-polls the
// broker for a SessionTurn and posts a ResultPacket back; both sides
// validate what they receive with the functions below, so a limit cannot
// drift between them.

// Where the session worker finds the broker and its workspace (docs/session.md, "The container"; docs/protocol.md, "The session protocol").
// The run directory is mounted read-only, the workspace read-write.
const (
	SessionRunDir     = "/run/sandbox"
	SessionSocketPath = "/run/sandbox/broker.sock"
	SessionSocketName = "broker.sock"
	// SessionHelloName is the file in the run directory that tells a
	// worker that cannot share the host's socket (a Kubernetes Pod) where
	// the broker's network listener is and the channel's token there: one
	// BrokerHello line, rewritten by the host whenever it makes the
	// channel a new broker (docs/kubernetes.md, "Session channels").
	SessionHelloName = "broker.hello"
	SessionHelloPath = "/run/sandbox/broker.hello"
	// SessionHelloArg follows SessionCommand in a Kubernetes Pod: the
	// worker reaches the broker through SessionHelloPath, never a socket.
	SessionHelloArg      = "--broker-from-file"
	SessionWorkspace     = "/workspace"
	SessionsDir          = "/workspace/sessions"
	SessionAttachments   = "/workspace/attachments"
	SessionOutbox        = "/workspace/outbox"
	SessionDummyOAuthKey = "sandbox-dummy-token"
)

// Where the host's copy of a profile's skills tree lies (docs/session.md, "Skills"): run/skills
// in the channel's run directory, so mounted read-only with it.
const (
	SessionSkillsName = "skills"
	SessionSkillsDir  = SessionRunDir + "/" + SessionSkillsName
)

// Session worker routes (docs/session.md, "Routes and statuses"). They carry no credential and spend no
// budget; the credential routes are the sealed ones (ToolRoute, MCPRoute)
// and the two Anthropic routes.
const (
	RouteWorkerReady  = "/worker/ready"
	RouteWorkerConfig = "/worker/config"
	RouteWorkerNext   = "/worker/next"
	RouteWorkerResult = "/worker/result"
	RouteMCPTools     = "/mcp-tools"
)

// Memory visibilities (docs/protocol.md, "The session protocol"); "" reads as MemoryPrivate.
const (
	MemoryShared  = "shared"
	MemoryPrivate = "private"
)

// Errors of the session protocol, with the reference's texts. All wrap
// ErrInvalid.
var (
	ErrTurnInput      = fmt.Errorf("%w: Invalid turn input", rtsandbox.ErrInvalid)
	ErrTooManyImages  = fmt.Errorf("%w: Too many images", rtsandbox.ErrInvalid)
	ErrImage          = fmt.Errorf("%w: Invalid or oversized image", rtsandbox.ErrInvalid)
	ErrImageBudget    = fmt.Errorf("%w: Image budget exceeded", rtsandbox.ErrInvalid)
	ErrTooManyFiles   = fmt.Errorf("%w: Too many reply files", rtsandbox.ErrInvalid)
	ErrReplyFile      = fmt.Errorf("%w: Invalid reply file", rtsandbox.ErrInvalid)
	ErrReplyBudget    = fmt.Errorf("%w: Reply file budget exceeded", rtsandbox.ErrInvalid)
	ErrResult         = fmt.Errorf("%w: Invalid result", rtsandbox.ErrInvalid)
	ErrReadyHandshake = fmt.Errorf("%w: Invalid ready handshake", rtsandbox.ErrInvalid)
)

// ErrTurnUndelivered marks a session turn that ended before any worker
// took it (GET /worker/next): nothing of it ran in the container, so the
// host may run it again on a worker started anew. A session broker's
// Execute wraps it in the error of such a turn.
var ErrTurnUndelivered = errors.New("turn not delivered to a worker")

// SessionAuthor is the speaker of a session turn as the worker sees it.
// PrincipalID is the reader for private-history projection (docs/session.md, "Privacy projection"); it is
// never a credential scope.
type SessionAuthor struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	PrincipalID string `json:"principalId,omitempty"`
}

// Image is one image of a turn or a tool result: standard padded base64
// and one of the four MIME types (docs/protocol.md, "Images and files").
type Image struct {
	Data     string `json:"data"`
	MIMEType string `json:"mimeType"`
}

// SessionTurn is the turn request the host queues and the worker receives
// from GET /worker/next (docs/protocol.md, "The session protocol"). Field order is the wire order.
type SessionTurn struct {
	TurnID           string        `json:"turnId"`
	Author           SessionAuthor `json:"author"`
	Text             string        `json:"text"`
	Memory           string        `json:"memory"`
	MemoryVisibility string        `json:"memoryVisibility,omitempty"`
	Images           []Image       `json:"images"`
	Thinking         string        `json:"thinking"`
	// Room bounds the turn's own files (our extension of docs/protocol.md, "The session protocol", absent
	// without a disk bound).
	Room *SessionRoom `json:"room,omitempty"`
	// BrokerToken is the turn's own token on the broker's network
	// listener, for the turn's credential routes (model, tools, MCP,
	// compaction); the host revokes it when the turn ends. Absent on a
	// socket: only a worker that reached the broker with a
	// SessionHelloPath file gets one (docs/kubernetes.md, "Session
	// channels").
	BrokerToken TurnToken `json:"brokerToken,omitempty"`
}

// TurnToken is a session turn's token text. It prints as "[token]" in
// fmt and slog, so a logged turn never shows it; JSON carries the text.
type TurnToken string

func (TurnToken) String() string             { return "[token]" }
func (TurnToken) GoString() string           { return "[token]" }
func (TurnToken) LogValue() slog.Value       { return slog.StringValue("[token]") }
func (TurnToken) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[token]")) }

// ValidBrokerToken reports whether s has a broker token's shape: 43
// base64url characters (256 bits).
func ValidBrokerToken(s string) bool { return len(s) == 43 && base64URL(s) }

// SessionRoom is what a session turn's own files (write_file, a host
// tool's image in the outbox) may take of the channel's workspace: its
// disk bound, less what is used, less the reserve the turn's
// conversation needs. The host measures it at the turn's start; the
// worker refuses a file that would pass it, so a turn's outputs never
// fill the workspace that later turns need.
type SessionRoom struct {
	Bytes int64 `json:"bytes"`
	Files int   `json:"files"`
}

// FileCost is what a file of n bytes counts against a SessionRoom: its
// bytes in whole 4 KiB blocks (what ext4 and most host filesystems
// allocate), and one block more for its metadata.
func FileCost(n int64) int64 {
	const block = 4096
	return (n+block-1)/block*block + block
}

// PrivateMemory reports whether the turn carries prompt memory that must
// not be shown to another reader: non-empty and not shared (docs/protocol.md, "Privacy").
func (t SessionTurn) PrivateMemory() bool {
	return t.Memory != "" && t.MemoryVisibility != MemoryShared
}

// Validate applies the rules of docs/protocol.md, "The session protocol", which host and worker share.
func (t SessionTurn) Validate() error {
	a := t.Author
	switch {
	case !ValidSafeName(t.TurnID),
		rtsandbox.UTF16Len(a.ID) > rtsandbox.MaxSessionField, rtsandbox.UTF16Len(a.Name) > rtsandbox.MaxSessionField,
		a.PrincipalID != "" && rtsandbox.UTF16Len(a.PrincipalID) > rtsandbox.MaxSessionField,
		rtsandbox.UTF16Len(t.Text) > rtsandbox.MaxSessionText, rtsandbox.UTF16Len(t.Memory) > rtsandbox.MaxSessionMemory,
		t.MemoryVisibility != "" && t.MemoryVisibility != MemoryShared && t.MemoryVisibility != MemoryPrivate,
		!ValidThinking(t.Thinking),
		t.Room != nil && (t.Room.Bytes < 0 || t.Room.Files < 0),
		t.BrokerToken != "" && !ValidBrokerToken(string(t.BrokerToken)):
		return ErrTurnInput
	}
	return ValidateImages(t.Images)
}

// ParseSessionTurn decodes and validates a turn request as the worker
// receives it. A principalId that is present must be a string of 1–256
// units; "" is refused, not read as absent.
func ParseSessionTurn(data []byte) (SessionTurn, error) {
	var probe struct {
		Author struct {
			PrincipalID *string `json:"principalId"`
		} `json:"author"`
	}
	var t SessionTurn
	if err := decodeObjectStrict(data, &t); err != nil {
		return SessionTurn{}, ErrTurnInput
	}
	if json.Unmarshal(data, &probe) == nil && probe.Author.PrincipalID != nil && *probe.Author.PrincipalID == "" {
		return SessionTurn{}, ErrTurnInput
	}
	if err := t.Validate(); err != nil {
		return SessionTurn{}, err
	}
	return t, nil
}

// ValidThinking reports whether level is a host-judged thinking level.
func ValidThinking(level string) bool {
	_, ok := rtsandbox.ThinkingBudget(level)
	return ok
}

// ValidSafeName is the safe file-name rule of docs/protocol.md, "The session protocol", used for turn ids,
// reply files and attachment names: 1–255 UTF-16 units, no '/', no '\', no
// control character (Unicode Cc), and neither "." nor "..".
func ValidSafeName(name string) bool {
	if name == "" || name == "." || name == ".." || rtsandbox.UTF16Len(name) > rtsandbox.MaxSafeNameLen {
		return false
	}
	if !utf8.ValidString(name) {
		return false // the reference's strings are UTF-16: no stray bytes
	}
	for _, r := range name {
		if r == '/' || r == '\\' || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// ValidImageType reports whether mime is one of the four image types.
func ValidImageType(mime string) bool {
	switch mime {
	case rtsandbox.MIMEPNG, rtsandbox.MIMEJPEG, rtsandbox.MIMEWebP, rtsandbox.MIMEGIF:
		return true
	}
	return false
}

// ValidateImages applies docs/protocol.md, "Images and files" to a turn's images.
func ValidateImages(images []Image) error {
	if len(images) > rtsandbox.MaxImages {
		return ErrTooManyImages
	}
	total := 0
	for _, im := range images {
		if err := ValidateImage(im); err != nil {
			return err
		}
		n, _ := rtsandbox.Base64Size(im.Data, rtsandbox.MaxImageBytes)
		if total += n; total > rtsandbox.MaxImagesTotal {
			return ErrImageBudget
		}
	}
	return nil
}

// ValidateImage applies docs/protocol.md, "Images and files" to one image.
func ValidateImage(im Image) error {
	n, ok := rtsandbox.Base64Size(im.Data, rtsandbox.MaxImageBytes)
	if !ok || n < 1 || !ValidImageType(im.MIMEType) {
		return ErrImage
	}
	return nil
}

// ReplyFile is one file of a turn's reply (docs/protocol.md, "Images and files"): a safe name and its
// bytes in standard padded base64.
type ReplyFile struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// ValidateReplyFiles applies docs/protocol.md, "Images and files".
func ValidateReplyFiles(files []ReplyFile) error {
	if len(files) > rtsandbox.MaxReplyFiles {
		return ErrTooManyFiles
	}
	total := 0
	for _, f := range files {
		n, ok := rtsandbox.Base64Size(f.Data, rtsandbox.MaxReplyFileBytes)
		if !ValidSafeName(f.Name) || f.Data == "" || !ok {
			return ErrReplyFile
		}
		if total += n; total > rtsandbox.MaxReplyFilesTotal {
			return ErrReplyBudget
		}
	}
	return nil
}

// SessionResult is a worker's outcome of a turn (docs/protocol.md, "The session protocol"): ok with the final
// text and reply files, or not ok with an error text for the operator.
type SessionResult struct {
	OK    bool
	Text  string
	Files []ReplyFile
	Error string
}

// MarshalJSON writes exactly one of the two shapes of docs/protocol.md, "The session protocol".
func (r SessionResult) MarshalJSON() ([]byte, error) {
	if !r.OK {
		return json.Marshal(struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}{false, r.Error})
	}
	files := r.Files
	if files == nil {
		files = []ReplyFile{}
	}
	return json.Marshal(struct {
		OK    bool        `json:"ok"`
		Text  string      `json:"text"`
		Files []ReplyFile `json:"files"`
	}{true, r.Text, files})
}

// UnmarshalJSON reads a result and checks its shape and bounds (docs/protocol.md, "The session protocol"
// step 5–6): ok a boolean; for ok, text a string of at most 100,000 units
// and files an array that passes ValidateReplyFiles; otherwise error a
// string of at most 10,000 units. Anything else is ErrResult.
func (r *SessionResult) UnmarshalJSON(data []byte) error {
	var raw struct {
		OK    *bool           `json:"ok"`
		Text  *string         `json:"text"`
		Files json.RawMessage `json:"files"`
		Error *string         `json:"error"`
	}
	if err := decodeObjectStrict(data, &raw); err != nil || raw.OK == nil {
		return ErrResult
	}
	var files []ReplyFile
	filesOK := *raw.OK && len(raw.Files) > 0 && raw.Files[0] == '[' && json.Unmarshal(raw.Files, &files) == nil
	res, err := NewSessionResult(*raw.OK, raw.Text, raw.Error, files, filesOK)
	if err != nil {
		return err
	}
	*r = res
	return nil
}

// NewSessionResult builds a result from its decoded members and checks
// their bounds (docs/protocol.md, "The session protocol"), whichever decoder read them: for ok, text
// (nil when absent or not a string) of at most 100,000 units and files
// (filesOK false when the member is not an array of file objects) that
// pass ValidateReplyFiles; otherwise errText of at most 10,000 units.
// Anything else is ErrResult, or the files' error.
func NewSessionResult(ok bool, text, errText *string, files []ReplyFile, filesOK bool) (SessionResult, error) {
	if !ok {
		if errText == nil || rtsandbox.UTF16Len(*errText) > rtsandbox.MaxResultError {
			return SessionResult{}, ErrResult
		}
		return SessionResult{Error: *errText}, nil
	}
	if text == nil || rtsandbox.UTF16Len(*text) > rtsandbox.MaxSessionText || !filesOK {
		return SessionResult{}, ErrResult
	}
	if err := ValidateReplyFiles(files); err != nil {
		return SessionResult{}, err
	}
	return SessionResult{OK: true, Text: *text, Files: files}, nil
}

// ResultPacket is the body of POST /worker/result (docs/protocol.md, "The session protocol").
type ResultPacket struct {
	TurnID string        `json:"turnId"`
	Result SessionResult `json:"result"`
}

// WorkerCapabilities are what a worker declares it implements (docs/protocol.md, "The session protocol",
// docs/protocol.md, "Privacy"). A worker declares only what it really does; the host's privacy
// gate trusts the declaration.
type WorkerCapabilities struct {
	PrivateTo     bool `json:"privateTo"`
	ReaderRecords bool `json:"readerRecords"`
}

// WorkerReady is the body of POST /worker/ready (docs/protocol.md, "The session protocol"). Capabilities nil
// means an older worker that declares none. SessionLoad, our addition
// (issue 22), is what the worker's conversation lost when it was loaded;
// nil when nothing was or it was reported already.
type WorkerReady struct {
	Capabilities   *WorkerCapabilities `json:"capabilities,omitempty"`
	PrivateHistory bool                `json:"privateHistory"`
	SessionLoad    *SessionLoad        `json:"sessionLoad,omitempty"`
}

// SessionLoad is the worker's report of its conversation's load, sent in
// its ready handshakes until one is accepted: the lines of the session
// file it continued that it dropped (torn, corrupt, too long, or of a
// turn cut by a crash) and the newer session files it did not continue
// (unreadable or not ours). Each is at most MaxSessionLoadCount.
type SessionLoad struct {
	DroppedLines int `json:"droppedLines"`
	IgnoredFiles int `json:"ignoredFiles"`
}

// MaxSessionLoadCount bounds each count of a SessionLoad: more than the
// lines a 32 MiB read can hold, and a worker caps its counts at it.
const MaxSessionLoadCount = 1 << 30

// ParseWorkerReady reads a ready body as docs/protocol.md, "The session protocol" checks it: empty or blank
// means {}; otherwise a JSON object whose privateHistory, if present, is a
// boolean and whose capabilities, if present, is an object whose privateTo
// and readerRecords are each a boolean or absent. sessionLoad, if
// present, is an object whose droppedLines and ignoredFiles are each an
// integer from 0 to MaxSessionLoadCount or absent.
func ParseWorkerReady(data []byte) (WorkerReady, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return WorkerReady{}, nil
	}
	var w readyWire
	if decodeObjectStrict(data, &w) != nil || w.PrivateHistory.Bad || w.Capabilities.Bad || w.SessionLoad.Bad {
		return WorkerReady{}, ErrReadyHandshake
	}
	r := WorkerReady{PrivateHistory: bool(w.PrivateHistory.Value)}
	if c := w.Capabilities; c.Present {
		r.Capabilities = &WorkerCapabilities{PrivateTo: bool(c.Value.PrivateTo.Value), ReaderRecords: bool(c.Value.ReaderRecords.Value)}
	}
	if l := w.SessionLoad; l.Present {
		r.SessionLoad = &SessionLoad{DroppedLines: int(l.Value.DroppedLines.Value), IgnoredFiles: int(l.Value.IgnoredFiles.Value)}
	}
	return r, nil
}

// readyWire is a ready body as encoding/json's struct decoding reads it:
// member names fold case, as they always did here. Every member is
// Checked: a member repeated after a bad value counts as its last value,
// as the raw members it was read into did.
type readyWire struct {
	Capabilities   Checked[capabilitiesWire] `json:"capabilities"`
	PrivateHistory Checked[Bool]             `json:"privateHistory"`
	SessionLoad    Checked[sessionLoadWire]  `json:"sessionLoad"`
}

// capabilitiesWire is capabilities: an object whose privateTo and
// readerRecords are each a boolean or absent.
type capabilitiesWire struct {
	PrivateTo     Checked[Bool] `json:"privateTo"`
	ReaderRecords Checked[Bool] `json:"readerRecords"`
}

func (c *capabilitiesWire) UnmarshalJSON(b []byte) error {
	type plain capabilitiesWire
	if err := decodeObjectStrict(b, (*plain)(c)); err != nil {
		return err
	}
	if c.PrivateTo.Bad || c.ReaderRecords.Bad {
		return errWireType
	}
	return nil
}

// sessionLoadWire is sessionLoad: an object whose droppedLines and
// ignoredFiles are each a count or absent.
type sessionLoadWire struct {
	DroppedLines Checked[countWire] `json:"droppedLines"`
	IgnoredFiles Checked[countWire] `json:"ignoredFiles"`
}

func (l *sessionLoadWire) UnmarshalJSON(b []byte) error {
	type plain sessionLoadWire
	if err := decodeObjectStrict(b, (*plain)(l)); err != nil {
		return err
	}
	if l.DroppedLines.Bad || l.IgnoredFiles.Bad {
		return errWireType
	}
	return nil
}

// countWire is an integer from 0 to MaxSessionLoadCount written as
// digits only (optCount).
type countWire int

func (n *countWire) UnmarshalJSON(b []byte) error {
	v, ok := optCount(b)
	if !ok {
		return errWireType
	}
	*n = countWire(v)
	return nil
}

// optCount reads a JSON value that must be an integer from 0 to
// MaxSessionLoadCount when present, written as digits only.
func optCount(raw json.RawMessage) (int, bool) {
	if raw == nil {
		return 0, true
	}
	if len(raw) == 0 || len(raw) > 10 || (raw[0] == '0' && len(raw) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= MaxSessionLoadCount
}

// optBool reads a JSON value that must be a boolean when present; a
// present null is not one.
func optBool(raw json.RawMessage) (value, ok bool) {
	switch string(raw) {
	case "":
		return false, true
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// SessionToolResponse is what POST /tools/<name> answers in session mode
// (docs/protocol.md, "The session protocol"): ok with text, or not ok with an error; an optional image, and
// privateTo naming the only reader who may see the result.
type SessionToolResponse struct {
	OK        bool   `json:"ok"`
	Text      string `json:"text,omitempty"`
	Error     string `json:"error,omitempty"`
	Image     *Image `json:"image,omitempty"`
	PrivateTo string `json:"privateTo,omitempty"`
}

// Validate checks an answer's bounds (docs/protocol.md, "The session protocol"): privateTo of at most
// MaxSessionField UTF-16 units, and an image that passes ValidateImage.
// The reader refuses a privateTo sent empty before: here "" is none.
func (r SessionToolResponse) Validate() error {
	if rtsandbox.UTF16Len(r.PrivateTo) > rtsandbox.MaxSessionField {
		return errors.New("privateTo is too long")
	}
	if r.Image != nil {
		return ValidateImage(*r.Image)
	}
	return nil
}

// MCPDiscovery is the answer of GET /mcp-tools (docs/protocol.md, "MCP calls"): each of the
// profile's MCP servers with the names of its allowed tools. Endpoints
// never appear.
type MCPDiscovery struct {
	Servers []MCPDiscoveryServer `json:"servers"`
}

// MCPDiscoveryServer is one server of MCPDiscovery.
type MCPDiscoveryServer struct {
	Name  string   `json:"name"`
	Tools []string `json:"tools"`
}

// errNotObject marks JSON that is not an object.
var errNotObject = errors.New("not a JSON object")

// decodeObjectStrict decodes data, which must be one JSON object and
// nothing after it, into v. Unknown fields are ignored (the reader
// rebuilds, it never passes them on); wrong types are errors.
func decodeObjectStrict(data []byte, v any) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return errNotObject
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errNotObject
	}
	return nil
}

// SessionBinding is what the host binds a session broker to for one turn
// (docs/protocol.md, "Privacy"): the admitted channel, speaker and tier, the channel's profile,
// the host-judged thinking level that caps the turn's model calls, and
// the turn's deadline, which bounds every call of the turn. Nothing the
// worker sends can change it.
type SessionBinding struct {
	rtsandbox.Binding
	Profile  string
	Thinking string
	Deadline time.Time
}

// The model's window as the session worker sizes its compaction by it
// (SessionWorkerConfig), in tokens. The defaults are the window of the
// Claude models and the reserve the reference's agent keeps.
const (
	DefaultContextWindow = 200_000
	DefaultReserveTokens = 16_384
	MinContextWindow     = 4_096
	MaxContextWindow     = 10_000_000
)

// SessionWorkerConfig is the answer of GET /worker/config: what the
// long-lived worker of a profile needs to run turns, and nothing secret.
// The reference bakes the model and prompt into operator code inside its
// image and answers only {compaction}; our image holds one static binary
// for every profile, so the trusted host hands the worker its profile here
// over the trusted socket (a Go-port decision, docs/session.md).
// Compaction is the reference's field, absent when the host has no
// compactor. SkillsDir and Skills are the profile's skills (docs/session.md, "Skills"): the
// index the host validated and where its copy of the tree is mounted;
// both absent when the profile has none.
type SessionWorkerConfig struct {
	// ContextWindow and ReserveTokens size the worker's compaction
	// (docs/session.md, "Compaction in the worker"): the model's context window in tokens
	// (MinContextWindow–MaxContextWindow) and the tokens kept free below
	// it (at most half the window); 0 (absent) means the defaults,
	// DefaultContextWindow and DefaultReserveTokens (at most a quarter of
	// the window).
	ContextWindow int `json:"contextWindow,omitempty"`
	ReserveTokens int `json:"reserveTokens,omitempty"`

	ModelAPI   string               `json:"modelApi"`
	Model      string               `json:"model"`
	Stream     bool                 `json:"stream"`
	Prompt     string               `json:"prompt"`
	TimeZone   string               `json:"timeZone"`
	Tools      []rtsandbox.ToolSpec `json:"tools"`
	MCP        []MCPServerTools     `json:"mcp"`
	Compaction *SessionCompactionID `json:"compaction,omitempty"`
	SkillsDir  string               `json:"skillsDir,omitempty"`
	Skills     []SessionSkill       `json:"skills,omitempty"`
}

// SessionSkill is one skill of a profile's index (docs/session.md, "Skills"): its folder's
// name, the description the system prompt lists, and the tools it gates
// until its SKILL.md has been read. A host tool is named as the profile
// names it (web_fetch), an MCP tool as <server>/<tool>.
type SessionSkill struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tools       []string `json:"tools,omitempty"`
}

// SessionCompactionID names the host compactor's engine (docs/protocol.md, "The session protocol").
type SessionCompactionID struct {
	Engine string `json:"engine"`
}
