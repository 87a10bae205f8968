package router

import (
	"context"
	"errors"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const guests rtsandbox.ChannelKey = "fake:guests"

// fixtureAccess is the reference's identity fixture: alice is a member
// with principal p_alice, owner is the owner, everyone else unresolved.
type fixtureAccess struct{}

func (fixtureAccess) Resolve(a access.Actor) (rtsandbox.Speaker, access.Tier) {
	switch a.Subject {
	case "alice":
		return rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "p_alice"}, access.Member
	case "owner":
		return rtsandbox.Speaker{ID: "owner", Name: "Owner", PrincipalID: "owner"}, access.Owner
	}
	return rtsandbox.Speaker{}, access.None
}

type (
	turnCall    = fakeruntime.Call
	fakeRuntime = fakeruntime.Runtime
)

// fakeSurface records what the router posts. The hooks, set before any
// message, may fail, block or panic.
type fakeSurface struct {
	failSend  func(chunk string) error
	onSend    func(ctx context.Context, ch rtsandbox.ChannelKey, chunk string) error
	onTyping  func(ctx context.Context, ch rtsandbox.ChannelKey) error
	previews  bool // take KindPreview deliveries
	onDeliver func(d Delivery)

	mu         sync.Mutex
	sent       []string
	deliveries []Delivery
	typing     []string // the message ids typing was shown for
	events     []string // "typing <key>" and "send <key>" in order
}

func (s *fakeSurface) Deliver(ctx context.Context, d Delivery) error {
	ch, chunk := d.Channel, d.Chunk
	if s.onDeliver != nil {
		s.onDeliver(d)
	}
	if s.onSend != nil {
		if err := s.onSend(ctx, ch, chunk); err != nil {
			return err
		}
	}
	if s.failSend != nil {
		if err := s.failSend(chunk); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, chunk)
	s.deliveries = append(s.deliveries, d)
	s.events = append(s.events, "send "+string(ch))
	return nil
}

func (s *fakeSurface) Previews() bool { return s.previews }

func (s *fakeSurface) Typing(ctx context.Context, ch rtsandbox.ChannelKey, id string) error {
	if s.onTyping != nil {
		if err := s.onTyping(ctx, ch); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.typing = append(s.typing, id)
	s.events = append(s.events, "typing "+string(ch))
	return nil
}

// Deliveries returns every delivery, in order.
func (s *fakeSurface) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// TypingFor returns the message ids typing was shown for, in order.
func (s *fakeSurface) TypingFor() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.typing)
}

func (s *fakeSurface) Sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

func (s *fakeSurface) Events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// memChannels is an in-memory ChannelSet; failing makes changes fail.
type memChannels struct {
	mu      sync.Mutex
	keys    map[rtsandbox.ChannelKey]bool
	failing bool
}

func newMemChannels(keys ...rtsandbox.ChannelKey) *memChannels {
	m := &memChannels{keys: map[rtsandbox.ChannelKey]bool{}}
	for _, k := range keys {
		m.keys[k] = true
	}
	return m
}

func (m *memChannels) Enabled(k rtsandbox.ChannelKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys[k]
}

func (m *memChannels) Enable(k rtsandbox.ChannelKey) error  { return m.set(k, true) }
func (m *memChannels) Disable(k rtsandbox.ChannelKey) error { return m.set(k, false) }

func (m *memChannels) set(k rtsandbox.ChannelKey, on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing {
		return errors.New("disk full")
	}
	m.keys[k] = on
	return nil
}

// logRecord is one captured log line.
type logRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

type recorder struct {
	mu   *sync.Mutex
	recs *[]logRecord
}

func newRecorder() recorder { return recorder{mu: &sync.Mutex{}, recs: &[]logRecord{}} }

func (r recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r recorder) Handle(_ context.Context, rec slog.Record) error {
	lr := logRecord{Level: rec.Level, Msg: rec.Message, Attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool { lr.Attrs[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.recs = append(*r.recs, lr)
	return nil
}
func (r recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r recorder) WithGroup(string) slog.Handler      { return r }

// records returns the records at level Info or above.
func (r recorder) records() []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, l := range *r.recs {
		if l.Level >= slog.LevelInfo {
			out = append(out, l)
		}
	}
	return out
}

func (r recorder) messages() []string {
	var out []string
	for _, l := range r.records() {
		out = append(out, l.Level.String()+" "+l.Msg)
	}
	return out
}

type harness struct {
	r       *Router
	rt      *fakeRuntime
	surface *fakeSurface
	chans   ChannelSet
	log     recorder
}

type harnessOpt func(*Options)

func newHarness(t *testing.T, chans ChannelSet, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{rt: &fakeRuntime{}, surface: &fakeSurface{}, chans: chans, log: newRecorder()}
	o := Options{Channels: chans, Runtime: h.rt, Access: fixtureAccess{}, Logger: slog.New(h.log), TypingInterval: time.Hour, Door: openDoor{}}
	for _, f := range opts {
		f(&o)
	}
	if rt, ok := o.Runtime.(*fakeRuntime); ok {
		h.rt = rt
	}
	r, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := r.AddSurface("fake", h.surface); err != nil {
		t.Fatalf("AddSurface: %v", err)
	}
	h.r = r
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

func (h *harness) handle(t *testing.T, m Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.r.Handle(ctx, m)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handle(%+v) did not settle", m)
	}
	return err
}

// submit is Submit with its two answers on one channel: a drop decided at
// once arrives like one decided later.
func (h *harness) submit(m Message) <-chan error {
	done, err := h.r.Submit(m)
	if err != nil {
		c := make(chan error, 1)
		c <- err
		return c
	}
	return done
}

// mention is an addressed message by author id in ch.
func mention(ch rtsandbox.ChannelKey, id, name, text string) Message {
	return Message{Channel: ch, Author: Author{ID: id, Name: name}, Text: text, MentionsBot: true}
}

// fallbackClaim stands in for the host agent-server claim (priority 100):
// it owns every channel and records what it admits.
type fallbackClaim struct {
	mu       sync.Mutex
	admitted []Message
}

func (c *fallbackClaim) Name() string                           { return "agents" }
func (c *fallbackClaim) Priority() int                          { return 100 }
func (c *fallbackClaim) Owns(rtsandbox.ChannelKey, string) bool { return true }
func (c *fallbackClaim) Stop(rtsandbox.ChannelKey) bool         { return false }
func (c *fallbackClaim) StartFresh(context.Context, rtsandbox.ChannelKey) (string, error) {
	return "agents", nil
}
func (c *fallbackClaim) Admit(m Message) (Admission, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admitted = append(c.admitted, m)
	return Admission{Failure: "agent turn failed", Run: func(context.Context, Port) error { return nil }}, ""
}

func (c *fallbackClaim) Admitted() []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.admitted)
}

// openStore opens a real channel store in a fresh private directory.
func openStore(t *testing.T, dir string, initial ...rtsandbox.ChannelKey) *channels.Store {
	t.Helper()
	s, err := channels.Open(dir, initial)
	if err != nil {
		t.Fatalf("channels.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The production implementations satisfy the router's interfaces.
var (
	_ ChannelSet = (*channels.Store)(nil)
	_ Resolver   = (*access.Policy)(nil)
)
