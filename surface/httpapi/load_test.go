package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/router"
)

// TestLoadHostPath: 50 channels, 5 messages each, all arriving at once
// through the HTTP API on loopback, against an instant in-process runtime,
// so the figures measure the host path (HTTP, decoding, the API's and the
// router's queues, the channel store, events). Every message must get
// exactly one reply, in order per channel, with nothing lost.
//
// Reproduce the figures: go test -run TestLoadHostPath -count=1 -v ./surface/httpapi
func TestLoadHostPath(t *testing.T) {
	const nChannels, perChannel = 50, 5
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var keys []rtsandbox.ChannelKey
	for i := range nChannels {
		keys = append(keys, rtsandbox.ChannelKey(fmt.Sprintf("http:room-%02d", i)))
	}
	store, err := channels.Open(filepath.Join(t.TempDir(), "state"), keys) // created 0700
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rt := &fakeRuntime{Turn: echo} // answers "echo: <text>" at once
	pol, _ := access.New(access.Rules{Everyone: true})
	r, err := router.New(router.Options{Door: door.New(nil), Channels: store, Runtime: rt, Access: pol})
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(Options{Router: r, Token: func() string { return guestToken }, LoopbackHosts: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddSurface(Prefix, api); err != nil {
		t.Fatal(err)
	}
	f := &fixture{api: api, router: r, rt: rt}
	f.srv = newLoopbackServer(t, api)
	defer func() {
		api.Stop()
		if err := r.Close(ctx); err != nil {
			t.Errorf("router.Close = %v", err)
		}
		if err := api.Close(ctx); err != nil {
			t.Errorf("api.Close = %v", err)
		}
	}()
	events := f.subscribe(t, "")

	type sent struct {
		channel rtsandbox.ChannelKey
		text    string
		at      time.Time
	}
	var mu sync.Mutex
	byID := map[string]sent{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nChannels}}
	defer client.CloseIdleConnections()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, ch := range keys {
		wg.Go(func() {
			<-start
			for i := range perChannel { // arrival order per channel is i
				text := fmt.Sprintf("%s message %d", ch, i)
				at := time.Now()
				req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/api/v1/messages", strings.NewReader(
					`{"channel":"`+string(ch)+`","author":{"id":"guest"},"text":"`+text+`","mentions_bot":true}`))
				req.Header.Set("Authorization", "Bearer "+guestToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("POST: %v", err)
					return
				}
				acc := decode[acceptedResponse](t, readAll(t, resp))
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("POST = %d", resp.StatusCode)
					return
				}
				mu.Lock()
				byID[acc.ID] = sent{ch, text, at}
				mu.Unlock()
			}
		})
	}
	began := time.Now()
	close(start)

	replies := map[string][]string{}
	order := map[rtsandbox.ChannelKey][]string{}
	var latencies []time.Duration
	doneAt := map[string]time.Time{}
	for len(doneAt) < nChannels*perChannel {
		e := events.next(t)
		switch e.Type {
		case EventReply:
			replies[e.Data.MessageID] = append(replies[e.Data.MessageID], e.Data.Chunk)
			order[e.Data.Channel] = append(order[e.Data.Channel], e.Data.Chunk)
		case EventDone:
			if e.Data.Dropped || e.Data.Error != "" {
				t.Errorf("message %s: %+v; want answered", e.Data.MessageID, e.Data)
			}
			doneAt[e.Data.MessageID] = time.Now()
		}
	}
	elapsed := time.Since(began)
	wg.Wait()

	for id, s := range byID {
		if want := []string{"echo: " + s.text}; !slices.Equal(replies[id], want) {
			t.Errorf("message %s replies = %q; want %q", id, replies[id], want)
		}
		latencies = append(latencies, doneAt[id].Sub(s.at))
	}
	if len(byID) != nChannels*perChannel || len(rt.Calls()) != nChannels*perChannel {
		t.Errorf("accepted %d, turns %d; want %d each", len(byID), len(rt.Calls()), nChannels*perChannel)
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
	if busy := r.Busy(); len(busy) != 0 {
		t.Errorf("channels still busy: %v", busy)
	}
	slices.Sort(latencies)
	t.Logf("host path: %d channels x %d messages = %d in %v: %.0f messages/s; latency p50 %v, p95 %v, max %v",
		nChannels, perChannel, len(latencies), elapsed.Round(time.Millisecond),
		float64(len(latencies))/elapsed.Seconds(), pct(latencies, 50), pct(latencies, 95), latencies[len(latencies)-1])
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)*p/100].Round(10 * time.Microsecond)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
