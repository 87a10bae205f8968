// The command-line conventions shared by the subcommands: version, log
// format and level, and output that stops a command when its reader goes.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// versionHelp is `rtsandbox version -h`.
const versionHelp = `usage: rtsandbox version

Prints the module version, the VCS revision the binary was built from (and
"modified" when the tree had uncommitted changes), the commit time and the
Go version, from the binary's build information. "devel" stands for a
version or revision the build did not record.
`

// runVersion is `rtsandbox version` and `rtsandbox --version`.
func runVersion(_ context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("rtsandbox version", stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), versionHelp) }
	if code, ok := parseOpsFlags(fs, args, stderr); !ok {
		return code
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info, ok))
	return exitOK
}

// devel names a version or revision the build did not record.
const devel = "devel"

// versionLine is "rtsandbox VERSION (revision REV[, modified][, committed
// TIME], GOVERSION)".
func versionLine(info *debug.BuildInfo, ok bool) string {
	version, goVersion := devel, runtime.Version()
	settings := map[string]string{}
	if ok && info != nil {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	parts := []string{"revision " + devel}
	if rev := settings["vcs.revision"]; rev != "" {
		parts[0] = "revision " + rev
	}
	if settings["vcs.modified"] == "true" {
		parts = append(parts, "modified")
	}
	if t := settings["vcs.time"]; t != "" {
		parts = append(parts, "committed "+t)
	}
	parts = append(parts, goVersion)
	return fmt.Sprintf("rtsandbox %s (%s)", version, strings.Join(parts, ", "))
}

// Log formats of --log-format.
const (
	logJSON = "json"
	logText = "text"
)

// logLevelEnv names the log level variable.
const logLevelEnv = "LOG_LEVEL"

// logFormatFlag registers --log-format with def as its default.
func logFormatFlag(fs *flag.FlagSet, def string) *string {
	return fs.String("log-format", def, "log format: json (one JSON object a line) or text (key=value)")
}

// newLogger returns the command's logger on w: the format from
// --log-format, the level from LOG_LEVEL (debug, info, warn or error, in
// any case; def when unset). An error names the flag or the variable.
func newLogger(w io.Writer, format string, getenv env, def slog.Level) (*slog.Logger, error) {
	level, err := logLevel(getenv(logLevelEnv), def)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case logJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case logText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", format)
}

// logLevel parses a LOG_LEVEL value; slog's own parser would also take
// "warn+2" and the like, which an operator most likely did not mean.
func logLevel(s string, def slog.Level) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return def, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%s=%q: want debug, info, warn or error", logLevelEnv, s)
}

// stopWriter passes writes to w until one fails (a closed pipe: `rtsandbox
// demo | head -1`), then calls stop once and fails every later write, so
// the command ends its turns and cleans up instead of writing into the
// void. It is safe for concurrent use.
type stopWriter struct {
	w    io.Writer
	stop func()

	mu  sync.Mutex
	err error // the first write error
}

func (s *stopWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	if err != nil {
		s.err = fmt.Errorf("stdout: %w", err)
		s.stop()
		return n, s.err
	}
	return n, nil
}

// failed returns the first write error, or nil.
func (s *stopWriter) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
