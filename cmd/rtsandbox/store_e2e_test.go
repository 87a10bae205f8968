package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/sqlitelock"
)

// outcome is one message's answer through the HTTP API and how long it
// took.
type outcome struct {
	channel string
	text    string
	took    time.Duration
	err     error
}

// sayAll sends one message in each channel at once (wait: true) and
// returns the answers; no t.Fatal off the test goroutine.
func (s *server) sayAll(channels []string, text string) []outcome {
	out := make([]outcome, len(channels))
	var wg sync.WaitGroup
	for i, ch := range channels {
		wg.Go(func() {
			at := time.Now()
			o := outcome{channel: ch}
			req, _ := http.NewRequest("POST", s.base+"/api/v1/messages", strings.NewReader(
				`{"channel":"`+ch+`","author":{"id":"alice","name":"Alice"},"text":"`+text+`","mentions_bot":true,"wait":true}`))
			req.Header.Set("Authorization", "Bearer "+serveGuestToken)
			req.Header.Set("Content-Type", "application/json")
			resp, err := s.client.Do(req)
			if err != nil {
				o.err = err
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var w waitReply
				if resp.StatusCode != 200 || json.Unmarshal(b, &w) != nil {
					o.err = fmt.Errorf("POST = %d %s", resp.StatusCode, b)
				}
				o.text = strings.Join(chunksOf(w), "")
			}
			o.took = time.Since(at)
			out[i] = o
		})
	}
	wg.Wait()
	return out
}

// TestServeUsageDatabaseLocked is issue 22's fault through serve: an
// operator's sqlite3 shell holds usage.db's write lock (BEGIN IMMEDIATE)
// while 12 sealed channels talk, under the default policy
// (budgets.on_store_error: deny).
//
//   - The 12 turns that arrive as the lock is taken are admitted (nothing
//     waits unwritten yet) and answered while the lock is still held:
//     none waits for it. Before, 3 failed at 5, 10 and 15 s and 9 waited
//     for the lock's end. The lock is held until all 12 are answered; a
//     watchdog lets it go at 90 s so that a turn waiting for it cannot
//     hang the test, and the test fails if the watchdog had to (a turn
//     answered only once the lock was gone). The bound is a watchdog, not
//     a speed figure: 12 cold containers take 7-21 s on a loaded 2-core
//     machine.
//   - Once their counts have waited unwritten past budget.StoreGrace, 12
//     more messages are refused with the store's text, each within 1 s.
//   - The log names the file; once the lock is gone the counts are
//     written, the log says so, the next turn is answered, and usage.db
//     holds every call.
//
// Cost: one serve and 13 sealed turns, about 15 s.
func TestServeUsageDatabaseLocked(t *testing.T) {
	parallelServe(t)
	const watchdog = 90 * time.Second
	tag, cli := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
		return fakemodel.Response{Content: "echo: " + req.UserText()}
	}))
	defer model.Close()
	addr := freeAddr(t)
	cfg, state := serveConfig(t, model.ChatURL(), tag, addr)
	var channels []string
	for i := range 12 {
		channels = append(channels, fmt.Sprintf("http:store-%02d", i))
	}
	body, _ := os.ReadFile(cfg)
	text := strings.Replace(string(body), `initial_channels: ["http:lobby"]`, `initial_channels: ["`+strings.Join(channels, `","`)+`"]`, 1)
	text += "budgets:\n  per_channel: {calls: 1000}\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, addr, "--config", cfg, "--drain", "30s")
	path := filepath.Join(state, budget.FileName)

	release := sqlitelock.Hold(t, path)
	locked := time.Now()
	dog := time.AfterFunc(watchdog, release)
	first := s.sayAll(channels, "first")
	held := time.Since(locked)
	if !dog.Stop() {
		t.Errorf("the 12 turns were still unanswered when the watchdog let the lock go at %v; a turn waited for it (answered in %v)", watchdog, held)
	}
	for _, o := range first {
		if o.err != nil || (o.text != "echo: first" && o.text != rtsandbox.StoreText) {
			t.Errorf("%s under the lock: %q, %v after %v; want the answer (or, admitted late, the store's text)", o.channel, o.text, o.err, o.took)
		}
	}
	waitForLog(t, s, "usage database unavailable")
	second := s.sayAll(channels, "second")
	for _, o := range second {
		if o.err != nil || o.text != rtsandbox.StoreText || o.took > time.Second {
			t.Errorf("%s past the grace: %q, %v after %v; want the store's text within 1s", o.channel, o.text, o.err, o.took)
		}
	}
	wantStoreLog(t, s.out.String(), path)
	release()
	waitForLog(t, s, "usage database written again")
	if got := chunksOf(s.say(t, channels[0], "third")); strings.Join(got, "") != "echo: third" {
		t.Errorf("after the lock: %q; want the answer", got)
	}
	t.Logf("12 turns under a held usage.db lock answered in %v; 12 refusals past the grace", held.Round(time.Millisecond))
	if t.Failed() {
		t.Logf("serve output:\n%s", s.out.String())
	}
	if code := s.stop(t); code != exitOK {
		t.Errorf("serve exit = %d", code)
	}
	if n := storedCalls(t, path); n < 13 {
		t.Errorf("usage.db holds %d installation calls after the stop; want at least 13 (every answered turn's)", n)
	}
	assertNoTurnContainers(t, cli, tag)
}

// wantStoreLog requires serve's log to name the usage database: the
// ledger's record (class store, the file) and the router's hint.
func wantStoreLog(t *testing.T, log, path string) {
	t.Helper()
	for _, want := range []string{`"file":"` + path + `"`, `"class":"store"`, "usage.db in the state dir", "usage database " + path} {
		if !strings.Contains(log, want) {
			t.Errorf("serve's log lacks %q", want)
		}
	}
}

// TestSessionServeUsageDatabaseLocked is the same fault in a warm session
// channel (deny): the turn that arrives as the lock is taken is answered
// while it is held, the next gets the store's text within 1 s, the log
// names the file, and once the lock is gone the channel answers again in
// the same container. Cost: one session container and four turns, about
// 5 s.
func TestSessionServeUsageDatabaseLocked(t *testing.T) {
	tag, cli := sessionDocker(t)
	model := echoModel()
	defer model.Close()
	addr := freeAddr(t)
	cfg, state := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	appendConfig(t, cfg, "budgets:\n  per_channel: {calls: 1000}\n")
	s := startServe(t, addr, "--config", cfg)
	path := filepath.Join(state, budget.FileName)
	s.sayOne(t, "http:lobby", "before", "Answer to before")
	before := oneContainer(t, cli, tag, s)

	release := sqlitelock.Hold(t, path)
	s.sayOne(t, "http:lobby", "during", "Answer to during")
	waitForLog(t, s, "usage database unavailable")
	at := time.Now()
	s.sayOne(t, "http:lobby", "refused", rtsandbox.StoreText)
	if took := time.Since(at); took > time.Second {
		t.Errorf("the refusal took %v; want it within 1s", took)
	}
	wantStoreLog(t, s.out.String(), path)
	release()
	waitForLog(t, s, "usage database written again")
	s.sayOne(t, "http:lobby", "after", "Answer to after")
	if after := oneContainer(t, cli, tag, s); after.ID != before.ID {
		t.Errorf("the channel's container changed: %s, then %s", before.ID, after.ID)
	}
	if t.Failed() {
		t.Logf("serve output:\n%s", s.out.String())
	}
	s.stopOK(t)
}

// waitForLog waits until serve's log holds s (the ledger's writer logs
// within a tick of the change); no sleep decides.
func waitForLog(t *testing.T, srv *server, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(budget.FlushInterval / 4)
	defer tick.Stop()
	for !strings.Contains(srv.out.String(), s) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no %q in serve's log:\n%s", s, srv.out.String())
		}
	}
}

// storedCalls reads today's installation calls from usage.db.
func storedCalls(t *testing.T, path string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path, RawQuery: "mode=ro"}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(`SELECT coalesce(sum(used), 0) FROM usage WHERE scope=? AND kind=?`, budget.Installation, string(budget.Calls)).Scan(&n); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return n
}
