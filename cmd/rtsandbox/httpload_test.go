package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// TestLoadServeDocker is the Docker-backed counterpart of the host-path
// load test in surface/httpapi: CHANNELS x MESSAGES messages arrive at
// once through `rtsandbox serve`, each a real sealed turn in its own
// container against an instant stand-in model. It is opt-in because it
// costs minutes of CPU:
//
//	RTSANDBOX_LOAD_DOCKER=1 RTSANDBOX_LOAD_CHANNELS=50 RTSANDBOX_LOAD_MESSAGES=5 \
//	  [RTSANDBOX_LOAD_MAX_TURNS=N] go test -run TestLoadServeDocker -count=1 -v -timeout 30m ./cmd/rtsandbox
func TestLoadServeDocker(t *testing.T) {
	if os.Getenv("RTSANDBOX_LOAD_DOCKER") != "1" {
		t.Skip("set RTSANDBOX_LOAD_DOCKER=1 to run the Docker-backed load test")
	}
	sandbox, maxTurns := "", envInt("RTSANDBOX_LOAD_MAX_TURNS", 0)
	if maxTurns > 0 {
		sandbox = fmt.Sprintf("  max_turns: %d\n", maxTurns)
	}
	loadServe(t, envInt("RTSANDBOX_LOAD_CHANNELS", 50), envInt("RTSANDBOX_LOAD_MESSAGES", 5), maxTurns, sandbox)
}

// TestServeBurstBeyondAdmissionBound is the admission-control acceptance
// test: a burst of four times the host's turn bound, across channels, with
// a 10 s turn timeout, is answered in full, in order, and leaves nothing.
// Before admission control every turn started its container at once and
// the deadline counted the wait: 80 channels at once failed 80 of 80.
func TestServeBurstBeyondAdmissionBound(t *testing.T) {
	const maxTurns = 2
	loadServe(t, 4*maxTurns, 1, maxTurns, fmt.Sprintf("  max_turns: %d\n  turn_timeout: 10s\n", maxTurns))
}

// loadServe sends nChannels x perChannel messages at once through a real
// `rtsandbox serve` (sandbox holds extra lines for the sandbox: section)
// and checks that each is answered once, in order per channel, and, when
// maxTurns > 0, that no more than maxTurns turns reached the model at
// once; it logs throughput and latency percentiles.
func loadServe(t *testing.T, nChannels, perChannel, maxTurns int, sandbox string) {
	tag, cli := sealedImage(t)
	var inFlight, peak atomic.Int32
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if maxTurns > 0 {
			time.Sleep(20 * time.Millisecond) // let turns overlap if the bound leaked
		}
		return fakemodel.Response{Content: "echo: " + req.UserText()}
	}))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	var keys []string
	for i := range nChannels {
		keys = append(keys, fmt.Sprintf("http:room-%02d", i))
	}
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Replaces the lobby-only list and the member list of serveConfig.
	body, _ := os.ReadFile(cfg)
	f.Close()
	text := strings.Replace(string(body), `initial_channels: ["http:lobby"]`, `initial_channels: ["`+strings.Join(keys, `","`)+`"]`, 1)
	text = strings.Replace(text, `members: ["http:alice"]`, `members: everyone`, 1)
	text = strings.Replace(text, "sandbox:\n", "sandbox:\n"+sandbox, 1)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, addr, "--config", cfg, "--drain", "60s")

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+serveGuestToken)
	resp, err := s.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events: %v", err)
	}
	defer resp.Body.Close()

	type ev struct {
		typ     string
		channel string
		id      string
		chunk   string
		dropped bool
		err     string
	}
	evs := make(chan ev, 4096)
	go func() {
		defer close(evs)
		sc := bufio.NewScanner(resp.Body)
		var typ string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				typ = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				var d struct {
					Channel   string `json:"channel"`
					MessageID string `json:"message_id"`
					Chunk     string `json:"chunk"`
					Dropped   bool   `json:"dropped"`
					Error     string `json:"error"`
				}
				_ = json.Unmarshal([]byte(v), &d)
				evs <- ev{typ, d.Channel, d.MessageID, d.Chunk, d.Dropped, d.Error}
			}
		}
	}()

	var mu sync.Mutex
	sentAt, texts := map[string]time.Time{}, map[string]string{}
	var wg sync.WaitGroup
	began := time.Now()
	for _, ch := range keys {
		wg.Go(func() {
			for i := range perChannel {
				text := fmt.Sprintf("%s message %d", ch, i)
				at := time.Now()
				code, body := s.call(t, "POST", "/api/v1/messages", serveGuestToken,
					`{"channel":"`+ch+`","author":{"id":"guest"},"text":"`+text+`","mentions_bot":true}`)
				var acc struct{ ID string }
				_ = json.Unmarshal([]byte(body), &acc)
				if code != 202 {
					t.Errorf("POST = %d %s", code, body)
					return
				}
				mu.Lock()
				sentAt[acc.ID], texts[acc.ID] = at, text
				mu.Unlock()
			}
		})
	}
	replies, order := map[string][]string{}, map[string][]string{}
	doneAt := map[string]time.Time{}
	for len(doneAt) < nChannels*perChannel {
		e, ok := <-evs
		if !ok {
			t.Fatalf("event stream ended after %d of %d messages", len(doneAt), nChannels*perChannel)
		}
		switch e.typ {
		case "reply":
			replies[e.id] = append(replies[e.id], e.chunk)
			order[e.channel] = append(order[e.channel], e.chunk)
		case "done":
			if e.dropped || e.err != "" {
				t.Errorf("message %s dropped or refused: %+v", e.id, e)
			}
			doneAt[e.id] = time.Now()
		}
	}
	elapsed := time.Since(began)
	wg.Wait()
	var lat []time.Duration
	for id, at := range sentAt {
		if want := []string{"echo: " + texts[id]}; !slices.Equal(replies[id], want) {
			t.Errorf("message %s replies = %q; want %q", id, replies[id], want)
		}
		lat = append(lat, doneAt[id].Sub(at))
	}
	for _, ch := range keys {
		var want []string
		for i := range perChannel {
			want = append(want, fmt.Sprintf("echo: %s message %d", ch, i))
		}
		if !slices.Equal(order[ch], want) {
			t.Errorf("replies in %s = %q; want %q", ch, order[ch], want)
		}
	}
	if maxTurns > 0 && int(peak.Load()) > maxTurns {
		t.Errorf("%d turns reached the model at once; the bound is %d", peak.Load(), maxTurns)
	}
	slices.Sort(lat)
	p := func(q int) time.Duration { return lat[(len(lat)-1)*q/100].Round(time.Millisecond) }
	t.Logf("docker: %d channels x %d messages = %d sealed turns in %v: %.2f turns/s; latency p50 %v, p95 %v, p99 %v, max %v",
		nChannels, perChannel, len(lat), elapsed.Round(time.Millisecond), float64(len(lat))/elapsed.Seconds(), p(50), p(95), p(99), lat[len(lat)-1].Round(time.Millisecond))
	if t.Failed() {
		t.Logf("serve output:\n%s", s.out.String())
	}
	cancel()
	if code := s.stop(t); code != exitOK {
		t.Errorf("serve exit = %d", code)
	}
	assertNoTurnContainers(t, cli, tag)
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
