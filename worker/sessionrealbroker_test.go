package worker_test

import (
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/worker"
)

// sessionRealBroker runs the session worker against the real session
// broker (broker.Session on a Unix socket) of a profile on api, with the
// stand-in model behind it, and returns the broker once the worker has
// announced itself.
func sessionRealBroker(t *testing.T, model *fakemodel.Server, api, workspace string) *broker.Session {
	t.Helper()
	url := model.ChatURL()
	if api == rtsandbox.ModelAPIAnthropic {
		url = model.URL()
	}
	b, err := broker.New(broker.Config{
		API: api, ModelURL: upstream.MustParseEndpoint(url, true), Model: "test-model",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return realBrokerKey, nil },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := broker.NewSession(broker.SessionConfig{Broker: b, Worker: wire.SessionWorkerConfig{
		ModelAPI: api, Model: "test-model", Prompt: "Be brief.", TimeZone: "UTC",
		Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "wsb")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "broker.sock")
	if err := s.Listen(sock); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- worker.RunSession(ctx, worker.SessionOptions{Socket: sock, Workspace: workspace}) }()
	t.Cleanup(func() {
		cancel()
		s.Close()
		<-done
		os.RemoveAll(dir)
	})
	for deadline := time.Now().Add(10 * time.Second); !s.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not announce itself")
		}
	}
	return s
}

// runRealSessionTurn binds and executes one turn on s.
func runRealSessionTurn(t *testing.T, s *broker.Session, turn wire.SessionTurn) wire.SessionResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, err := s.Bind(ctx, wire.SessionBinding{
		Binding: rtsandbox.Binding{Channel: "fake:guests", Speaker: rtsandbox.Speaker{ID: "ann", Name: "Ann"}},
		Profile: "studio", Thinking: "low", Deadline: time.Now().Add(30 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	res, err := s.Execute(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A turn's images and an image read_attachment shows reach the stand-in
// model as image parts through the real session broker, in both
// dialects: the broker's model rules (the session /model rule with data-
// URL image parts, the Messages rebuild) admit what the worker sends.
func TestSessionImagesRealBroker(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	for _, api := range []string{"", rtsandbox.ModelAPIAnthropic} {
		t.Run("api="+api, func(t *testing.T) {
			model := fakemodel.NewWithOptions(fakemodel.Options{Key: realBrokerKey},
				fakemodel.CallTools(fakemodel.Call("read_attachment", map[string]string{"name": "m1-0-shot.png"})),
				fakemodel.Reply("two pictures"))
			defer model.Close()
			ws := t.TempDir()
			os.Mkdir(filepath.Join(ws, "attachments"), 0o700)
			os.WriteFile(filepath.Join(ws, "attachments", "m1-0-shot.png"), png, 0o600)
			s := sessionRealBroker(t, model, api, ws)
			turn := wire.SessionTurn{TurnID: "t1", Author: wire.SessionAuthor{ID: "ann", Name: "Ann"}, Text: "look",
				Images: []wire.Image{{Data: "R0lG", MIMEType: rtsandbox.MIMEGIF}}, Thinking: "low"}
			if res := runRealSessionTurn(t, s, turn); !res.OK || res.Text != "two pictures" {
				t.Fatalf("result %+v", res)
			}
			reqs := model.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model requests", len(reqs))
			}
			want := []fakemodel.Image{{MIMEType: rtsandbox.MIMEGIF, Data: "R0lG"}, {MIMEType: rtsandbox.MIMEPNG, Data: base64.StdEncoding.EncodeToString(png)}}
			if diff := cmp.Diff(want, reqs[1].Images()); diff != "" {
				t.Errorf("images of the second request (-want +got):\n%s", diff)
			}
		})
	}
}
