package webpage

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/safefetch"
)

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
	// error is a *FetchError with its Status.
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

// Extractor turns a fetched page into text; Extract is the one the host
// uses, tests substitute others. It gets already bounded bytes and the
// caller's context, must stop when that ends, and must not fetch again.
type Extractor func(ctx context.Context, res *safefetch.Result, maxBytes int) (string, error)

// FetchText fetches rawURL through f (nil means the zero Fetcher: system
// DNS and the production pinned transport) under opts, and returns the
// text extract (nil means Extract) makes of it, bounded to maxBytes. Every
// error is a *FetchError (ErrFetchRefused, ErrFetchNetwork, ErrFetchStatus,
// ErrFetchInternal) or ErrContentType; a panic inside is contained (see
// Contain). It is the fetch behind web_fetch and the research worker's
// fetch_content.
func FetchText(ctx context.Context, f *safefetch.Fetcher, rawURL string, opts safefetch.Options, maxBytes int, extract Extractor) (string, error) {
	return Contain(func() (string, error) { return fetchText(ctx, f, rawURL, opts, maxBytes, extract) })
}

func fetchText(ctx context.Context, f *safefetch.Fetcher, rawURL string, opts safefetch.Options, maxBytes int, extract Extractor) (string, error) {
	if f == nil {
		f = &safefetch.Fetcher{}
	}
	if extract == nil {
		extract = Extract
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

// LogPanic writes the operator record of a panic Contain turned into err
// (its value, cut, and its stack) under msg for tool; any other err, and a
// nil log, write nothing.
func LogPanic(ctx context.Context, log *slog.Logger, msg, tool string, err error) {
	if pe, ok := errors.AsType[*PanicError](err); ok && log != nil {
		log.ErrorContext(ctx, msg, "tool", tool, "panic", Cut(pe.Error(), 1024), "stack", string(pe.Stack))
	}
}
