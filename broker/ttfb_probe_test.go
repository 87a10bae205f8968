package broker_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
)

func TestTTFBProbe(t *testing.T) {
	answer := benchStream(1<<20, 4096)
	pause := 5 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		io.WriteString(w, answer[0])
		rc.Flush()
		time.Sleep(pause)
		for _, ev := range answer[1:] {
			io.WriteString(w, ev)
			rc.Flush()
		}
	}))
	defer srv.Close()
	f := newFixture(t, nil, func(c *broker.Config) {
		c.API, c.Stream, c.Client, c.ModelURL = rtsandbox.ModelAPIAnthropic, true, upstream.New(nil), ep(srv.URL)
		c.MaxCalls = 1000
	})
	bs := f.listen(t, broker.ListenOptions{})
	run := func(c *http.Client, url string) (time.Duration, time.Duration) {
		var ds, ts []time.Duration
		buf := make([]byte, 64<<10)
		for range 40 {
			start := time.Now()
			req, _ := http.NewRequest("POST", url, strings.NewReader(streamBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+rtsandbox.DummyKey)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			hd := time.Since(start)
			resp.Body.Read(buf)
			ds = append(ds, time.Since(start))
			ts = append(ts, hd)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		slices.Sort(ds)
		slices.Sort(ts)
		return ts[len(ts)/2], ds[len(ds)/2]
	}
	h1, d1 := run(&http.Client{Transport: upstream.NewTransport()}, srv.URL+"/v1/messages")
	h2, d2 := run(socketClient(bs.Path()), "http://broker"+rtsandbox.RouteAnthropicMessages)
	t.Logf("direct head %v first %v; broker head %v first %v", h1, d1, h2, d2)
	_ = context.Background
}
