package main

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/safefetch/safefetchtest"
)

// Discord end to end with real Docker through serve (the function
// `rtsandbox serve` runs, with serveNet pointing the Discord surface at
// fakediscord and the session runtime's downloads at a loopback CDN).

const (
	discordTestToken = "cmd-files-discord-token"
	discordChannel   = "600000000000000001"
	discordAlice     = "700000000000000002"
)

// discordEnv is serve's getenv with the bot token.
func discordEnv(k string) string {
	if k == "RTS_DISCORD_TOKEN" {
		return discordTestToken
	}
	return serveEnv(k)
}

// TestSessionServeDiscordFiles: a Discord message's attachment, served by
// a CDN at a public name, is downloaded by the host through safefetch and
// reaches the stand-in model as an image part; the file the model writes
// with write_file is posted back as a multipart attachment of the reply.
func TestSessionServeDiscordFiles(t *testing.T) {
	tag, _ := sessionDocker(t)
	shot, report := pngOf(t, 2, 2), []byte("a,b\n1,2\n")
	model := filesModel(t, report)
	defer model.Close()
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/attachments/1/2/shot.png" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Write(shot)
	}))
	defer cdn.Close()
	fake := fakediscord.New(fakediscord.Options{Token: discordTestToken})
	defer fake.Close()

	addr := freeAddr(t)
	path, _ := sealedConfig(t, model.ChatURL(), tag, workerUserFlag())
	appendConfig(t, path, "access:\n  members: [\"discord:"+discordAlice+"\"]\ninitial_channels: [\"discord:"+discordChannel+"\"]\n"+
		"discord: {token_env: RTS_DISCORD_TOKEN}\nhttp: {listen: \""+addr+"\", token_env: RTS_HTTP_TOKEN}\n"+
		"profiles:\n  chat: {mode: session}\ndefault_profile: chat\nsession:\n  turn_timeout: 120s\n")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncbuf.Buffer{}
	done := make(chan error, 1)
	n := serveNet{discord: host.DiscordNet{Client: fake.Client(), Dialer: fake.Dialer()},
		fetcher: safefetchtest.Loopback(cdn, map[string]string{"cdn.example.com": "93.184.216.34"})}
	go func() {
		done <- serve(ctx, cfg, discordEnv, slog.New(slog.NewJSONHandler(out, nil)), time.Minute, nil, n)
	}()
	s := &server{base: "http://" + addr, out: out, client: &http.Client{Transport: &http.Transport{}}}
	defer s.client.CloseIdleConnections()
	waitReady(t, s)
	// serve's HTTP side answers before its Discord gateway is identified.
	idctx, idcancel := context.WithTimeout(ctx, time.Minute)
	defer idcancel()
	if err := fake.WaitIdentified(idctx); err != nil {
		t.Fatalf("%v\nserve:\n%s", err, out.String())
	}

	bot := fakediscord.User{ID: fake.BotID(), Username: "bot", Bot: true}
	if _, err := fake.Post(fakediscord.Message{ChannelID: discordChannel, GuildID: "500000000000000001",
		Content: "<@" + fake.BotID() + "> make a report", Author: fakediscord.User{ID: discordAlice, Username: "alice"},
		Mentions: []fakediscord.User{bot}, Attachments: []fakediscord.Attachment{{ID: "1", Filename: "shot.png", Size: len(shot),
			URL: "http://cdn.example.com/attachments/1/2/shot.png", ContentType: "image/png"}}}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	calls, err := fake.Wait(wctx, func(cs []fakediscord.Call) bool { _, ok := replyWithFiles(cs); return ok })
	if err != nil {
		t.Fatalf("no reply with files in the channel: %v\ncalls: %+v\nserve:\n%s", err, calls, out.String())
	}
	reply, _ := replyWithFiles(calls)
	if !strings.Contains(string(reply.Body), "Here is the table.") {
		t.Errorf("reply payload = %s; want the model's text", reply.Body)
	}
	var got []rtsandbox.File
	for _, f := range reply.Files {
		got = append(got, rtsandbox.File{Name: f.Name, Data: f.Data})
	}
	if diff := cmp.Diff([]rtsandbox.File{{Name: "report.csv", Data: report}}, got); diff != "" {
		t.Errorf("uploaded files (-want +got):\n%s", diff)
	}
	if reqs := model.Requests(); len(reqs) == 0 {
		t.Error("the model was not asked")
	} else if diff := cmp.Diff([]fakemodel.Image{{MIMEType: rtsandbox.MIMEPNG, Data: base64.StdEncoding.EncodeToString(shot)}}, reqs[0].Images()); diff != "" {
		t.Errorf("the attachment did not reach the model as an image part (-want +got):\n%s", diff)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("serve did not stop within a minute:\n%s", out.String())
	}
}

// replyWithFiles is the first message post in the test channel that
// uploaded files.
func replyWithFiles(calls []fakediscord.Call) (fakediscord.Call, bool) {
	for _, c := range calls {
		if c.Method == "POST" && c.Path == "/channels/"+discordChannel+"/messages" && len(c.Files) > 0 {
			return c, true
		}
	}
	return fakediscord.Call{}, false
}
