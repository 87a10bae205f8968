// The operator's `fetch` command: one controlled fetch through safefetch.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/safefetch"
)

// Exit codes of `rtsandbox fetch` beyond the shared ones.
const (
	exitFetchRefused = 3 // refused by the fetch policy
	exitFetchFailed  = 4 // network, TLS, DNS, timeout, or an HTTP status ≥ 400
)

// runFetch fetches one URL through safefetch with the system resolver and
// prints {"status","url","bytes","content_type"} as one JSON line. A
// response with status ≥ 400 is still printed, and exits 4.
func runFetch(ctx context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox fetch", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rtsandbox fetch [--max-bytes N] [--timeout D] [--no-redirects] URL")
		fs.PrintDefaults()
	}
	maxBytes := fs.Int64("max-bytes", safefetch.DefaultMaxBytes, fmt.Sprintf("body bound in bytes, 1…%d", safefetch.MaxMaxBytes))
	timeout := fs.Duration("timeout", safefetch.DefaultTimeout, "whole-fetch deadline, 1ms…"+safefetch.MaxTimeout.String())
	noRedirects := fs.Bool("no-redirects", false, "print a redirect instead of following it")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if err := fetchFlags(fs, *maxBytes, *timeout); err != nil {
		fmt.Fprintln(stderr, "rtsandbox fetch:", err)
		fs.Usage()
		return exitUsage
	}
	opts := safefetch.DefaultOptions()
	opts.MaxBytes, opts.Timeout, opts.NoRedirects = *maxBytes, *timeout, *noRedirects
	f := &safefetch.Fetcher{Resolver: net.DefaultResolver}
	res, err := f.Fetch(ctx, fs.Arg(0), opts)
	if err != nil {
		code, what := fetchFailure(err, *timeout)
		return cli.Fail(stderr, "rtsandbox fetch", code, what)
	}
	line, _ := json.Marshal(struct {
		Status      int    `json:"status"`
		URL         string `json:"url"`
		Bytes       int    `json:"bytes"`
		ContentType string `json:"content_type"`
	}{res.Status, res.URL, len(res.Body), res.Header.Get("Content-Type")})
	fmt.Fprintln(stdout, string(line))
	if res.Status >= 400 {
		fmt.Fprintln(stderr, "rtsandbox fetch: http status", res.Status)
		return exitFetchFailed
	}
	return exitOK
}

// fetchFlags names the flag or argument at fault: exactly one URL, and
// the bounds safefetch accepts.
func fetchFlags(fs *flag.FlagSet, maxBytes int64, timeout time.Duration) error {
	switch {
	case fs.NArg() == 0:
		return errors.New("a URL is required")
	case fs.NArg() > 1:
		return fmt.Errorf("%w %q: fetch takes one URL", cli.ErrUnexpectedArg, fs.Arg(1))
	case maxBytes < 1 || maxBytes > safefetch.MaxMaxBytes:
		return fmt.Errorf("--max-bytes %d: out of range 1…%d", maxBytes, safefetch.MaxMaxBytes)
	case timeout < time.Millisecond || timeout > safefetch.MaxTimeout:
		return fmt.Errorf("--timeout %s: out of range 1ms…%s", timeout, safefetch.MaxTimeout)
	}
	return nil
}

// fetchFailure maps a fetch error to the exit code and what to print.
func fetchFailure(err error, timeout time.Duration) (int, string) {
	switch {
	case errors.Is(err, safefetch.ErrInvalidBounds): // checked before; the fetcher checks again
		return exitUsage, err.Error()
	case errors.Is(err, safefetch.ErrUnreachable):
		// A policy-class error upstream, but a network failure to an operator.
		return exitFetchFailed, "network: " + err.Error()
	case errors.Is(err, safefetch.ErrUnsafe):
		return exitFetchRefused, "refused: " + err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return exitFetchFailed, "timed out after " + timeout.Round(time.Millisecond).String()
	}
	return exitFetchFailed, "network: " + err.Error()
}
