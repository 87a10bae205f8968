// Package discord is the Discord chat surface: it reports guild messages
// to the router as facts, posts the router's replies and typing, and
// serves the owner slash commands `/<root> sandbox on|off|status|fresh|stop`
// (docs/session-mode.md, "Owner commands per mode"; docs/host.md, "Discord").
//
// The contract:
//
//   - The gateway asks only for guild messages and message content. DMs
//     are not subscribed; a DM that arrives anyway is reported as direct,
//     which the sandbox claim drops.
//   - Every message becomes a router.Message with channel key
//     discord:<channel id>; the router and its claims decide what is
//     answered. Webhook posts are integrations and bots are bots, so they
//     never resolve to a speaker. Attachments are described to the router
//     (URL, name, declared size and type), never downloaded here.
//   - Reply files are posted as Discord attachments, split over
//     follow-up messages within Discord's bounds (files.go); a file over
//     the upload limit gets a fixed note naming it instead.
//   - Replies allow user mentions only (never @everyone or roles).
//   - Owner commands are acknowledged at once with a deferred ephemeral
//     response, then edited with the router's fixed text. The router alone
//     decides who is an owner.
//   - Everything a chat user sees is a fixed text from the router; error
//     details go to the injected logger. The bot token is read on Start,
//     carried as rtsandbox.Secret, and never logged or put in an error.
//   - discordgo runs event handlers on its gateway reader and does not
//     recover their panics, so every handler and goroutine of the surface
//     recovers its own: a panic fails one event or command, is logged
//     with the channel key and the stack, and the surface goes on.
package discord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Prefix is the channel key prefix this surface serves: discord:<channel id>.
const Prefix = "discord"

// DefaultRootCommand is the root slash command when Options.RootCommand is
// empty.
const DefaultRootCommand = "roundtable"

// Intents are the gateway intents the surface asks for: guild messages and
// their content. Interactions need no intent.
const Intents = discordgo.IntentsGuildMessages | discordgo.IntentsMessageContent

// Timeouts of the surface's own calls.
const (
	// fetchTimeout bounds reading a replied-to message.
	fetchTimeout = 5 * time.Second
	// ackTimeout bounds the deferred answer; Discord wants it within 3 s.
	ackTimeout = 3 * time.Second
	// commandWait bounds how long an owner command waits on the channel
	// queue: an interaction token lasts 15 minutes.
	commandWait = 14 * time.Minute
	// editTimeout bounds the edit that shows the command's text.
	editTimeout = 10 * time.Second
	// inboxSize bounds messages read from the gateway but not yet routed.
	inboxSize = 256
)

// Error classes. Test with errors.Is.
var (
	// ErrNoToken: the token getter returned nothing.
	ErrNoToken = errors.New("discord: no bot token")
	// ErrState: Start called twice, or after Close.
	ErrState = errors.New("discord: surface already started or closed")
	// ErrChannel: the channel key is not a discord:<snowflake> key.
	ErrChannel = errors.New("discord: not a Discord channel key")
	// ErrNotReady: the gateway did not send READY with the bot's ids.
	ErrNotReady = errors.New("discord: gateway not ready")
)

// Router is what the surface needs of the router (*router.Router).
type Router interface {
	Submit(m router.Message) (<-chan error, error)
	// Admits is a probe only: it saves fetching a replied-to message
	// (a REST call on the serial inbound loop) for a message no claim
	// would admit. Submit alone decides.
	Admits(m router.Message) bool
	Command(ctx context.Context, c router.Command) (string, error)
}

// Options configure a Surface. Token and Router are required.
type Options struct {
	// Token returns the bot token; it is called on Start (and on every
	// Start), never cached elsewhere.
	Token func() rtsandbox.Secret
	// RootCommand is the root slash command; "" means DefaultRootCommand.
	RootCommand string
	Router      Router
	// Logger receives operator records; nil discards them.
	Logger *slog.Logger
	// HTTPClient carries REST calls; nil means a client with a 20 s
	// timeout.
	HTTPClient *http.Client
	// Dialer opens the gateway websocket; nil means a dialer with a 10 s
	// handshake timeout and the environment's proxy.
	Dialer *websocket.Dialer
	// Preview shows a streamed answer while its turn runs: one message,
	// posted on the first preview and edited (preview.go). Off by default.
	Preview bool
	// Now is the clock of the preview cadence; nil means time.Now.
	Now func() time.Time
	// MaxUploadBytes is the file bytes one message may carry (files.go):
	// the servers' upload limit; 0 means DefaultMaxUploadBytes (a server
	// without boosts).
	MaxUploadBytes int64
}

// Surface is the Discord surface. It implements router.Surface.
type Surface struct {
	root    string
	token   func() rtsandbox.Secret
	router  Router
	log     *slog.Logger
	client  *http.Client
	dialer  *websocket.Dialer
	ownHTTP bool // client created here: close its idle connections
	preview bool
	now     func() time.Time
	pmu     sync.Mutex
	shown   map[string]*shownPreview // by channel id: its turn's preview message

	maxUpload int64 // Options.MaxUploadBytes

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	inbox  chan *discordgo.Message
	wg     sync.WaitGroup // inbound loop, interactions

	mu      sync.Mutex
	started bool
	live    bool // Start succeeded: a dropped gateway is opened again (reconnect)
	closed  bool
	session *discordgo.Session
	secret  rtsandbox.Secret // the token of the running session, for redaction
	botID   string
	appID   string
}

var snowflakeRE = regexp.MustCompile(`^[0-9]{1,20}$`)

var rootRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// New checks opts, builds the surface and registers it with the router
// under Prefix. It does not connect; call Start. Errors wrap
// rtsandbox.ErrInvalid or the router's.
func New(opts Options) (*Surface, error) {
	if opts.Token == nil || opts.Router == nil {
		return nil, fmt.Errorf("discord: Token and Router are required: %w", rtsandbox.ErrInvalid)
	}
	root := opts.RootCommand
	if root == "" {
		root = DefaultRootCommand
	}
	if !rootRE.MatchString(root) {
		return nil, fmt.Errorf("discord: root command %q: %w", root, rtsandbox.ErrInvalid)
	}
	if opts.MaxUploadBytes < 0 {
		return nil, fmt.Errorf("discord: negative MaxUploadBytes: %w", rtsandbox.ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Surface{
		root:    root,
		token:   opts.Token,
		router:  opts.Router,
		log:     log.With("surface", Prefix),
		client:  opts.HTTPClient,
		dialer:  opts.Dialer,
		inbox:   make(chan *discordgo.Message, inboxSize),
		preview: opts.Preview,
		now:     opts.Now,
		shown:   map[string]*shownPreview{},

		maxUpload: cmp.Or(opts.MaxUploadBytes, DefaultMaxUploadBytes),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.client == nil {
		s.client = &http.Client{Timeout: 20 * time.Second}
		s.ownHTTP = true
	}
	if s.dialer == nil {
		s.dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 10 * time.Second}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Start reads the token, connects to the gateway, waits for READY and
// registers the owner commands (a global bulk overwrite, which replaces
// any other global command of the application). On error nothing is left
// running; the surface may not be started again. ctx bounds the command
// registration; the connection itself is bounded by the HTTP client's and
// dialer's timeouts.
func (s *Surface) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.closed {
		s.mu.Unlock()
		return ErrState
	}
	s.started = true
	s.mu.Unlock()

	secret := s.token()
	if strings.TrimSpace(secret.Reveal()) == "" {
		return ErrNoToken
	}
	sess, err := discordgo.New("Bot " + secret.Reveal())
	if err != nil {
		return fmt.Errorf("discord: new session: %s", redact(err, secret))
	}
	sess.Client = s.client
	sess.Dialer = s.dialer
	sess.LogLevel = -1 // silent: discordgo logs through the std logger; ours records what matters
	sess.StateEnabled = false
	sess.SyncEvents = true // handlers only hand work off; see onMessage
	sess.Identify.Intents = Intents
	sess.AddHandler(s.onReady)
	sess.AddHandler(s.onMessage)
	sess.AddHandler(s.onInteraction)
	// Reconnection is ours (reconnect): discordgo's reads its flag
	// without a lock, so it cannot be turned off once the session runs,
	// and its retry loop outlives Close.
	sess.ShouldReconnectOnError = false
	sess.AddHandler(s.onDisconnect)
	sess.AddHandler(func(*discordgo.Session, *discordgo.Resumed) { s.log.Info("discord gateway resumed") })

	s.mu.Lock()
	s.session, s.secret = sess, secret
	s.mu.Unlock()

	if err := sess.Open(); err != nil {
		return fmt.Errorf("discord: connect to the gateway: %s", redact(err, secret))
	}
	botID, appID := s.ids()
	if botID == "" || appID == "" {
		s.closeSession()
		return ErrNotReady
	}
	if err := s.registerCommands(ctx, sess, appID); err != nil {
		s.closeSession()
		return err
	}
	s.mu.Lock()
	if s.closed { // Close ran meanwhile
		s.mu.Unlock()
		s.closeSession()
		return ErrState
	}
	s.live = true
	s.wg.Add(1)
	s.mu.Unlock()
	go s.inbound()
	s.log.Info("discord surface started", "bot", botID, "root_command", s.root)
	return nil
}

// Close disconnects, stops waiting on owner commands (each still gets its
// edit) and waits for the surface's goroutines. It is safe to call more
// than once. discordgo's own close takes about a second.
func (s *Surface) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.closeSession()
	s.wg.Wait()
	if s.ownHTTP {
		s.client.CloseIdleConnections()
	}
	return nil
}

// closeSession closes the gateway connection; nothing reopens it once
// the surface is closed (onDisconnect).
func (s *Surface) closeSession() {
	s.mu.Lock()
	sess := s.session
	s.mu.Unlock()
	if sess == nil {
		return
	}
	if err := sess.Close(); err != nil {
		s.log.Warn("discord gateway close failed", "err", s.redact(err))
	}
}

// onDisconnect runs when the gateway connection closed, whoever closed
// it: on a started surface that is not closed, it opens the connection
// again in the background.
func (s *Surface) onDisconnect(sess *discordgo.Session, _ *discordgo.Disconnect) {
	s.log.Warn("discord gateway disconnected")
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live || s.closed {
		return
	}
	s.wg.Add(1)
	go s.reconnect(sess)
}

// reconnect opens sess again (a resume, when Discord allows it), backing
// off from 1 s to 10 min between failures, until it is open or the
// surface closes. Two drops in a row start two of these: the later Open
// finds the connection open and returns.
func (s *Surface) reconnect(sess *discordgo.Session) {
	defer s.wg.Done()
	wait := time.Second
	for {
		err := sess.Open()
		if err == nil || errors.Is(err, discordgo.ErrWSAlreadyOpen) {
			if err == nil && s.ctx.Err() != nil {
				sess.Close() // Close ran while this opened
			}
			return
		}
		s.log.Warn("discord gateway reconnect failed", "err", s.redact(err), "retry_in", wait)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Minute)
	}
}

func (s *Surface) ids() (botID, appID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.botID, s.appID
}

// onReady records the bot's user and application ids. It runs inside
// discordgo's Open and on every re-identify.
func (s *Surface) onReady(_ *discordgo.Session, r *discordgo.Ready) {
	defer s.recovered("ready event", "")
	if r == nil || r.User == nil {
		return
	}
	s.mu.Lock()
	s.botID = r.User.ID
	if r.Application != nil && r.Application.ID != "" {
		s.appID = r.Application.ID
	} else {
		s.appID = r.User.ID // a bot's application id is its user id
	}
	s.mu.Unlock()
	s.log.Info("discord gateway ready")
}

// channelID returns the Discord channel id of a discord:<snowflake> key.
func channelID(key rtsandbox.ChannelKey) (string, error) {
	prefix, id, ok := strings.Cut(string(key), ":")
	if !ok || prefix != Prefix || !snowflakeRE.MatchString(id) {
		return "", fmt.Errorf("%w: %q", ErrChannel, key)
	}
	return id, nil
}

// key returns the channel key of a Discord channel id.
func key(id string) rtsandbox.ChannelKey { return rtsandbox.ChannelKey(Prefix + ":" + id) }

// rest returns the session for REST calls; it exists once Start ran.
func (s *Surface) rest() (*discordgo.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == nil {
		return nil, ErrNotReady
	}
	return s.session, nil
}

// usersOnly lets a message ping users it names, never @everyone, @here or
// roles.
func usersOnly() *discordgo.MessageAllowedMentions {
	return &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{discordgo.AllowedMentionTypeUsers}}
}

// Deliver implements router.Surface: it posts the chunk as its own
// message, whatever its kind, with the delivery's files (files.go),
// except a preview, which posts or edits the message's preview
// (preview.go); a reply then removes the preview.
func (s *Surface) Deliver(ctx context.Context, d router.Delivery) error {
	id, err := channelID(d.Channel)
	if err != nil {
		return err
	}
	sess, err := s.rest()
	if err != nil {
		return err
	}
	if d.Kind == router.KindPreview {
		return s.showPreview(ctx, sess, id, d)
	}
	return s.send(ctx, sess, id, d)
}

// Typing implements router.Surface: it shows the typing indicator once,
// in the channel (Discord has no per-message typing).
func (s *Surface) Typing(ctx context.Context, channel rtsandbox.ChannelKey, _ string) error {
	id, err := channelID(channel)
	if err != nil {
		return err
	}
	sess, err := s.rest()
	if err != nil {
		return err
	}
	if err := sess.ChannelTyping(id, discordgo.WithContext(ctx)); err != nil {
		return fmt.Errorf("discord: typing in %s: %s", channel, s.redact(err))
	}
	return nil
}

// recovered, deferred, ends a panic of the surface's work on one event and
// logs it with the channel key (or "") and the stack. The panic value is
// named by its type only: it could quote a message, and discordgo's errors
// could carry the token.
func (s *Surface) recovered(where string, channel rtsandbox.ChannelKey) {
	if p := recover(); p != nil {
		s.log.Error("recovered from a panic", "where", where, "channel", channel,
			"panic", fmt.Sprintf("%T", p), "stack", string(debug.Stack()))
	}
}

// redact returns err's text with the session's token removed.
func (s *Surface) redact(err error, more ...string) string {
	s.mu.Lock()
	secret := s.secret
	s.mu.Unlock()
	return redact(err, secret, more...)
}

// redact returns err's text with the token and the other secrets (such as
// interaction tokens, which appear in webhook URLs) replaced. The text is
// used in errors and logs instead of err itself, so that no caller can
// reach the unredacted chain.
func redact(err error, secret rtsandbox.Secret, more ...string) string {
	text := err.Error()
	for _, v := range append([]string{secret.Reveal()}, more...) {
		if strings.TrimSpace(v) != "" {
			text = strings.ReplaceAll(text, v, "[redacted]")
		}
	}
	return text
}
