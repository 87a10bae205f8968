// Package search asks an operator-configured web search service and renders
// the results as a compact numbered list for a model.
//
// The contract:
//
//   - A Backend answers Search(ctx, query) with text or a content-free error
//     class. Two backends ship: SearXNG's JSON API (GET <url>?q=…&format=json)
//     and the Brave Search API (GET <url>?q=… with X-Subscription-Token).
//   - The URL is operator configuration, an upstream.Endpoint checked by the
//     one endpoint rule where it was read, and may be an internal service,
//     so it is not SSRF-vetted; the query only ever lands in the q
//     parameter. Requests go through the hardened upstream.Client (GET):
//     headers built from scratch, no redirects followed, no environment
//     proxy (a proxy would see the key), no transparent decompression, a
//     bounded response, a per-call deadline.
//   - The key is read from the host on every call (rotation needs no
//     restart) and an answer that echoes it is refused: the JSON answer is
//     checked as decoded (upstream.CheckJSON), and the rendered text, after
//     tags are stripped and character references decoded, is checked again
//     (upstream.CheckText), so markup cannot hide a key that rendering
//     would reveal.
//   - Rendering: at most MaxResults results as "n. title\n   url\n   snippet",
//     with markup stripped, whitespace collapsed and each field bounded.
package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// Limits.
const (
	MaxQueryLen      = 4000    // UTF-16 units, as the web_search tool declares
	MaxResponseBytes = 2 << 20 // search API answer
	DefaultTimeout   = 30 * time.Second
	DefaultResults   = 8
	MaxResults       = 20
	maxTitle         = 200
	maxSnippet       = 400
	maxURL           = 2000
)

// Providers.
const (
	SearXNG = "searxng"
	Brave   = "brave"
)

// Failure classes. Texts are content-free: no URL, query, header or body.
var (
	ErrQuery    = fmt.Errorf("%w: search query must be 1 to 4000 characters", rtsandbox.ErrInvalid)
	ErrConfig   = fmt.Errorf("%w: invalid search backend configuration", rtsandbox.ErrInvalid)
	ErrNoKey    = fmt.Errorf("%w: search API key is not set", rtsandbox.ErrUpstream)
	ErrNetwork  = fmt.Errorf("%w: search service unreachable", rtsandbox.ErrUpstream)
	ErrCanceled = fmt.Errorf("%w: search canceled or timed out", rtsandbox.ErrUpstream)
	ErrStatus   = fmt.Errorf("%w: search service answered an error status", rtsandbox.ErrUpstream)
	ErrRedirect = fmt.Errorf("%w: search service redirected (refused)", rtsandbox.ErrUpstream)
	ErrTooLarge = fmt.Errorf("%w: search answer too large", rtsandbox.ErrUpstream)
	ErrAnswer   = fmt.Errorf("%w: search answer is not the expected JSON", rtsandbox.ErrUpstream)
)

// Backend is a search service.
type Backend interface {
	Search(ctx context.Context, query string) (string, error)
}

// Func adapts a function to Backend.
type Func func(ctx context.Context, query string) (string, error)

// Search calls f.
func (f Func) Search(ctx context.Context, query string) (string, error) { return f(ctx, query) }

// Config configures New.
type Config struct {
	// Provider is SearXNG or Brave.
	Provider string
	// URL is the endpoint, such as https://search.internal/search or
	// https://api.search.brave.com/res/v1/web/search, checked by
	// upstream.ParseEndpoint; the zero Endpoint is ErrConfig.
	URL upstream.Endpoint
	// Key returns the credential, read on every call: Brave's
	// X-Subscription-Token (required: an empty key fails the call with
	// ErrNoKey), or SearXNG's optional bearer token. nil means none.
	Key func() rtsandbox.Secret
	// Results is how many results are rendered: 0 means DefaultResults,
	// at most MaxResults.
	Results int
	// Timeout bounds one call; 0 means DefaultTimeout.
	Timeout time.Duration
	// Client makes the calls; nil means upstream.New(nil).
	Client *upstream.Client
}

// client is one configured backend.
type client struct {
	cfg    Config
	render func([]byte) ([]result, error)
}

// New checks cfg and returns its backend.
func New(cfg Config) (Backend, error) {
	if cfg.URL.IsZero() {
		return nil, fmt.Errorf("search URL: %w", ErrConfig)
	}
	if cfg.Results == 0 {
		cfg.Results = DefaultResults
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Results < 1 || cfg.Results > MaxResults || cfg.Timeout < 0 {
		return nil, fmt.Errorf("search results or timeout: %w", ErrConfig)
	}
	if cfg.Client == nil {
		cfg.Client = upstream.New(nil)
	}
	c := &client{cfg: cfg}
	switch cfg.Provider {
	case SearXNG:
		c.render = searxngResults
	case Brave:
		c.render = braveResults
	default:
		return nil, fmt.Errorf("search provider: %w", ErrConfig)
	}
	return c, nil
}

// Search runs query and renders the results.
func (c *client) Search(ctx context.Context, query string) (string, error) {
	query = strings.TrimSpace(query)
	if n := rtsandbox.UTF16Len(query); n < 1 || n > MaxQueryLen {
		return "", ErrQuery
	}
	var key rtsandbox.Secret
	if c.cfg.Key != nil {
		key = c.cfg.Key()
	}
	if c.cfg.Provider == Brave && key == "" {
		return "", ErrNoKey
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	q := url.Values{"q": {query}}
	if c.cfg.Provider == SearXNG {
		q.Set("format", "json")
	} else {
		q.Set("count", strconv.Itoa(c.cfg.Results))
	}
	call := upstream.Call{URL: c.cfg.URL.WithQuery(q), Key: key, MaxBytes: MaxResponseBytes}
	if c.cfg.Provider == Brave {
		call.KeyHeader = "X-Subscription-Token"
	}
	body, err := c.cfg.Client.Get(ctx, call)
	if err != nil {
		return "", classify(err)
	}
	if err := upstream.CheckJSON(body, key.Reveal()); err != nil {
		if errors.Is(err, upstream.ErrReflect) {
			return "", err
		}
		return "", ErrAnswer
	}
	results, err := c.render(body)
	if err != nil {
		return "", ErrAnswer
	}
	text := render(results, c.cfg.Results)
	// Rendering decodes character references and strips tags, so a key
	// the JSON check could not see ("&#114;&#116;…", "rts-<b></b>key…")
	// may appear only now: check what is passed on.
	if err := upstream.CheckText(text, key.Reveal()); err != nil {
		return "", err
	}
	return text, nil
}

// classify maps upstream's failure classes to search's own (content-free)
// classes, which the research worker shows the model.
func classify(err error) error {
	for _, m := range []struct{ from, to error }{
		{upstream.ErrCanceled, ErrCanceled},
		{upstream.ErrRedirect, ErrRedirect},
		{upstream.ErrStatus, ErrStatus},
		{upstream.ErrTooLarge, ErrTooLarge},
	} {
		if errors.Is(err, m.from) {
			return m.to
		}
	}
	return ErrNetwork
}

// result is one search hit before rendering.
type result struct{ Title, URL, Snippet string }

func searxngResults(body []byte) ([]result, error) {
	var ans struct {
		Results []struct {
			Title   string `json:"title"`
			URL     string `json:"url"`
			Content string `json:"content"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, err
	}
	out := make([]result, 0, len(ans.Results))
	for _, r := range ans.Results {
		out = append(out, result{r.Title, r.URL, r.Content})
	}
	return out, nil
}

func braveResults(body []byte) ([]result, error) {
	var ans struct {
		Web struct {
			Results []struct {
				Title       string `json:"title"`
				URL         string `json:"url"`
				Description string `json:"description"`
			} `json:"results"`
		} `json:"web"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, err
	}
	out := make([]result, 0, len(ans.Web.Results))
	for _, r := range ans.Web.Results {
		out = append(out, result{r.Title, r.URL, r.Description})
	}
	return out, nil
}

// NoResults is the text for an empty result list.
const NoResults = "No results."

// render writes at most max results as a numbered list. Results without an
// http(s) URL are skipped; titles and snippets lose markup and line breaks.
func render(results []result, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range results {
		if n >= max {
			break
		}
		u := clean(r.URL, maxURL)
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || len(u) != len(strings.TrimSpace(r.URL)) {
			continue
		}
		n++
		title := clean(stripTags(r.Title), maxTitle)
		if title == "" {
			title = "(untitled)"
		}
		fmt.Fprintf(&b, "%d. %s\n   %s\n", n, title, u)
		if s := clean(stripTags(r.Snippet), maxSnippet); s != "" {
			fmt.Fprintf(&b, "   %s\n", s)
		}
	}
	if n == 0 {
		return NoResults
	}
	return strings.TrimRight(b.String(), "\n")
}

var tagRE = regexp.MustCompile(`<[^<>]{0,256}>`)

// stripTags drops inline markup (Brave marks matches with <strong>) and
// decodes entities.
func stripTags(s string) string { return html.UnescapeString(tagRE.ReplaceAllString(s, "")) }

// clean collapses whitespace and control characters to single spaces and
// bounds s to max bytes on a rune boundary.
func clean(s string, max int) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError
	}), " ")
	if len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	return s
}
