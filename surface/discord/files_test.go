package discord_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/discord"
)

// recordingRouter records every message the surface submits.
type recordingRouter struct {
	discord.Router
	mu   sync.Mutex
	msgs []router.Message
}

func (r *recordingRouter) Submit(m router.Message) (<-chan error, error) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	return r.Router.Submit(m)
}

func (r *recordingRouter) messages() []router.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func cdn(name string) string { return "https://cdn.discordapp.com/attachments/1/2/" + name }

// Inbound: the message's attachments, then a forward's snapshot's (the
// message's own, as the reference merges them), then the replied-to
// message's (FromReference), each described by URL, name, declared size
// and type; Message.Attachments counts the message's own. Nothing is
// downloaded.
func TestInboundFilesDescribed(t *testing.T) {
	a := fakediscord.Attachment{ID: "1", Filename: "shot.png", Size: 1234, URL: cdn("shot.png"), ContentType: "image/png"}
	b := fakediscord.Attachment{ID: "2", Filename: "notes.txt", Size: 7, URL: cdn("notes.txt")}
	c := fakediscord.Attachment{ID: "3", Filename: "../../etc/passwd", Size: 9, URL: cdn("passwd")}
	tests := []struct {
		name      string
		msg       func(h *harness) fakediscord.Message
		wantFiles []rtsandbox.Attachment
		wantCount int
	}{
		{
			name: "own-attachments",
			msg: func(*harness) fakediscord.Message {
				m := guildMessage(enabledID, alice, []string{memberRole}, "look", true)
				m.Attachments = []fakediscord.Attachment{a, b}
				return m
			},
			wantFiles: []rtsandbox.Attachment{
				{Name: "shot.png", ContentType: "image/png", Size: 1234, URL: cdn("shot.png")},
				{Name: "notes.txt", Size: 7, URL: cdn("notes.txt")},
			},
			wantCount: 2,
		},
		{
			// [SEC] The name is the guest's and passes untouched: the
			// runtime sanitises it (docs/session.md, "Attachments in, reply files out"), the surface never
			// builds a path from it.
			name: "sec-name-with-path-separators-passed-through",
			msg: func(*harness) fakediscord.Message {
				m := guildMessage(enabledID, alice, []string{memberRole}, "look", true)
				m.Attachments = []fakediscord.Attachment{c}
				return m
			},
			wantFiles: []rtsandbox.Attachment{{Name: "../../etc/passwd", Size: 9, URL: cdn("passwd")}},
			wantCount: 1,
		},
		{
			name: "reply-with-embedded-reference-files-after-own",
			msg: func(h *harness) fakediscord.Message {
				earlier := h.post(t, fakediscord.Message{ChannelID: enabledID, GuildID: guild, Author: botUser(), Content: "here", Attachments: []fakediscord.Attachment{b}})
				m := guildMessage(enabledID, alice, []string{memberRole}, "and this?", false)
				m.Attachments = []fakediscord.Attachment{a}
				m.MessageReference = &fakediscord.MessageReference{MessageID: earlier.ID, ChannelID: enabledID, GuildID: guild}
				m.ReferencedMessage = &earlier
				return m
			},
			wantFiles: []rtsandbox.Attachment{
				{Name: "shot.png", ContentType: "image/png", Size: 1234, URL: cdn("shot.png")},
				{Name: "notes.txt", Size: 7, URL: cdn("notes.txt"), FromReference: true},
			},
			wantCount: 1,
		},
		{
			name: "reply-with-fetched-reference-files",
			msg: func(h *harness) fakediscord.Message {
				earlier := h.post(t, fakediscord.Message{ChannelID: enabledID, GuildID: guild, Author: botUser(), Content: "here", Attachments: []fakediscord.Attachment{b}})
				m := guildMessage(enabledID, alice, []string{memberRole}, "and this?", false)
				m.MessageReference = &fakediscord.MessageReference{MessageID: earlier.ID, ChannelID: enabledID, GuildID: guild}
				return m
			},
			wantFiles: []rtsandbox.Attachment{{Name: "notes.txt", Size: 7, URL: cdn("notes.txt"), FromReference: true}},
			wantCount: 0,
		},
		{
			name: "forward-snapshot-files-are-the-message's",
			msg: func(*harness) fakediscord.Message {
				m := guildMessage(enabledID, alice, []string{memberRole}, "", true)
				m.Attachments = []fakediscord.Attachment{a}
				m.MessageReference = &fakediscord.MessageReference{Type: fakediscord.ReferenceForward, MessageID: "42", ChannelID: otherID, GuildID: guild}
				m.MessageSnapshots = []fakediscord.Snapshot{{Message: fakediscord.SnapshotMessage{Content: "fwd", Attachments: []fakediscord.Attachment{b}}}}
				return m
			},
			wantFiles: []rtsandbox.Attachment{
				{Name: "shot.png", ContentType: "image/png", Size: 1234, URL: cdn("shot.png")},
				{Name: "notes.txt", Size: 7, URL: cdn("notes.txt")},
			},
			wantCount: 2,
		},
		{
			name: "no-attachments",
			msg: func(*harness) fakediscord.Message {
				return guildMessage(enabledID, alice, []string{memberRole}, "hi", true)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordingRouter{}
			h := newWrappedHarness(t, func(r discord.Router) discord.Router { rec.Router = r; return rec })
			h.post(t, tt.msg(h))
			calls := h.waitFor(t, "the reply", func(c []fakediscord.Call) bool { return count(c, "POST", messagesPath(enabledID)) >= 1 })
			var got *router.Message
			for _, m := range rec.messages() {
				if m.Author.ID == aliceID {
					got = &m
				}
			}
			if got == nil {
				t.Fatal("the message never reached the router")
			}
			if diff := cmp.Diff(tt.wantFiles, got.Files); diff != "" {
				t.Errorf("Files (-want +got):\n%s", diff)
			}
			if got.Attachments != tt.wantCount {
				t.Errorf("Attachments = %d; want %d", got.Attachments, tt.wantCount)
			}
			for _, c := range calls {
				if strings.Contains(c.Path, "attachments") {
					t.Errorf("attachment fetched: %s %s", c.Method, c.Path)
				}
			}
		})
	}
}

// post is one message the bot posted: its content, its files as
// "name=bytes", and, for a content-only message, the mentions it allows.
type post struct {
	Content string
	Files   []string
	Parse   []string
	Status  int
}

func posts(t *testing.T, calls []fakediscord.Call, id string) []post {
	t.Helper()
	var out []post
	for _, c := range calls {
		if c.Method != "POST" || c.Path != messagesPath(id) {
			continue
		}
		var body struct {
			Content         string `json:"content"`
			AllowedMentions struct {
				Parse []string `json:"parse"`
			} `json:"allowed_mentions"`
		}
		if err := c.Decode(&body); err != nil {
			t.Fatalf("message body %s: %v", c.Body, err)
		}
		p := post{Content: body.Content, Parse: body.AllowedMentions.Parse, Status: c.Status}
		for _, f := range c.Files {
			p.Files = append(p.Files, f.Name+"="+string(f.Data))
		}
		out = append(out, p)
	}
	return out
}

func file(name string, size int) rtsandbox.File {
	return rtsandbox.File{Name: name, Data: []byte(strings.Repeat(name[:1], size))}
}

func fileAt(name string, size int) string { return name + "=" + strings.Repeat(name[:1], size) }

func tooLarge(escaped string) string { return fmt.Sprintf(rtsandbox.FileTooLargeFormat, escaped) }

// Outbound: a delivery's files are posted as Discord attachments through
// discordgo's multipart upload, with the chunk, split into follow-up
// messages of at most ten files and the upload limit (here 100 bytes);
// a file over the limit is not posted and the channel gets a fixed note
// naming it, which pings nobody.
func TestReplyFilesPostedAsAttachments(t *testing.T) {
	users := []string{"users"}
	none := []string{}
	var eleven []rtsandbox.File
	var elevenWant []string
	for i := range 11 {
		name := fmt.Sprintf("%c.txt", 'a'+i)
		eleven = append(eleven, file(name, 1))
		elevenWant = append(elevenWant, fileAt(name, 1))
	}
	tests := []struct {
		name      string
		fakeLimit int64 // the fake server's limit; 0: the surface's
		chunk     string
		files     []rtsandbox.File
		want      []post
	}{
		{
			name: "files-with-the-text", chunk: "Here.", files: []rtsandbox.File{file("a.txt", 3), file("b.csv", 4)},
			want: []post{{Content: "Here.", Files: []string{fileAt("a.txt", 3), fileAt("b.csv", 4)}, Parse: users, Status: 200}},
		},
		{
			name: "eleven-files-split-ten-then-one", chunk: "Here.", files: eleven,
			want: []post{
				{Content: "Here.", Files: elevenWant[:10], Parse: users, Status: 200},
				{Files: elevenWant[10:], Parse: users, Status: 200},
			},
		},
		{
			name: "total-over-the-limit-split-not-dropped", chunk: "Here.", files: []rtsandbox.File{file("a.bin", 60), file("b.bin", 60), file("c.bin", 40)},
			want: []post{
				{Content: "Here.", Files: []string{fileAt("a.bin", 60)}, Parse: users, Status: 200},
				{Files: []string{fileAt("b.bin", 60), fileAt("c.bin", 40)}, Parse: users, Status: 200},
			},
		},
		{
			name: "sec-oversize-file-gets-a-note-the-rest-posted", chunk: "Here.", files: []rtsandbox.File{file("big.bin", 101), file("ok.txt", 100)},
			want: []post{
				{Content: "Here.", Files: []string{fileAt("ok.txt", 100)}, Parse: users, Status: 200},
				{Content: tooLarge(`big.bin`), Parse: none, Status: 200},
			},
		},
		{
			name: "sec-note-escapes-markdown-and-pings-nobody", chunk: "Here.", files: []rtsandbox.File{file("<@"+ownerID+"> **x**.txt", 101)},
			want: []post{
				{Content: "Here.", Parse: users, Status: 200},
				{Content: tooLarge(`\<\@` + ownerID + `\> \*\*x\*\*.txt`), Parse: none, Status: 200},
			},
		},
		{
			name: "server-refuses-as-too-large-text-alone-then-note", fakeLimit: 50, chunk: "Here.", files: []rtsandbox.File{file("a.bin", 80)},
			want: []post{
				{Content: "Here.", Parse: users, Status: 413},
				{Content: "Here.", Parse: users, Status: 200},
				{Content: tooLarge(`a.bin`), Parse: none, Status: 200},
			},
		},
		{
			name: "files-without-text", chunk: "", files: []rtsandbox.File{file("a.txt", 2)},
			want: []post{{Files: []string{fileAt("a.txt", 2)}, Parse: users, Status: 200}},
		},
		{
			name: "only-an-oversize-file-without-text", chunk: "", files: []rtsandbox.File{file("big.bin", 101)},
			want: []post{{Content: tooLarge(`big.bin`), Parse: none, Status: 200}},
		},
		{
			name: "no-files", chunk: "Plain.",
			want: []post{{Content: "Plain.", Parse: users, Status: 200}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := buildHarness(t, harnessConfig{
				edit: func(o *discord.Options) { o.MaxUploadBytes = 100 },
				fake: func(o *fakediscord.Options) { o.MaxUploadBytes = cmpOr(tt.fakeLimit, 100) },
			})
			d := router.Delivery{Channel: enabled, InReplyTo: "m1", Kind: router.KindReply, Chunk: tt.chunk, Files: tt.files}
			if err := h.s.Deliver(context.Background(), d); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			if diff := cmp.Diff(tt.want, posts(t, h.after(h.fake.Calls()), enabledID)); diff != "" {
				t.Errorf("posts (-want +got):\n%s", diff)
			}
		})
	}
}

func cmpOr(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// End to end through the router: a guest's attachment reaches an
// InputRuntime as the CDN's description (never downloaded by the
// surface), and the turn's files reach Discord with the reply; a failed
// turn's files do not.
func TestTurnFilesThroughTheRouter(t *testing.T) {
	t.Parallel()
	h := buildHarness(t, harnessConfig{})
	h.rt.Files = func(c turnCall) []rtsandbox.File {
		return []rtsandbox.File{{Name: "answer.txt", Data: []byte("42 for " + c.Text)}}
	}
	m := guildMessage(enabledID, alice, []string{memberRole}, "count this", true)
	m.Attachments = []fakediscord.Attachment{{ID: "1", Filename: "data.csv", Size: 5, URL: cdn("data.csv"), ContentType: "text/csv"}}
	h.post(t, m)
	calls := h.waitFor(t, "the reply", func(c []fakediscord.Call) bool { return count(c, "POST", messagesPath(enabledID)) == 1 })
	want := []post{{Content: "Sealed.", Files: []string{"answer.txt=42 for count this"}, Parse: []string{"users"}, Status: 200}}
	if diff := cmp.Diff(want, posts(t, calls, enabledID)); diff != "" {
		t.Errorf("posts (-want +got):\n%s", diff)
	}
	got := h.rt.Calls()
	wantAtt := []rtsandbox.Attachment{{Name: "data.csv", ContentType: "text/csv", Size: 5, URL: cdn("data.csv")}}
	if len(got) != 1 || got[0].MessageID == "" || !cmp.Equal(got[0].Attachments, wantAtt) || got[0].Text != "count this" {
		t.Errorf("runtime calls = %+v; want one input turn with %+v and no notice", got, wantAtt)
	}

	h.rt.SetTurn(func(context.Context, turnCall) (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: false}, nil })
	h.post(t, guildMessage(enabledID, alice, []string{memberRole}, "again", true))
	calls = h.waitFor(t, "the failure", func(c []fakediscord.Call) bool { return count(c, "POST", messagesPath(enabledID)) == 2 })
	last := posts(t, calls, enabledID)[1]
	if last.Content != rtsandbox.TurnFailedText || len(last.Files) != 0 {
		t.Errorf("failed turn posted %+v; want the failure text and no file", last)
	}
}
