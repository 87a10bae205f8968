package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The reference's test "A worker result of {ok:false, error:"prompt failed: 529
// overloaded"}": the error contains that text and wraps a cause; the
// failure is logged with channel, turn id, timedOut false; the driver's
// logs and remove are not called (the worker is kept).
func TestWorkerOkFalseKeepsContainer(t *testing.T) {
	f := newFixture(t)
	f.w.worker = func(context.Context, wire.SessionTurn) (wire.SessionResult, error) {
		return wire.SessionResult{Error: "prompt failed: 529 overloaded"}, nil
	}
	_, err := f.rt.Turn(context.Background(), TurnRequest{Binding: binding("discord:party", "a"), Text: "hi", TurnID: "t1"})
	if err == nil || !strings.Contains(err.Error(), "prompt failed: 529 overloaded") {
		t.Fatalf("error = %v; want the worker's text", err)
	}
	if te, ok := err.(*turnError); !ok || len(te.errs) == 0 || te.errs[0] == nil {
		t.Errorf("error %#v carries no cause", err)
	}
	if !errors.Is(err, ErrWorkerFailed) {
		t.Errorf("error %v does not wrap ErrWorkerFailed", err)
	}
	if want := "Sandbox turn failed: Worker turn failed: prompt failed: 529 overloaded"; err.Error() != want {
		t.Errorf("error = %q; want %q", err, want)
	}
	rec := f.log.find("sandbox turn failed")
	if len(rec) != 1 {
		t.Fatalf("failure records = %+v", rec)
	}
	a := rec[0].attrs
	if a["channel"] != "discord:party" || a["turn_id"] != "t1" || a["timed_out"] != false ||
		!strings.Contains(a["message"].(string), "529 overloaded") {
		t.Errorf("failure record = %+v", a)
	}
	for _, c := range f.w.takeCalls() {
		if strings.HasPrefix(c, "logs:") || strings.HasPrefix(c, "remove:") {
			t.Errorf("driver call %q after ok:false; want none", c)
		}
	}
}

// The reference's test "A worker that never answers (timeout 1 s)": the error is exactly
// "Sandbox turn timed out" with a cause; the driver calls after the turn
// was delivered are exactly logs:200 then remove; the failure log says
// timedOut true, cancelled false; the worker's log lines are saved
// trimmed.
func TestTimeoutSavesLogAndRemoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.w.worker = hangWorker(func() { f.w.takeCalls() }) // keep only what follows the delivery
		_, err := f.rt.Turn(context.Background(), TurnRequest{Binding: binding("discord:party", "a"), Text: "hi", TurnID: "t1"})
		if err == nil || err.Error() != "Sandbox turn timed out" {
			t.Fatalf("error = %v; want exactly Sandbox turn timed out", err)
		}
		if !errors.Is(err, rtsandbox.ErrTurnTimeout) {
			t.Errorf("error %v does not wrap rtsandbox.ErrTurnTimeout", err)
		}
		name := f.rt.name("discord:party")
		if diff := cmp.Diff([]string{"logs:200", "remove:" + name}, f.w.takeCalls()); diff != "" {
			t.Errorf("driver calls (-want +got):\n%s", diff)
		}
		rec := f.log.find("sandbox turn failed")
		if len(rec) != 1 || rec[0].attrs["timed_out"] != true || rec[0].attrs["cancelled"] != false {
			t.Errorf("failure records = %+v", rec)
		}
		logs := f.log.find("sandbox worker log before removal")
		if len(logs) != 1 {
			t.Fatalf("worker log records = %+v", logs)
		}
		want := map[string]any{"channel": "discord:party", "turn_id": "t1", "lines": "worker line 1\nworker line 2"}
		if diff := cmp.Diff(want, logs[0].attrs); diff != "" {
			t.Errorf("worker log record (-want +got):\n%s", diff)
		}
	})
}

// docs/architecture.md, "The request path": the worker's log lines and the failure message are
// scrubbed and bounded before they reach the operator log.
func TestAbortLogScrubbed(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.Scrub = func(s string) string { return strings.ReplaceAll(s, "host-secret", "[redacted]") }
	})
	f.w.logText = "leaked host-secret\x1b[2J" + strings.Repeat("x", 300000)
	ctx, cancel := context.WithCancel(context.Background())
	f.w.worker = func(wctx context.Context, _ wire.SessionTurn) (wire.SessionResult, error) {
		cancel()
		<-wctx.Done()
		return wire.SessionResult{}, errors.New("upstream said host-secret")
	}
	_, err := f.turnIn(ctx, "discord:scrub", "a")
	if err == nil || strings.Contains(err.Error(), "host-secret") {
		t.Fatalf("error = %v; want a scrubbed failure", err)
	}
	logs := f.log.find("sandbox worker log before removal")
	if len(logs) != 1 {
		t.Fatalf("worker log records = %+v", logs)
	}
	lines := logs[0].attrs["lines"].(string)
	if strings.Contains(lines, "host-secret") || len(lines) > maxLogLines {
		t.Errorf("worker log not scrubbed or bounded: %d bytes, secret %v", len(lines), strings.Contains(lines, "host-secret"))
	}
	for _, r := range f.log.find("sandbox turn failed") {
		if strings.Contains(r.attrs["message"].(string), "host-secret") {
			t.Error("failure message not scrubbed")
		}
	}
}

// The default scrubber turns control characters other than tab and
// newline into spaces, so worker output cannot forge log lines.
func TestStripControls(t *testing.T) {
	if got, want := stripControls("a\x1b[2Jb\r\nc\td\u0085"), "a [2Jb \nc\td "; got != want {
		t.Errorf("stripControls = %q; want %q", got, want)
	}
}
