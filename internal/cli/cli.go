// Package cli holds the command-line conventions every rtsandbox
// subcommand keeps, so cmd/ is only flags, config → options and wiring:
//
//   - Help goes to stdout and exits 0: `NAME help`, `-h`, `--help`,
//     `NAME help CMD` and `NAME CMD -h`. Misuse goes to stderr and exits 2;
//     a flag error names the one flag at fault.
//   - `NAME --version` runs the version command.
//   - Commands that log take --log-format json|text; LOG_LEVEL is debug,
//     info, warn or error, anything else exits 2 naming it.
//   - A StopWriter stops a command whose output reader went away, so the
//     command cleans up instead of writing into the void.
//   - A second SIGINT or SIGTERM after the first (SecondSignal) cuts a
//     drain short.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// devel names a version or revision the build did not record.
const devel = "devel"

// VersionLine is "rtsandbox VERSION (revision REV[, modified][, committed
// TIME], GOVERSION)".
func VersionLine(info *debug.BuildInfo, ok bool) string {
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
	LogJSON = "json"
	LogText = "text"
)

// LogLevelEnv names the log level variable.
const LogLevelEnv = "LOG_LEVEL"

// LogFormatFlag registers --log-format with def as its default.
func LogFormatFlag(fs *flag.FlagSet, def string) *string {
	return fs.String("log-format", def, "log format: json (one JSON object a line) or text (key=value)")
}

// NewLogger returns the command's logger on w: the format from
// --log-format, the level from LOG_LEVEL (debug, info, warn or error, in
// any case; def when unset). An error names the flag or the variable.
func NewLogger(w io.Writer, format string, getenv Env, def slog.Level) (*slog.Logger, error) {
	level, err := LogLevel(getenv(LogLevelEnv), def)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case LogJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case LogText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", format)
}

// LogLevel parses a LOG_LEVEL value; slog's own parser would also take
// "warn+2" and the like, which an operator most likely did not mean.
func LogLevel(s string, def slog.Level) (slog.Level, error) {
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
	return 0, fmt.Errorf("%s=%q: want debug, info, warn or error", LogLevelEnv, s)
}

// StopWriter passes writes to w until one fails (a closed pipe: `rtsandbox
// demo | head -1`), then calls stop once and fails every later write, so
// the command ends its turns and cleans up instead of writing into the
// void. It is safe for concurrent use.
type StopWriter struct {
	w    io.Writer
	stop func()

	mu  sync.Mutex
	err error // the first write error
}

func (s *StopWriter) Write(p []byte) (int, error) {
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

// Failed returns the first write error, or nil.
func (s *StopWriter) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// NewFlagSet returns a flag set that reports errors instead of exiting.
func NewFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// MissingFlag returns an error naming the first of names (flags of fs, in
// the order given) whose value is empty, or nil.
func MissingFlag(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && f.Value.String() == "" {
			return fmt.Errorf("--%s is required", n)
		}
	}
	return nil
}

// ErrUnexpectedArg refuses a positional argument a command does not take.
var ErrUnexpectedArg = errors.New("unexpected argument")

// NoArgs refuses positional arguments, naming the first.
func NoArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w %q", ErrUnexpectedArg, fs.Arg(0))
	}
	return nil
}

// PositiveFlag returns an error naming the duration flag of fs called name
// when its value is not positive, or nil.
func PositiveFlag(fs *flag.FlagSet, name string) error {
	f := fs.Lookup(name)
	if f == nil {
		return nil
	}
	if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d <= 0 {
		return fmt.Errorf("--%s must be positive (got %s)", name, d)
	}
	return nil
}

// FirstError returns the first non-nil error: flag checks in flag order,
// so an error names the one flag at fault.
func FirstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ParseFlags parses flags that take no positional arguments. ok is
// false when the command should return code at once: help (the flag set
// printed it) or misuse (the flag set, or this, named the flag or
// argument at fault).
func ParseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	if err == nil {
		err = NoArgs(fs)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		}
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK, false
	case err != nil:
		return ExitUsage, false
	}
	return ExitOK, true
}

// ParseInterspersed parses flags placed before, between or after the
// positional arguments, which it returns in order. "--" ends the flags.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// SecondSignal returns a channel closed by the first SIGINT or SIGTERM
// that arrives after ctx ended (the first one ends ctx and starts the
// drain), and a function that stops listening.
func SecondSignal(ctx context.Context) (force <-chan struct{}, stop func()) {
	forced, quit := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-quit:
			return
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		select {
		case <-sig:
			close(forced)
		case <-quit:
		}
	}()
	return forced, func() { close(quit); <-done }
}

// Exit codes shared by the subcommands.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// Env is the process environment, read on every use so that rotated
// secrets take effect without a restart.
type Env = func(string) string

// Func is one subcommand: a function of (ctx, args, env, stdio), so tests
// drive it exactly as an operator would. It returns the exit code.
type Func func(ctx context.Context, args []string, getenv Env, stdin io.Reader, stdout, stderr io.Writer) int

// Command is one subcommand; Run nil lists it without running it (help).
type Command struct {
	Name, Summary string
	Run           Func
}

// App is a program of subcommands. Besides Commands it has `version`
// (also `--version`) and `help`.
type App struct {
	Name     string
	Commands []Command
}

// builtins are the subcommands every App has, listed after its own.
func (a App) builtins() []Command {
	return []Command{
		{Name: "version", Summary: "print the version, the VCS revision and the Go version", Run: a.version},
		{Name: "help", Summary: "show the commands, or one command's flags (help CMD)"},
	}
}

// version is `NAME version` and `NAME --version`: the module version, the
// VCS revision and whether the tree was modified, from the binary's build
// information ("devel" when there is none).
func (a App) version(_ context.Context, args []string, _ Env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := NewFlagSet(a.Name+" version", stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s version\n\n%s", a.Name, versionHelp)
	}
	if code, ok := ParseFlags(fs, args, stderr); !ok {
		return code
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, VersionLine(info, ok))
	return ExitOK
}

// versionHelp is the body of `NAME version -h`.
const versionHelp = `Prints the module version, the VCS revision the binary was built from (and
"modified" when the tree had uncommitted changes), the commit time and the
Go version, from the binary's build information. "devel" stands for a
version or revision the build did not record.
`

// Run dispatches args to the subcommand they name, with help and version.
func (a App) Run(ctx context.Context, args []string, getenv Env, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		a.usage(stderr)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		a.usage(stdout)
		return ExitOK
	case "help":
		return a.runHelp(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "-version", "--version":
		return a.version(ctx, args[1:], getenv, stdin, stdout, stderr)
	}
	c, ok := a.lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q; run \"%s help\" for the list\n", a.Name, args[0], a.Name)
		return ExitUsage
	}
	if WantsHelp(args[1:]) {
		return help(ctx, c, args[1:], getenv, stdin, stdout, stderr)
	}
	return c.Run(ctx, args[1:], getenv, stdin, stdout, stderr)
}

// lookup finds a runnable subcommand by name.
func (a App) lookup(name string) (Command, bool) {
	for _, c := range slices.Concat(a.Commands, a.builtins()) {
		if c.Name == name && c.Run != nil {
			return c, true
		}
	}
	return Command{}, false
}

// runHelp is `NAME help [CMD [SUBCMD]]`.
func (a App) runHelp(ctx context.Context, args []string, getenv Env, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		a.usage(stdout)
		return ExitOK
	}
	c, ok := a.lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "%s help: unknown command %q; run \"%s help\" for the list\n", a.Name, args[0], a.Name)
		return ExitUsage
	}
	return help(ctx, c, append(args[1:len(args):len(args)], "-h"), getenv, stdin, stdout, stderr)
}

// help runs c with a help flag among args. A flag set writes its usage to
// the stderr it was given; help sends it to stdout when the command
// answered help (exit 0) and to stderr when it found an error first (a
// flag it does not know, exit 2).
func help(ctx context.Context, c Command, args []string, getenv Env, stdin io.Reader, stdout, stderr io.Writer) int {
	var held bytes.Buffer
	code := c.Run(ctx, args, getenv, stdin, stdout, &held)
	out := stderr
	if code == ExitOK {
		out = stdout
	}
	_, _ = out.Write(held.Bytes())
	return code
}

// WantsHelp reports whether args ask for help: a help flag before "--".
func WantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--h", "-help", "--help":
			return true
		}
	}
	return false
}

func (a App) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", a.Name)
	for _, c := range slices.Concat(a.Commands, a.builtins()) {
		fmt.Fprintf(w, "  %-13s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\n%s help <command> (or %s <command> -h) shows a command's flags.\n", a.Name, a.Name)
}

// NewStopWriter returns a StopWriter on w that calls stop once.
func NewStopWriter(w io.Writer, stop func()) *StopWriter { return &StopWriter{w: w, stop: stop} }

// Fail prints "name: a…" as one line on w and returns code: the last words
// of a command that stops.
func Fail(w io.Writer, name string, code int, a ...any) int {
	fmt.Fprintln(w, append([]any{name + ":"}, a...)...)
	return code
}

// Setup is the start every command with a config shares: its flag set
// (FS) with --config (required) and, for a command that logs,
// --log-format. T is the loaded config.
type Setup[T any] struct {
	name      string
	FS        *flag.FlagSet
	config    *string
	logFormat *string // nil: the command does not log
	load      func(path string) (T, error)
	// without names a flag whose value replaces the config (ConfigOptionalWith).
	without string
}

// FlagSet reports whether the flag name was given on the command line.
func FlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// ConfigOptionalWith makes --config optional, and not loaded, when the
// string flag name is set: a mode of the command that needs no config
// file (chat --server). The two flags exclude each other.
func (s *Setup[T]) ConfigOptionalWith(name string) { s.without = name }

// withoutConfig reports whether the flag that replaces the config is set.
func (s *Setup[T]) withoutConfig() bool {
	return s.without != "" && s.FS.Lookup(s.without).Value.String() != ""
}

// NewSetup starts name's flag set; logDefault "" means no --log-format.
// load reads the config file.
func NewSetup[T any](name string, stderr io.Writer, logDefault string, load func(string) (T, error)) *Setup[T] {
	s := &Setup[T]{name: name, FS: NewFlagSet(name, stderr), load: load}
	s.config = s.FS.String("config", "", "config file (required)")
	if logDefault != "" {
		s.logFormat = LogFormatFlag(s.FS, logDefault)
	}
	return s
}

// Load parses args, checks --config and then more (flag errors in flag
// order), builds the logger on logTo at LOG_LEVEL (default level; a
// discarding logger for a command that does not log) and loads the
// config. When ok is false the error is printed: return code.
func (s *Setup[T]) Load(args []string, getenv Env, stderr, logTo io.Writer, level slog.Level, more ...func() error) (
	cfg T, log *slog.Logger, code int, ok bool) {
	if code, ok := ParseFlags(s.FS, args, stderr); !ok {
		return cfg, nil, code, false
	}
	errs := []error{MissingFlag(s.FS, "config")}
	if s.withoutConfig() {
		errs[0] = nil
		if *s.config != "" {
			errs[0] = fmt.Errorf("--config: not with --%s (the remote host has its own)", s.without)
		}
	}
	for _, check := range more {
		errs = append(errs, check())
	}
	if err := FirstError(errs...); err != nil {
		return cfg, nil, Fail(stderr, s.name, ExitUsage, err), false
	}
	log = slog.New(slog.DiscardHandler)
	if s.logFormat != nil {
		var err error
		if log, err = NewLogger(logTo, *s.logFormat, getenv, level); err != nil {
			return cfg, nil, Fail(stderr, s.name, ExitUsage, err), false
		}
	}
	if s.withoutConfig() {
		return cfg, log, ExitOK, true
	}
	cfg, err := s.load(*s.config)
	if err != nil {
		return cfg, nil, Fail(stderr, s.name, ExitUsage, err), false
	}
	return cfg, log, ExitOK, true
}

// BindingFlags are the flags of the commands that run a turn by hand
// (turn, broker): the config and what the host would have admitted, the
// channel and the speaker.
type BindingFlags struct {
	Config, Channel string
	Speaker         rtsandbox.Speaker
}

// Register adds the flags; --config only when withConfig (a setup has its
// own).
func (f *BindingFlags) Register(fs *flag.FlagSet, channelHelp string, withConfig bool) {
	if withConfig {
		fs.StringVar(&f.Config, "config", "", "config file (required)")
	}
	fs.StringVar(&f.Channel, "channel", "", channelHelp)
	fs.StringVar(&f.Speaker.ID, "speaker-id", "", "speaker id (required)")
	fs.StringVar(&f.Speaker.Name, "speaker-name", "", "speaker display name (required)")
	fs.StringVar(&f.Speaker.PrincipalID, "principal", "", "speaker principal id (required)")
}

// Check names the first flag at fault, in flag order; more are further
// required flags.
func (f *BindingFlags) Check(fs *flag.FlagSet, more ...string) error {
	required := append([]string{"config", "channel", "speaker-id", "speaker-name", "principal"}, more...)
	if err := FirstError(NoArgs(fs), MissingFlag(fs, required...)); err != nil {
		return err
	}
	if !rtsandbox.ChannelKey(f.Channel).Valid() {
		return fmt.Errorf("--channel: %q is not a channel key (kind:id, such as http:lobby)", f.Channel)
	}
	if err := f.Speaker.Validate(); err != nil {
		return fmt.Errorf("--speaker-id/--speaker-name/--principal: %w", err)
	}
	return nil
}

// ActionArgs checks the positional arguments of a command shaped ACTION
// [KEY]: an action of keyless takes nothing more, one of keyed takes
// exactly one KEY (named by key in the error). The error names the
// argument at fault.
func ActionArgs(pos, keyless, keyed []string, key string) (action, arg string, err error) {
	all := append(slices.Clone(keyless), keyed...)
	list := strings.Join(all[:len(all)-1], ", ") + " or " + all[len(all)-1]
	if len(pos) == 0 {
		return "", "", fmt.Errorf("an action is required: %s", list)
	}
	want := 2 // action and key
	switch {
	case slices.Contains(keyless, pos[0]):
		want = 1
	case !slices.Contains(keyed, pos[0]):
		return "", "", fmt.Errorf("unknown action %q: want %s", pos[0], list)
	case len(pos) == 1:
		return "", "", fmt.Errorf("%s: %s is required", pos[0], key)
	}
	if len(pos) > want {
		return "", "", fmt.Errorf("%w %q", ErrUnexpectedArg, pos[want])
	}
	if want == 1 {
		return pos[0], "", nil
	}
	return pos[0], pos[1], nil
}
