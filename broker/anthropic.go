package broker

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The Anthropic Messages routes (docs/protocol.md, "Model calls"): served only when the
// model's API is anthropic, and the only routes that carry the model
// credential then, as x-api-key with an anthropic-version. The worker's
// body is rebuilt by modelapi.NormalizeMessages under the host's model,
// output ceiling and thinking level; a refusal is answered 400 in the
// Anthropic error shape, so that clients resend without the refused part
// instead of retrying. Upstream answers keep their status: an error status
// (429, 529, "prompt is too long") is relayed with its filtered body and
// allow-listed headers, so that the worker can retry or shorten.

const (
	// anthropicKeyHeader carries the model credential on these routes.
	anthropicKeyHeader = "X-Api-Key"
	// defaultAnthropicVersion is sent when the worker names none.
	defaultAnthropicVersion = "2023-06-01"
	// maxAnthropicHeader bounds a forwarded anthropic-version or
	// anthropic-beta value (docs/session.md, "Routes and statuses").
	maxAnthropicHeader = 4096
	// refuseStream is the refusal of stream:true when the host does not
	// allow streaming.
	refuseStream = "Streaming is not enabled on this host"
)

// anthropicRoute reports whether path is one of the Anthropic routes and
// the model speaks that API.
func (b *Broker) anthropicRoute(path string) bool {
	return b.anthropic() && (path == wire.RouteAnthropicMessages || path == wire.RouteAnthropicCountTokens)
}

// sdkRoute reports whether path is a model route at an official SDK's own
// path (an Anthropic route, or RouteOpenAIChat), served for the API the
// model speaks: those accept the SDK's headers (checkHeaders).
func (b *Broker) sdkRoute(path string) bool {
	return b.anthropicRoute(path) || !b.anthropic() && path == wire.RouteOpenAIChat
}

// serveMessages serves both Anthropic routes.
func serveMessages(ctx context.Context, t *Turn, req request) outcome {
	count := req.path == wire.RouteAnthropicCountTokens
	msg, err := modelapi.NormalizeMessages(req.obj, modelapi.MessagesParams{
		Model: t.b.cfg.Model, MaxOutputTokens: int64(t.b.cfg.MaxOutputTokens),
		Level: t.thinking(), CountTokens: count, Budget: req.budget,
	})
	var ref *modelapi.Refusal
	switch {
	case errors.Is(err, jsontree.ErrStopped):
		return fail("call canceled")
	case errors.As(err, &ref):
		// The message may quote a guest's block type: keep the record
		// content-free.
		return messagesRefusal(ref, "anthropic payload refused by the messages rule")
	case err != nil:
		return fail("anthropic parameters invalid")
	}
	streamed := msg.Stream != nil && *msg.Stream
	if streamed && !t.b.cfg.Stream {
		return messagesRefusal(&modelapi.Refusal{Message: refuseStream}, "stream asked, not allowed by the host")
	}
	key, err := t.b.cfg.APIKey(ctx, t.binding)
	if err != nil || key == "" {
		return missingKey(err)
	}
	payload, err := marshal(msg)
	if err != nil {
		return fail("cannot encode model request")
	}
	req.sent()
	query := ""
	if req.beta {
		query = betaQuery
	}
	call := upstream.Call{
		URL:  t.b.cfg.ModelURL.Join(strings.TrimPrefix(req.path, "/anthropic"), query),
		Body: payload, Key: key, KeyHeader: anthropicKeyHeader, Header: anthropicHeaders(req.header),
		Accept: acceptStream,
	}
	send := func(ctx context.Context, call upstream.Call) outcome { return t.pass(ctx, req.w, call, streamed) }
	if count {
		return send(ctx, call) // counting costs the call, no tokens
	}
	return t.spend(ctx, call, msg, int(msg.MaxTokens), send)
}

// messagesRefusal is the 400 answer of a refused Anthropic request.
func messagesRefusal(ref *modelapi.Refusal, detail string) outcome {
	status, body := ref.Render()
	return outcome{status: status, body: body, json: true, class: refModelPayload.class, detail: detail}
}

// anthropicHeaders are the worker's headers forwarded on these routes:
// anthropic-version (a default when absent) and anthropic-beta, each when
// at most maxAnthropicHeader bytes. Nothing else of the worker's is sent.
func anthropicHeaders(in http.Header) http.Header {
	out := http.Header{"Anthropic-Version": {defaultAnthropicVersion}}
	for _, name := range []string{"Anthropic-Version", "Anthropic-Beta"} {
		if v := strings.Join(in.Values(name), ","); v != "" && len(v) <= maxAnthropicHeader {
			out[name] = []string{v}
		}
	}
	return out
}
