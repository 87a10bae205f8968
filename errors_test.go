package rtsandbox_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

// One kind per error, one guest text per kind: wrapped sentinels, *Error
// values and the errors a turn ends with map to the fixed text a guest
// sees; everything else is "failed or stopped".
func TestGuestText(t *testing.T) {
	tests := []struct {
		name string
		err  error
		kind rtsandbox.Kind
		text string
	}{
		{"busy-wrapped", fmt.Errorf("sandbox: no slot: %w", rtsandbox.ErrBusy), rtsandbox.KindBusy, rtsandbox.BusyText},
		{"budget-error-value", &rtsandbox.Error{Kind: rtsandbox.KindOverBudget, Op: "budget", Err: errors.New("speaker calls")}, rtsandbox.KindOverBudget, rtsandbox.BudgetText},
		{"stopping", rtsandbox.ErrStopping, rtsandbox.KindStopping, rtsandbox.RestartingText},
		{"queue-full", fmt.Errorf("push: %w", rtsandbox.ErrQueueFull), rtsandbox.KindQueueFull, rtsandbox.QueueFullText},
		{"ended-early", fmt.Errorf("%w: stopped", rtsandbox.ErrEndedEarly), rtsandbox.KindEndedEarly, rtsandbox.TurnFailedOrStoppedText},
		{"cancelled", context.Canceled, rtsandbox.KindEndedEarly, rtsandbox.TurnFailedOrStoppedText},
		{"refused-and-ended-early", fmt.Errorf("%w: %w: disposed", rtsandbox.ErrRefused, rtsandbox.ErrEndedEarly), rtsandbox.KindEndedEarly, rtsandbox.TurnFailedOrStoppedText},
		{"disk-full", fmt.Errorf("write: %w", syscall.ENOSPC), rtsandbox.KindDiskFull, rtsandbox.TurnFailedOrStoppedText},
		{"workspace-full", fmt.Errorf("session: %w: files", rtsandbox.ErrWorkspaceFull), rtsandbox.KindWorkspaceFull, rtsandbox.WorkspaceFullText},
		{"workspace-full-wins-over-enospc", fmt.Errorf("%w: %w", rtsandbox.ErrWorkspaceFull, syscall.ENOSPC), rtsandbox.KindWorkspaceFull, rtsandbox.WorkspaceFullText},
		{"store", fmt.Errorf("budget: usage database /state/usage.db: %w", rtsandbox.ErrStore), rtsandbox.KindStore, rtsandbox.StoreText},
		{"over-budget-wins-over-store", fmt.Errorf("%w: %w", rtsandbox.ErrStore, rtsandbox.ErrOverBudget), rtsandbox.KindOverBudget, rtsandbox.BudgetText},
		{"credential-at-the-door", fmt.Errorf("door: %w: model.api_key_env in the text", rtsandbox.ErrCredential), rtsandbox.KindCredential, rtsandbox.TurnFailedOrStoppedText},
		{"credential-wins-over-everything", fmt.Errorf("%w: %w", rtsandbox.ErrBusy, rtsandbox.ErrCredential), rtsandbox.KindCredential, rtsandbox.TurnFailedOrStoppedText},
		{"sandbox-stopped", fmt.Errorf("session: %w: container died", rtsandbox.ErrSandboxStopped), rtsandbox.KindSandboxStopped, rtsandbox.SandboxStoppedText},
		{"sandbox-stopped-wins-over-ended-early", fmt.Errorf("%w: %w", context.Canceled, rtsandbox.ErrSandboxStopped), rtsandbox.KindSandboxStopped, rtsandbox.SandboxStoppedText},
		{"stopping-wins-over-sandbox-stopped", fmt.Errorf("%w: %w", rtsandbox.ErrSandboxStopped, rtsandbox.ErrStopping), rtsandbox.KindStopping, rtsandbox.RestartingText},
		{"upstream", fmt.Errorf("%w: 502", rtsandbox.ErrUpstream), rtsandbox.KindUpstream, rtsandbox.TurnFailedOrStoppedText},
		{"invalid", fmt.Errorf("%w: key", rtsandbox.ErrInvalid), rtsandbox.KindInvalid, rtsandbox.TurnFailedOrStoppedText},
		{"unclassified", errors.New("docker exploded"), rtsandbox.KindFailed, rtsandbox.TurnFailedOrStoppedText},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := []any{rtsandbox.KindOf(tt.err), rtsandbox.GuestText(tt.err)}
			if diff := cmp.Diff([]any{tt.kind, tt.text}, got); diff != "" {
				t.Errorf("KindOf, GuestText (-want +got):\n%s", diff)
			}
		})
	}
}

// An *Error matches its kind's sentinel and unwraps to its cause; the
// sentinels keep their texts and do not match each other.
func TestErrorIsAndUnwrap(t *testing.T) {
	cause := errors.New("cause")
	err := fmt.Errorf("outer: %w", &rtsandbox.Error{Kind: rtsandbox.KindBusy, Op: "turn", Err: cause})
	got := []bool{errors.Is(err, rtsandbox.ErrBusy), errors.Is(err, cause), errors.Is(err, rtsandbox.ErrRefused), errors.Is(rtsandbox.ErrInvalid, rtsandbox.ErrRefused)}
	if diff := cmp.Diff([]bool{true, true, false, false}, got); diff != "" {
		t.Errorf("errors.Is (-want +got):\n%s", diff)
	}
	if got, want := err.Error(), "outer: turn: channel is busy: cause"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	texts := []string{rtsandbox.ErrInvalid.Error(), rtsandbox.ErrRefused.Error(), rtsandbox.ErrBusy.Error(), rtsandbox.ErrUpstream.Error(),
		rtsandbox.ErrEndedEarly.Error(), rtsandbox.ErrOverBudget.Error(), rtsandbox.ErrStopping.Error(), rtsandbox.ErrQueueFull.Error()}
	want := []string{"invalid", "refused", "channel is busy", "upstream failed", "ended early", "daily budget exhausted",
		"the host is shutting down", "channel queue is full"}
	if diff := cmp.Diff(want, texts); diff != "" {
		t.Errorf("sentinel texts (-want +got):\n%s", diff)
	}
}
