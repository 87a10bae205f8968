package host

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/router"
)

// startDiscord wires the config's discord: section into a router: the
// token comes from its variable, the root command from the config, and an
// addressed message in a sandboxed channel is answered in that channel.
func TestStartDiscordWiresConfigIntoRouter(t *testing.T) {
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	rt := &fakeruntime.Runtime{Turn: func(context.Context, fakeruntime.Call) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: "Sealed reply."}, nil
	}}
	fake, r := discordWorld(t, rt, log)
	cfg := &config.Config{Discord: &config.Discord{TokenEnv: "RTS_DISCORD_TOKEN", RootCommand: "guests"}}
	getenv := func(k string) string {
		if k == "RTS_DISCORD_TOKEN" {
			return discordToken
		}
		return ""
	}
	stop, err := startDiscord(context.Background(), cfg, r, getenv, log, DiscordNet{Client: fake.Client(), Dialer: fake.Dialer()})
	if err != nil {
		t.Fatalf("startDiscord: %v", err)
	}
	defer stop()
	mentionBot(t, fake)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls, err := fake.Wait(ctx, func(c []fakediscord.Call) bool {
		for _, call := range c {
			if call.Method == "POST" && call.Path == "/channels/"+channelID+"/messages" {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no reply in the channel: %v", err)
	}
	var registered bool
	for _, c := range calls {
		registered = registered || (c.Method == "PUT" && strings.Contains(string(c.Body), `"name":"guests"`))
	}
	if !registered {
		t.Error("the root command from the config was not registered")
	}
	if calls := rt.Calls(); len(calls) != 1 || calls[0].Channel != "discord:"+channelID || calls[0].Speaker.PrincipalID != "discord:700000000000000002" {
		t.Errorf("turns = %+v; want one for alice in the channel", calls)
	}
	if strings.Contains(logs.String(), discordToken) {
		t.Error("the token appears in the log")
	}
}

// startDiscord passes discord.preview: with it the turn gets a text
// observer and its streamed text shows as a preview, deleted once the
// reply is out; without it, neither.
func TestStartDiscordPassesPreview(t *testing.T) {
	for _, preview := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[preview], func(t *testing.T) {
			observed := make(chan bool, 1)
			var fake *fakediscord.Server
			rt := &fakeruntime.Runtime{Turn: func(ctx context.Context, c fakeruntime.Call) (rtsandbox.Reply, error) {
				observed <- c.OnText != nil
				if c.OnText != nil {
					c.OnText(1, "Drafting")
					// The preview goes out before the reply, which ends it.
					_, _ = fake.Wait(ctx, func(calls []fakediscord.Call) bool {
						return slices.ContainsFunc(calls, func(c fakediscord.Call) bool { return strings.Contains(string(c.Body), "Drafting") })
					})
				}
				return rtsandbox.Reply{OK: true, Text: "Sealed reply."}, nil
			}}
			log := slog.New(slog.DiscardHandler)
			fake, r := discordWorld(t, rt, log)
			cfg := &config.Config{Model: config.Model{Stream: true}, Discord: &config.Discord{TokenEnv: "T", Preview: preview}}
			stop, err := startDiscord(context.Background(), cfg, r, func(string) string { return discordToken }, log,
				DiscordNet{Client: fake.Client(), Dialer: fake.Dialer()})
			if err != nil {
				t.Fatalf("startDiscord: %v", err)
			}
			defer stop()
			mentionBot(t, fake)
			if got := <-observed; got != preview {
				t.Errorf("the turn got a text observer: %v, want %v", got, preview)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var posts []string
			_, err = fake.Wait(ctx, func(c []fakediscord.Call) bool {
				posts = posts[:0]
				for _, call := range c {
					if call.Path == "/channels/"+channelID+"/messages" || call.Method == "DELETE" {
						posts = append(posts, call.Method+" "+string(call.Body))
					}
				}
				if len(posts) == 0 {
					return false
				}
				if last := posts[len(posts)-1]; preview {
					return strings.HasPrefix(last, "DELETE")
				} else {
					return strings.Contains(last, "Sealed reply.")
				}
			})
			if err != nil {
				t.Fatalf("waiting for the reply: %v (calls %q)", err, posts)
			}
			if preview && (len(posts) != 3 || !strings.Contains(posts[0], "Drafting") || !strings.HasPrefix(posts[2], "DELETE")) {
				t.Errorf("calls = %q, want the preview, the reply, the preview's deletion", posts)
			}
			if !preview && len(posts) != 1 {
				t.Errorf("calls = %q, want the reply only", posts)
			}
		})
	}
}

const (
	discordToken = "cmd-discord-test-token"
	channelID    = "600000000000000001"
)

// discordWorld is a fake Discord and a router over a real channel store
// (channelID sandboxed, everyone a member) and rt; both end with the test.
func discordWorld(t *testing.T, rt *fakeruntime.Runtime, log *slog.Logger) (*fakediscord.Server, *router.Router) {
	t.Helper()
	fake := fakediscord.New(fakediscord.Options{Token: discordToken})
	t.Cleanup(fake.Close)
	store, err := channels.Open(filepath.Join(t.TempDir(), "state"), []rtsandbox.ChannelKey{"discord:" + channelID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	policy, err := access.New(access.Rules{Everyone: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Options{Door: door.New(nil), Channels: store, Runtime: rt, Access: policy, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return fake, r
}

// mentionBot posts alice's message that mentions the bot in channelID.
func mentionBot(t *testing.T, fake *fakediscord.Server) {
	t.Helper()
	bot := fakediscord.User{ID: fake.BotID(), Username: "bot", Bot: true}
	if _, err := fake.Post(fakediscord.Message{ChannelID: channelID, GuildID: "500000000000000001",
		Content: "<@" + fake.BotID() + "> hello", Author: fakediscord.User{ID: "700000000000000002", Username: "alice"},
		Mentions: []fakediscord.User{bot}}); err != nil {
		t.Fatal(err)
	}
}
