package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/channels"
)

// channelsConfig writes a config whose state_dir is a fresh private dir,
// with extra YAML appended.
func channelsConfig(t *testing.T, extra string) (path, state string) {
	t.Helper()
	state = filepath.Join(t.TempDir(), "state")
	path = opsConfig(t, state, "")
	if extra != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(extra); err != nil {
			t.Fatal(err)
		}
	}
	return path, state
}

func TestChannelsCommand(t *testing.T) {
	cfg, _ := channelsConfig(t, "initial_channels: [\"discord:1\"]\n")
	steps := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"list-seeds-initial", []string{"list", "--config", cfg}, 0, "discord:1\n"},
		{"on", []string{"on", "http:lobby", "--config", cfg}, 0, "http:lobby: sandbox routing enabled\n"},
		{"on-again-is-no-op", []string{"--config", cfg, "on", "http:lobby"}, 0, "http:lobby: sandbox routing enabled\n"},
		{"status-on", []string{"status", "http:lobby", "--config", cfg}, 0, "http:lobby: sandbox routing enabled\n"},
		{"list-both", []string{"list", "--config", cfg}, 0, "discord:1\nhttp:lobby\n"},
		// off also removes the channel's session container (none here).
		{"off", []string{"off", "discord:1", "--config", cfg}, 0, "discord:1: sandbox routing disabled\ndiscord:1: session container removed\n"},
		{"status-off", []string{"status", "discord:1", "--config", cfg}, 0, "discord:1: sandbox routing disabled\n"},
		{"list-after-off", []string{"list", "--config", cfg}, 0, "http:lobby\n"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			code, out, errOut := runOps(t, append([]string{"channels"}, s.args...)...)
			if code != s.code || out != s.out {
				t.Errorf("channels %v = %d %q (stderr %q); want %d %q", s.args, code, out, errOut, s.code, s.out)
			}
		})
	}
}

func TestChannelsCommandUsage(t *testing.T) {
	cfg, _ := channelsConfig(t, "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no-action", []string{"--config", cfg}, channelsUsage},
		{"no-config", []string{"list"}, channelsUsage},
		{"unknown-action", []string{"drop", "http:x", "--config", cfg}, channelsUsage},
		{"missing-key", []string{"on", "--config", cfg}, channelsUsage},
		{"extra-arg", []string{"on", "http:x", "http:y", "--config", cfg}, channelsUsage},
		{"invalid-key", []string{"on", "HTTP:x", "--config", cfg}, `invalid channel key "HTTP:x"`},
		{"no-colon", []string{"off", "lobby", "--config", cfg}, `invalid channel key "lobby"`},
		{"key-over-256-bytes", []string{"on", "http:" + strings.Repeat("c", rtsandbox.MaxChannelKey-4), "--config", cfg}, "of at most 256 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runOps(t, append([]string{"channels"}, tt.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("channels %v = %d %q; want %d and %q", tt.args, code, errOut, exitUsage, tt.want)
			}
		})
	}
}

// TestChannelsCommandRefusesWhileServed: a server holds the store's lock;
// the offline command must not change the set behind its back, but the
// read-only views answer from the stored file.
func TestChannelsCommandRefusesWhileServed(t *testing.T) {
	cfg, state := channelsConfig(t, "")
	held, err := channels.Open(state, []rtsandbox.ChannelKey{"http:lobby"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list"}, "http:lobby\n"},
		{[]string{"status", "http:lobby"}, "http:lobby: sandbox routing enabled\n"},
		{[]string{"status", "http:other"}, "http:other: sandbox routing disabled\n"},
	} {
		code, out, errOut := runOps(t, append(append([]string{"channels"}, tc.args...), "--config", cfg)...)
		if code != exitOK || out != tc.want {
			t.Errorf("channels %v while served = %d %q %q; want 0 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	for _, args := range [][]string{{"on", "http:x"}, {"off", "http:lobby"}} {
		code, out, errOut := runOps(t, append(append([]string{"channels"}, args...), "--config", cfg)...)
		if code != exitFail || out != "" || !strings.Contains(errOut, "is in use by a running rtsandbox serve") {
			t.Errorf("channels %v while locked = %d %q %q; want 1 and the lock message", args, code, out, errOut)
		}
	}
	if got := held.List(); len(got) != 1 || got[0] != "http:lobby" {
		t.Errorf("store changed while locked: %v", got)
	}
	held.Close()
	if code, out, _ := runOps(t, "channels", "list", "--config", cfg); code != 0 || out != "http:lobby\n" {
		t.Errorf("channels list after the server left = %d %q; want 0 and http:lobby", code, out)
	}
}
