package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
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
		if c.run != nil {
			tests = append(tests, struct {
				name string
				args []string
				want string
			}{c.name + "-each", []string{c.name, "-h"}, ""})
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

func TestVersionLine(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no-build-info", nil, false, "rtsandbox devel (revision devel, " + runtime.Version() + ")"},
		{"devel-no-vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true,
			"rtsandbox devel (revision devel, go1.26.8)"},
		{"clean-tagged", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "false"},
		}}, true, "rtsandbox v1.2.3 (revision " + rev + ", committed 2026-01-02T03:04:05Z, go1.26.8)"},
		{"dirty", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20260102030405-0123456789ab+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"},
		}}, true, "rtsandbox v0.0.0-20260102030405-0123456789ab+dirty (revision " + rev + ", modified, go1.26.8)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionLine(tt.info, tt.ok); got != tt.want {
				t.Errorf("versionLine = %q; want %q", got, tt.want)
			}
		})
	}
}

// `version` and `--version` print the same line, from this binary's build
// information.
func TestVersionCommand(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	want := versionLine(info, ok) + "\n"
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
		{"demo-bad-user", []string{"demo", "--user", "0:0"}, `rtsandbox demo: --user: "0:0" is not a non-root "UID:GID"`},
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
				code, stdout, stderr := runCLI(t, map[string]string{logLevelEnv: bad}, args...)
				want := "rtsandbox " + name + ": LOG_LEVEL=\"" + bad + "\": want debug, info, warn or error\n"
				if code != exitUsage || stdout != "" || stderr != want {
					t.Errorf("LOG_LEVEL=%s rtsandbox %s = %d, %q, %q; want 2 and %q", bad, name, code, stdout, stderr, want)
				}
			})
		}
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		name, format, level string
		def                 slog.Level
		want                []string // lines written by debug, info, warn and error records
	}{
		{"json-default-info", logJSON, "", slog.LevelInfo, []string{
			`{"level":"INFO","msg":"i","k":"v"}`, `{"level":"WARN","msg":"w","k":"v"}`, `{"level":"ERROR","msg":"e","k":"v"}`,
		}},
		{"text-default-warn", logText, "", slog.LevelWarn, []string{`level=WARN msg=w k=v`, `level=ERROR msg=e k=v`}},
		{"text-debug", logText, "DEBUG", slog.LevelWarn, []string{
			`level=DEBUG msg=d k=v`, `level=INFO msg=i k=v`, `level=WARN msg=w k=v`, `level=ERROR msg=e k=v`,
		}},
		{"json-error", logJSON, " error ", slog.LevelInfo, []string{`{"level":"ERROR","msg":"e","k":"v"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := newLogger(&buf, tt.format, func(k string) string {
				if k == logLevelEnv {
					return tt.level
				}
				return ""
			}, tt.def)
			if err != nil {
				t.Fatal(err)
			}
			log.Debug("d", "k", "v")
			log.Info("i", "k", "v")
			log.Warn("w", "k", "v")
			log.Error("e", "k", "v")
			if diff := cmp.Diff(tt.want, withoutTime(buf.String())); diff != "" {
				t.Errorf("log lines (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := newLogger(&bytes.Buffer{}, "logfmt", func(string) string { return "" }, slog.LevelInfo); err == nil {
		t.Errorf("newLogger(logfmt) = nil error; want one naming --log-format")
	}
}

var timeRE = regexp.MustCompile(`^time=\S+ |"time":"[^"]*",`)

// withoutTime splits log output into lines without their time.
func withoutTime(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, timeRE.ReplaceAllString(l, ""))
		}
	}
	return out
}

// A stopWriter stops its command once, at the first failed write.
func TestStopWriter(t *testing.T) {
	stops := 0
	w := &stopWriter{w: &failAfter{n: 1}, stop: func() { stops++ }}
	if _, err := w.Write([]byte("first\n")); err != nil {
		t.Fatalf("first write = %v", err)
	}
	for range 3 {
		if _, err := w.Write([]byte("more\n")); !errors.Is(err, syscall.EPIPE) {
			t.Errorf("write after the reader went = %v; want EPIPE", err)
		}
	}
	if stops != 1 || !errors.Is(w.failed(), syscall.EPIPE) {
		t.Errorf("stop called %d times, failed() = %v; want 1 and EPIPE", stops, w.failed())
	}
}

// failAfter accepts n writes, then fails like a pipe whose reader exited.
type failAfter struct {
	n      int
	buf    bytes.Buffer
	writes int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.writes >= f.n {
		return 0, syscall.EPIPE
	}
	f.writes++
	return f.buf.Write(p)
}

// The JSON audit records of `broker` are real JSON objects by default;
// --log-format text switches them (checked on the in-process command).
func TestBrokerLogFormatFlag(t *testing.T) {
	for _, tt := range []struct{ format, want string }{{"", logJSON}, {"text", logText}} {
		args := []string{"--config", "c", "--socket", "s", "--channel", "http:x", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p"}
		if tt.format != "" {
			args = append(args, "--log-format", tt.format)
		}
		f, err := parseBrokerFlags(args, &bytes.Buffer{})
		if err != nil || f.logFormat != tt.want {
			t.Errorf("parseBrokerFlags(--log-format %q) = %q, %v; want %q", tt.format, f.logFormat, err, tt.want)
		}
	}
	var rec map[string]any
	var buf bytes.Buffer
	log, _ := newLogger(&buf, logJSON, func(string) string { return "" }, slog.LevelInfo)
	log.Info("broker call", "route", rtsandbox.RouteModel)
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["route"] != rtsandbox.RouteModel {
		t.Errorf("JSON record %q: %v", buf.String(), err)
	}
}
