// Package hosttool holds the host tools rtsandbox ships: webhook tools that
// an operator declares in the config, and the built-in clock. Both satisfy
// rtsandbox.HostTool, the interface programs embedding rtsandbox implement
// for their own tools. Host tools run on the host with the host-bound
// channel and speaker; the broker bounds them in time and result size.
//
// Web pages, read by web_fetch and by the research worker through Extract,
// are guest-chosen, so their extraction is bounded whatever the markup. It
// streams the tokens of x/net's html.Tokenizer instead of building a tree:
// html.Parse copies every formatting element left open, attributes and
// all, into each new block (a 43 KB page took 482 MB, 180 KB ran the host
// out of memory) and takes no context. A pre-pass first cuts every tag to
// 64 attributes, because the Tokenizer allocates for each attribute of a
// tag, read or not, and de-duplicates their names with a map. The bounds:
// 2 MiB of page read (MaxParseBytes), 64 attributes per tag, 256 open
// elements tracked, 64 KiB of text out (MaxExtractBytes), the context
// checked every 256 tokens; within them any page costs at most 64 MiB of
// allocation and a second of CPU (docs/benchmarks.md).
package hosttool

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// ErrBadAnswer marks a webhook answer that is not {"text": "…"}.
var ErrBadAnswer = fmt.Errorf("%w: webhook answer is not {\"text\":string}", rtsandbox.ErrUpstream)

// Webhook is a host tool served by an operator's HTTPS endpoint. Each call
// POSTs {"input":…,"channel":…,"speaker":{"id","name","principal_id"}} and
// expects 200 with {"text":"…"}; anything else fails the call. The request
// follows every upstream rule (fixed URL, rebuilt headers, no redirects,
// no proxy, 1 MiB answers) and an answer that echoes the bearer, in any
// form upstream.Forms lists, is refused: the JSON answer as decoded, and
// the text returned.
type Webhook struct {
	// URL is the webhook's endpoint, checked by upstream.ParseEndpoint
	// where it was read; the zero Endpoint fails every call.
	URL upstream.Endpoint
	// Key returns the bearer for this call, read from the host each time;
	// nil or "" sends no Authorization header.
	Key    func() rtsandbox.Secret
	Client *upstream.Client
}

// webhookRequest is the body sent to the webhook, in wire order.
type webhookRequest struct {
	Input   json.RawMessage   `json:"input"`
	Channel string            `json:"channel"`
	Speaker rtsandbox.Speaker `json:"speaker"`
}

// Run calls the webhook with the guest's arguments and the host-bound
// context.
func (w *Webhook) Run(ctx context.Context, input json.RawMessage, tc rtsandbox.Binding) (string, error) {
	body, err := jsonjs.Marshal(webhookRequest{Input: input, Channel: string(tc.Channel), Speaker: tc.Speaker})
	if err != nil {
		return "", fmt.Errorf("webhook request: %w", err)
	}
	var key rtsandbox.Secret
	if w.Key != nil {
		key = w.Key()
	}
	resp, err := w.Client.Post(ctx, upstream.Call{URL: w.URL, Body: body, Key: key, Status: http.StatusOK})
	if err != nil {
		return "", err
	}
	if err := upstream.CheckJSON(resp, key.Reveal()); err != nil {
		return "", err
	}
	var answer struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(resp, &answer); err != nil || answer.Text == nil {
		return "", ErrBadAnswer
	}
	// The JSON check saw the strings as its scanner decodes them; check the
	// text exactly as it is passed on too (json.Unmarshal, unlike the
	// scanner, turns invalid UTF-8 into U+FFFD).
	if err := upstream.CheckText(*answer.Text, key.Reveal()); err != nil {
		return "", err
	}
	return *answer.Text, nil
}
