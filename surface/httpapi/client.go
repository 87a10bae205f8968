package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// MaxClientAnswerBytes bounds a wait answer the Client reads: one reply's
// chunks and files as the API encodes them (about 67 MiB at most, base64),
// with room to spare.
const MaxClientAnswerBytes = 96 << 20

// ErrRemote marks a refusal of the remote API: a status other than 200,
// with the API's fixed text.
var ErrRemote = errors.New("the chat API refused")

// Client talks to a running serve's HTTP chat API the way a router talks
// to a surface, so a terminal chat (console.Chat) can hold a conversation
// with a running host exactly as it holds a local one: Handle posts the
// message with "wait": true and hands each reply chunk to Surface.Deliver;
// Command runs fresh and stop with the owner token. The remote host's
// channel mode (sealed or session) is its own: the client never needs to
// know it.
//
// Tokens are read on every request. The transport uses no proxy and
// follows no redirect, so a token goes to URL's host and nowhere else.
// Build it with NewClient; one goroutine at a time calls it (the console
// sends one line after another).
type Client struct {
	// URL is the API's base, such as http://127.0.0.1:8787.
	URL *url.URL
	// Token is the guest token; OwnerToken the owner's, nil or "" when
	// the operator gave none (owner commands are then refused here).
	Token, OwnerToken func() string
	// Surface receives each reply; set it before the first Handle.
	Surface router.Surface

	http *http.Client
}

// NewClient returns a client of the API at base: without proxy, following
// no redirect.
func NewClient(base *url.URL, token, ownerToken func() string) *Client {
	return &Client{URL: base, Token: token, OwnerToken: ownerToken, http: &http.Client{
		Transport:     &http.Transport{Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

var _ interface {
	Handle(context.Context, router.Message) error
	Command(context.Context, router.Command) (string, error)
} = (*Client)(nil)

// clientMessage is the request body of POST /api/v1/messages.
type clientMessage struct {
	Channel     string       `json:"channel"`
	Author      clientAuthor `json:"author"`
	Text        string       `json:"text"`
	MentionsBot bool         `json:"mentions_bot"`
	Wait        bool         `json:"wait"`
}

type clientAuthor struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// Handle posts m and waits for its replies, which go to Surface.Deliver
// one chunk at a time (a reply's files with its last chunk). A message the
// remote router dropped returns an error naming the reason.
func (c *Client) Handle(ctx context.Context, m router.Message) error {
	body, err := json.Marshal(clientMessage{Channel: string(m.Channel), Author: clientAuthor{ID: m.Author.ID, Name: m.Author.Name},
		Text: m.Text, MentionsBot: true, Wait: true})
	if err != nil {
		return err
	}
	if err := c.Surface.Typing(ctx, m.Channel, m.ID); err != nil {
		return err
	}
	var w waitResponse
	if err := c.call(ctx, "/api/v1/messages", c.Token, body, &w); err != nil {
		return err
	}
	if w.Dropped {
		return fmt.Errorf("the remote host dropped the message: %s", w.Reason)
	}
	for _, r := range w.Replies {
		if err := c.deliver(ctx, m, r); err != nil {
			return err
		}
	}
	return nil
}

// deliver hands one reply to the surface: its chunks in order, the files
// with the last one (alone when the reply has no text).
func (c *Client) deliver(ctx context.Context, m router.Message, r reply) error {
	files := make([]rtsandbox.File, len(r.Files))
	for i, f := range r.Files {
		files[i] = rtsandbox.File{Name: f.Name, Data: f.Data}
	}
	chunks := r.Chunks
	if len(chunks) == 0 {
		chunks = []string{""}
	}
	for i, chunk := range chunks {
		d := router.Delivery{Channel: m.Channel, InReplyTo: m.ID, Kind: router.KindReply, Chunk: chunk}
		if i == len(chunks)-1 {
			d.Files = files
		}
		if err := c.Surface.Deliver(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// Command runs the owner commands fresh and stop on the remote host and
// returns its fixed answer.
func (c *Client) Command(ctx context.Context, cmd router.Command) (string, error) {
	if cmd.Action != router.ActionFresh && cmd.Action != router.ActionStop {
		return "", fmt.Errorf("%s over the chat API client: %w", cmd.Action, rtsandbox.ErrRefused)
	}
	if c.OwnerToken == nil || c.OwnerToken() == "" {
		return "The remote host's owner commands need its owner token.", fmt.Errorf("no owner token: %w", rtsandbox.ErrRefused)
	}
	var a actionResponse
	path := "/api/v1/channels/" + url.PathEscape(string(cmd.Channel)) + "/" + cmd.Action
	if err := c.call(ctx, path, c.OwnerToken, []byte("{}"), &a); err != nil {
		return "", err
	}
	return a.Message, nil
}

// call POSTs body to path with the token and decodes a 200 answer into
// out; any other status is ErrRemote with the API's fixed text.
func (c *Client) call(ctx context.Context, path string, token func() string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL.JoinPath(path).String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token())
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxClientAnswerBytes+1))
	switch {
	case err != nil:
		return err
	case len(data) > MaxClientAnswerBytes:
		return fmt.Errorf("the chat API's answer is larger than %d MiB", MaxClientAnswerBytes>>20)
	case resp.StatusCode != http.StatusOK:
		var e errorBody
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return fmt.Errorf("%w: %s: %s", ErrRemote, resp.Status, e.Error)
	}
	return json.Unmarshal(data, out)
}
