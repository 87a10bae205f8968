package broker_test

// The lines of the reference's capability tests: the
// privacy capability gate. Fixture: workerImage sandbox:old, tool recall
// (a SessionHostTool here), bound speaker ann with principal ann.

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

var ann = rtsandbox.Speaker{ID: "ann", Name: "Ann", PrincipalID: "ann"}

// problemRE matches the docs/protocol.md, "Privacy" problem text for sandbox:old.
// rebuildRE the shorter match of the lines that name only the image and
// the advice (the missing list is then one capability).
var (
	problemRE = regexp.MustCompile(`sandbox:old.*privateTo.*readerRecords.*rebuild`)
	rebuildRE = regexp.MustCompile(`sandbox:old.*rebuild`)
)

func annTurn(id, memory, visibility string) wire.SessionTurn {
	t := sessTurn(id)
	t.Author = wire.SessionAuthor{ID: "ann", Name: "Ann", PrincipalID: "ann"}
	t.Memory, t.MemoryVisibility = memory, visibility
	return t
}

// modelCalls counts the provider's model calls.
func (f *sessFixture) modelCalls() int { return len(f.upstreamCalls("/v1/")) }

// deliver long-polls the pending turn.
func (f *sessFixture) deliver() resp {
	f.t.Helper()
	return f.do(http.MethodGet, wire.RouteWorkerNext, "")
}

// The reference's test "Legacy compatibility": ready {} (no capabilities) → 200; a
// shared-visibility non-empty memory turn is delivered; a public tool call
// → 200; the result is accepted and execute is ok.
func TestSessionLegacyWorkerServesSharedTurns(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{}`), 200, "Ready")
	f.bindAs(sessChannel, ann, "")
	exec := f.execute(context.Background(), annTurn("a", "shared note", wire.MemoryShared))
	wantResp(t, f.deliver(), 200, "")
	f.toolAnswer = wire.SessionToolResponse{OK: true, Text: "public"}
	wantResp(t, f.post("/tools/recall", `{"input":{}}`), 200, `{"ok":true,"text":"public"}`)
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"a","result":{"ok":true,"text":"hi","files":[]}}`), 200, "Accepted")
	if got := waitExec(t, exec); got.Err != nil || !got.Result.OK {
		t.Errorf("Execute = %+v, %v; want ok", got.Result, got.Err)
	}
}

// The reference's test "[SEC] A worker with no capabilities, in two cases: (a) ready
// {privateHistory:false} and a turn with private memory PRIVATE PROMPT;
// (b) ready {privateHistory:true} and empty memory. Execute rejects with
// a message matching sandbox:old … privateTo … readerRecords … rebuild;
// the provider is called 0 times".
func TestSessionIncapableWorkerNeverGetsPrivateTurn(t *testing.T) {
	for name, tc := range map[string]struct{ ready, memory string }{
		"private-memory":  {`{"privateHistory":false}`, "PRIVATE PROMPT"},
		"private-history": {`{"privateHistory":true}`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			f := newSession(t, sessOptions{})
			wantResp(t, f.post(wire.RouteWorkerReady, tc.ready), 200, "Ready")
			f.bindAs(sessChannel, ann, "")
			_, err := f.sess.Execute(context.Background(), annTurn("a", tc.memory, ""))
			if !errors.Is(err, broker.ErrWorkerCapability) || !problemRE.MatchString(err.Error()) {
				t.Errorf("Execute error = %v; want the capability problem", err)
			}
			if n := f.modelCalls(); n != 0 {
				t.Errorf("provider called %d times", n)
			}
		})
	}
}

// The reference's test "[SEC] With capabilities {}, {privateTo:true} or
// {readerRecords:true}, a tool returning privateTo:"ann" and text SECRET:
// the tool call → 409 and the body does not contain SECRET; execute
// rejects matching sandbox:old … rebuild; a following model call → 410;
// provider calls 0".
func TestSessionPrivateToolResultWithheldFromIncapableWorker(t *testing.T) {
	for _, caps := range []string{`{}`, `{"privateTo":true}`, `{"readerRecords":true}`} {
		t.Run(caps, func(t *testing.T) {
			f := newSession(t, sessOptions{})
			wantResp(t, f.post(wire.RouteWorkerReady, `{"capabilities":`+caps+`}`), 200, "Ready")
			f.bindAs(sessChannel, ann, "")
			exec := f.execute(context.Background(), annTurn("a", "", ""))
			wantResp(t, f.deliver(), 200, "")
			f.toolAnswer = wire.SessionToolResponse{OK: true, Text: "SECRET", PrivateTo: "ann"}
			r := f.post("/tools/recall", `{"input":{}}`)
			if r.Status != 409 || strings.Contains(r.Body, "SECRET") || !rebuildRE.MatchString(r.Body) {
				t.Errorf("tool answer = %d %q; want 409 with the problem", r.Status, r.Body)
			}
			if got := waitExec(t, exec); !rebuildRE.MatchString(errText(got.Err)) {
				t.Errorf("Execute error = %v; want the problem", got.Err)
			}
			wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 410, "Turn ended")
			if n := f.modelCalls(); n != 0 {
				t.Errorf("provider called %d times", n)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The reference's test "[SEC] Downgrade: ready with both capabilities, then a
// private-memory turn queued, then ready {} → execute rejects
// (sandbox:old … rebuild); provider calls 0; a later result for turn a →
// 409".
func TestSessionCapabilityDowngradeRejectsPendingTurn(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{"capabilities":{"privateTo":true,"readerRecords":true}}`), 200, "Ready")
	f.bindAs(sessChannel, ann, "")
	exec := f.execute(context.Background(), annTurn("a", "PRIVATE PROMPT", wire.MemoryPrivate))
	wantResp(t, f.deliver(), 200, "")
	wantResp(t, f.post(wire.RouteWorkerReady, `{}`), 200, "Ready")
	if got := waitExec(t, exec); !problemRE.MatchString(errText(got.Err)) {
		t.Errorf("Execute error = %v; want the problem", got.Err)
	}
	if n := f.modelCalls(); n != 0 {
		t.Errorf("provider called %d times", n)
	}
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"a","result":{"ok":true,"text":"x","files":[]}}`), 409, "No matching turn")
}

// The reference's test "[SEC] Ready with capabilities:{privateTo:"true"} (a string) → 400
// and isReady() false".
func TestSessionReadyRefusesStringCapability(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{"capabilities":{"privateTo":"true"}}`), 400, "Invalid ready handshake")
	if f.sess.Ready() {
		t.Error("ready after a bad handshake")
	}
}

// The reference's test "With both capabilities, a private tool result is passed through
// to the worker as {privateTo:"ann", text:"SECRET"}".
func TestSessionPrivateToolResultToCapableWorker(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{"capabilities":{"privateTo":true,"readerRecords":true}}`), 200, "Ready")
	f.bindAs(sessChannel, ann, "")
	f.toolAnswer = wire.SessionToolResponse{OK: true, Text: "SECRET", PrivateTo: "ann"}
	wantResp(t, f.post("/tools/recall", `{"input":{"q":1},"channel":"discord:owner"}`), 200, `{"ok":true,"text":"SECRET","privateTo":"ann"}`)
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.toolCalls[0].Binding
	if f.toolCalls[0].Input != `{"q":1}` || b.Channel != sessChannel || b.Speaker != ann || b.Profile != "studio" || b.Thinking != "xhigh" || b.Deadline.IsZero() {
		t.Errorf("tool call = %+v; want the bound turn", f.toolCalls[0])
	}
}

// A host tool answer out of its bounds fails the call (502): a privateTo
// over 256 units, an invalid image.
func TestSessionToolAnswerBounds(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{"capabilities":{"privateTo":true,"readerRecords":true}}`), 200, "Ready")
	f.bind("")
	for name, answer := range map[string]wire.SessionToolResponse{
		"long-private-to": {OK: true, PrivateTo: strings.Repeat("a", 257)},
		"bad-image":       {OK: true, Image: &wire.Image{Data: "bad%", MIMEType: "image/png"}},
		"long-error":      {Error: strings.Repeat("e", 10001)},
	} {
		f.toolAnswer = answer
		if r := f.post("/tools/recall", `{"input":{}}`); r.Status != 502 || r.Body != "Broker call failed" {
			t.Errorf("%s: answer = %d %q; want 502", name, r.Status, r.Body)
		}
	}
	for name, body := range map[string]string{"missing": `{}`, "array": `{"input":[]}`, "string": `{"input":"x"}`} {
		wantResp(t, f.post("/tools/recall", body), 400, "Invalid tool input")
		_ = name
	}
}

// A worker's load report (issue 22 item 3) is logged with the channel
// and its counts before the handshake is answered, an empty one not at
// all, and a worker that repeats one with every handshake is logged at
// most maxLoadReports times; a bad one is refused like any bad handshake.
func TestSessionReadyLogsSessionLoad(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{"sessionLoad":{}}`), 200, "Ready")
	if strings.Contains(f.logs.String(), "lost lines on load") {
		t.Errorf("an empty load report was logged:\n%s", f.logs.String())
	}
	wantResp(t, f.post(wire.RouteWorkerReady, `{"sessionLoad":{"droppedLines":-1}}`), 400, "Invalid ready handshake")
	body := `{"capabilities":{"privateTo":true,"readerRecords":true},"sessionLoad":{"droppedLines":3,"ignoredFiles":1}}`
	wantResp(t, f.post(wire.RouteWorkerReady, body), 200, "Ready")
	logs := f.logs.String()
	for _, want := range []string{"session conversation lost lines on load", `"channel":"` + string(sessChannel) + `"`, `"dropped_lines":3`, `"ignored_files":1`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	for range 2 * broker.MaxLoadReports {
		wantResp(t, f.post(wire.RouteWorkerReady, body), 200, "Ready")
	}
	if n := strings.Count(f.logs.String(), "lost lines on load"); n != broker.MaxLoadReports {
		t.Errorf("%d load reports logged; want at most %d", n, broker.MaxLoadReports)
	}
}
