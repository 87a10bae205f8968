package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/inflight"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
)

// damagedTail is one way a session file's end can be damaged, and what
// the worker must make of it (issue 22 item 3).
type damagedTail struct {
	channel string
	tail    string
	dropped int // lines the load drops, reported to serve's log
	bad     int // lines that stay in the file and do not parse: never a torn one
}

// TestSessionServeDamagedTailsLoseOnlyThemselves: three session channels
// hold two exchanges each; with serve stopped and their containers gone,
// each file gets a damaged end: a torn record, garbage (a line and a torn
// rest), a 50 MB line. The next serve's turn in each channel still sees
// both earlier exchanges, serve's log names each channel and the lines
// its load dropped, and the new exchange is appended after whole lines,
// never merged into a torn one. About 15 s: six container starts.
func TestSessionServeDamagedTailsLoseOnlyThemselves(t *testing.T) {
	parallelServe(t)
	tails := []damagedTail{
		{"http:torn", `{"type":"reader","turnId":"x","reader":"alice","privateMemory":false}` + "\n" + `{"type":"message","turnId":"x","message":{"role":"us`, 2, 0},
		{"http:garbage", "\x00\xffgarbage\x01\n\x00\x00\x00\x00", 2, 1},
		{"http:huge", strings.Repeat("h", 50<<20) + "\n", 1, 1},
	}
	e := echoSession(t, "  turn_timeout: 120s\n")
	for _, tc := range tails {
		e.s.on(t, tc.channel)
		for _, word := range []string{"one", "two"} {
			text := tc.channel[5:] + " " + word
			e.s.sayOne(t, tc.channel, text, "Answer to "+text)
		}
	}
	e.s.stopOK(t)
	removeContainersOf(t, e.cli, e.tag) // the next turns load the files again
	files := sessionFiles(t, e.state, tails)
	for _, tc := range tails {
		appendFile(t, files[tc.channel], tc.tail)
	}

	s := startServe(t, e.addr, "--config", e.cfg)
	for _, tc := range tails {
		name := tc.channel[5:]
		s.sayOne(t, tc.channel, name+" three", "Answer to "+name+" three")
		req := requestWith(e.model, name+" three")
		for _, want := range []string{name + " one", "Answer to " + name + " one", name + " two", "Answer to " + name + " two"} {
			if !strings.Contains(req, want) {
				t.Errorf("%s: the turn after the damage lacks %q", tc.channel, want)
			}
		}
		if !hasLogLine(s.out.String(), `"msg":"session conversation lost lines on load`, `"channel":"`+tc.channel+`"`, `"dropped_lines":`+strconv.Itoa(tc.dropped)+`,`) {
			t.Errorf("%s: serve's log lacks the load report with %d dropped lines:\n%s", tc.channel, tc.dropped, s.out.String())
		}
		data, err := os.ReadFile(files[tc.channel])
		if err != nil {
			t.Fatal(err)
		}
		if bad := badLines(data); !bytes.HasSuffix(data, []byte("\n")) || bad != tc.bad {
			t.Errorf("%s: file has %d lines that do not parse (want %d), ends in newline %v", tc.channel, bad, tc.bad, bytes.HasSuffix(data, []byte("\n")))
		}
		if !bytes.Contains(data, []byte(name+" three")) {
			t.Errorf("%s: the new exchange is not in the file", tc.channel)
		}
	}
	s.stopOK(t)
}

// sessionFiles maps each channel of tails to its one session file, found
// by the words of its first turn.
func sessionFiles(t *testing.T, state string, tails []damagedTail) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(state, "party", "*", "workspace", "sessions", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range tails {
			if bytes.Contains(data, []byte(tc.channel[5:]+" one")) {
				out[tc.channel] = p
			}
		}
	}
	if len(out) != len(tails) || len(paths) != len(tails) {
		t.Fatalf("session files %v; want one per channel", paths)
	}
	return out
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// badLines counts the lines of data that are not JSON.
func badLines(data []byte) int {
	n := 0
	for line := range bytes.Lines(data) {
		if !json.Valid(bytes.TrimSuffix(line, []byte("\n"))) {
			n++
		}
	}
	return n
}

// requestWith is the body of the model request whose text holds s.
func requestWith(model *fakemodel.Server, s string) string {
	for _, r := range model.Requests() {
		if strings.Contains(string(r.Raw), s) {
			return string(r.Raw)
		}
	}
	return ""
}

// newClient is an HTTP client whose idle connections close when the test
// ends.
func newClient(t *testing.T) *http.Client {
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// serveChildEnv makes this test binary run `rtsandbox serve` with the
// arguments it holds (JSON) instead of its tests (TestMain): a serve in
// its own process, which a test can kill.
const serveChildEnv = "RTSANDBOX_TEST_SERVE_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(serveChildEnv); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			os.Exit(2)
		}
		os.Exit(run(context.Background(), a, serveEnv, strings.NewReader(""), os.Stdout, os.Stderr))
	}
	code := m.Run()
	// The cluster tier's tests (kube_*_test.go) share one test cluster.
	if err := k8stest.StopAll(); err != nil && code == 0 {
		code = 1
	}
	if err := removeWorkerImage(); err != nil {
		fmt.Fprintln(os.Stderr, "remove the tests' worker image:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// serveProcess is serve running in a child process (startServeProcess).
type serveProcess struct {
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// startServeProcess runs serve with args in a child process (this test
// binary, serveChildEnv) and waits until /healthz answers; the child is
// killed when the test ends, if it still runs.
func startServeProcess(t *testing.T, addr string, args ...string) *serveProcess {
	t.Helper()
	encoded, _ := json.Marshal(append([]string{"serve"}, args...))
	p := &serveProcess{cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &syncbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), serveChildEnv+"="+string(encoded))
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	client := newClient(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("serve exited before it was ready:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready within 30s:\n%s", p.out.String())
		}
	}
}

// TestServeKilledMidTurnTellsTheMessage: serve, in its own process, is
// killed (SIGKILL) while a turn waits on the model, in either mode. The
// message was recorded in flight; the next serve on the same state posts
// the restarting notice for it on the HTTP API's event stream, to the
// stream the client opens after the restart, and holds no message in
// flight after a clean stop. About 2 s per mode here (one container, the
// sealed one reaped at the restart); the kill is a real SIGKILL of a
// process, so the state is what a crash leaves.
func TestServeKilledMidTurnTellsTheMessage(t *testing.T) {
	for _, mode := range []string{"session", "sealed"} {
		t.Run(mode, func(t *testing.T) { killedMidTurn(t, mode) })
	}
}

func killedMidTurn(t *testing.T, mode string) {
	tag, _ := sessionDocker(t)
	var hang atomic.Bool
	hang.Store(true)
	release := make(chan struct{})
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if hang.Load() {
				<-release
			}
			return fakemodel.Response{Content: "Answer to " + lastWords(req.UserText())}
		}))
	defer model.Close()
	defer close(release) // before the model closes
	addr := freeAddr(t)
	cfg, state := serveConfig(t, model.ChatURL(), tag, addr)
	if mode == "session" {
		cfg, state = sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	}
	child := startServeProcess(t, addr, "--config", cfg)

	s := &server{base: "http://" + addr, client: newClient(t)}
	code, body := s.call(t, "POST", "/api/v1/messages", serveGuestToken,
		`{"channel":"http:lobby","author":{"id":"alice","name":"Alice"},"text":"lost in the crash","mentions_bot":true}`)
	var accepted struct{ ID string }
	if code != 202 || json.Unmarshal([]byte(body), &accepted) != nil || accepted.ID == "" {
		t.Fatalf("POST message = %d %s", code, body)
	}
	record := filepath.Join(state, inflight.FileName)
	waitFor(t, func() bool {
		data, _ := os.ReadFile(record)
		return len(model.Requests()) == 1 && bytes.Contains(data, []byte(accepted.ID))
	})
	if err := child.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if <-child.exited; child.err == nil {
		t.Fatalf("serve exited cleanly; want it killed:\n%s", child.out.String())
	}

	hang.Store(false)
	s2 := startServe(t, addr, "--config", cfg)
	ev, stop := s2.subscribe(t, "?channel=http:lobby")
	waitFor(t, func() bool { return strings.Contains(ev.String(), "event: done") })
	stop()
	got := ev.String()
	for _, want := range []string{`"message_id":"` + accepted.ID + `"`, rtsandbox.RestartingText[3:], `"reason":"shutting_down"`} {
		if !strings.Contains(got, want) {
			t.Errorf("event stream after the restart lacks %q:\n%s", want, got)
		}
	}
	s2.sayOne(t, "http:lobby", "after the crash", "Answer to after the crash")
	s2.stopOK(t)
	if !hasLogLine(s2.out.String(), `"msg":"restart notice posted for a message in flight at the last stop"`, `"message":"`+accepted.ID+`"`) {
		t.Errorf("serve's log lacks the notice line:\n%s", s2.out.String())
	}
	if data, err := os.ReadFile(record); err != nil || !bytes.Contains(data, []byte(`"messages":[]`)) {
		t.Errorf("in-flight record after a clean stop = %s, %v; want no message", data, err)
	}
}
