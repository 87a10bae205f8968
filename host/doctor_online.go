// doctor --online: one request to the model, and an MCP session with each
// MCP server.

package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// probeTimeout bounds each online probe.
const probeTimeout = 15 * time.Second

// probeBody is what a probe posts: an empty JSON object, which names no
// model and holds no messages, so no endpoint can run a completion or a
// tool on it and no tokens are spent. The endpoint still has to accept
// the connection, the TLS handshake and (for a 400 rather than a 401) the
// key.
const probeBody = `{}`

// endpoint is one online target.
type endpoint struct {
	name, url string
	key       config.EnvVar
	accept    string
	// keyHeader carries the key as it is (x-api-key for Anthropic);
	// "" sends Authorization: Bearer <key>.
	keyHeader string
}

// onlineChecks probes the model and every MCP server through the
// upstream package's hardened transport: no environment proxy, bounded
// dial and TLS times, no redirect followed. The configured key is sent,
// only to the configured URL, exactly as the broker would send it.
func onlineChecks(ctx context.Context, cfg *config.Config, getenv env) []Check {
	model := endpoint{name: "model online", url: cfg.Model.URL.String(), key: cfg.Model.APIKeyEnv, accept: "application/json"}
	if cfg.Model.API == rtsandbox.ModelAPIAnthropic {
		// The broker's Messages target, keyed as the broker sends it.
		model.url, model.keyHeader = cfg.Model.URL.Join("/v1/messages", "").String(), "X-Api-Key"
	}
	transport := upstream.NewTransport()
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // reported, never followed
	}}
	out := []Check{probe(ctx, hc, model, getenv)}
	client := upstream.New(transport)
	for _, s := range cfg.MCP {
		out = append(out, probeMCP(ctx, client, s, getenv))
	}
	return out
}

// probeMCP opens an MCP session with s as the broker does (initialize
// with the configured key, the session id kept), lists its tools, closes
// the session, and checks that every tool the config names is listed. No
// tool is called.
func probeMCP(ctx context.Context, client *upstream.Client, s config.MCPServer, getenv env) Check {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	t := endpoint{name: "mcp " + s.Name + " online", url: s.URL.String(), key: s.APIKeyEnv}
	listed, err := client.MCP(s.URL).ListTools(ctx, rtsandbox.Secret(s.APIKeyEnv.Lookup(getenv)))
	if err != nil {
		return judgeMCP(t, err)
	}
	names := make(map[string]bool, len(listed))
	for _, tool := range listed {
		names[tool.Name] = true
	}
	var missing []string
	for _, tool := range s.Tools {
		if !names[tool.Name] {
			missing = append(missing, tool.Name)
		}
	}
	if len(missing) > 0 {
		return fail(t.name, "check mcp[].tools against the server's tools (names are case-sensitive)",
			"%s lists %d tools but not %q", t.url, len(listed), missing)
	}
	return ok(t.name, "%s: MCP session opened, %d tools listed, the %d configured all there (no tool called)",
		t.url, len(listed), len(s.Tools))
}

// judgeMCP turns a failed MCP session into a check: a refused status as a
// plain probe's (judge), the rest by its failure class.
func judgeMCP(t endpoint, err error) Check {
	if code, ok := upstream.Status(err); ok {
		if c := judge(t, code); c.status != statusOK {
			return c
		}
		return fail(t.name, "check the URL's path: it must be the server's Streamable HTTP endpoint",
			"%s answered %d to initialize", t.url, code)
	}
	switch {
	case errors.Is(err, upstream.ErrRedirect):
		return fail(t.name, "use the final URL: rtsandbox never follows redirects", "%s redirects", t.url)
	case errors.Is(err, upstream.ErrNetwork), errors.Is(err, upstream.ErrCanceled):
		return fail(t.name, "check the URL, DNS, firewall and TLS from this host (no proxy is used)", "%s: %v", t.url, err)
	case errors.Is(err, upstream.ErrMCPSession):
		return fail(t.name, "check the URL's path: it must be the server's Streamable HTTP endpoint",
			"%s answered, but not as an MCP server: %v", t.url, err)
	}
	return fail(t.name, "check the server", "%s: %v", t.url, err)
}

// probe posts probeBody to t and judges the answer by its status alone;
// the body is read (bounded) and dropped.
func probe(ctx context.Context, hc *http.Client, t endpoint, getenv env) Check {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader([]byte(probeBody)))
	if err != nil {
		return fail(t.name, "check the URL in the config", "cannot build a request: %v", err)
	}
	req.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {t.accept}, "User-Agent": {""}}
	switch key := t.key.Lookup(getenv); {
	case key == "":
	case t.keyHeader != "":
		req.Header.Set(t.keyHeader, key)
	default:
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fail(t.name, "check the URL, DNS, firewall and TLS from this host (no proxy is used)", "%s: %v", t.url, netCause(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, upstream.MaxResponseBytes))
	return judge(t, resp.StatusCode)
}

// judge turns a probe's status into a check. Any answer proves the
// connection; only some prove the endpoint is the right one.
func judge(t endpoint, code int) Check {
	at := fmt.Sprintf("%s answered %d", t.url, code)
	switch {
	case code >= 300 && code < 400:
		return fail(t.name, "use the final URL: rtsandbox never follows redirects", "%s (a redirect)", at)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fail(t.name, fmt.Sprintf("check the value of %s", t.key), "%s: the key was refused", at)
	case code == http.StatusNotFound:
		return fail(t.name, "check the URL's path in the config", "%s: nothing is served at this path", at)
	case code >= 500:
		return warn(t.name, "try again later, or ask the endpoint's operator", "%s: the endpoint reached is failing", at)
	}
	return ok(t.name, "%s to an empty request (reachable; no tokens spent)", at)
}

// netCause drops the URL from a transport error: the caller prints it once.
func netCause(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
