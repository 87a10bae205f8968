// Package fakediscord is an in-process Discord for tests: a gateway
// websocket and the REST routes the host uses, speaking Discord's wire
// format, so that a real discordgo session can run against it with no
// network.
//
// Point a client at it without touching discordgo's package variables:
// use Client as the session's HTTP client (it sends every request for
// discord.com to the fake and refuses any other host) and Dialer as its
// websocket dialer (it dials only the fake). GET /api/v*/gateway answers
// the fake's own ws URL.
//
// Gateway: Hello (op 10), Identify (op 2; a wrong token is closed with
// 4004), heartbeats (op 1 → op 11), Resume (op 6 → RESUMED), READY, and
// dispatches the test sends with Post (MESSAGE_CREATE), Slash
// (INTERACTION_CREATE) or Dispatch. REST: see routes; every request is
// recorded as a Call, in order.
package fakediscord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Defaults of Options.
const (
	DefaultBotID   = "1000000000000000001"
	DefaultAppID   = "1000000000000000002"
	DefaultBotName = "roundtable"
	// HeartbeatInterval is what Hello announces, in ms: long enough that a
	// test never waits on the ticker.
	HeartbeatInterval = 45000
)

// Options configure a Server.
type Options struct {
	// Token is the bot token the fake accepts (without "Bot "); required.
	Token                 string
	BotID, AppID, BotName string
	// MaxUploadBytes is the file bytes one message may carry, as a
	// server's upload limit; more is refused with 413 (code 40005).
	// 0 means DefaultMaxUploadBytes.
	MaxUploadBytes int64
}

// DefaultMaxUploadBytes is the upload limit of a server without boosts.
const DefaultMaxUploadBytes = 10 << 20

// maxFiles is Discord's bound on the attachments of one message.
const maxFiles = 10

// Call is one recorded REST request.
type Call struct {
	Seq    int    // order among all calls, from 1
	Method string // GET, POST, PUT, PATCH, DELETE
	Path   string // without /api/v<n>, such as /channels/42/messages
	// Body is the JSON body: of a multipart/form-data request, its
	// payload_json part.
	Body json.RawMessage
	// Files are the files[n] parts of a multipart/form-data request, in
	// the order of their part names' n.
	Files  []File
	Status int // what the fake answered
}

// File is one uploaded file part.
type File struct {
	Field       string // the part's form name, such as files[0]
	Name        string // its filename
	ContentType string
	Data        []byte
}

// Decode unmarshals the request body into v.
func (c Call) Decode(v any) error { return json.Unmarshal(c.Body, v) }

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	opts  Options
	srv   *httptest.Server
	trans *http.Transport
	ids   atomic.Int64

	wg sync.WaitGroup // gateway connections

	mu         sync.Mutex
	closed     bool
	conns      map[*gwConn]bool
	calls      []Call
	identifies []Identify
	messages   map[string]Message // by id
	acked      map[string]string  // interaction token → callback state: "" unknown, "open", "acked"
	changed    chan struct{}      // closed and replaced on every change
}

// New starts a fake Discord on a loopback port.
func New(opts Options) *Server {
	if opts.BotID == "" {
		opts.BotID = DefaultBotID
	}
	if opts.AppID == "" {
		opts.AppID = DefaultAppID
	}
	if opts.BotName == "" {
		opts.BotName = DefaultBotName
	}
	if opts.MaxUploadBytes == 0 {
		opts.MaxUploadBytes = DefaultMaxUploadBytes
	}
	s := &Server{
		opts:     opts,
		conns:    map[*gwConn]bool{},
		messages: map[string]Message{},
		acked:    map[string]string{},
		changed:  make(chan struct{}),
	}
	s.ids.Store(1_300_000_000_000_000_000)
	s.srv = httptest.NewServer(s.routes())
	addr := s.srv.Listener.Addr().String()
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	s.trans = &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 4}
	return s
}

// BotID returns the bot's user id.
func (s *Server) BotID() string { return s.opts.BotID }

// AppID returns the application id.
func (s *Server) AppID() string { return s.opts.AppID }

// Client returns an HTTP client that sends requests for discord.com to the
// fake and refuses every other host.
func (s *Server) Client() *http.Client {
	return &http.Client{Transport: rewrite{s}, Timeout: 10 * time.Second}
}

type rewrite struct{ s *Server }

func (rw rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Hostname() != "discord.com" {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("fakediscord: refusing a request for host %q: no network in tests", req.URL.Hostname())
	}
	out := req.Clone(req.Context())
	u := *req.URL
	u.Scheme, u.Host = "http", rw.s.srv.Listener.Addr().String()
	out.URL, out.Host = &u, "discord.com"
	return rw.s.trans.RoundTrip(out)
}

// Dialer returns a websocket dialer that connects only to the fake,
// whatever address it is asked for.
func (s *Server) Dialer() *websocket.Dialer {
	addr := s.srv.Listener.Addr().String()
	return &websocket.Dialer{
		HandshakeTimeout: 5 * time.Second,
		NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
	}
}

// Close ends every gateway connection, stops the server and waits for its
// goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.DropGateway()
	s.wg.Wait()
	s.srv.Close()
	s.trans.CloseIdleConnections()
}

// DropGateway cuts every gateway connection without a close frame, as a
// network failure does; the clients may connect (and resume) again.
func (s *Server) DropGateway() {
	s.mu.Lock()
	conns := make([]*gwConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.ws.Close()
	}
}

func (s *Server) nextID() string { return strconv.FormatInt(s.ids.Add(1), 10) }

// notifyLocked wakes Wait callers; s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Calls returns the REST calls so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Identifies returns the Identify payloads received so far.
func (s *Server) Identifies() []Identify {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.identifies)
}

// Wait returns the calls once done(calls) holds, or ctx's error with the
// calls so far.
func (s *Server) Wait(ctx context.Context, done func([]Call) bool) ([]Call, error) {
	for {
		s.mu.Lock()
		calls, ch := slices.Clone(s.calls), s.changed
		s.mu.Unlock()
		if done(calls) {
			return calls, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return calls, ctx.Err()
		}
	}
}

// WaitIdentified returns once a gateway session has been sent READY, so
// that Post and Dispatch reach it, or ctx's error. A client's HTTP side
// can be up before its gateway is: a test that posts right after it would
// race the Identify.
func (s *Server) WaitIdentified(ctx context.Context) error {
	for {
		s.mu.Lock()
		ch, ok := s.changed, false
		for c := range s.conns {
			ok = ok || c.identified.Load()
		}
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("fakediscord: no gateway session identified: %w", ctx.Err())
		}
	}
}

// Message returns a stored message (posted by a test or by the bot).
func (s *Server) Message(id string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[id]
	return m, ok
}

// Post stores m (filling ID, Timestamp and empty lists) and dispatches it
// as MESSAGE_CREATE to every identified session. It returns m as sent.
func (s *Server) Post(m Message) (Message, error) {
	if m.ID == "" {
		m.ID = s.nextID()
	}
	if m.Timestamp == "" {
		m.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if m.Type == 0 && m.MessageReference != nil && m.MessageReference.Type == ReferenceDefault {
		m.Type = TypeReply
	}
	for i := range m.MessageSnapshots {
		snap := &m.MessageSnapshots[i].Message
		if snap.Timestamp == "" {
			snap.Timestamp = m.Timestamp
		}
		snap.Attachments = nonNil(snap.Attachments)
	}
	m.Mentions = nonNil(m.Mentions)
	m.MentionRoles = nonNil(m.MentionRoles)
	m.Attachments = nonNil(m.Attachments)
	m.Embeds = nonNil(m.Embeds)
	s.mu.Lock()
	stored := m
	stored.GuildID, stored.Member = "", nil // a REST GET carries neither
	s.messages[m.ID] = stored
	s.mu.Unlock()
	return m, s.Dispatch("MESSAGE_CREATE", m)
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// Slash dispatches an application command interaction as
// INTERACTION_CREATE and returns its id and token.
func (s *Server) Slash(c Slash) (Interaction, error) {
	in := Interaction{ID: s.nextID(), Token: "itok-" + s.nextID()}
	type option struct {
		Name    string   `json:"name"`
		Type    int      `json:"type"`
		Options []option `json:"options,omitempty"`
	}
	data := map[string]any{
		"id": s.nextID(), "name": c.Root, "type": 1,
		"options": []option{{Name: c.Group, Type: 2, Options: []option{{Name: c.Sub, Type: 1}}}},
	}
	p := map[string]any{
		"id": in.ID, "application_id": s.opts.AppID, "type": 2, "token": in.Token, "version": 1,
		"data": data, "channel_id": c.ChannelID, "locale": "en-US",
		"app_permissions": "0", "entitlements": []any{},
	}
	user := c.User
	if c.GuildID != "" {
		p["guild_id"], p["context"] = c.GuildID, 0
		p["member"] = Member{Nick: c.Nick, Roles: nonNil(c.Roles), User: &user}
	} else {
		p["user"], p["context"] = user, 1
	}
	s.mu.Lock()
	s.acked[in.Token] = "open"
	s.mu.Unlock()
	return in, s.Dispatch("INTERACTION_CREATE", p)
}

// Dispatch sends event t with data d to every identified session.
func (s *Server) Dispatch(t string, d any) error {
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	s.mu.Lock()
	var conns []*gwConn
	for c := range s.conns {
		if c.identified.Load() {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	if len(conns) == 0 {
		return errors.New("fakediscord: no identified gateway session")
	}
	var errs []error
	for _, c := range conns {
		errs = append(errs, c.dispatch(t, raw))
	}
	return errors.Join(errs...)
}

// ---- gateway ----

type gwConn struct {
	ws         *websocket.Conn
	wmu        sync.Mutex
	seq        atomic.Int64
	identified atomic.Bool
}

func (c *gwConn) write(f frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteJSON(f)
}

// identify sends READY or RESUMED and marks the session identified under
// the write lock, before the frame leaves: a client that has seen READY
// can be sent events at once, and an event that a concurrent Dispatch
// sends to this session waits for the lock, so it follows READY.
func (c *gwConn) identify(t string, d json.RawMessage) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.identified.Store(true)
	seq := c.seq.Add(1)
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := c.ws.WriteJSON(frame{Op: opDispatch, D: d, S: &seq, T: &t}); err != nil {
		c.identified.Store(false)
		return err
	}
	return nil
}

func (c *gwConn) dispatch(t string, d json.RawMessage) error {
	seq := c.seq.Add(1)
	return c.write(frame{Op: opDispatch, D: d, S: &seq, T: &t})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed shapes are marshalled
	}
	return b
}

func (s *Server) handleGateway(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{HandshakeTimeout: 5 * time.Second}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered
	}
	c := &gwConn{ws: ws}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[c] = true
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		ws.Close()
		s.wg.Done()
	}()
	s.serveGateway(c)
}

func (s *Server) serveGateway(c *gwConn) {
	if c.write(frame{Op: opHello, D: mustJSON(map[string]int{"heartbeat_interval": HeartbeatInterval})}) != nil {
		return
	}
	for {
		var f frame
		if err := c.ws.ReadJSON(&f); err != nil {
			return
		}
		switch f.Op {
		case opHeartbeat:
			if c.write(frame{Op: opHeartbeatAck}) != nil {
				return
			}
		case opIdentify:
			var id identifyIn
			if json.Unmarshal(f.D, &id) != nil || id.Token != "Bot "+s.opts.Token {
				s.closeAuth(c)
				return
			}
			s.mu.Lock()
			s.identifies = append(s.identifies, id.Identify)
			s.notifyLocked()
			s.mu.Unlock()
			ready := map[string]any{
				"v": 9, "session_id": "fake-session", "resume_gateway_url": s.wsURL(),
				"user":        User{ID: s.opts.BotID, Username: s.opts.BotName, Bot: true},
				"application": map[string]any{"id": s.opts.AppID, "flags": 0},
				"guilds":      []any{}, "private_channels": []any{},
			}
			if c.identify("READY", mustJSON(ready)) != nil {
				return
			}
			s.mu.Lock()
			s.notifyLocked() // WaitIdentified
			s.mu.Unlock()
		case opResume:
			var res struct {
				Token string `json:"token"`
			}
			if json.Unmarshal(f.D, &res) != nil || res.Token != "Bot "+s.opts.Token {
				s.closeAuth(c)
				return
			}
			if c.identify("RESUMED", json.RawMessage(`{}`)) != nil {
				return
			}
		}
	}
}

// closeAuth closes c as Discord does on a bad token.
func (s *Server) closeAuth(c *gwConn) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	msg := websocket.FormatCloseMessage(4004, "Authentication failed.")
	_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
}

func (s *Server) wsURL() string {
	return "ws://" + s.srv.Listener.Addr().String() + "/gateway"
}

// ---- REST ----

// answer is a route's reply: status and JSON body (nil: none).
type answer struct {
	status int
	body   any
}

// request is what a route gets of a request: its JSON body (of a
// multipart request, the payload_json part) and uploaded files.
type request struct {
	body  []byte
	files []File
}

type route func(r *http.Request, in request) answer

// jsonRoute is a route that reads the JSON body only.
func jsonRoute(h func(r *http.Request, body []byte) answer) route {
	return func(r *http.Request, in request) answer { return h(r, in.body) }
}

var apiPrefix = regexp.MustCompile(`^/api/v[0-9]+`)

// routes is the fake's route table.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /gateway/", s.handleGateway)
	mux.HandleFunc("GET /gateway", s.handleGateway)
	api := func(pattern string, auth bool, h func(r *http.Request, body []byte) answer) {
		mux.Handle(pattern, s.record(auth, jsonRoute(h)))
	}
	api("GET /api/{v}/gateway", false, s.getGateway)
	api("GET /api/{v}/gateway/bot", true, s.getGateway)
	mux.Handle("POST /api/{v}/channels/{channel}/messages", s.record(true, s.postMessage))
	api("GET /api/{v}/channels/{channel}/messages/{message}", true, s.getMessage)
	api("PATCH /api/{v}/channels/{channel}/messages/{message}", true, s.editMessage)
	api("DELETE /api/{v}/channels/{channel}/messages/{message}", true, s.deleteMessage)
	api("POST /api/{v}/channels/{channel}/typing", true, func(*http.Request, []byte) answer { return answer{http.StatusNoContent, nil} })
	api("PUT /api/{v}/applications/{app}/commands", true, s.putCommands)
	api("POST /api/{v}/interactions/{id}/{token}/callback", false, s.callback)
	api("PATCH /api/{v}/webhooks/{app}/{token}/messages/{message}", false, s.editOriginal)
	api("/", false, func(*http.Request, []byte) answer { return errorAnswer(http.StatusNotFound, 0, "404: Not Found") })
	return mux
}

func errorAnswer(status, code int, msg string) answer {
	return answer{status, map[string]any{"code": code, "message": msg}}
}

// record wraps h: reads the body (a JSON body, or a multipart/form-data
// upload), checks the bot token when auth is set, records the call and
// writes the answer.
func (s *Server) record(auth bool, h route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, a, ok := s.read(r)
		switch {
		case !ok: // a is the refusal
		case auth && r.Header.Get("Authorization") != "Bot "+s.opts.Token:
			a = errorAnswer(http.StatusUnauthorized, 0, "401: Unauthorized")
		default:
			a = h(r, in)
		}
		body := in.body
		if !json.Valid(body) {
			body = nil
		}
		s.mu.Lock()
		s.calls = append(s.calls, Call{
			Seq: len(s.calls) + 1, Method: r.Method,
			Path: apiPrefix.ReplaceAllString(r.URL.Path, ""), Body: body, Files: in.files, Status: a.status,
		})
		s.notifyLocked()
		s.mu.Unlock()
		if a.body == nil {
			w.WriteHeader(a.status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_ = json.NewEncoder(w).Encode(a.body)
	})
}

func (s *Server) getGateway(*http.Request, []byte) answer {
	return answer{http.StatusOK, map[string]any{"url": s.wsURL()}}
}

// maxContent is Discord's message content limit.
const maxContent = 2000

// postMessage creates a message as Discord does: content of at most
// 2,000 units and at most ten files within the upload limit; a message
// needs content or a file.
func (s *Server) postMessage(r *http.Request, req request) answer {
	var in struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(req.body, &in); err != nil || (in.Content == "" && len(req.files) == 0) {
		return errorAnswer(http.StatusBadRequest, 50006, "Cannot send an empty message")
	}
	if utf16Len(in.Content) > maxContent || len(req.files) > maxFiles {
		return errorAnswer(http.StatusBadRequest, 50035, "Invalid Form Body")
	}
	m := Message{
		ID: s.nextID(), ChannelID: r.PathValue("channel"), Content: in.Content,
		Author:    User{ID: s.opts.BotID, Username: s.opts.BotName, Bot: true},
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
		Mentions:  []User{}, MentionRoles: []string{}, Attachments: []Attachment{}, Embeds: []json.RawMessage{},
	}
	for _, f := range req.files {
		id := s.nextID()
		m.Attachments = append(m.Attachments, Attachment{
			ID: id, Filename: f.Name, Size: len(f.Data), ContentType: f.ContentType,
			URL: "https://cdn.discordapp.com/attachments/" + m.ChannelID + "/" + id + "/" + url.PathEscape(f.Name),
		})
	}
	s.mu.Lock()
	s.messages[m.ID] = m
	s.mu.Unlock()
	// Discord echoes the bot's own message on the gateway, as it does.
	_ = s.Dispatch("MESSAGE_CREATE", m)
	return answer{http.StatusOK, m}
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

func (s *Server) getMessage(r *http.Request, _ []byte) answer {
	s.mu.Lock()
	m, ok := s.messages[r.PathValue("message")]
	s.mu.Unlock()
	if !ok || m.ChannelID != r.PathValue("channel") {
		return errorAnswer(http.StatusNotFound, 10008, "Unknown Message")
	}
	return answer{http.StatusOK, m}
}

// editMessage changes the content of one of the bot's messages, as
// Discord does: an unknown message is 404 (10008), another author's 403
// (50005), content over 2,000 units 400 (50035); the edit is dispatched
// as MESSAGE_UPDATE and answered with the message.
func (s *Server) editMessage(r *http.Request, body []byte) answer {
	var in struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return errorAnswer(http.StatusBadRequest, 50035, "Invalid Form Body")
	}
	if in.Content != nil && utf16Len(*in.Content) > maxContent {
		return errorAnswer(http.StatusBadRequest, 50035, "Invalid Form Body")
	}
	s.mu.Lock()
	m, ok := s.messages[r.PathValue("message")]
	switch {
	case !ok || m.ChannelID != r.PathValue("channel"):
		s.mu.Unlock()
		return errorAnswer(http.StatusNotFound, 10008, "Unknown Message")
	case m.Author.ID != s.opts.BotID:
		s.mu.Unlock()
		return errorAnswer(http.StatusForbidden, 50005, "Cannot edit a message authored by another user")
	}
	if in.Content != nil {
		m.Content = *in.Content
	}
	edited := time.Now().UTC().Format(time.RFC3339Nano)
	m.EditedTimestamp = &edited
	s.messages[m.ID] = m
	s.mu.Unlock()
	_ = s.Dispatch("MESSAGE_UPDATE", m)
	return answer{http.StatusOK, m}
}

// deleteMessage removes a message (204), dispatched as MESSAGE_DELETE; an
// unknown one is 404 (10008).
func (s *Server) deleteMessage(r *http.Request, _ []byte) answer {
	id, channel := r.PathValue("message"), r.PathValue("channel")
	s.mu.Lock()
	m, ok := s.messages[id]
	if ok && m.ChannelID == channel {
		delete(s.messages, id)
	}
	s.mu.Unlock()
	if !ok || m.ChannelID != channel {
		return errorAnswer(http.StatusNotFound, 10008, "Unknown Message")
	}
	_ = s.Dispatch("MESSAGE_DELETE", map[string]string{"id": id, "channel_id": channel})
	return answer{http.StatusNoContent, nil}
}

func (s *Server) putCommands(r *http.Request, body []byte) answer {
	if r.PathValue("app") != s.opts.AppID {
		return errorAnswer(http.StatusForbidden, 50001, "Missing Access")
	}
	var cmds []map[string]any
	if err := json.Unmarshal(body, &cmds); err != nil {
		return errorAnswer(http.StatusBadRequest, 50035, "Invalid Form Body")
	}
	for _, c := range cmds {
		c["id"], c["application_id"], c["version"] = s.nextID(), s.opts.AppID, s.nextID()
	}
	return answer{http.StatusOK, cmds}
}

func (s *Server) callback(r *http.Request, body []byte) answer {
	token := r.PathValue("token")
	var in struct {
		Type int `json:"type"`
	}
	if json.Unmarshal(body, &in) != nil || in.Type == 0 {
		return errorAnswer(http.StatusBadRequest, 50035, "Invalid Form Body")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.acked[token] {
	case "":
		return errorAnswer(http.StatusNotFound, 10062, "Unknown interaction")
	case "acked":
		return errorAnswer(http.StatusBadRequest, 40060, "Interaction has already been acknowledged.")
	}
	s.acked[token] = "acked"
	return answer{http.StatusNoContent, nil}
}

func (s *Server) editOriginal(r *http.Request, body []byte) answer {
	if r.PathValue("app") != s.opts.AppID || r.PathValue("message") != "@original" {
		return errorAnswer(http.StatusNotFound, 10015, "Unknown Webhook")
	}
	s.mu.Lock()
	state := s.acked[r.PathValue("token")]
	s.mu.Unlock()
	if state != "acked" {
		return errorAnswer(http.StatusNotFound, 10015, "Unknown Webhook")
	}
	var in struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return errorAnswer(http.StatusBadRequest, 50035, "Invalid Form Body")
	}
	return answer{http.StatusOK, Message{
		ID: s.nextID(), Content: in.Content, Flags: 64,
		Author:    User{ID: s.opts.BotID, Username: s.opts.BotName, Bot: true},
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
		Mentions:  []User{}, MentionRoles: []string{}, Attachments: []Attachment{}, Embeds: []json.RawMessage{},
	}}
}

// WebhookPath is the recorded path of an interaction's @original edit.
func (s *Server) WebhookPath(in Interaction) string {
	return "/webhooks/" + s.opts.AppID + "/" + url.PathEscape(in.Token) + "/messages/@original"
}

// CallbackPath is the recorded path of an interaction's callback.
func (s *Server) CallbackPath(in Interaction) string {
	return "/interactions/" + in.ID + "/" + url.PathEscape(in.Token) + "/callback"
}
