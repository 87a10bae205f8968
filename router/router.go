// Package router decides what happens to every chat message: which claim
// owns its channel, whether it is admitted, and when it runs. It is the
// only thing surfaces talk to (docs/host.md, "Routing rules").
//
// The contract:
//
//   - Claims are ranked by descending priority, stable on registration
//     order. The first claim that owns a channel decides everything there;
//     a message it does not admit is dropped, never passed to a lower claim.
//     New adds the sandbox claim (priority 200) to the caller's claims.
//   - Speakers are resolved by the router from the access rules, never
//     taken from a surface; bots and integrations are never resolved.
//   - A message is admitted once, by Submit, which answers at once whether
//     the router took it. Admitted work runs on a per-channel FIFO queue:
//     one task at a time per channel in arrival order, channels
//     concurrently, and a failed task never blocks the next. This queue is
//     the only per-channel order: surfaces keep none. Guest messages are
//     bounded per channel (Options.QueueLimit); owner commands and reports
//     are not.
//   - Owner commands on, off, status and fresh run on the channel's queue,
//     behind every message accepted before them, whichever surface sent
//     them; stop acts at once (it aborts the running turn). They work per
//     mode through the one runtime interface (rtsandbox.Runtime, which each
//     mode implements whole; the router never asks which mode it is):
//     fresh and stop are the runtime's; off also removes what it keeps
//     between turns (a session container), and status adds its mode,
//     profile and container state (status.go).
//   - Everything the router posts is a Delivery that names the message it
//     answers (InReplyTo, the surface's Message.ID): KindReply for a turn's
//     answer or fixed failure text, KindNotice for the router's notice about
//     a message it will not run, KindReport for a background report
//     (PostReport, "" InReplyTo), KindRestarted for the restarting notice
//     about a message an earlier process of the host took and never
//     answered (NotifyRestarted). Typing names the message too.
//   - Every message Submit takes is in the ledger (Options.InFlight) from
//     before it is queued until it is settled, so that a start after a
//     crash can tell the ones left unanswered (NotifyRestarted).
//   - Files: a message's attachments (Message.Files) go, untouched, to the
//     runtime in rtsandbox.TurnInput (TurnInput); a runtime that cannot
//     take them adds the attachments notice itself (TurnInput.SealedText). The
//     files of a successful answer (Answer.Files) go out on the last
//     chunk of the reply (Delivery.Files); a failed turn posts none.
//   - Previews (preview.go): a surface that opts in (PreviewSurface) gets
//     KindPreview deliveries with the text so far of a sandbox turn's
//     streamed answers, at most one per PreviewInterval per message, when
//     the runtime reports it (Run's onText). They end before the reply,
//     which is always the worker's; a preview never replaces it.
//   - Every message the router does not run is dropped for one reason of
//     a fixed set (DropReasons): logged as "message dropped" with the
//     channel, the surface and the reason (never the content), reported to
//     Options.OnDrop, and returned to the surface (Reason of Submit's
//     error).
//   - Everything a guest or chat user sees is a fixed text of the root
//     package (rtsandbox.GuestText maps a turn's error to it); error
//     details go only to the injected logger.
//   - Delivery is bounded: a reply is at most chunk.MaxChunks messages (a
//     longer one is cut with rtsandbox.ReplyCutNotice), every Deliver and
//     Typing call has Options.SendTimeout, and a whole reply
//     Options.ReplyTimeout, so a surface that hangs fails the reply instead
//     of holding the channel's queue.
//   - A panic in a surface call, the runtime or a claim's work fails only
//     that call: it is recovered, logged with the channel key and the stack
//     (never the message or reply text), answered with the fixed failure
//     text where a turn was running, and the channel's next message runs.
//
// A surface implements Surface; the wiring registers it with AddSurface
// under its channel kind (never the surface's own constructor). The
// surface calls Submit (or Handle) for every inbound message, with an ID
// unique to it, and Command for owner commands.
package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
)

// Defaults of Options.
const (
	// DefaultQueueLimit bounds one channel's guest messages, the running one
	// included: enough for a lively conversation, small enough that a flood
	// cannot queue hours of sealed turns (each may take up to 10 minutes).
	DefaultQueueLimit = 8
	// DefaultTypingInterval refreshes the typing indicator; Discord shows
	// it for about 10 s.
	DefaultTypingInterval = 8 * time.Second
	// DefaultSendTimeout bounds one Send or Typing call: Discord answers in
	// well under a second and waits out a rate limit of a few seconds, so
	// a call that takes longer is stuck, and the channel's queue must not
	// wait for it.
	DefaultSendTimeout = 30 * time.Second
	// DefaultReplyTimeout bounds posting one reply: MaxChunks messages
	// under Discord's per-channel rate limit (about five per five
	// seconds) take about 20 s.
	DefaultReplyTimeout = 2 * time.Minute
	// noticeTimeout bounds posting a notice outside any turn.
	noticeTimeout = 30 * time.Second
)

// Error classes. Test with errors.Is.
var (
	// ErrStopping: the router is shutting down and takes no new work
	// (rtsandbox.ErrStopping).
	ErrStopping = rtsandbox.ErrStopping
	// ErrQueueFull: the channel already has QueueLimit guest messages
	// (rtsandbox.ErrQueueFull).
	ErrQueueFull = rtsandbox.ErrQueueFull
	// ErrNoClaim: no claim owns the channel.
	ErrNoClaim = errors.New("no claim owns the channel")
	// ErrNoSurface: no surface serves the channel's key prefix.
	ErrNoSurface = errors.New("no surface serves the channel")
)

// Author is who wrote a message, as the surface knows them.
type Author struct {
	ID   string // the surface's id of the author, such as a Discord user id
	Name string // display name in that channel
	// Roles are role identities such as "discord:role:42"; nil when
	// unknown (DMs).
	Roles []string
	// Bot is a bot account; Integration a webhook or similar. Neither is
	// ever resolved to a speaker.
	Bot, Integration bool
}

// Message is one inbound chat message as a surface reports it. A surface
// reports facts; it never decides who may talk.
type Message struct {
	Channel rtsandbox.ChannelKey
	// ID is the surface's id of the message, unique per surface: every
	// delivery answering the message names it (Delivery.InReplyTo).
	ID     string
	Space  string // server or workspace id (Discord guild); "" for DMs
	Author Author
	// Text is the content with the bot mention removed, trimmed.
	Text         string
	MentionsBot  bool
	RepliesToBot bool
	IsDirect     bool // a DM-like conversation
	// ReferenceText is the replied-to message's text, as far as readable.
	ReferenceText string
	// Attachments counts the message's own files (a forward's included,
	// the replied-to message's not); nothing is downloaded. A surface
	// that fills Files keeps it equal to the Files whose FromReference is
	// false; the router counts at least those.
	Attachments int
	// Files describes the attached files the surface can hand over (a
	// URL to fetch or inline bytes), the message's then the replied-to
	// message's (FromReference); the router never fetches or reads them.
	// The runtime receives them in rtsandbox.TurnInput.
	Files []rtsandbox.Attachment
	// ForwardedText is a forwarded message's text; it only keeps a message
	// with no text of its own from being dropped as empty.
	ForwardedText string

	// Speaker and Tier are set by the router before a claim sees the
	// message; whatever a surface puts here is discarded. Speaker is nil
	// when the access rules serve nobody by this author.
	Speaker *rtsandbox.Speaker
	Tier    access.Tier
}

// Surface is one chat network as the router needs it. Methods must be safe
// for concurrent use and honour ctx.
type Surface interface {
	// Deliver posts one chunk of at most chunk.ChunkLimit UTF-16 units.
	// Chunks of one reply are delivered one after another, in order, at
	// most chunk.MaxChunks of them. ctx ends after Options.SendTimeout at
	// the latest; Deliver must then return, or the channel's queue waits
	// for it.
	Deliver(ctx context.Context, d Delivery) error
	// Typing shows the typing indicator once, for the message inReplyTo
	// (a Message.ID of this surface); the router repeats it every
	// TypingInterval while that message's turn runs. An error is logged as
	// a warning; ctx ends like Deliver's.
	Typing(ctx context.Context, channel rtsandbox.ChannelKey, inReplyTo string) error
}

// DeliveryKind says what a delivered chunk is.
type DeliveryKind string

// Delivery kinds.
const (
	// KindReply: a turn's answer to a message (its reply, or the fixed
	// failure text when the turn failed).
	KindReply DeliveryKind = "reply"
	// KindNotice: the router's fixed notice about a message it will not
	// run (queue full, restarting).
	KindNotice DeliveryKind = "notice"
	// KindReport: a background report (a research result), tied to no
	// message.
	KindReport DeliveryKind = "report"
	// KindRestarted: the router's restarting notice
	// (rtsandbox.RestartingText) about a message an earlier process of
	// the host took and never answered: it was in flight when that
	// process died (NotifyRestarted). The message is not one this
	// process's surface submitted.
	KindRestarted DeliveryKind = "restarted"
	// KindPreview: the text so far of the answer to a message whose turn
	// is running (preview.go), only to a PreviewSurface whose Previews is
	// true, at most once per PreviewInterval per message. Unlike the
	// other kinds its Chunk is the whole preview, up to MaxPreviewBytes
	// and not cut to chunk.ChunkLimit: the surface shows as much as fits.
	// It never replaces the reply: the worker's reply (or the failure
	// text) always follows as KindReply, and no preview follows it.
	KindPreview DeliveryKind = "preview"
)

// Delivery is one chunk the router posts to a surface, naming the message
// it answers.
type Delivery struct {
	Channel rtsandbox.ChannelKey
	// InReplyTo is the Message.ID of the message the chunk answers, as
	// the surface submitted it; "" for reports and for notices tied to no
	// message.
	InReplyTo string
	Kind      DeliveryKind
	Chunk     string
	// Files are the reply files of a turn, decoded and validated by the
	// runtime (rtsandbox.File, within the bounds of docs/limits.md, "Files"). Only a KindReply carries
	// them, and only its last chunk; a surface posts them with that chunk.
	// A successful reply with files but no text is one delivery whose
	// Chunk is "". Failure texts never carry files.
	Files []rtsandbox.File
}

// PreviewSurface is a Surface that may take KindPreview deliveries. A
// surface opts in by implementing it and returning true from Previews (its
// operator switched previews on); the others never see a preview.
type PreviewSurface interface {
	Surface
	Previews() bool
}

// ChannelSet is the persisted set of sandboxed channels (*channels.Store
// implements it).
type ChannelSet interface {
	Enabled(key rtsandbox.ChannelKey) bool
	Enable(key rtsandbox.ChannelKey) error
	Disable(key rtsandbox.ChannelKey) error
}

// Resolver maps an author to a speaker and tier (*access.Policy implements
// it). access.None means no speaker.
type Resolver interface {
	Resolve(a access.Actor) (rtsandbox.Speaker, access.Tier)
}

// Claim is one plugin's ownership of a set of channels.
type Claim interface {
	// Name is unique across claims.
	Name() string
	// Priority ranks claims; higher is asked first.
	Priority() int
	// Owns reports whether the claim owns channel. space is the message's
	// space when routing a message, "" for DMs and channel-only questions
	// (stop, start fresh).
	Owns(channel rtsandbox.ChannelKey, space string) bool
	// Admit decides what to do with a message in an owned channel: an
	// admission, or the reason to drop it (one of the Drop constants;
	// another non-empty text counts as DropNotAdmitted). A dropped message
	// is never passed to a lower claim. It must not block.
	Admit(m Message) (adm Admission, drop string)
	// StartFresh starts the channel's conversation over; it runs on the
	// channel's queue and returns the conversation kind.
	StartFresh(ctx context.Context, channel rtsandbox.ChannelKey) (string, error)
	// Stop aborts the channel's running turn and reports whether one ran.
	Stop(channel rtsandbox.ChannelKey) bool
}

// Admission is an admitted turn.
type Admission struct {
	// Run executes inside the channel's queue. An error is logged with
	// Failure as the message, except a *DropError: Run decided not to run
	// the message after all (its channel was switched off while it
	// waited), which is reported as a drop with the error's reason.
	Run     func(ctx context.Context, port Port) error
	Failure string
}

// Port is what a running turn may do with the surfaces: everything it
// posts answers the message it runs for.
type Port interface {
	// Reply passes text through the door (door.go), cuts it into chunks
	// (at most chunk.MaxChunks, a longer text ending with
	// rtsandbox.ReplyCutNotice) and posts them in order as KindReply
	// deliveries answering the message; it fails with ErrNoSurface when
	// no surface serves the channel, or with the first delivery error (one
	// past its deadline or a panicking surface included). The router cuts
	// the text itself, after the door, so that the door sees it whole, as
	// the guest reads it across the chunks.
	Reply(ctx context.Context, text string) error
	// ReplyFiles is Reply whose last delivery also carries files
	// (Delivery.Files); with files and no text it posts one empty chunk
	// with them. An earlier chunk that fails ends the reply, so the files
	// are never posted after a failed delivery.
	ReplyFiles(ctx context.Context, text string, files []rtsandbox.File) error
	// StartTyping shows typing for the message now and every
	// TypingInterval until stop is called; stop waits for the refresher to
	// end. Without a surface it does nothing.
	StartTyping(ctx context.Context) (stop func())
	// StartPreview returns the text observer of the message's turn, to
	// hand to the runtime's Run, and a stop that ends the previews
	// and waits for the one in flight; call stop before Reply. onText is
	// nil, and stop does nothing, when the message's surface takes no
	// previews.
	StartPreview(ctx context.Context) (onText func(answer int, delta string), stop func())
}

// Options configure a Router. Channels, Runtime and Access are required.
type Options struct {
	Channels ChannelSet
	Runtime  rtsandbox.Runtime
	Access   Resolver
	// Claims are further claims; New adds the sandbox claim.
	Claims []Claim
	// Logger receives operator records; nil discards them.
	Logger *slog.Logger
	// QueueLimit bounds one channel's guest messages, running one
	// included; 0 means DefaultQueueLimit.
	QueueLimit int
	// TypingInterval is the typing refresh period; 0 means
	// DefaultTypingInterval.
	TypingInterval time.Duration
	// SendTimeout bounds each Send and Typing call to a surface; 0 means
	// DefaultSendTimeout. A delivery with files may take SendTimeout more
	// per file (an upload), and its reply as much more.
	SendTimeout time.Duration
	// ReplyTimeout bounds posting one reply or report, all its chunks
	// together; 0 means DefaultReplyTimeout. A turn whose reply fails so
	// holds its channel for at most ReplyTimeout plus the failure notice
	// (at most 30 s) after the runtime answered.
	ReplyTimeout time.Duration
	// OnDrop, when set, is called for every dropped message with its
	// channel and reason (one of DropReasons), on the goroutine that
	// dropped it: it must not block (count, don't post). Metrics hook.
	OnDrop func(channel rtsandbox.ChannelKey, reason string)
	// Usage, when set, is today's budget usage of a channel, one line for
	// its owner: the status command appends it. It must not block long;
	// "" adds nothing.
	Usage func(ctx context.Context, channel rtsandbox.ChannelKey) string
	// Door is the last check of everything the router hands a surface
	// (door.go); required: a router without one does not start.
	Door Door
	// InFlight, when set, records every message Submit takes until it is
	// settled (answered, failed, dropped or refused), so that a later
	// start can tell the ones a crash left unanswered
	// (NotifyRestarted). *inflight.Journal implements it.
	InFlight Ledger
	// OnDoor, when set, is called for every delivery the door refused,
	// with its channel and kind (KindPreview for a preview, "command"
	// for an owner command's answer): it must not block. Metrics hook.
	OnDoor func(channel rtsandbox.ChannelKey, kind DeliveryKind)
}

// Ledger records the messages in flight (Options.InFlight). Begin and End
// must not block.
type Ledger interface {
	Begin(channel rtsandbox.ChannelKey, id string)
	End(channel rtsandbox.ChannelKey, id string)
}

// noLedger records nothing.
type noLedger struct{}

func (noLedger) Begin(rtsandbox.ChannelKey, string) {}
func (noLedger) End(rtsandbox.ChannelKey, string)   {}

// Router routes messages from surfaces to claims. It is safe for
// concurrent use.
type Router struct {
	log      *slog.Logger
	access   Resolver
	channels ChannelSet
	claims   []Claim
	runtime  rtsandbox.Runtime // the sandbox claim's, for status and off
	typing   time.Duration
	sendTO   time.Duration // Options.SendTimeout
	replyTO  time.Duration // Options.ReplyTimeout
	onDrop   func(rtsandbox.ChannelKey, string)
	usage    func(context.Context, rtsandbox.ChannelKey) string
	door     Door
	onDoor   func(rtsandbox.ChannelKey, DeliveryKind)
	inFlight Ledger
	q        *queue
	abort    context.CancelCauseFunc // cause ErrStopping: a cut turn's guest hears the restarting text
	bg       sync.WaitGroup          // notice senders; Add only under mu while !bgClosed

	mu         sync.Mutex
	bgClosed   bool // Close is waiting for bg: no new background work
	surfaces   map[string]Surface
	fullNotice map[rtsandbox.ChannelKey]bool // queue-full notice posted, no push since
	stopNotice map[rtsandbox.ChannelKey]bool // restarting notice posted
}

// New checks opts and returns a Router with the sandbox claim and opts'
// claims ranked. Errors wrap rtsandbox.ErrInvalid.
func New(opts Options) (*Router, error) {
	if opts.Channels == nil || opts.Runtime == nil || opts.Access == nil || opts.Door == nil {
		return nil, fmt.Errorf("router: Channels, Runtime, Access and Door are required: %w", rtsandbox.ErrInvalid)
	}
	if opts.QueueLimit < 0 || opts.TypingInterval < 0 || opts.SendTimeout < 0 || opts.ReplyTimeout < 0 {
		return nil, fmt.Errorf("router: negative QueueLimit, TypingInterval, SendTimeout or ReplyTimeout: %w", rtsandbox.ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.InFlight == nil {
		opts.InFlight = noLedger{}
	}
	claims := append([]Claim{newSandboxClaim(opts.Channels, opts.Runtime, log)}, opts.Claims...)
	seen := map[string]bool{}
	for _, c := range claims {
		if c == nil || seen[c.Name()] {
			return nil, fmt.Errorf("router: nil or duplicate claim: %w", rtsandbox.ErrInvalid)
		}
		seen[c.Name()] = true
	}
	slices.SortStableFunc(claims, func(a, b Claim) int { return cmp.Compare(b.Priority(), a.Priority()) })
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Router{
		log:        log,
		access:     opts.Access,
		channels:   opts.Channels,
		claims:     claims,
		runtime:    opts.Runtime,
		typing:     cmp.Or(opts.TypingInterval, DefaultTypingInterval),
		sendTO:     cmp.Or(opts.SendTimeout, DefaultSendTimeout),
		replyTO:    cmp.Or(opts.ReplyTimeout, DefaultReplyTimeout),
		onDrop:     opts.OnDrop,
		usage:      opts.Usage,
		door:       opts.Door,
		onDoor:     opts.OnDoor,
		inFlight:   opts.InFlight,
		q:          newQueue(ctx, cmp.Or(opts.QueueLimit, DefaultQueueLimit), log),
		abort:      cancel,
		surfaces:   map[string]Surface{},
		fullNotice: map[rtsandbox.ChannelKey]bool{},
		stopNotice: map[rtsandbox.ChannelKey]bool{},
	}, nil
}

// AddSurface makes s serve channel keys with prefix (such as "discord").
// A prefix is served by one surface. Errors wrap rtsandbox.ErrInvalid.
func (r *Router) AddSurface(prefix string, s Surface) error {
	if s == nil || !rtsandbox.ValidKind(prefix) {
		return fmt.Errorf("router: surface prefix %q: %w", prefix, rtsandbox.ErrInvalid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.surfaces[prefix] != nil {
		return fmt.Errorf("router: surface prefix %q registered twice: %w", prefix, rtsandbox.ErrInvalid)
	}
	r.surfaces[prefix] = s
	return nil
}

// Submit routes m: it decides m's admission once, and queues an admitted
// message on its channel's queue, before it returns, so messages submitted
// one after another from one goroutine keep their order. err is non-nil
// when m was not taken: a *DropError (errors.Is ErrDropped; Reason names
// why), which also matches ErrQueueFull or ErrStopping for a refusal the
// router answers with a notice (posted in the background, as a KindNotice
// delivery naming m). Otherwise done receives one value when m is
// settled: nil when it ran (whatever the turn's outcome), else a
// *DropError for a drop decided while m waited (its channel was switched
// off, the host began shutting down). A taken message is in the ledger
// (Options.InFlight) from before it is queued until it is settled.
func (r *Router) Submit(m Message) (done <-chan error, err error) {
	adm, reason := r.admit(&m)
	if reason != "" {
		return nil, r.dropped(m, reason, nil)
	}
	r.inFlight.Begin(m.Channel, m.ID)
	t, perr := r.q.push(m.Channel, true, r.task(m, adm))
	if perr != nil {
		r.inFlight.End(m.Channel, m.ID)
		derr := r.dropped(m, Reason(perr), perr)
		r.background(func() { r.refused(m, perr) }) // closing: no notice
		return nil, derr
	}
	r.mu.Lock()
	delete(r.fullNotice, m.Channel)
	r.mu.Unlock()
	out := make(chan error, 1)
	wait := func() {
		err := <-t.done
		if errors.Is(err, ErrStopping) { // still waiting when the router closed
			r.refused(m, err)
			err = r.dropped(m, DropShuttingDown, err)
		}
		r.inFlight.End(m.Channel, m.ID)
		out <- err
	}
	if !r.background(wait) {
		go func() { // the queue settles t before Close returns
			err := <-t.done
			if errors.Is(err, ErrStopping) {
				err = r.dropped(m, DropShuttingDown, err)
			}
			r.inFlight.End(m.Channel, m.ID)
			out <- err
		}()
	}
	return out, nil
}

// task is the queued work of an admitted message: it runs adm and logs a
// failure under adm.Failure. It returns nil when the message ran (the
// turn's outcome is not the submitter's business) and the drop's error
// when adm decided not to run it after all.
func (r *Router) task(m Message, adm Admission) func(context.Context) error {
	return func(ctx context.Context) error {
		err := r.runAdmission(ctx, m.Channel, m.ID, adm)
		if de, ok := errors.AsType[*DropError](err); ok {
			return r.dropped(m, knownReason(de.Reason), nil)
		}
		if err != nil {
			r.log.Error(adm.Failure, "channel", m.Channel, "err", err)
		}
		return nil
	}
}

// background runs f on the notice group unless Close has begun waiting for
// it: a WaitGroup must not gain work while Wait may be running (a message
// submitted during shutdown would otherwise panic the router).
func (r *Router) background(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bgClosed {
		return false
	}
	r.bg.Go(f)
	return true
}

// Admits reports whether m would be admitted now, without queueing it and
// without recording anything: a probe for a surface that must decide
// whether costly pre-work (fetching a replied-to message) is worth it.
// Submit alone decides; its answer can differ (the mode may change in
// between, and a queued message's mode is checked again when it runs).
func (r *Router) Admits(m Message) bool {
	_, reason := r.admit(&m)
	return reason == ""
}

// runAdmission runs adm, turning a panic into an error so that it is logged
// like any failure and the channel's next task still runs.
func (r *Router) runAdmission(ctx context.Context, channel rtsandbox.ChannelKey, id string, adm Admission) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = recovered(r.log, channel, "turn", p)
		}
	}()
	return adm.Run(ctx, turnPort{r: r, channel: channel, id: id})
}

// Handle is Submit that waits until m is settled or ctx ends; ctx bounds
// only the wait, never the turn.
func (r *Router) Handle(ctx context.Context, m Message) error {
	done, err := r.Submit(m)
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// admit runs docs/host.md, "Routing rules" and returns m's admission, or the
// reason to drop it. It records nothing. A claim or the access rules
// panicking drops the message (DropInternal): admit runs on the surface's
// goroutine, which must survive it.
func (r *Router) admit(m *Message) (adm Admission, reason string) {
	defer func() {
		if p := recover(); p != nil {
			_ = recovered(r.log, m.Channel, "admission", p)
			adm, reason = Admission{}, DropInternal
		}
	}()
	m.Speaker, m.Tier = nil, access.None
	if !m.Channel.Valid() {
		return Admission{}, DropNotSandboxed // no claim can own an invalid key
	}
	m.Attachments = max(m.Attachments, ownFiles(m.Files))
	if strings.TrimSpace(m.Text) == "" && m.Attachments == 0 && strings.TrimSpace(m.ForwardedText) == "" {
		return Admission{}, DropEmpty
	}
	claim := r.owner(m.Channel, m.Space)
	if claim == nil {
		return Admission{}, DropNotSandboxed
	}
	if !m.Author.Bot && !m.Author.Integration {
		sp, tier := r.access.Resolve(r.actor(m.Channel, m.Author))
		if tier != access.None {
			m.Speaker, m.Tier = &sp, tier
		}
	}
	adm, reason = claim.Admit(*m)
	switch {
	case reason != "":
		return Admission{}, knownReason(reason)
	case adm.Run == nil:
		return Admission{}, DropNotAdmitted
	}
	return adm, ""
}

// ownFiles counts the files of the message itself, not of the one it
// replies to.
func ownFiles(files []rtsandbox.Attachment) int {
	n := 0
	for _, f := range files {
		if !f.FromReference {
			n++
		}
	}
	return n
}

func (r *Router) actor(channel rtsandbox.ChannelKey, a Author) access.Actor {
	prefix, _, _ := strings.Cut(string(channel), ":")
	return access.Actor{
		Provider: prefix, Subject: a.ID, Name: a.Name, Roles: a.Roles,
		Bot: a.Bot, Integration: a.Integration,
	}
}

// owner returns the first claim, in rank order, that owns channel.
func (r *Router) owner(channel rtsandbox.ChannelKey, space string) Claim {
	for _, c := range r.claims {
		if c.Owns(channel, space) {
			return c
		}
	}
	return nil
}

// Stop aborts the running turn of channel through its owning claim and
// reports whether one was running. It does not wait for the queue.
func (r *Router) Stop(channel rtsandbox.ChannelKey) bool {
	if c := r.owner(channel, ""); c != nil {
		return c.Stop(channel)
	}
	return false
}

// StartFresh asks the owning claim, on the channel's queue (after the
// queued turns), to start the conversation over, and returns the
// conversation kind ("sandbox"). ctx bounds only the wait. Errors:
// ErrNoClaim, ErrStopping, ctx's error or the claim's.
func (r *Router) StartFresh(ctx context.Context, channel rtsandbox.ChannelKey) (string, error) {
	var kind string
	err := r.inQueue(ctx, channel, func(ctx context.Context) error {
		c := r.owner(channel, "")
		if c == nil {
			return ErrNoClaim
		}
		var err error
		kind, err = c.StartFresh(ctx, channel)
		return err
	})
	return kind, err
}

// inQueue runs fn on channel's queue, unbounded, and waits for it.
func (r *Router) inQueue(ctx context.Context, channel rtsandbox.ChannelKey, fn func(context.Context) error) error {
	t, err := r.q.push(channel, false, fn)
	if err != nil {
		return err
	}
	select {
	case err := <-t.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// QueueSize returns the running plus waiting tasks of channel.
func (r *Router) QueueSize(channel rtsandbox.ChannelKey) int { return r.q.size(channel) }

// QueueDepth returns the tasks queued across channels, running ones
// included (the sum of QueueSize): guest messages, owner commands and
// reports. Metrics gauge; cheap enough to read on every scrape.
func (r *Router) QueueDepth() int { return r.q.depth() }

// Busy returns the channels with queued or running work, sorted.
func (r *Router) Busy() []rtsandbox.ChannelKey { return r.q.busy() }

// Drain begins a shutdown: new guest messages are refused and waiting
// ones settled as shutting_down (with the restarting notice), while
// running turns, owner commands and background reports go on. Close
// follows; Drain lets the host finish other work (research jobs posting
// their last reports) first without starting new turns.
func (r *Router) Drain() { r.q.refuseBounded() }

// Close shuts the router down: new messages and waiting tasks are refused
// (waiting guest messages get the restarting notice), running tasks may
// finish until ctx ends, then they are cancelled with the cause
// ErrStopping (which aborts their turns; a runtime that reports the
// cause, as the session runtime does, gets the restarting text) and
// awaited. Close returns ctx's error if it had to
// cancel. Later calls only wait.
func (r *Router) Close(ctx context.Context) error {
	r.q.close()
	err := r.q.wait(ctx)
	r.abort(ErrStopping) // a runtime that reports its turn's cause (session) gets the restarting text

	_ = r.q.wait(context.Background())
	r.mu.Lock()
	r.bgClosed = true
	r.mu.Unlock()
	r.bg.Wait()
	return err
}

// ValidAuthorID reports whether id can name a person of the surface kind
// under the access rules' identity rule, so a surface can refuse a bad
// author at its door without knowing the access package.
func ValidAuthorID(kind, id string) bool {
	_, err := access.User(kind, id)
	return err == nil
}
