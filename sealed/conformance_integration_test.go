package sealed

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/runtimetest"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// TestIntegrationRuntimeConformance runs the runtime interface's
// conformance suite against the sealed runtime: the real worker in a real
// container, its model a loopback stand-in that answers, fails (HTTP 500)
// or never answers by the turn's text, and a conversation continued when
// the model's request carries an earlier turn.
func TestIntegrationRuntimeConformance(t *testing.T) {
	needDocker(t)
	const ok, fail, hang, answer = "conformance-ok", "conformance-fail", "conformance-hang", "Sealed answer."
	var continued atomic.Bool
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		continued.Store(strings.Count(string(body), ok) > 1)
		switch last := lastUserText(string(body)); {
		case strings.Contains(last, hang):
			<-r.Context().Done()
		case strings.Contains(last, fail):
			http.Error(w, `{"error":{"message":"down"}}`, http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, completion(answer))
		}
	}))
	defer model.Close()
	const timeout = 5 * time.Second
	f, _ := dockerFixture(t, integ.workerImage, func(f *fixture) {
		f.cfg.ModelURL, f.cfg.Model = upstream.MustParseEndpoint(model.URL+"/v1/chat/completions", true), "fake-model"
		f.opts.Model, f.opts.TurnTimeout = "fake-model", timeout
		f.opts.ProfileFor = func(rtsandbox.ChannelKey) string { return "sealed-profile" }
	})
	var n atomic.Int32
	runtimetest.Run(t, runtimetest.Harness{
		Runtime: f.rt, Timeout: timeout,
		Mode: rtsandbox.ModeSealed, Profile: "sealed-profile",
		Channel: func() rtsandbox.ChannelKey { return rtsandbox.ChannelKey(fmt.Sprintf("fake:conf%d", n.Add(1))) },
		OK:      ok, Fail: fail, Hang: hang, Answer: answer,
		Continued: func(*testing.T) bool { return continued.Load() },
	})
}

// lastUserText is the text after the last "user" role of a chat
// completions body: the turn's own message, whatever the history holds.
func lastUserText(body string) string {
	i := strings.LastIndex(body, `"role":"user"`)
	if i < 0 {
		return ""
	}
	return body[i:]
}
