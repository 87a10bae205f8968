package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
)

// removeWatch records, for each Remove, whether the channel was still
// enabled then.
type removeWatch struct {
	chans   ChannelSet
	mu      sync.Mutex
	enabled []bool
}

func (w *removeWatch) onRemove(ch rtsandbox.ChannelKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.enabled = append(w.enabled, w.chans.Enabled(ch))
}

func (w *removeWatch) enabledAtRemove() []bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enabled
}

func TestStatusPerMode(t *testing.T) {
	tests := []struct {
		name   string
		status rtsandbox.RuntimeStatus
		err    error
		want   string
	}{
		{
			name:   "sealed",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSealed, Profile: "default"},
			want:   rtsandbox.EnabledText + "\nMode: sealed (a fresh container every turn). Profile: default.",
		},
		{
			name:   "session-running",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio", Container: rtsandbox.ContainerRunning},
			want:   rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: running.",
		},
		{
			name:   "session-missing",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio", Container: rtsandbox.ContainerMissing},
			want:   rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: missing.",
		},
		{
			name:   "session-stopped",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio", Container: rtsandbox.ContainerStopped},
			want:   rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: stopped.",
		},
		{
			name:   "engine-unreachable-shows-unknown",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio"},
			err:    errors.New("docker: connection refused"),
			want:   rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: unknown.",
		},
		{
			name: "session-workspace",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio", Container: rtsandbox.ContainerRunning,
				Workspace: &rtsandbox.WorkspaceUsage{Mode: "hard", Mounted: true, Bytes: 3 << 19, MaxBytes: 64 << 20, Files: 12, MaxFiles: 512}},
			want: rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: running." +
				"\nWorkspace (hard bound): 1.5 of 64 MiB, 12 of 512 files used.",
		},
		{
			name: "session-workspace-full",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio", Container: rtsandbox.ContainerMissing,
				Workspace: &rtsandbox.WorkspaceUsage{Mode: "soft", Mounted: true, Bytes: 64 << 20, MaxBytes: 64 << 20, Files: 40, MaxFiles: 512, Full: true}},
			want: rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: missing." +
				"\nWorkspace (soft bound): 64.0 of 64 MiB, 40 of 512 files used. Full: turns are refused until the owner runs fresh.",
		},
		{
			name: "session-workspace-unmounted",
			status: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio", Container: rtsandbox.ContainerMissing,
				Workspace: &rtsandbox.WorkspaceUsage{Mode: "hard"}},
			want: rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: missing." +
				"\nWorkspace (hard bound): not mounted; measured at the channel's next turn.",
		},
		{
			name: "no-mode-adds-nothing",
			err:  errors.New("broken"),
			want: rtsandbox.EnabledText,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chans := newMemChannels(guests)
			rt := &fakeruntime.Runtime{Stat: tt.status, StatErr: tt.err}
			h := newHarness(t, chans, func(o *Options) { o.Runtime = rt })
			text, err := h.r.Command(context.Background(), ownerCmd(guests, ActionStatus))
			if err != nil || text != tt.want {
				t.Errorf("status = %q, %v; want %q", text, err, tt.want)
			}
			if tt.err != nil && strings.Contains(text, tt.err.Error()) {
				t.Errorf("status text leaks the error detail: %q", text)
			}
		})
	}
}

// Status keeps the usage line last, after the runtime's line.
func TestStatusLineThenUsage(t *testing.T) {
	chans := newMemChannels(guests)
	rt := &fakeruntime.Runtime{Stat: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSealed, Profile: "default"}}
	h := newHarness(t, chans, func(o *Options) {
		o.Runtime = rt
		o.Usage = func(context.Context, rtsandbox.ChannelKey) string { return "usage" }
	})
	text, _ := h.r.Command(context.Background(), ownerCmd(guests, ActionStatus))
	if want := rtsandbox.EnabledText + "\nMode: sealed (a fresh container every turn). Profile: default.\nusage"; text != want {
		t.Errorf("status = %q; want %q", text, want)
	}
}

func TestOffRemovesRuntimeState(t *testing.T) {
	tests := []struct {
		name      string
		removeErr error
		wantText  string
		wantErr   bool
	}{
		{"removed", nil, rtsandbox.DisabledText, false},
		{"remove-fails-says-so", errors.New("docker: timeout"), rtsandbox.CommandFailedText, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chans := newMemChannels(guests)
			w := &removeWatch{chans: chans}
			rt := &fakeruntime.Runtime{RemoveErr: tt.removeErr, OnRemove: w.onRemove}
			h := newHarness(t, chans, func(o *Options) { o.Runtime = rt })
			text, err := h.r.Command(context.Background(), ownerCmd(guests, ActionOff))
			if text != tt.wantText || (err != nil) != tt.wantErr {
				t.Errorf("off = %q, %v; want %q (error %v)", text, err, tt.wantText, tt.wantErr)
			}
			removed, enabled := rt.Removed(), w.enabledAtRemove()
			// Removed once, after the channel was switched off.
			if diff := cmp.Diff([]rtsandbox.ChannelKey{guests}, removed); diff != "" {
				t.Errorf("Remove calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]bool{false}, enabled); diff != "" {
				t.Errorf("channel enabled at Remove (-want +got):\n%s", diff)
			}
			if chans.Enabled(guests) {
				t.Error("channel still enabled after off")
			}
		})
	}
}

// On, status and a failed off never remove anything; a store that cannot
// switch the channel off leaves its container alone.
func TestOnlyOffRemoves(t *testing.T) {
	chans := newMemChannels(guests)
	rt := &fakeruntime.Runtime{Stat: rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSealed, Profile: "default"}}
	h := newHarness(t, chans, func(o *Options) { o.Runtime = rt })
	ctx := context.Background()
	for _, a := range []string{ActionOn, ActionStatus, ActionFresh, ActionStop} {
		if _, err := h.r.Command(ctx, ownerCmd(guests, a)); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	chans.failing = true
	if text, _ := h.r.Command(ctx, ownerCmd(guests, ActionOff)); text != rtsandbox.CommandFailedText {
		t.Errorf("off with a failing store = %q", text)
	}
	if removed := rt.Removed(); len(removed) != 0 {
		t.Errorf("Remove called for %q; want never", removed)
	}
}

// A runtime that names no mode and keeps nothing keeps the old answers.
func TestPlainRuntimeKeepsOldAnswers(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	ctx := context.Background()
	if text, _ := h.r.Command(ctx, ownerCmd(guests, ActionStatus)); text != rtsandbox.EnabledText {
		t.Errorf("status = %q; want %q", text, rtsandbox.EnabledText)
	}
	if text, _ := h.r.Command(ctx, ownerCmd(guests, ActionOff)); text != rtsandbox.DisabledText {
		t.Errorf("off = %q; want %q", text, rtsandbox.DisabledText)
	}
}

// TestEnabledTextByMode (issue 26 item 4): on and status answer with the
// enabled text of the channel's mode: a session channel is never told
// to "start a sealed turn"; a runtime that names no mode gets the sealed
// text, as before modes. off says the channel's messages are no longer
// answered (there is no other host routing to fall back to).
func TestEnabledTextByMode(t *testing.T) {
	for _, tt := range []struct {
		mode string
		want string
	}{
		{rtsandbox.ModeSession, rtsandbox.EnabledSessionText},
		{rtsandbox.ModeSealed, rtsandbox.EnabledText},
		{"", rtsandbox.EnabledText},
	} {
		for _, action := range []string{ActionOn, ActionStatus} {
			chans := newMemChannels(guests)
			rt := &fakeruntime.Runtime{Stat: rtsandbox.RuntimeStatus{Mode: tt.mode, Profile: "p"}}
			h := newHarness(t, chans, func(o *Options) { o.Runtime = rt })
			text, err := h.r.Command(context.Background(), ownerCmd(guests, action))
			if first, _, _ := strings.Cut(text, "\n"); err != nil || first != tt.want {
				t.Errorf("%s in mode %q = %q, %v; want it to begin with %q", action, tt.mode, text, err, tt.want)
			}
		}
	}
	h := newHarness(t, newMemChannels(guests))
	if text, _ := h.r.Command(context.Background(), ownerCmd(guests, ActionOff)); text != rtsandbox.DisabledText || strings.Contains(text, "host routing") {
		t.Errorf("off = %q; want %q", text, rtsandbox.DisabledText)
	}
}

// TestOwnerTextsByMode holds every owner command's answer against the
// channel's mode: each names only its own mode (a session channel was
// told "…to start a sealed turn"), and the answers that do not depend on
// the mode are the same in both.
func TestOwnerTextsByMode(t *testing.T) {
	type answers map[string]string
	want := map[string]answers{
		rtsandbox.ModeSealed: {
			ActionOn:     rtsandbox.EnabledText,
			ActionStatus: rtsandbox.EnabledText + "\n" + fmt.Sprintf(rtsandbox.SealedStatusFormat, "p"),
			ActionFresh:  rtsandbox.FreshText,
			ActionStop:   rtsandbox.IdleText,
			ActionOff:    rtsandbox.DisabledText,
		},
		rtsandbox.ModeSession: {
			ActionOn:     rtsandbox.EnabledSessionText,
			ActionStatus: rtsandbox.EnabledSessionText + "\n" + fmt.Sprintf(rtsandbox.SessionStatusFormat, "p", rtsandbox.ContainerRunning),
			ActionFresh:  rtsandbox.FreshText,
			ActionStop:   rtsandbox.IdleText,
			ActionOff:    rtsandbox.DisabledText,
		},
	}
	other := map[string]string{rtsandbox.ModeSealed: "session", rtsandbox.ModeSession: "sealed"}
	for mode, w := range want {
		t.Run(mode, func(t *testing.T) {
			rt := &fakeruntime.Runtime{Stat: rtsandbox.RuntimeStatus{Mode: mode, Profile: "p", Container: rtsandbox.ContainerRunning}}
			h := newHarness(t, newMemChannels(guests), func(o *Options) { o.Runtime = rt })
			got := answers{}
			for _, action := range []string{ActionOn, ActionStatus, ActionFresh, ActionStop, ActionOff} {
				text, err := h.r.Command(context.Background(), ownerCmd(guests, action))
				if err != nil {
					t.Fatalf("%s: %v", action, err)
				}
				got[action] = text
				if strings.Contains(strings.ToLower(text), other[mode]) {
					t.Errorf("%s in a %s channel = %q: names the %s mode", action, mode, text, other[mode])
				}
			}
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("owner answers in mode %s (-want +got):\n%s", mode, diff)
			}
		})
	}
}
