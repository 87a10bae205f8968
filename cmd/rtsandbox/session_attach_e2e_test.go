package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// End to end with real Docker, through the session runtime as the host's
// runtime mux calls it (host.SessionRuntime.Run; the HTTP API's
// attachments are another change): a message's image reaches the stand-in
// model as an image part, the worker reads the attachment for a host tool,
// the tool's image lands in the worker's outbox and comes back as a reply
// file, and a disguised image is refused with the fixed notice.

// pngOf is a real w×h PNG.
func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// drawTool is a session host tool named image_generate: it records its
// input and answers with an image.
type drawTool struct {
	mu     sync.Mutex
	inputs []json.RawMessage
	image  wire.Image
}

func (d *drawTool) Run(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) {
	return "", errors.New("session only")
}

func (d *drawTool) RunSession(_ context.Context, input json.RawMessage, _ wire.SessionBinding) (wire.SessionToolResponse, error) {
	d.mu.Lock()
	d.inputs = append(d.inputs, input)
	d.mu.Unlock()
	return wire.SessionToolResponse{OK: true, Text: "drawn", Image: &d.image}, nil
}

// attachRuntime builds serve's session runtime (sessionRuntime) from the
// config written for model and the test's image, with the profile's
// broker configuration as the host builds it plus tool.
func attachRuntime(t *testing.T, model *fakemodel.Server, tool *drawTool) host.SessionRuntime {
	t.Helper()
	tag, cli := sessionDocker(t)
	path, _ := sessionConfig(t, model.ChatURL(), tag, freeAddr(t), "  turn_timeout: 120s\n")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pc, ok := cfg.ForProfile("chat")
	if !ok {
		t.Fatal("no profile chat")
	}
	log := slog.New(slog.DiscardHandler)
	bc, err := host.BrokerConfig(context.Background(), pc, serveEnv, upstream.New(nil), log)
	if err != nil {
		t.Fatal(err)
	}
	bc.Tools = append(bc.Tools, broker.Tool{Impl: tool, Spec: rtsandbox.ToolSpec{
		Name: "image_generate", Description: "Draw an image, optionally from reference images.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"},"reference_images":{"type":"array","maxItems":4}},"required":["prompt"]}`),
	}})
	uid, gid := 0, 0
	if u := workerUserFlag(); u != "" {
		if uid, gid, err = config.ParseUser(u); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := host.SessionMode(nil).Runtime(context.Background(), host.SessionDeps{
		Config: cfg, Getenv: serveEnv, Logger: log, Engine: cli, UID: uid, GID: gid,
		Installation: host.InstallationID(cfg), TimeZone: "UTC",
		ProfileFor: func(rtsandbox.ChannelKey) string { return "chat" },
		Brokers:    map[string]broker.Config{"chat": bc},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return rt
}

// TestSessionImageInFileOut: an image posted with a message reaches the
// stand-in model as an image part (chat completions through the real
// session broker, in the real worker container); the model has the
// worker pass the saved attachment to image_generate as a reference; the
// tool's image, which the worker writes to its outbox, comes back as the
// reply file; the HTML file named x.png is refused before it is saved,
// and the reply ends with the fixed notice saying so.
func TestSessionImageInFileOut(t *testing.T) {
	shot, drawn := pngOf(t, 2, 2), pngOf(t, 3, 1)
	var sawImages []fakemodel.Image
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			sawImages = req.Images()
			return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_image_generate",
				map[string]any{"prompt": "the same, bigger", "reference_images": []string{"m1-0-shot.png"}})}}
		}),
		fakemodel.Reply("Here it is."))
	t.Cleanup(model.Close)
	tool := &drawTool{image: wire.Image{Data: base64.StdEncoding.EncodeToString(drawn), MIMEType: rtsandbox.MIMEPNG}}
	rt := attachRuntime(t, model, tool)

	b := rtsandbox.Binding{Channel: "http:lobby", Speaker: rtsandbox.Speaker{ID: "alice", Name: "Alice"}, Tier: rtsandbox.TierMember}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ans, err := rt.Run(ctx, b, rtsandbox.TurnInput{MessageID: "m1", Text: "make this bigger", Attachments: []rtsandbox.Attachment{
		{Name: "shot.png", ContentType: "image/png", Data: shot},
		{Name: "x.png", ContentType: "image/png", Data: []byte("<!doctype html><script>alert(1)</script>")},
	}}, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff([]fakemodel.Image{{MIMEType: rtsandbox.MIMEPNG, Data: base64.StdEncoding.EncodeToString(shot)}}, sawImages); diff != "" {
		t.Errorf("the image did not reach the model as an image part (-want +got):\n%s", diff)
	}
	prompt := model.Requests()[0].UserText()
	for _, want := range []string{"make this bigger", `"m1-0-shot.png": image/png`, `attachment 2 "x.png": ` + rtsandbox.AttachNotImageReason} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
	notice := rtsandbox.AttachmentsNoticeText + "\n" + fmt.Sprintf(rtsandbox.AttachmentLineFormat, 2, "", rtsandbox.AttachNotImageReason)
	if want := "Here it is.\n\n" + notice; ans.Reply.Text != want {
		t.Errorf("reply %q; want %q", ans.Reply.Text, want)
	}
	if diff := cmp.Diff([]rtsandbox.File{{Name: "image.png", Data: drawn}}, ans.Files); diff != "" {
		t.Errorf("reply files (-want +got):\n%s", diff)
	}
	tool.mu.Lock()
	defer tool.mu.Unlock()
	want := `{"prompt":"the same, bigger","reference_images":[{"data":"` + base64.StdEncoding.EncodeToString(shot) + `","mimeType":"image/png"}]}`
	if len(tool.inputs) != 1 || string(tool.inputs[0]) != want {
		t.Errorf("image_generate got %s; want %s", tool.inputs, want)
	}
}
