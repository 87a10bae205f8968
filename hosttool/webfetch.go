package hosttool

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/safefetch"
)

// WebFetchName is the built-in web fetch tool's name (the model sees
// host_web_fetch).
const WebFetchName = "web_fetch"

// MaxURLLen bounds the URL a model may ask for, in UTF-16 units as the
// schema's maxLength counts (spec §2.4).
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

// Failure classes of a fetch. Their texts are fixed and carry no URL,
// address, header or body, so the model and the guest may see them; the
// cause stays reachable with errors.Is/As for the operator log.
var (
	// ErrFetchInput: the arguments are not {"url": string of 1…8000}.
	ErrFetchInput error = &classError{"web fetch needs a url of 1 to 8000 characters", rtsandbox.ErrInvalid}
	// ErrFetchRefused: the fetch policy refused the URL, an address, a
	// redirect or the size (safefetch.ErrUnsafe).
	ErrFetchRefused error = &classError{"the URL was refused: only public http(s) pages within the size bounds may be read", rtsandbox.ErrRefused}
	// ErrFetchNetwork: the page could not be reached or read in time.
	ErrFetchNetwork error = &classError{"the page could not be reached or did not answer in time", rtsandbox.ErrUpstream}
	// ErrFetchStatus: the page answered a status other than 2xx; the
	// error is a *StatusError.
	ErrFetchStatus error = &classError{"the page answered an error status", rtsandbox.ErrUpstream}
)

// classError is a failure class whose text is exactly its fixed message and
// which matches a root class (rtsandbox.ErrInvalid, ErrRefused, ErrUpstream).
type classError struct {
	text string
	kind error
}

func (e *classError) Error() string { return e.text }
func (e *classError) Unwrap() error { return e.kind }

// FetchError is a classified fetch failure. Error returns only the class's
// fixed text (and the status code for ErrFetchStatus); Unwrap yields both
// the class and the cause.
type FetchError struct {
	Class  error
	Status int   // the HTTP status for ErrFetchStatus, else 0
	Cause  error // operator detail; never shown
}

func (e *FetchError) Error() string {
	if e.Status != 0 {
		return e.Class.Error() + " (HTTP " + strconv.Itoa(e.Status) + ")"
	}
	return e.Class.Error()
}

// Unwrap returns the class and the cause.
func (e *FetchError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Cause}
}

// FetchText fetches rawURL through f (nil means the zero Fetcher: system
// DNS and the production pinned transport) under opts, and returns
// Extract's text bounded to maxBytes. Every error is a *FetchError
// (ErrFetchRefused, ErrFetchNetwork, ErrFetchStatus, ErrFetchInternal) or
// ErrContentType; a panic inside is contained (see Contain). It is the
// fetch behind web_fetch and the research worker's fetch_content.
func FetchText(ctx context.Context, f *safefetch.Fetcher, rawURL string, opts safefetch.Options, maxBytes int) (string, error) {
	return Contain(func() (string, error) { return fetchText(ctx, f, rawURL, opts, maxBytes, Extract) })
}

// extractFunc is Extract's type; tests substitute it.
type extractFunc func(ctx context.Context, res *safefetch.Result, maxBytes int) (string, error)

func fetchText(ctx context.Context, f *safefetch.Fetcher, rawURL string, opts safefetch.Options, maxBytes int, extract extractFunc) (string, error) {
	if f == nil {
		f = &safefetch.Fetcher{}
	}
	res, err := f.Fetch(ctx, rawURL, opts)
	if err != nil {
		class := ErrFetchNetwork
		if errors.Is(err, safefetch.ErrUnsafe) {
			class = ErrFetchRefused
		}
		return "", &FetchError{Class: class, Cause: err}
	}
	if res.Status < 200 || res.Status > 299 {
		return "", &FetchError{Class: ErrFetchStatus, Status: res.Status}
	}
	return extract(ctx, res, maxBytes)
}

// WebFetch is the built-in web fetch host tool. It fetches through
// safefetch, so every address, redirect and size is vetted there, and
// returns Extract's text, whose cost is bounded whatever the page's markup
// (see ExtractHTML for why it streams rather than builds a tree). The zero
// value is ready to use.
type WebFetch struct {
	// Fetcher is the SSRF-safe fetcher; nil means the zero Fetcher. Its
	// Resolver and Transport are trusted test seams only.
	Fetcher *safefetch.Fetcher
	// Options bound each fetch; when MaxBytes, Timeout, MaxRedirects and
	// NoRedirects are all zero, safefetch.DefaultOptions is used (with
	// Header kept). Header is trusted host input only.
	Options safefetch.Options
	// MaxBytes bounds the returned text; 0 means MaxExtractBytes.
	MaxBytes int
	// Logger receives the operator record of a contained panic (its value
	// and stack); nil discards it.
	Logger *slog.Logger

	// extract replaces Extract in tests; nil means Extract.
	extract extractFunc
}

// Run fetches the guest's URL. The host-bound context is not used: the
// fetch is the same for every speaker. A panic anywhere in the run is
// contained: the guest gets ErrFetchInternal's fixed text, the operator
// log the panic.
func (w *WebFetch) Run(ctx context.Context, input json.RawMessage, _ rtsandbox.Binding) (string, error) {
	text, err := Contain(func() (string, error) { return w.run(ctx, input) })
	if pe, ok := errors.AsType[*PanicError](err); ok && w.Logger != nil {
		w.Logger.ErrorContext(ctx, "web_fetch panicked", "tool", WebFetchName,
			"panic", Cut(pe.Error(), 1024), "stack", string(pe.Stack))
	}
	return text, err
}

func (w *WebFetch) run(ctx context.Context, input json.RawMessage) (string, error) {
	var in struct {
		URL *string `json:"url"`
	}
	if err := json.Unmarshal(input, &in); err != nil || in.URL == nil {
		return "", ErrFetchInput
	}
	if n := rtsandbox.UTF16Len(*in.URL); n < 1 || n > MaxURLLen {
		return "", ErrFetchInput
	}
	opts := w.Options
	if opts.MaxBytes == 0 && opts.Timeout == 0 && opts.MaxRedirects == 0 && !opts.NoRedirects {
		opts = safefetch.DefaultOptions()
		opts.Header = w.Options.Header
	}
	extract := w.extract
	if extract == nil {
		extract = Extract
	}
	return fetchText(ctx, w.Fetcher, *in.URL, opts, w.MaxBytes, extract)
}
