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

// StandIn serves StandInModel in a loop on listen, a loopback address,
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
	s, err := Listen(Options{Addr: listen, Path: StandInPath, Loop: true, NoRecord: true, Key: k}, StandInModel())
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

// StandInHelpText answers a message no script knows: the trigger phrases.
const StandInHelpText = "I am a scripted stand-in, not a real LLM. Try: \"remember that I drink tea\", then \"what do I drink?\"; " +
	"\"describe the image\" with images attached; \"write a file notes.md saying hello\" (session channels)."

// StandInModel is the stand-in's script, stateless like MemoryDemo and
// served in a loop. It speaks both workers: it calls only tools the
// request offers, under the name that request uses.
//
//   - the memory demo (MemoryDemo), under the sealed tool names or the
//     session worker's host_memory_set and host_memory_get, and recall
//     from either mode's prompt memory;
//   - "describe the image(s)": how many images the request carries and
//     each one's media type and decoded size (describe.go);
//   - "write a file NAME [saying TEXT]": the session worker's write_file,
//     so the file comes back as a reply file (writefile.go);
//   - anything else: StandInHelpText.
func StandInModel() Step {
	return Func(func(req Request) Response {
		for _, script := range []func(Request) (Response, bool){imageScript, fileScript, memoryScript} {
			if resp, ok := script(req); ok {
				return resp
			}
		}
		return Response{Content: StandInHelpText}
	})
}

// StandInHelp is `rtsandbox standin-model -h`: what the stand-in does.
const StandInHelp = `usage: rtsandbox standin-model --listen 127.0.0.1:PORT [--key-env VAR]

Serves a SCRIPTED STAND-IN model, not a real LLM, in a loop: a test double
for trying serve, chat and the HTTP chat API without an API key, in
sealed and in session channels. Its scripts:

  "remember that I drink tea"   stores it with the memory tool the
                                channel offers (memory_set, or
                                host_memory_set in a session channel)
  "what do I drink?"            answers from the speaker's memory
  "describe the image"          counts the images it was shown, with
                                each one's media type and size
  "write a file notes.md saying hello"
                                writes notes.md with the write_file
                                tool (session channels): it comes back
                                as a file of the reply
  anything else                 a short hint

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
