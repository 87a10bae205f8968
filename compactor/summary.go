// Package compactor is the host's built-in compactor (session spec
// docs/protocol.md, "Compaction"): the "summary" engine, which an operator switches on with
// session.compactor in the config. It implements broker.Compactor.
//
// The contract:
//
//   - Compact summarises a worker's compact request with one call to a
//     configured model, made on the host with the host's credential
//     (read per call through Options.APIKey, never kept, never logged)
//     through the hardened upstream client: fixed endpoint, no
//     redirects, a bounded answer that must be JSON and must not reflect
//     the credential in any of its forms.
//   - The model reads the messages to summarise (and a split turn's
//     prefix, the previous summary and the worker's custom instructions)
//     as a bounded transcript (transcript.go): each message at most
//     16 KiB, all of them at most Options.MaxInputBytes, the oldest
//     left out first and counted. The messages are data; the prompt says
//     so.
//   - The answer is {summary, firstKeptEntryId (the request's),
//     tokensBefore (the request's), estimatedTokensAfter (the summary and
//     the kept messages at four bytes a token), details {model,
//     summarized}}; the summary ends with the request's read and modified
//     files, so the worker keeps track of them. A request with nothing to
//     summarise is declined (nil), and the worker summarises on its own.
//   - Errors are content-free: the upstream client's failure classes
//     (status, network, timeout, reflection) and the engine's own fixed
//     texts, never an upstream body or the credential.
package compactor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Engine is the built-in engine's name, as the worker and the answer's
// details.engine see it.
const Engine = "summary"

// Bounds and defaults of Options.
const (
	DefaultMaxSummaryTokens = 4096
	MinMaxSummaryTokens     = 256
	MaxMaxSummaryTokens     = rtsandbox.MaxOutputTokensUL // 32768
	DefaultMaxInputBytes    = 512 << 10                   // about 128k tokens
	MinMaxInputBytes        = 16 << 10
	MaxMaxInputBytes        = 8 << 20
)

const anthropicVersion = "2023-06-01"

// Errors of the engine: Options refused by New (wrapping
// rtsandbox.ErrInvalid), and the fixed failures of Compact (wrapping
// rtsandbox.ErrUpstream).
var (
	ErrOptions    = fmt.Errorf("%w: invalid summary compactor options", rtsandbox.ErrInvalid)
	ErrNoKey      = fmt.Errorf("%w: the summary model's credential is missing", rtsandbox.ErrUpstream)
	ErrNoSummary  = fmt.Errorf("%w: the summary model answered no text", rtsandbox.ErrUpstream)
	ErrBadAnswer  = fmt.Errorf("%w: the summary model's answer has no message", rtsandbox.ErrUpstream)
	errNoMessages = errors.New("nothing to summarise")
)

// Options configure a Summary.
type Options struct {
	// API is the model's dialect: rtsandbox.ModelAPIOpenAI ("" too) or
	// rtsandbox.ModelAPIAnthropic.
	API string
	// URL is the chat-completions endpoint (openai) or the API's base URL
	// (anthropic: /v1/messages is appended), as config model.url.
	URL upstream.Endpoint
	// Model is the model name sent upstream.
	Model string
	// APIKey returns the model credential on every call; a failure or ""
	// fails the call before any upstream contact.
	APIKey func(ctx context.Context) (rtsandbox.Secret, error)
	// Client makes the calls; nil means upstream.New(nil).
	Client *upstream.Client
	// Timeout and MaxRequestBytes are the compactor's settings of docs/protocol.md, "Compaction"
	// (broker.CheckCompactor checks them); 0 means
	// wire.DefaultCompactorTimeout and DefaultCompactorRequest.
	Timeout         time.Duration
	MaxRequestBytes int64
	// MaxSummaryTokens is the summary's max_tokens, 256..32768; 0 means
	// DefaultMaxSummaryTokens.
	MaxSummaryTokens int
	// MaxInputBytes bounds the transcript sent to the model,
	// 16 KiB..8 MiB; 0 means DefaultMaxInputBytes.
	MaxInputBytes int
}

// Summary is the "summary" engine. It is safe for concurrent use.
type Summary struct {
	o Options
}

// New checks opts and returns the engine.
func New(opts Options) (*Summary, error) {
	switch {
	case opts.API != "" && opts.API != rtsandbox.ModelAPIOpenAI && opts.API != rtsandbox.ModelAPIAnthropic:
		return nil, fmt.Errorf("%w: api %q", ErrOptions, opts.API)
	case opts.URL.IsZero():
		return nil, fmt.Errorf("%w: no model URL", ErrOptions)
	case strings.TrimSpace(opts.Model) == "":
		return nil, fmt.Errorf("%w: no model name", ErrOptions)
	case opts.APIKey == nil:
		return nil, fmt.Errorf("%w: no credential", ErrOptions)
	}
	def := func(v *int, d, lo, hi int) bool {
		if *v == 0 {
			*v = d
		}
		return *v >= lo && *v <= hi
	}
	if !def(&opts.MaxSummaryTokens, DefaultMaxSummaryTokens, MinMaxSummaryTokens, MaxMaxSummaryTokens) {
		return nil, fmt.Errorf("%w: summary tokens outside %d..%d", ErrOptions, MinMaxSummaryTokens, MaxMaxSummaryTokens)
	}
	if !def(&opts.MaxInputBytes, DefaultMaxInputBytes, MinMaxInputBytes, MaxMaxInputBytes) {
		return nil, fmt.Errorf("%w: input bytes outside %d..%d", ErrOptions, MinMaxInputBytes, MaxMaxInputBytes)
	}
	if opts.Timeout == 0 {
		opts.Timeout = wire.DefaultCompactorTimeout
	}
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = wire.DefaultCompactorRequest
	}
	if opts.Client == nil {
		opts.Client = upstream.New(nil)
	}
	return &Summary{o: opts}, nil
}

// Engine is "summary".
func (s *Summary) Engine() string { return Engine }

// Timeout bounds one compaction.
func (s *Summary) Timeout() time.Duration { return s.o.Timeout }

// MaxRequestBytes bounds a compact request.
func (s *Summary) MaxRequestBytes() int64 { return s.o.MaxRequestBytes }

// Compact summarises req with one model call; channel is not sent
// upstream. A request with nothing to summarise is declined.
func (s *Summary) Compact(ctx context.Context, req wire.CompactRequest, _ rtsandbox.ChannelKey) (*wire.Compaction, error) {
	input, n, err := transcript(jsontree.NewBudget(ctx, jsontree.NodesFor(0)), req, s.o.MaxInputBytes)
	switch {
	case errors.Is(err, errNoMessages):
		return nil, nil
	case err != nil:
		return nil, err // the call ended while the messages were read
	}
	text, err := s.complete(ctx, input)
	if err != nil {
		return nil, err
	}
	summary := text + fileLists(req.ReadFiles, req.ModifiedFiles)
	after := tokens(len(summary))
	for _, m := range req.KeptMessages {
		after += tokens(len(m))
	}
	return &wire.Compaction{
		Summary: summary, FirstKeptEntryID: req.FirstKeptEntryID, TokensBefore: req.TokensBefore,
		EstimatedTokensAfter: &after, Details: map[string]any{"model": s.o.Model, "summarized": n},
	}, nil
}

// tokens estimates n bytes at four bytes a token, rounded up, as the
// session worker estimates.
func tokens(n int) int64 { return int64(n+3) / 4 }

// complete makes the model call and returns the summary text, trimmed.
func (s *Summary) complete(ctx context.Context, input string) (string, error) {
	key, err := s.o.APIKey(ctx)
	if err != nil || key == "" {
		return "", ErrNoKey
	}
	call := upstream.Call{URL: s.o.URL, Key: key, Idempotent: true}
	anthropic := s.o.API == rtsandbox.ModelAPIAnthropic
	if anthropic {
		call.URL = s.o.URL.Join("/v1/messages", "")
		call.KeyHeader = "X-Api-Key"
		call.Header = map[string][]string{"Anthropic-Version": {anthropicVersion}}
		call.Body, err = json.Marshal(messagesRequest{Model: s.o.Model, MaxTokens: s.o.MaxSummaryTokens, System: Prompt,
			Messages: []messagesMessage{{Role: "user", Content: input}}})
	} else {
		call.Body, err = json.Marshal(modelapi.ChatRequest{Model: s.o.Model, MaxTokens: s.o.MaxSummaryTokens,
			Messages: []modelapi.Message{{Role: "system", Content: Prompt}, {Role: "user", Content: input}}})
	}
	if err != nil {
		return "", fmt.Errorf("summary request: %w", rtsandbox.ErrInvalid)
	}
	body, err := s.o.Client.Post(ctx, call)
	if err == nil {
		err = upstream.CheckJSON(body, key.Reveal())
	}
	if err != nil {
		return "", fmt.Errorf("summary model call: %w", err)
	}
	text, err := answerText(body, anthropic)
	if err != nil {
		return "", err
	}
	if text = strings.TrimSpace(text); text == "" {
		return "", ErrNoSummary
	}
	return text, nil
}

// messagesRequest is the Anthropic Messages body of the call.
type messagesRequest struct {
	Model     string            `json:"model"`
	MaxTokens int               `json:"max_tokens"`
	System    string            `json:"system"`
	Messages  []messagesMessage `json:"messages"`
}

type messagesMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// answerText reads the text of a model answer: the first choice's
// message content (chat completions) or the text blocks of the content
// (Messages), joined.
func answerText(body []byte, anthropic bool) (string, error) {
	if anthropic {
		var ans struct {
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(body, &ans) != nil || ans.Content == nil {
			return "", ErrBadAnswer
		}
		var b strings.Builder
		for _, c := range ans.Content {
			if c.Type == "text" {
				b.WriteString(c.Text)
			}
		}
		return b.String(), nil
	}
	var ans struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &ans) != nil || len(ans.Choices) == 0 {
		return "", ErrBadAnswer
	}
	if c := ans.Choices[0].Message.Content; c != nil {
		return *c, nil
	}
	return "", nil
}

// fileLists is the files section the summary ends with: the files the
// conversation read and those it changed, one a line, each list only when
// it has any.
func fileLists(read, modified []string) string {
	var b strings.Builder
	for _, l := range []struct {
		tag   string
		files []string
	}{{"read-files", read}, {"modified-files", modified}} {
		if len(l.files) == 0 {
			continue
		}
		names := make([]string, len(l.files))
		for i, f := range l.files {
			names[i] = oneLine(f)
		}
		fmt.Fprintf(&b, "\n\n<%s>\n%s\n</%s>", l.tag, strings.Join(names, "\n"), l.tag)
	}
	return b.String()
}
