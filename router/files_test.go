package router

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/chunk"
)

var (
	shot     = rtsandbox.Attachment{Name: "shot.png", ContentType: "image/png", Size: 3, URL: "https://cdn.example/shot.png"}
	quoted   = rtsandbox.Attachment{Name: "old.pdf", Size: 9, URL: "https://cdn.example/old.pdf", FromReference: true}
	outFiles = []rtsandbox.File{{Name: "a.txt", Data: []byte("A")}, {Name: "b.csv", Data: []byte("1,2")}}
)

// The runtime gets the message's id, its model text without the
// attachments notice (the runtime decides what to do with the files), its
// files, the replied-to message's included, and the surface's count of its
// own; an empty message counts only its own files.
func TestRuntimeGetsTurnInput(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
		want *turnCall // nil: dropped as empty
	}{
		{
			name: "text-and-own-file",
			msg:  Message{Text: "look", Attachments: 1, Files: []rtsandbox.Attachment{shot}},
			want: &turnCall{Text: "look", Attachments: []rtsandbox.Attachment{shot}, Attached: 1},
		},
		{
			name: "quote-and-both-files-no-notice",
			msg:  Message{Text: "and this?", ReferenceText: "earlier", Attachments: 1, Files: []rtsandbox.Attachment{shot, quoted}},
			want: &turnCall{Text: "Quoted message (untrusted): earlier\n\nand this?", Attachments: []rtsandbox.Attachment{shot, quoted}, Attached: 1},
		},
		{
			name: "file-only-message-uncounted-by-surface-still-runs",
			msg:  Message{Files: []rtsandbox.Attachment{shot}},
			want: &turnCall{Text: "", Attachments: []rtsandbox.Attachment{shot}, Attached: 1},
		},
		{
			name: "reference-files-alone-are-empty",
			msg:  Message{Files: []rtsandbox.Attachment{quoted}},
		},
		{
			name: "no-files",
			msg:  Message{Text: "hi"},
			want: &turnCall{Text: "hi"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, newMemChannels(guests))
			m := tt.msg
			m.Channel, m.ID, m.Author, m.MentionsBot = guests, "m-1", Author{ID: "alice", Name: "Alice"}, true
			err := h.handle(t, m)
			if tt.want == nil {
				if Reason(err) != DropEmpty || len(h.rt.Calls()) != 0 {
					t.Fatalf("Handle = %v, calls %+v; want dropped as empty", err, h.rt.Calls())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := *tt.want
			want.Channel, want.Speaker = guests, rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "p_alice"}
			want.MessageID = "m-1"
			if diff := cmp.Diff([]turnCall{want}, h.rt.Calls()); diff != "" {
				t.Errorf("runtime calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A runtime that cannot take attachments (the sealed one) answers from
// the input's SealedText: the notice for the message's own files, counted
// by the surface or handed over, none for the replied-to message's.
func TestSealedTextKeepsAttachmentsNotice(t *testing.T) {
	tests := []struct {
		name  string
		files []rtsandbox.Attachment
		count int
		want  string
	}{
		{"own-file", []rtsandbox.Attachment{shot}, 1, "look\n" + rtsandbox.AttachmentsUnsupportedText},
		{"own-file-uncounted-by-surface", []rtsandbox.Attachment{shot}, 0, "look\n" + rtsandbox.AttachmentsUnsupportedText},
		{"reference-file-only", []rtsandbox.Attachment{quoted}, 0, "look"},
		{"counted-without-files", nil, 2, "look\n" + rtsandbox.AttachmentsUnsupportedText},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, newMemChannels(guests))
			m := mention(guests, "alice", "Alice", "look")
			m.Files, m.Attachments = tt.files, tt.count
			if err := h.handle(t, m); err != nil {
				t.Fatal(err)
			}
			calls := h.rt.Calls()
			if len(calls) != 1 || calls[0].Input().SealedText() != tt.want {
				t.Errorf("runtime calls = %+v; want one whose sealed text is %q", calls, tt.want)
			}
		})
	}
}

// fileDelivery is what a test compares of a delivery.
type fileDelivery struct {
	Kind  DeliveryKind
	Chunk string
	Files []string
}

func fileDeliveries(ds []Delivery) []fileDelivery {
	var out []fileDelivery
	for _, d := range ds {
		fd := fileDelivery{Kind: d.Kind, Chunk: d.Chunk}
		for _, f := range d.Files {
			fd.Files = append(fd.Files, f.Name+"="+string(f.Data))
		}
		out = append(out, fd)
	}
	return out
}

// A successful answer's files arrive on the last chunk of the reply only;
// a reply with files and no text is one empty chunk carrying them.
func TestReplyFilesOnLastChunkOnly(t *testing.T) {
	long := strings.Repeat("x", chunk.ChunkLimit) + "\n\n" + strings.Repeat("y", chunk.ChunkLimit) + "\n\nend"
	tests := []struct {
		name  string
		text  string
		files []rtsandbox.File
		want  []fileDelivery
	}{
		{
			name: "one-chunk", text: "Done.", files: outFiles,
			want: []fileDelivery{{KindReply, "Done.", []string{"a.txt=A", "b.csv=1,2"}}},
		},
		{
			name: "three-chunks-files-on-last", text: long, files: outFiles,
			want: []fileDelivery{
				{KindReply, strings.Repeat("x", chunk.ChunkLimit), nil},
				{KindReply, strings.Repeat("y", chunk.ChunkLimit), nil},
				{KindReply, "end", []string{"a.txt=A", "b.csv=1,2"}},
			},
		},
		{
			name: "blank-text-with-files-is-one-empty-chunk", text: " \n ", files: outFiles,
			want: []fileDelivery{{KindReply, "", []string{"a.txt=A", "b.csv=1,2"}}},
		},
		{
			name: "blank-text-without-files-posts-nothing", text: " ",
		},
		{
			name: "no-files", text: "Done.",
			want: []fileDelivery{{KindReply, "Done.", nil}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, newMemChannels(guests))
			h.rt.Turn = reply(tt.text)
			h.rt.Files = func(turnCall) []rtsandbox.File { return tt.files }
			if err := h.handle(t, mention(guests, "alice", "Alice", "go")); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, fileDeliveries(h.surface.Deliveries())); diff != "" {
				t.Errorf("deliveries (-want +got):\n%s", diff)
			}
		})
	}
}

// [SEC] Files are never posted after a failure: a runtime error, a
// worker's ok:false, a runtime panic or a failed earlier chunk each end
// the reply with the fixed failure text and no file, even though the
// runtime handed files back.
func TestReplyFilesNeverAfterFailure(t *testing.T) {
	errBoom := errors.New("boom")
	twoChunks := strings.Repeat("x", chunk.ChunkLimit) + "\n\nlast"
	tests := []struct {
		name     string
		run      func(context.Context, turnCall) (rtsandbox.Reply, error)
		failSend func(chunk string) error
		want     []fileDelivery
	}{
		{
			name: "runtime-error",
			run:  func(context.Context, turnCall) (rtsandbox.Reply, error) { return rtsandbox.Reply{}, errBoom },
			want: []fileDelivery{{KindReply, rtsandbox.TurnFailedOrStoppedText, nil}},
		},
		{
			name: "worker-not-ok",
			run: func(context.Context, turnCall) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{OK: false, Text: "partial"}, nil
			},
			want: []fileDelivery{{KindReply, rtsandbox.TurnFailedText, nil}},
		},
		{
			name: "runtime-panic",
			run:  func(context.Context, turnCall) (rtsandbox.Reply, error) { panic("runtime bug") },
			want: []fileDelivery{{KindReply, rtsandbox.TurnFailedOrStoppedText, nil}},
		},
		{
			name: "earlier-chunk-fails",
			run:  reply(twoChunks),
			failSend: func(c string) error {
				if strings.HasPrefix(c, "xxx") {
					return errBoom
				}
				return nil
			},
			want: []fileDelivery{{KindReply, rtsandbox.TurnFailedOrStoppedText, nil}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, newMemChannels(guests))
			h.rt.Turn = tt.run
			h.rt.Files = func(turnCall) []rtsandbox.File { return outFiles }
			h.surface.failSend = tt.failSend
			if err := h.handle(t, mention(guests, "alice", "Alice", "go")); err != nil {
				t.Fatal(err)
			}
			// failSend refuses before the surface records: the failed
			// chunk is not among the deliveries.
			if diff := cmp.Diff(tt.want, fileDeliveries(h.surface.Deliveries())); diff != "" {
				t.Errorf("deliveries (-want +got):\n%s", diff)
			}
		})
	}
}

// The InputRuntime gets the preview observer exactly when the message's
// surface takes previews, like a TextRuntime, and its previews end before
// the reply.
func TestInputRuntimePreviews(t *testing.T) {
	for _, previews := range []bool{false, true} {
		name := map[bool]string{false: "surface-without-previews-nil-observer", true: "surface-with-previews-gets-observer"}[previews]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, newMemChannels(guests))
			h.surface.previews = previews
			h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
				if (c.OnText != nil) != previews {
					t.Errorf("observer set %v; want %v", c.OnText != nil, previews)
				}
				if c.OnText != nil {
					c.OnText(1, "draft")
				}
				return rtsandbox.Reply{OK: true, Text: "final"}, nil
			}
			if err := h.handle(t, mention(guests, "alice", "Alice", "go")); err != nil {
				t.Fatal(err)
			}
			ds := h.surface.Deliveries()
			if last := ds[len(ds)-1]; last.Kind != KindReply || last.Chunk != "final" {
				t.Errorf("last delivery = %+v; want the reply", last)
			}
		})
	}
}

// The delivery carrying files may take SendTimeout more per file (an
// upload to a slow network); the chunks before it keep SendTimeout.
func TestFileDeliveryGetsUploadTime(t *testing.T) {
	tests := []struct {
		name  string
		take  time.Duration // how long the last delivery takes
		files []rtsandbox.File
		want  []string
	}{
		{"two-files-within-three-send-timeouts", 2*time.Minute + 50*time.Second, outFiles, []string{"Done."}},
		{"no-files-past-one-send-timeout-fails", 2 * time.Minute, nil, []string{rtsandbox.TurnFailedOrStoppedText}},
		{"two-files-past-three-send-timeouts-fails", 3*time.Minute + time.Second, outFiles, []string{rtsandbox.TurnFailedOrStoppedText}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, newMemChannels(guests), func(o *Options) { o.SendTimeout = time.Minute; o.ReplyTimeout = time.Minute })
				h.rt.Turn = reply("Done.")
				h.rt.Files = func(turnCall) []rtsandbox.File { return tt.files }
				h.surface.onSend = func(ctx context.Context, _ rtsandbox.ChannelKey, c string) error {
					if c != "Done." {
						return nil
					}
					select {
					case <-time.After(tt.take):
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				if err := <-h.submit(mention(guests, "alice", "Alice", "go")); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, h.surface.Sent(), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("sent (-want +got):\n%s", diff)
				}
			})
		})
	}
}
