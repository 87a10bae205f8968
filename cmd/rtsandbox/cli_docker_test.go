package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/hostbin"
)

// closingWriter is a stdout whose reader exits once it has seen a line
// containing trigger: later writes fail with EPIPE, as a pipe's do.
type closingWriter struct {
	trigger string

	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (c *closingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, syscall.EPIPE
	}
	c.closed = bytes.Contains(p, []byte(c.trigger))
	return c.buf.Write(p)
}

// The demo whose stdout closes during its first turn stops: no second
// turn, no container left, one line on stderr and exit 1.
func TestDemoStopsWhenStdoutCloses(t *testing.T) {
	tag, cli := sealedImage(t)
	out := &closingWriter{trigger: "guest:"}
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--image", tag}, os.Getenv, strings.NewReader(""), out, &errOut)
	if code != exitFail || !strings.Contains(errOut.String(), demoStoppedText) || strings.Contains(errOut.String(), "panic") {
		t.Errorf("demo with a closed stdout = %d, stderr %q; want 1 and %q", code, errOut.String(), demoStoppedText)
	}
	if strings.Contains(out.buf.String(), "turn 2") {
		t.Errorf("demo went on after its output closed:\n%s", out.buf.String())
	}
	assertNoTurnContainers(t, cli, tag)
}

// buildCLI builds the rtsandbox binary into a short temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(shortTempDir(t), "rtsandbox")
	if err := hostbin.GoBuild(t.Context(), ".", nil, "-o", bin, "."); err != nil {
		t.Fatal(err)
	}
	return bin
}

// The real binary: `rtsandbox demo | head -3` (the reader exits during the
// first turn) ends the demo with exit 1 instead of a SIGPIPE death, leaves
// no container and no temporary state, and prints no Go panic; help and
// version go to stdout.
func TestBinaryConventions(t *testing.T) {
	parallelServe(t)
	bin := buildCLI(t)
	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(bin, "--version").Output()
		re := regexp.MustCompile(`^rtsandbox \S+ \(revision ([0-9a-f]{40}|devel)(, modified)?(, committed \S+)?, go1\.\S+\)\n$`)
		if err != nil || !re.Match(out) {
			t.Errorf("rtsandbox --version = %q, %v; want it to match %s", out, err, re)
		}
	})
	t.Run("help", func(t *testing.T) {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "help", "demo")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "-log-format") || stderr.Len() != 0 {
			t.Errorf("rtsandbox help demo = %q, stderr %q, %v; want the flags on stdout", out, stderr.String(), err)
		}
	})
	t.Run("demo-closed-stdout", func(t *testing.T) {
		tag, cli := sealedImage(t)
		tmp := shortTempDir(t) // the demo's state dir holds the broker socket
		cmd := exec.Command(bin, "demo", "--image", tag)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewReader(stdout)
		for {
			line, err := lines.ReadString('\n')
			if err != nil {
				t.Fatalf("demo ended before its first turn: %v\nstderr: %s", err, stderr.String())
			}
			if strings.Contains(line, "guest:") {
				break
			}
		}
		stdout.Close() // like head: the reader is gone while the turn runs
		err = cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitFail {
			t.Errorf("demo after its reader exited: %v (%v); want exit status 1, not a signal", err, cmd.ProcessState)
		}
		if got := stderr.String(); !strings.Contains(got, demoStoppedText) || strings.Contains(got, "panic") || strings.Contains(got, "goroutine ") {
			t.Errorf("stderr = %q; want %q and no panic", got, demoStoppedText)
		}
		assertNoTurnContainers(t, cli, tag)
		if left, _ := filepath.Glob(filepath.Join(tmp, "rtsdemo*")); len(left) != 0 {
			t.Errorf("demo state left behind: %v", left)
		}
	})
}

// serve warns, in one line naming the keys and the command that enables
// each key not stored, when initial_channels differs from the stored set
// after the first start; never at the first start, nor when they agree.
// --log-format text switches serve's log.
func TestServeWarnsOnInitialChannelDrift(t *testing.T) {
	tag, _ := sealedImage(t)
	addr := freeAddr(t)
	path, _ := serveConfig(t, "http://127.0.0.1:1/v1", tag, addr)
	serveOnce := func(args ...string) string {
		s := startServe(t, addr, append([]string{"--config", path}, args...)...)
		if code := s.stop(t); code != exitOK {
			t.Fatalf("serve = %d:\n%s", code, s.out.String())
		}
		return s.out.String()
	}
	if out := serveOnce(); strings.Contains(out, "initial_channels differs") {
		t.Errorf("first start warned about drift:\n%s", out)
	}
	out := serveOnce("--log-format", "text")
	if strings.Contains(out, "initial_channels differs") || !strings.Contains(out, `level=INFO msg=serving app=rtsandbox`) {
		t.Errorf("second start, same channels: want text lines and no drift warning:\n%s", out)
	}
	cfg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(cfg), `initial_channels: ["http:lobby"]`, `initial_channels: ["http:lobby", "http:new"]`, 1)
	if err := os.WriteFile(path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	var warns []map[string]any
	for _, line := range strings.Split(serveOnce(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == host.ChannelDriftText {
			delete(rec, "time")
			warns = append(warns, rec)
		}
	}
	want := []map[string]any{{
		"level": "WARN", "msg": host.ChannelDriftText, "app": "rtsandbox",
		"not_stored": []any{"http:new"}, "not_in_initial_channels": []any{},
		"enable_with": []any{"rtsandbox channels on http:new --config FILE"},
	}}
	if diff := cmp.Diff(want, warns); diff != "" {
		t.Errorf("drift warnings (-want +got):\n%s", diff)
	}
}

// A Discord failure at start is named once: serve adds no second
// "discord:" to the surface's own error.
func TestServeDiscordErrorPrefixedOnce(t *testing.T) {
	tag, _ := sealedImage(t)
	path, _ := sealedConfig(t, "http://127.0.0.1:1/v1", tag, workerUserFlag())
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("discord:\n  token_env: RTS_EMPTY_DISCORD_TOKEN\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Blank, not empty: the start checks see a set variable, the surface a
	// token it refuses before any connection (no network in tests).
	getenv := func(k string) string {
		if k == "RTS_EMPTY_DISCORD_TOKEN" {
			return "   "
		}
		return serveEnv(k)
	}
	code, _, stderr := runSealed(t, getenv, "", "serve", "--config", path)
	if want := "rtsandbox serve: discord: no bot token\n"; code != exitFail || stderr != want {
		t.Errorf("serve with an empty Discord token = %d, %q; want 1 and %q", code, stderr, want)
	}
}
