package fakemodel

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StandInPath is the only path the operator's stand-in serves: the OpenAI
// chat-completions wire.
const StandInPath = "/v1/chat/completions"

// standInShutdown bounds the wait for requests in flight when ctx ends.
const standInShutdown = 5 * time.Second

// StandIn serves the memory demo in a loop on listen, a loopback address,
// until ctx ends: the operator's `rtsandbox standin-model`. key, called
// once listen is checked, is the one bearer key every request must carry
// ("" accepts any). announce is told where it listens once it does.
// Errors of the arguments name the flag at fault and match ErrUsage.
func StandIn(ctx context.Context, listen string, key func() (string, error), announce func(url string)) error {
	switch {
	case listen == "":
		return usageError("--listen is required, such as --listen 127.0.0.1:8788")
	case !LoopbackAddr(listen):
		return usageError(fmt.Sprintf("--listen %q: not a loopback host:port; the stand-in is a test double and listens on loopback only", listen))
	}
	k, err := key()
	if err != nil {
		return err
	}
	s, err := Listen(Options{Addr: listen, Path: StandInPath, Loop: true, NoRecord: true, Key: k}, MemoryDemo())
	if err != nil {
		return err
	}
	announce(s.URL() + StandInPath)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), standInShutdown)
	defer cancel()
	_ = s.Shutdown(sctx) // past the bound it closes the connections; either way it stopped
	return nil
}

// ErrUsage marks a StandIn refusal of its arguments.
var ErrUsage = errors.New("usage")

// UsageError is an argument refusal with text msg, matching ErrUsage.
func UsageError(msg string) error { return usageError(msg) }

// usageError is an argument refusal: its text, matching ErrUsage.
type usageError string

func (e usageError) Error() string        { return string(e) }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// StandInHelp is `rtsandbox standin-model -h`: what the stand-in does.
const StandInHelp = `usage: rtsandbox standin-model --listen 127.0.0.1:PORT [--key-env VAR]

Serves a SCRIPTED STAND-IN model, not a real LLM: the memory demo of
` + "`rtsandbox demo`" + ` played in a loop ("remember that I drink tea", then
"what do I drink?"; anything else gets a short hint). It is a test double
for trying serve, chat and the HTTP chat API without an API key.

It speaks the OpenAI chat-completions wire only, on POST ` + StandInPath + `
(non-streaming). The Anthropic Messages wire is not served yet.

--listen must be a loopback address (127.0.0.0/8, [::1] or localhost):
other addresses are refused, because a stand-in must never face a network.

Key: without --key-env any request is answered, with any bearer key or
none. With --key-env VAR, VAR must be set when the stand-in starts (it is
read once) and every request must carry "Authorization: Bearer $VAR"
(others get 401): point model.api_key_env of the rtsandbox config at a
variable with the same value to see the broker supply the key.

It runs until SIGINT or SIGTERM and then exits 0.

flags:
`
