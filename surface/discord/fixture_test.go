package discord_test

import (
	"context"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/discord"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bot token of every test; no log line or error may contain it.
const token = "MTAwMDAwMDAwMDAwMDAwMDAx.fake.SECRET-token-value"

const (
	guild      = "500000000000000001"
	enabledID  = "600000000000000001" // sandboxed at start
	otherID    = "600000000000000002" // not sandboxed
	dmID       = "600000000000000009"
	memberRole = "800000000000000001"
	ownerID    = "700000000000000001"
	aliceID    = "700000000000000002" // a member through memberRole
	malloryID  = "700000000000000003" // served by no rule
)

const (
	enabled rtsandbox.ChannelKey = "discord:" + enabledID
	other   rtsandbox.ChannelKey = "discord:" + otherID
)

var (
	owner   = fakediscord.User{ID: ownerID, Username: "ada", GlobalName: "Ada"}
	alice   = fakediscord.User{ID: aliceID, Username: "alice"}
	mallory = fakediscord.User{ID: malloryID, Username: "mallory"}
)

const wait = 10 * time.Second

type (
	turnCall    = fakeruntime.Call
	fakeRuntime = fakeruntime.Runtime
)

type harness struct {
	fake   *fakediscord.Server
	store  *channels.Store
	dir    string
	rt     *fakeRuntime
	router *router.Router
	s      *discord.Surface
	logs   *syncbuf.Buffer
	setup  int // REST calls made by Start
}

// newHarness runs a real router (real channel store and access policy, a
// fake runtime) behind a started Discord surface talking to a fake Discord.
func newHarness(t *testing.T) *harness {
	t.Helper()
	return newWrappedHarness(t, nil)
}

// newWrappedHarness is newHarness with the surface's view of the router
// passed through wrap (nil: none).
func newWrappedHarness(t *testing.T, wrap func(discord.Router) discord.Router) *harness {
	t.Helper()
	return newHarnessWith(t, wrap, nil)
}

// newHarnessWith is newWrappedHarness with the surface's options passed
// through edit (nil: none) before New.
func newHarnessWith(t *testing.T, wrap func(discord.Router) discord.Router, edit func(*discord.Options)) *harness {
	t.Helper()
	return buildHarness(t, harnessConfig{wrap: wrap, edit: edit})
}

// harnessConfig varies a harness: the surface's view of the router
// (wrap), its options (edit) and the fake Discord's options (fake).
type harnessConfig struct {
	wrap func(discord.Router) discord.Router
	edit func(*discord.Options)
	fake func(*fakediscord.Options)
	// door is the router's door (nil: one with no credential), and
	// onDoor its OnDoor.
	door   router.Door
	onDoor func(rtsandbox.ChannelKey, router.DeliveryKind)
}

func buildHarness(t *testing.T, hc harnessConfig) *harness {
	t.Helper()
	wrap, edit := hc.wrap, hc.edit
	h := &harness{rt: &fakeRuntime{}, logs: &syncbuf.Buffer{}}
	// Cleanups run last-registered first: the surface closes, then the
	// router, the store and the fake; the token check runs at the very end.
	t.Cleanup(func() {
		if strings.Contains(h.logs.String(), token) {
			t.Errorf("the bot token appears in the logs:\n%s", h.logs.String())
		}
	})
	fo := fakediscord.Options{Token: token}
	if hc.fake != nil {
		hc.fake(&fo)
	}
	h.fake = fakediscord.New(fo)
	t.Cleanup(h.fake.Close)

	h.dir = filepath.Join(t.TempDir(), "state")
	store, err := channels.Open(h.dir, []rtsandbox.ChannelKey{enabled})
	if err != nil {
		t.Fatalf("channels.Open: %v", err)
	}
	h.store = store
	t.Cleanup(func() { store.Close() })

	policy, err := access.New(access.Rules{
		Owners:  []access.Identity{"discord:" + ownerID},
		Members: []access.Identity{"discord:role:" + memberRole},
	})
	if err != nil {
		t.Fatalf("access.New: %v", err)
	}
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt := h.rt
	var d router.Door = door.New(nil)
	if hc.door != nil {
		d = hc.door
	}
	r, err := router.New(router.Options{Door: d, OnDoor: hc.onDoor, Channels: store, Runtime: rt, Access: policy, Logger: log, TypingInterval: time.Hour})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	h.router = r
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("router Close: %v", err)
		}
	})

	var dr discord.Router = r
	if wrap != nil {
		dr = wrap(r)
	}
	opts := discord.Options{
		Token:      func() rtsandbox.Secret { return token },
		Router:     dr,
		Logger:     log,
		HTTPClient: h.fake.Client(),
		Dialer:     h.fake.Dialer(),
	}
	if edit != nil {
		edit(&opts)
	}
	s, err := discord.New(opts)
	if err != nil {
		t.Fatalf("discord.New: %v", err)
	}
	if err := r.AddSurface(discord.Prefix, s); err != nil {
		t.Fatal(err)
	}
	h.s = s
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("surface Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.setup = len(h.fake.Calls())
	return h
}

// after returns the REST calls made after Start.
func (h *harness) after(calls []fakediscord.Call) []fakediscord.Call { return calls[h.setup:] }

// waitFor waits until done holds for the calls after Start.
func (h *harness) waitFor(t *testing.T, what string, done func([]fakediscord.Call) bool) []fakediscord.Call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	calls, err := h.fake.Wait(ctx, func(c []fakediscord.Call) bool { return done(h.after(c)) })
	if err != nil {
		t.Fatalf("waiting for %s: %v; calls after setup: %s", what, err, describe(h.after(calls)))
	}
	return h.after(calls)
}

// post dispatches m as MESSAGE_CREATE.
func (h *harness) post(t *testing.T, m fakediscord.Message) fakediscord.Message {
	t.Helper()
	var err error
	m, err = h.fake.Post(m)
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	return m
}

// slash dispatches `/roundtable sandbox <sub>` by u in channel (guild
// "" = a DM).
func (h *harness) slash(t *testing.T, guildID, channel string, u fakediscord.User, roles []string, sub string) fakediscord.Interaction {
	t.Helper()
	var (
		in  fakediscord.Interaction
		err error
	)
	in, err = h.fake.Slash(fakediscord.Slash{
		GuildID: guildID, ChannelID: channel, User: u, Roles: roles,
		Root: discord.DefaultRootCommand, Group: discord.Group, Sub: sub,
	})
	if err != nil {
		t.Fatalf("Slash: %v", err)
	}
	return in
}

// answer waits for in's edit and returns its content and the edit call.
func (h *harness) answer(t *testing.T, in fakediscord.Interaction) (string, fakediscord.Call) {
	t.Helper()
	path := h.fake.WebhookPath(in)
	calls := h.waitFor(t, "the command's edit", func(c []fakediscord.Call) bool { return find(c, "PATCH", path) >= 0 })
	edit := calls[find(calls, "PATCH", path)]
	var body struct {
		Content string `json:"content"`
	}
	if err := edit.Decode(&body); err != nil {
		t.Fatalf("edit body %s: %v", edit.Body, err)
	}
	return body.Content, edit
}

// guildMessage is a message by u (with roles) in channel of the guild;
// mention prefixes the bot's mention and lists the bot in mentions.
func guildMessage(channel string, u fakediscord.User, roles []string, text string, mention bool) fakediscord.Message {
	m := fakediscord.Message{
		ChannelID: channel, GuildID: guild, Author: u, Content: text,
		Member: &fakediscord.Member{Roles: roles},
	}
	if mention {
		m.Content = "<@" + fakediscord.DefaultBotID + "> " + text
		m.Mentions = []fakediscord.User{botUser()}
	}
	return m
}

func botUser() fakediscord.User {
	return fakediscord.User{ID: fakediscord.DefaultBotID, Username: fakediscord.DefaultBotName, Bot: true}
}

func find(calls []fakediscord.Call, method, path string) int {
	for i, c := range calls {
		if c.Method == method && c.Path == path {
			return i
		}
	}
	return -1
}

func count(calls []fakediscord.Call, method, path string) int {
	n := 0
	for _, c := range calls {
		if c.Method == method && c.Path == path {
			n++
		}
	}
	return n
}

func describe(calls []fakediscord.Call) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString("\n  " + c.Method + " " + c.Path + " " + string(c.Body))
	}
	return b.String()
}

func messagesPath(id string) string { return "/channels/" + id + "/messages" }
func typingPath(id string) string   { return "/channels/" + id + "/typing" }

// sentContents returns the contents posted to channel id, in order.
func sentContents(t *testing.T, calls []fakediscord.Call, id string) []string {
	t.Helper()
	var out []string
	for _, c := range calls {
		if c.Method != "POST" || c.Path != messagesPath(id) {
			continue
		}
		var body struct {
			Content string `json:"content"`
		}
		if err := c.Decode(&body); err != nil {
			t.Fatalf("message body %s: %v", c.Body, err)
		}
		out = append(out, body.Content)
	}
	return out
}
