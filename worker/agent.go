package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

const (
	maxModelCalls = 12
	// maxPayload bounds each /model body; the broker accepts 256 KiB and
	// the rest is headroom for its own additions.
	maxPayload  = 192 * 1024
	maxToolList = 32 * 1024
)

// limitText is the reply after maxModelCalls calls without a final answer.
const limitText = "The sandbox turn reached its model-call limit."

// message is a chat-completions message in the reference's key order.
type message = wire.ChatMessage

type modelPayload struct {
	Model    string          `json:"model"`
	Messages []message       `json:"messages"`
	Tools    []wire.ChatTool `json:"tools"`
	// images go with the last user message, the turn's own; toolImages
	// with the result of the tool call whose id keys them (read_attachment
	// in session mode). Each model client puts them where its API takes
	// images; they are never part of the chat shape, nor of the stored
	// conversation. The sealed worker has none.
	images     []wire.Image
	toolImages map[string][]wire.Image
}

// agent is the tool loop both modes share: it calls the model, runs the
// tools the model asks for and appends their results, until the model
// answers without tool calls. The sealed worker (sealedTurn) and the
// session worker (sessionWorker.newTurnAgent) each build its
// conversation, tools and budgets, and read its final answer. Zero
// budgets are the sealed ones.
type agent struct {
	model   modelClient
	tools   *toolTable
	payload modelPayload
	// histLeft counts the history messages still at payload.Messages[1:],
	// which fitContext drops first.
	histLeft int
	used     map[string]bool // tool-call ids handed out (repairToolCalls)
	// maxPayload bounds the request as fitContext measures it; 0 means
	// maxPayload (sealed).
	maxPayload int
	// resultBudget bounds, in JSON bytes, each tool result and each
	// tool-calling assistant text kept in context; 0 means budgetPreview.
	resultBudget int
	// exchanges makes fitContext drop history a whole exchange at a time
	// (up to the next user message), so a tool reply never outlives its
	// call; the sealed history is plain user and assistant messages.
	exchanges bool
	// toolFailed reports a refused or failed tool call; nil discards it.
	toolFailed func(name string, err error)
	calls      int // tool calls run
	// shown is the session turn's image budget, through which a tool
	// shows the model an image; nil for the sealed worker.
	shown *shownImages
	// project, when set, is the view of the conversation every request
	// sends and fitContext measures (the session worker's privacy
	// projection for the turn's reader); payload keeps the messages as
	// they are, for the session file.
	project func([]message) []message
	// prepare, when set, runs before every model call (the session
	// worker's compaction); it may replace the history at
	// payload.Messages[1:1+histLeft].
	prepare func(ctx context.Context) error
	// overflow, when set, runs after a model call refused as over the
	// model's context (errContextOverflow) and reports whether it
	// compacted, upon which the call is retried once (the session
	// worker's compaction); nil fails the turn with the refusal (sealed).
	overflow func(ctx context.Context) bool
}

// sealedTurn is one sealed turn: the loop with the channel's memory and
// history as the host passed them.
type sealedTurn struct {
	*agent
	turn   wire.Turn
	broker *broker
	mem    *memory

	history     []message // as loaded and truncated; saved in full
	userContent string    // {"speaker":…,"message":…} before truncation
}

// runTurn runs the agent loop of docs/protocol.md, "The sealed turn" for one validated turn.
func runTurn(ctx context.Context, turn wire.Turn, o Options) (rtsandbox.Reply, error) {
	a, err := newAgent(turn, o)
	if err != nil {
		return rtsandbox.Reply{}, err
	}
	defer a.broker.close()
	final, err := a.run(ctx, maxModelCalls)
	switch {
	case err != nil:
		return rtsandbox.Reply{}, err
	case final == nil:
		// No final answer: the memory changes stand, the history does not
		// grow (with reset it comes back empty, as the owner asked).
		return a.reply(false, limitText, historyEntries(a.history)), nil
	}
	return a.finish(final)
}

// run calls the model at most maxSteps times and returns its final answer
// (a chat-completions message without tool calls), or nil when the steps
// ran out first.
func (a *agent) run(ctx context.Context, maxSteps int) (*answerMessage, error) {
	for step := range maxSteps {
		final, err := a.step(ctx, step)
		if err != nil || final != nil {
			return final, err
		}
	}
	return nil, nil
}

// reply carries the text and the channel's state back to the host.
func (a *sealedTurn) reply(ok bool, text string, history []rtsandbox.HistoryEntry) rtsandbox.Reply {
	memory := a.mem.entries
	if memory == nil {
		memory = []rtsandbox.MemoryEntry{}
	}
	return rtsandbox.Reply{OK: ok, Text: text, State: &rtsandbox.ChannelState{Memory: memory, History: history}}
}

func newAgent(turn wire.Turn, o Options) (*sealedTurn, error) {
	mem := &memory{entries: turn.Memory}
	history := loadHistory(turn.History, turn.Reset)
	b := newBroker(o.Socket)
	if o.Network != nil {
		b = newNetworkBroker(o.Network)
	}
	stderr := o.Stderr
	a := &sealedTurn{
		agent: &agent{
			histLeft: len(history), used: map[string]bool{},
			model: newModelClient(modelSettings{api: turn.ModelAPI, stream: turn.Stream, thinking: turn.Thinking}, b),
			tools: newSealedTools(turn, mem, b),
			toolFailed: func(name string, err error) {
				fmt.Fprintf(stderr, "rtsandbox-worker: tool %s: %v\n", name, err)
			},
		},
		turn: turn, broker: b, mem: mem, history: history,
	}
	system, err := a.system(mem, o.Now())
	if err != nil {
		return nil, err
	}
	a.userContent, err = userContent(turn)
	if err != nil {
		return nil, err
	}
	tools := a.tools.modelTools()
	if jsonjs.Size(tools) > maxToolList {
		return nil, errToolListBudget
	}
	msgs := make([]message, 0, len(history)+2)
	msgs = append(msgs, message{Role: "system", Content: system})
	msgs = append(msgs, history...)
	msgs = append(msgs, message{Role: "user", Content: promptText(a.userContent, budgetUser)})
	a.payload = modelPayload{Model: turn.Model, Messages: msgs, Tools: tools}
	return a, nil
}

// system builds the system message with the memory previews of the
// turn's speaker and of the channel.
func (a *sealedTurn) system(mem *memory, now time.Time) (string, error) {
	when, err := localTime(now, a.turn.TimeZone)
	if err != nil {
		return "", err
	}
	speakerMemory, err := mem.run(wire.MemoryCall{Tool: wire.MemoryGet, Scope: wire.ScopeSpeaker}, a.turn.Speaker.ID)
	if err != nil {
		return "", err
	}
	channelNotes, err := mem.run(wire.MemoryCall{Tool: wire.MemoryGet, Scope: wire.ScopeChannel}, a.turn.Speaker.ID)
	if err != nil {
		return "", err
	}
	return systemPrompt(a.turn.Prompt, when, speakerMemory, channelNotes), nil
}

// userContent wraps the message with its speaker as JSON, so the display
// name stays a labelled value rather than text the model reads as prose.
func userContent(turn wire.Turn) (string, error) {
	b, err := jsonjs.Marshal(struct {
		Speaker wire.TurnSpeaker `json:"speaker"`
		Message string           `json:"message"`
	}{turn.Speaker, turn.Text})
	return string(b), err
}

// step makes one model call and returns the final answer, or runs the
// requested tools, appends their results and returns nil.
func (a *agent) step(ctx context.Context, step int) (final *answerMessage, err error) {
	if a.prepare != nil {
		if err := a.prepare(ctx); err != nil {
			return nil, err
		}
	}
	msg, err := a.call(ctx)
	if err != nil {
		return nil, err
	}
	calls := msg.ToolCalls
	if len(calls) == 0 {
		return msg, nil
	}
	if len(calls) > rtsandbox.MaxToolCallsPerMessage {
		return nil, errTooManyCalls
	}
	a.runCalls(ctx, step, msg, calls)
	return nil, nil
}

// call fits the context and makes the model call. A call refused as over
// the model's context is made once more after the overflow hook
// compacted; the retry's failure, another overflow included, is the
// call's.
func (a *agent) call(ctx context.Context) (*answerMessage, error) {
	if err := a.fitContext(); err != nil {
		return nil, err
	}
	msg, err := a.model.complete(ctx, a.view())
	if !errors.Is(err, errContextOverflow) || a.overflow == nil || !a.overflow(ctx) {
		return msg, err
	}
	if err := a.fitContext(); err != nil {
		return nil, err
	}
	return a.model.complete(ctx, a.view())
}

// fitContext drops context until the request fits the payload budget
// and the model API's message bound (a long session conversation outgrows
// the /model rule's 128 messages long before its size budget): history
// oldest first, then whole assistant+tool groups oldest first, so a tool
// reply never loses its assistant message. Images are measured aside:
// the turn's image budget bounds them (docs/protocol.md, "Where the worker finds the broker"), and a request of 64 MiB of
// images is not encoded again for every message dropped.
func (a *agent) fitContext() error {
	p := &a.payload
	budget := cmp.Or(a.maxPayload, maxPayload)
	tooMany := func() bool { return len(p.Messages) > a.model.maxMessages() }
	size := func() int {
		v := *a.view()
		v.images, v.toolImages = nil, nil
		return jsonjs.Size(a.model.request(&v))
	}
	for tooMany() || size() > budget {
		switch {
		case a.histLeft > 0:
			n := 1
			for a.exchanges && n < a.histLeft && p.Messages[1+n].Role != "user" {
				n++
			}
			p.Messages = slices.Delete(p.Messages, 1, 1+n)
			a.histLeft -= n
		case len(p.Messages) > 2:
			end := 3
			for end < len(p.Messages) && p.Messages[end].Role == "tool" {
				end++
			}
			p.Messages = slices.Delete(p.Messages, 2, end)
		default:
			return errContextBudget
		}
	}
	return nil
}

// view is the payload a request sends: the conversation through project.
func (a *agent) view() *modelPayload {
	if a.project == nil {
		return &a.payload
	}
	v := a.payload
	v.Messages = a.project(v.Messages)
	return &v
}

// finish validates the final answer and adds the exchange to the history.
func (a *sealedTurn) finish(msg *answerMessage) (rtsandbox.Reply, error) {
	text := rtsandbox.TrimJS(msg.Content.Value)
	switch {
	case !msg.Content.Set:
		return rtsandbox.Reply{}, errNoContent
	case text == "":
		return rtsandbox.Reply{}, errBlankContent
	}
	if rtsandbox.UTF16Len(text) > rtsandbox.MaxReplyText {
		text = cutAnswer(text)
	}
	return a.reply(true, text, nextHistory(a.history, a.userContent, text)), nil
}

// answerCutNotice ends an answer that was longer than the reply limit.
const answerCutNotice = "\n\n[The answer was cut here: it was longer than 100,000 characters.]"

// cutAnswer keeps the longest prefix of text, on a character boundary, that
// fits rtsandbox.MaxReplyText UTF-16 units together with answerCutNotice. The
// reference fails such a turn; the guest is better served by the start of
// the answer and a visible notice.
func cutAnswer(text string) string {
	room := rtsandbox.MaxReplyText - rtsandbox.UTF16Len(answerCutNotice)
	return rtsandbox.PrefixUTF16(text, room) + answerCutNotice
}

// runCalls appends the repaired assistant message, then runs the calls one
// at a time, in order, with their original arguments, appending one tool
// message per call.
func (a *agent) runCalls(ctx context.Context, step int, msg *answerMessage, calls []json.RawMessage) {
	normalized := repairToolCalls(calls, step, a.used, a.tools.has)
	budget := cmp.Or(a.resultBudget, budgetPreview)
	content := ""
	if msg.Content.Set {
		content = promptText(msg.Content.Value, budget)
	}
	a.payload.Messages = append(a.payload.Messages, message{Role: "assistant", Content: content, ToolCalls: normalized})
	for i, call := range normalized {
		text, privateTo := a.runCall(ctx, call.Function.Name, parseModelCall(calls[i]))
		a.payload.Messages = append(a.payload.Messages, message{Role: "tool", ToolCallID: call.ID, Content: promptText(text, budget), PrivateTo: privateTo})
		a.fileImages(call.ID)
	}
}

// fileImages keeps the images the call id's tool showed with its result.
func (a *agent) fileImages(id string) {
	if a.shown == nil {
		return
	}
	images := a.shown.take()
	if len(images) == 0 {
		return
	}
	if a.payload.toolImages == nil {
		a.payload.toolImages = map[string][]wire.Image{}
	}
	a.payload.toolImages[id] = images
}

// runCall returns the tool's text and the only reader it is for ("" for
// everyone), or refusedText when the call cannot run or fails. Failure
// details go to toolFailed only (the sealed worker's stderr, the session
// worker's log), never to the model.
func (a *agent) runCall(ctx context.Context, name string, c modelCall) (text, privateTo string) {
	f, ok := a.tools.index[name]
	in, okInput := callInput(c)
	if !ok || !okInput {
		return refusedText, ""
	}
	a.calls++
	var err error
	if f.owned != nil {
		text, privateTo, err = f.owned(ctx, in)
	} else {
		text, err = f.run(ctx, in)
	}
	if err != nil {
		if a.toolFailed != nil {
			a.toolFailed(name, err)
		}
		return refusedText, ""
	}
	return text, privateTo
}
