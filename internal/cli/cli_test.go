package cli

import (
	"bytes"
	"errors"
	"log/slog"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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
			if got := VersionLine(tt.info, tt.ok); got != tt.want {
				t.Errorf("VersionLine = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		name, format, level string
		def                 slog.Level
		want                []string // lines written by debug, info, warn and error records
	}{
		{"json-default-info", LogJSON, "", slog.LevelInfo, []string{
			`{"level":"INFO","msg":"i","k":"v"}`, `{"level":"WARN","msg":"w","k":"v"}`, `{"level":"ERROR","msg":"e","k":"v"}`,
		}},
		{"text-default-warn", LogText, "", slog.LevelWarn, []string{`level=WARN msg=w k=v`, `level=ERROR msg=e k=v`}},
		{"text-debug", LogText, "DEBUG", slog.LevelWarn, []string{
			`level=DEBUG msg=d k=v`, `level=INFO msg=i k=v`, `level=WARN msg=w k=v`, `level=ERROR msg=e k=v`,
		}},
		{"json-error", LogJSON, " error ", slog.LevelInfo, []string{`{"level":"ERROR","msg":"e","k":"v"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := NewLogger(&buf, tt.format, func(k string) string {
				if k == LogLevelEnv {
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
	if _, err := NewLogger(&bytes.Buffer{}, "logfmt", func(string) string { return "" }, slog.LevelInfo); err == nil {
		t.Errorf("NewLogger(logfmt) = nil error; want one naming --log-format")
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

// A StopWriter stops its command once, at the first failed write.
func TestStopWriter(t *testing.T) {
	stops := 0
	w := &StopWriter{w: &failAfter{n: 1}, stop: func() { stops++ }}
	if _, err := w.Write([]byte("first\n")); err != nil {
		t.Fatalf("first write = %v", err)
	}
	for range 3 {
		if _, err := w.Write([]byte("more\n")); !errors.Is(err, syscall.EPIPE) {
			t.Errorf("write after the reader went = %v; want EPIPE", err)
		}
	}
	if stops != 1 || !errors.Is(w.Failed(), syscall.EPIPE) {
		t.Errorf("stop called %d times, failed() = %v; want 1 and EPIPE", stops, w.Failed())
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

func TestActionArgs(t *testing.T) {
	tests := []struct {
		pos              []string
		action, arg, err string
	}{
		{[]string{"list"}, "list", "", ""},
		{[]string{"on", "http:lobby"}, "on", "http:lobby", ""},
		{nil, "", "", "an action is required: list, on, off or status"},
		{[]string{"on"}, "", "", "on: a channel KEY is required"},
		{[]string{"drop", "x"}, "", "", `unknown action "drop": want list, on, off or status`},
		{[]string{"list", "x"}, "", "", `unexpected argument "x"`},
		{[]string{"off", "a:1", "b:2"}, "", "", `unexpected argument "b:2"`},
	}
	for _, tt := range tests {
		action, arg, err := ActionArgs(tt.pos, []string{"list"}, []string{"on", "off", "status"}, "a channel KEY")
		got := ""
		if err != nil {
			got = err.Error()
		}
		if action != tt.action || arg != tt.arg || got != tt.err {
			t.Errorf("ActionArgs(%q) = %q, %q, %q; want %q, %q, %q", tt.pos, action, arg, got, tt.action, tt.arg, tt.err)
		}
	}
}
