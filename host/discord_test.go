package host

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/router"
)

// startDiscord wires the config's discord: section into a router: the
// token comes from its variable, the root command from the config, and an
// addressed message in a sandboxed channel is answered in that channel.
func TestStartDiscordWiresConfigIntoRouter(t *testing.T) {
	const token = "cmd-discord-test-token"
	const channelID = "600000000000000001"
	fake := fakediscord.New(fakediscord.Options{Token: token})
	defer fake.Close()
	store, err := channels.Open(filepath.Join(t.TempDir(), "state"), []rtsandbox.ChannelKey{"discord:" + channelID})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	policy, err := access.New(access.Rules{Everyone: true})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	rt := &fakeruntime.Runtime{Run: func(context.Context, fakeruntime.Call) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: "Sealed reply."}, nil
	}}
	r, err := router.New(router.Options{Channels: store, Runtime: rt, Access: policy, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	cfg := &config.Config{Discord: &config.Discord{TokenEnv: "RTS_DISCORD_TOKEN", RootCommand: "guests"}}
	getenv := func(k string) string {
		if k == "RTS_DISCORD_TOKEN" {
			return token
		}
		return ""
	}
	stop, err := startDiscord(context.Background(), cfg, r, getenv, log, DiscordNet{Client: fake.Client(), Dialer: fake.Dialer()})
	if err != nil {
		t.Fatalf("startDiscord: %v", err)
	}
	defer stop()
	bot := fakediscord.User{ID: fake.BotID(), Username: "bot", Bot: true}
	if _, err := fake.Post(fakediscord.Message{ChannelID: channelID, GuildID: "500000000000000001",
		Content: "<@" + fake.BotID() + "> hello", Author: fakediscord.User{ID: "700000000000000002", Username: "alice"},
		Mentions: []fakediscord.User{bot}}); err != nil {
		t.Fatal(err)
	}
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
	if strings.Contains(logs.String(), token) {
		t.Error("the token appears in the log")
	}
}
