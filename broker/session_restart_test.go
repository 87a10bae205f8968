package broker_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

// TestSessionReadyDuringDeliveredTurnFails (issue 22 item 1): a worker
// that announces itself again after it took the pending turn is a new
// process (its container restarted): the turn fails at once with the
// sandbox-stopped class, not at its deadline. A turn not yet delivered
// stays queued for the new worker's poll.
func TestSessionReadyDuringDeliveredTurnFails(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{}`), 200, "Ready")
	f.bind("")
	exec := f.execute(context.Background(), sessTurn("m1"))
	if r := f.do(http.MethodGet, wire.RouteWorkerNext, ""); r.Status != 200 {
		t.Fatalf("poll = %d; want the turn", r.Status)
	}
	wantResp(t, f.post(wire.RouteWorkerReady, `{}`), 200, "Ready")
	got := waitExec(t, exec)
	if !errors.Is(got.Err, broker.ErrWorkerRestarted) || !errors.Is(got.Err, rtsandbox.ErrSandboxStopped) {
		t.Fatalf("Execute = %v; want ErrWorkerRestarted", got.Err)
	}
	if got := rtsandbox.GuestText(got.Err); got != rtsandbox.SandboxStoppedText {
		t.Errorf("guest text %q", got)
	}
}

// TestSessionReadyBeforeDeliveryKeepsTurn: a worker that announces itself
// while the turn waits undelivered (a restart between turns, or before
// its first poll) gets the turn on its poll.
func TestSessionReadyBeforeDeliveryKeepsTurn(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerReady, `{}`), 200, "Ready")
	f.bind("")
	exec := f.execute(context.Background(), sessTurn("m1"))
	waitFor(t, "the turn pending", func() bool { return broker.SessionPending(f.sess) })
	wantResp(t, f.post(wire.RouteWorkerReady, `{}`), 200, "Ready")
	if r := f.do(http.MethodGet, wire.RouteWorkerNext, ""); r.Status != 200 {
		t.Fatalf("poll = %d; want the turn", r.Status)
	}
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"m1","result":{"ok":true,"text":"done","files":[]}}`), 200, "Accepted")
	if got := waitExec(t, exec); got.Err != nil || got.Result.Text != "done" {
		t.Errorf("Execute = %+v, %v; want the result", got.Result, got.Err)
	}
}

// TestSessionCancelledTurnUndelivered: a turn cancelled before any worker
// took it says so (wire.ErrTurnUndelivered), so the host may run it
// again; one cancelled after a worker took it does not.
func TestSessionCancelledTurnUndelivered(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("")
	ctx, cancel := context.WithCancel(context.Background())
	exec := f.execute(ctx, sessTurn("m1"))
	waitFor(t, "the turn pending", func() bool { return broker.SessionPending(f.sess) })
	cancel()
	if got := waitExec(t, exec); !errors.Is(got.Err, broker.ErrTurnCancelled) || !errors.Is(got.Err, wire.ErrTurnUndelivered) {
		t.Errorf("Execute cancelled undelivered = %v; want ErrTurnCancelled and ErrTurnUndelivered", got.Err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	exec = f.execute(ctx, sessTurn("m2"))
	if r := f.do(http.MethodGet, wire.RouteWorkerNext, ""); r.Status != 200 {
		t.Fatalf("poll = %d; want the turn", r.Status)
	}
	cancel()
	if got := waitExec(t, exec); !errors.Is(got.Err, broker.ErrTurnCancelled) || errors.Is(got.Err, wire.ErrTurnUndelivered) {
		t.Errorf("Execute cancelled after delivery = %v; want ErrTurnCancelled only", got.Err)
	}
}
