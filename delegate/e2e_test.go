package delegate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
	"github.com/rtsandbox/rtsandbox/research"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/search"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/webpage"
)

type fakeChannels struct{}

func (fakeChannels) Enabled(rtsandbox.ChannelKey) bool  { return true }
func (fakeChannels) Enable(rtsandbox.ChannelKey) error  { return nil }
func (fakeChannels) Disable(rtsandbox.ChannelKey) error { return nil }

type fakeAccess struct{}

func (fakeAccess) Resolve(access.Actor) (rtsandbox.Speaker, access.Tier) {
	return rtsandbox.Speaker{}, access.None
}

// surface records the chunks the router sends.
type surface struct {
	mu   sync.Mutex
	sent map[rtsandbox.ChannelKey][]string
	got  chan struct{}
}

func (s *surface) Deliver(_ context.Context, d router.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent[d.Channel] = append(s.sent[d.Channel], d.Chunk)
	select {
	case s.got <- struct{}{}:
	default:
	}
	return nil
}

func (s *surface) Typing(context.Context, rtsandbox.ChannelKey, string) error { return nil }

// reports posts through the router's report path, as the host does.
type reports struct{ r *router.Router }

func (p reports) SendReply(ctx context.Context, ch rtsandbox.ChannelKey, text string) error {
	return p.r.PostReport(ctx, ch, text)
}

func (s *surface) chunks(ch rtsandbox.ChannelKey) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent[ch]...)
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// A member asks the guest-facing research tool; the research worker runs
// on the host (fake model, loopback search, safefetch mapped to a loopback
// page) and the report reaches the channel through a real router.
func TestDelegatedResearchEndToEnd(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<p>The answer is 42.</p>`)
	}))
	defer page.Close()
	searchSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"results":[{"title":"Answer","url":"http://facts.example.com/a","content":"42"}]}`)
	}))
	defer searchSrv.Close()
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("web_search", map[string]string{"query": "the answer"})),
		fakemodel.CallTools(fakemodel.Call("fetch_content", map[string]string{"url": "http://facts.example.com/a"})),
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			res, _ := req.ToolResult(req.Last().ToolCallID)
			return fakemodel.Response{Content: "The answer is 42 (source: http://facts.example.com/a).\n\nPage said: " + res}
		}),
	)
	defer model.Close()

	backend, err := search.New(search.Config{Provider: search.SearXNG, URL: upstream.MustParseEndpoint(searchSrv.URL, true)})
	if err != nil {
		t.Fatal(err)
	}
	pageAddr := page.Listener.Addr().String()
	fetcher := &safefetch.Fetcher{
		Resolver: resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
			if host == "facts.example.com" {
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}),
		Transport: &safefetch.Pinned{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, pageAddr)
		}},
	}
	worker, err := research.New(research.Options{
		ModelURL: upstream.MustParseEndpoint(model.ChatURL(), true), Model: "gpt-4.1-mini",
		Search: backend, Extract: webpage.Extract, Fetcher: fetcher,
	})
	if err != nil {
		t.Fatal(err)
	}

	r, err := router.New(router.Options{Door: door.New(nil), Channels: fakeChannels{}, Runtime: &fakeruntime.Runtime{}, Access: fakeAccess{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	surf := &surface{sent: map[rtsandbox.ChannelKey][]string{}, got: make(chan struct{}, 1)}
	if err := r.AddSurface("fake", surf); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{
		Target: "guest", Timeout: 30 * time.Second,
		Run: func(ctx context.Context, task string, _ RunContext) (string, error) {
			return worker.Run(ctx, task)
		},
		Deliver: PostOutcome(reports{r}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Dispose(context.Background())

	const ch rtsandbox.ChannelKey = "fake:lobby"
	member := rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "fake:alice"}
	tool := &Tool{Delegator: d, Target: "guest"}
	answer, err := tool.Run(context.Background(), json.RawMessage(`{"title":"The answer","task":"Find the answer."}`),
		rtsandbox.Binding{Channel: ch, Speaker: member, Tier: access.Member})
	if err != nil || !strings.HasPrefix(answer, "Research #1 started.") || !strings.Contains(answer, "posted to this channel") {
		t.Fatalf("tool answer = %q, %v", answer, err)
	}
	owner := rtsandbox.Speaker{ID: "o", Name: "Owner", PrincipalID: "fake:owner"}
	if answer, err := tool.Run(context.Background(), json.RawMessage(`{"title":"x","task":"y"}`),
		rtsandbox.Binding{Channel: ch, Speaker: owner, Tier: access.Owner}); err != nil || answer != "Research was not started: Delegation scope refused." {
		t.Errorf("owner tool answer = %q, %v", answer, err)
	}
	if _, err := tool.Run(context.Background(), json.RawMessage(`{"title":1}`), rtsandbox.Binding{Channel: ch, Speaker: member, Tier: access.Member}); err == nil {
		t.Error("malformed input accepted")
	}
	if err := d.Idle(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(surf.chunks(ch), "\n")
	for _, want := range []string{"Research #1 (The answer) is ready:", "The answer is 42 (source: http://facts.example.com/a).", "Page said: URL: http://facts.example.com/a"} {
		if !strings.Contains(got, want) {
			t.Errorf("channel text lacks %q:\n%s", want, got)
		}
	}
}

// Jobs cancelled on shutdown report "ran out of time" to the channel.
func TestDisposeReportsToChannel(t *testing.T) {
	r, err := router.New(router.Options{Door: door.New(nil), Channels: fakeChannels{}, Runtime: &fakeruntime.Runtime{}, Access: fakeAccess{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	surf := &surface{sent: map[rtsandbox.ChannelKey][]string{}, got: make(chan struct{}, 1)}
	_ = r.AddSurface("fake", surf)
	started := make(chan struct{})
	d, _ := New(Options{Target: "guest", Deliver: PostOutcome(reports{r}), Run: func(ctx context.Context, _ string, _ RunContext) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	}})
	req := request()
	req.Channel = "fake:lobby"
	req.Title = "Line\nbreak"
	if _, err := d.Start(req); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := d.Dispose(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := surf.chunks("fake:lobby"); len(got) != 1 || got[0] != "Research #1 (Line break) failed: the worker ran out of time" {
		t.Errorf("chunks = %q", got)
	}
}
