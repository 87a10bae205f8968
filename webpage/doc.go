// Package webpage reads a public web page for a model: an SSRF-safe fetch
// (package safefetch) followed by a bounded extraction of its readable
// text. It serves both the web_fetch host tool and the research worker's
// fetch_content, so the two cannot drift apart.
//
// The contract:
//
//   - FetchText fetches through safefetch, so every address, redirect and
//     size is vetted there, and returns Extract's text.
//   - Extract reads at most MaxParseBytes (2 MiB) of a page, caps every tag
//     at 64 attributes and the open elements at 256, returns at most
//     MaxExtractBytes (64 KiB) of text by default, and checks its context
//     while it works; a page of any markup stays within fixed allocation
//     and CPU bounds (docs/benchmarks.md).
//   - Failures are classes with fixed, content-free texts (ErrFetchInput,
//     ErrFetchRefused, ErrFetchNetwork, ErrFetchStatus, ErrFetchInternal,
//     ErrContentType) that the model and the guest may see; the cause stays
//     reachable with errors.Is/As for the operator log. A panic in fetching
//     or extraction is contained (Contain) and never takes the host down.
package webpage
