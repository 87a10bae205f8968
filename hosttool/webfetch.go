package hosttool

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/webpage"
)

// WebFetchName is the built-in web fetch tool's name (the model sees
// host_web_fetch).
const WebFetchName = "web_fetch"

// MaxURLLen bounds the URL a model may ask for, in UTF-16 units as the
// schema's maxLength counts (docs/web.md, "Host tools and research").
const MaxURLLen = 8000

// WebFetchSpec declares the web fetch tool; each call returns a fresh
// value.
func WebFetchSpec() rtsandbox.ToolSpec {
	return rtsandbox.ToolSpec{
		Name: WebFetchName,
		Description: "Read a public web page (HTTP or HTTPS) and return its readable text, with links " +
			"as numbered footnotes. Private and internal addresses are refused. HTML, plain text and " +
			"JSON only; long pages are cut.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string",` +
			`"minLength":1,"maxLength":8000,"description":"absolute http:// or https:// URL"}},` +
			`"required":["url"],"additionalProperties":false}`),
	}
}

// WebFetch is the built-in web fetch host tool. It fetches through
// safefetch, so every address, redirect and size is vetted there, and
// returns webpage.Extract's text, whose cost is bounded whatever the page's
// markup (see webpage.ExtractHTML for why it streams rather than builds a
// tree). The zero
// value is ready to use.
type WebFetch struct {
	// Fetcher is the SSRF-safe fetcher; nil means the zero Fetcher. Its
	// Resolver and Transport are trusted test seams only.
	Fetcher *safefetch.Fetcher
	// Options bound each fetch; when MaxBytes, Timeout, MaxRedirects and
	// NoRedirects are all zero, safefetch.DefaultOptions is used (with
	// Header kept). Header is trusted host input only.
	Options safefetch.Options
	// MaxBytes bounds the returned text; 0 means webpage.MaxExtractBytes.
	MaxBytes int
	// Logger receives the operator record of a contained panic (its value
	// and stack); nil discards it.
	Logger *slog.Logger

	// extract replaces webpage.Extract in tests; nil means Extract.
	extract webpage.Extractor
}

// Run fetches the guest's URL. The host-bound context is not used: the
// fetch is the same for every speaker. A panic anywhere in the run is
// contained: the guest gets webpage.ErrFetchInternal's fixed text, the operator
// log the panic.
func (w *WebFetch) Run(ctx context.Context, input json.RawMessage, _ rtsandbox.Binding) (string, error) {
	text, err := webpage.Contain(func() (string, error) { return w.run(ctx, input) })
	webpage.LogPanic(ctx, w.Logger, "web_fetch panicked", WebFetchName, err)
	return text, err
}

func (w *WebFetch) run(ctx context.Context, input json.RawMessage) (string, error) {
	var in struct {
		URL *string `json:"url"`
	}
	if err := json.Unmarshal(input, &in); err != nil || in.URL == nil {
		return "", webpage.ErrFetchInput
	}
	if n := rtsandbox.UTF16Len(*in.URL); n < 1 || n > MaxURLLen {
		return "", webpage.ErrFetchInput
	}
	opts := w.Options
	if opts.MaxBytes == 0 && opts.Timeout == 0 && opts.MaxRedirects == 0 && !opts.NoRedirects {
		opts = safefetch.DefaultOptions()
		opts.Header = w.Options.Header
	}
	return webpage.FetchText(ctx, w.Fetcher, *in.URL, opts, w.MaxBytes, w.extract)
}
