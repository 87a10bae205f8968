package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/wire"
)

// runCLI runs the rtsandbox command line with env vars and returns the exit
// code, stdout and stderr.
func runCLI(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return vars[k] }, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// Help goes to stdout and exits 0, for the command list and for every
// subcommand, however it is asked for.
func TestHelpGoesToStdout(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // on stdout
	}{
		{"help", []string{"help"}, "usage: rtsandbox <command>"},
		{"help-names-both-modes", []string{"help"}, "with sealed or session turns"}, // issue 26 item 4
		{"dash-h", []string{"-h"}, "usage: rtsandbox <command>"},
		{"dash-dash-help", []string{"--help"}, "usage: rtsandbox <command>"},
		{"help-serve", []string{"help", "serve"}, "-drain"},
		{"serve-h", []string{"serve", "-h"}, "-log-format"},
		{"serve-help-after-flags", []string{"serve", "--drain", "1s", "--help"}, "-reseed"},
		{"help-image", []string{"help", "image"}, "usage: rtsandbox image build"},
		{"help-image-build", []string{"help", "image", "build"}, "-tag"},
		{"channels-h", []string{"channels", "list", "-h"}, "usage: rtsandbox channels"},
		{"fetch-h", []string{"fetch", "-h"}, "usage: rtsandbox fetch"},
		{"version-h", []string{"version", "-h"}, "usage: rtsandbox version"},
	}
	for _, c := range commands() {
		if c.Run != nil {
			tests = append(tests, struct {
				name string
				args []string
				want string
			}{c.Name + "-each", []string{c.Name, "-h"}, ""})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != exitOK || stderr != "" || stdout == "" || !strings.Contains(stdout, tt.want) {
				t.Errorf("rtsandbox %q = %d, stdout %q, stderr %q; want 0 and help on stdout containing %q",
					tt.args, code, stdout, stderr, tt.want)
			}
		})
	}
}

// Misuse goes to stderr and exits 2, with nothing on stdout.
func TestMisuseGoesToStderr(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"no-command", nil, "usage: rtsandbox <command>"},
		{"unknown-command", []string{"nope"}, `unknown command "nope"`},
		{"help-unknown", []string{"help", "nope"}, `unknown command "nope"`},
		{"flag-error-before-help", []string{"serve", "--bogus", "-h"}, "-bogus"},
		{"image-unknown", []string{"image", "push"}, `unknown subcommand "push"`},
		{"image-none", []string{"image"}, "a subcommand is required"},
		{"version-extra", []string{"version", "now"}, `unexpected argument "now"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, tt.want) {
				t.Errorf("rtsandbox %q = %d, stdout %q, stderr %q; want 2 and %q on stderr", tt.args, code, stdout, stderr, tt.want)
			}
		})
	}
}

// `version` and `--version` print the same line, from this binary's build
// information.
func TestVersionCommand(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	want := cli.VersionLine(info, ok) + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := runCLI(t, nil, args...)
		if code != exitOK || stdout != want || stderr != "" {
			t.Errorf("rtsandbox %q = %d, %q, %q; want 0 and %q", args, code, stdout, stderr, want)
		}
	}
}

// Every flag error names the one flag (or argument) at fault and no other.
func TestFlagErrorsNameOneFlag(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "absent.yaml") // flag checks come before the config is read
	turn := []string{"--config", cfg, "--channel", "http:lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p", "--text", "hi"}
	broker := []string{"--config", cfg, "--socket", "s.sock", "--channel", "http:lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p"}
	tests := []struct {
		name string
		args []string
		want string // the whole first line of stderr
	}{
		{"serve-no-config", []string{"serve"}, "rtsandbox serve: --config is required"},
		{"serve-only-drain-wrong", []string{"serve", "--config", cfg, "--drain", "0s"}, "rtsandbox serve: --drain must be positive (got 0s)"},
		{"serve-extra-arg", []string{"serve", "extra"}, `rtsandbox serve: unexpected argument "extra"`},
		{"serve-bad-format", []string{"serve", "--config", cfg, "--log-format", "xml"}, `rtsandbox serve: --log-format "xml": want json or text`},
		{"chat-no-config", []string{"chat"}, "rtsandbox chat: --config is required"},
		{"demo-bad-user", []string{"demo", "--user", "0:0"}, `rtsandbox demo: --user: "0:0" is not a non-root "UID:GID" (decimal ids from 1 to 2147483647)`},
		{"demo-bad-format", []string{"demo", "--log-format", "yaml"}, `rtsandbox demo: --log-format "yaml": want json or text`},
		{"channels-no-config", []string{"channels", "list"}, "rtsandbox channels: --config is required"},
		{"channels-no-action", []string{"channels", "--config", cfg}, "rtsandbox channels: an action is required: list, on, off or status"},
		{"channels-no-key", []string{"channels", "on", "--config", cfg}, "rtsandbox channels: on: a channel KEY is required"},
		{"channels-extra", []string{"channels", "list", "x", "--config", cfg}, `rtsandbox channels: unexpected argument "x"`},
		{"fetch-no-url", []string{"fetch"}, "rtsandbox fetch: a URL is required"},
		{"fetch-two-urls", []string{"fetch", "http://a.test/", "http://b.test/"}, `rtsandbox fetch: unexpected argument "http://b.test/": fetch takes one URL`},
		{"fetch-max-bytes", []string{"fetch", "--max-bytes", "0", "http://a.test/"}, "rtsandbox fetch: --max-bytes 0: out of range 1…33554432"},
		{"fetch-timeout", []string{"fetch", "--timeout", "3m", "http://a.test/"}, "rtsandbox fetch: --timeout 3m0s: out of range 1ms…2m0s"},
		{"reap-no-config", []string{"reap"}, "rtsandbox reap: --config is required: its state_dir identifies this installation"},
		{"backup-no-config", []string{"backup", "dir"}, "rtsandbox backup: --config is required"},
		{"backup-no-dir", []string{"backup", "--config", cfg}, "rtsandbox backup: exactly one backup directory DIR is required"},
		{"restore-two-dirs", []string{"restore", "--config", cfg, "a", "b"}, "rtsandbox restore: exactly one backup directory DIR is required"},
		{"restore-bad-flag", []string{"restore", "--forced", "dir"}, "flag provided but not defined: -forced"},
	}
	for i := 0; i+1 < len(turn); i += 2 { // each required flag of turn left out in turn
		args := append(append([]string{"turn"}, turn[:i]...), turn[i+2:]...)
		tests = append(tests, struct {
			name string
			args []string
			want string
		}{"turn-no" + turn[i], args, "rtsandbox turn: " + turn[i] + " is required"})
	}
	for i := 0; i+1 < len(broker); i += 2 {
		args := append(append([]string{"broker"}, broker[:i]...), broker[i+2:]...)
		tests = append(tests, struct {
			name string
			args []string
			want string
		}{"broker-no" + broker[i], args, "rtsandbox broker: " + broker[i] + " is required"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			first, _, _ := strings.Cut(stderr, "\n")
			if code != exitUsage || stdout != "" || first != tt.want {
				t.Errorf("rtsandbox %q = %d, stdout %q, stderr %q; want 2 and first line %q", tt.args, code, stdout, stderr, tt.want)
			}
		})
	}
}

// A LOG_LEVEL outside debug, info, warn, error is a usage error naming the
// variable, for every command that logs; before the config is read.
func TestLogLevelErrorNamesTheVariable(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "absent.yaml")
	commands := map[string][]string{
		"serve":  {"serve", "--config", cfg},
		"chat":   {"chat", "--config", cfg},
		"demo":   {"demo"},
		"turn":   {"turn", "--config", cfg, "--channel", "http:lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p", "--text", "hi"},
		"broker": {"broker", "--config", cfg, "--socket", "s.sock", "--channel", "http:lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p"},
	}
	for name, args := range commands {
		for _, bad := range []string{"verbose", "warn+2", "WARNING"} {
			t.Run(name+"-"+bad, func(t *testing.T) {
				code, stdout, stderr := runCLI(t, map[string]string{cli.LogLevelEnv: bad}, args...)
				want := "rtsandbox " + name + ": LOG_LEVEL=\"" + bad + "\": want debug, info, warn or error\n"
				if code != exitUsage || stdout != "" || stderr != want {
					t.Errorf("LOG_LEVEL=%s rtsandbox %s = %d, %q, %q; want 2 and %q", bad, name, code, stdout, stderr, want)
				}
			})
		}
	}
}

// The JSON audit records of `broker` are real JSON objects by default;
// --log-format text switches them (checked on the in-process command).
func TestBrokerLogFormatFlag(t *testing.T) {
	for _, tt := range []struct{ format, want string }{{"", cli.LogJSON}, {"text", cli.LogText}} {
		args := []string{"--config", "c", "--socket", "s", "--channel", "http:x", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p"}
		if tt.format != "" {
			args = append(args, "--log-format", tt.format)
		}
		_, _, format, err := parseBrokerFlags(args, &bytes.Buffer{})
		if err != nil || format != tt.want {
			t.Errorf("parseBrokerFlags(--log-format %q) = %q, %v; want %q", tt.format, format, err, tt.want)
		}
	}
	var rec map[string]any
	var buf bytes.Buffer
	log, _ := cli.NewLogger(&buf, cli.LogJSON, func(string) string { return "" }, slog.LevelInfo)
	log.Info("broker call", "route", wire.RouteModel)
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["route"] != wire.RouteModel {
		t.Errorf("JSON record %q: %v", buf.String(), err)
	}
}
