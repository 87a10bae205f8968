package broker

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// Progress a guest can see (issue 11 item 4). A Turn made with WithText
// reports the text of each streamed 2xx model answer, as it is relayed, to
// its callback: only the answer's text deltas (OpenAI chat-completions
// choices[0].delta.content, Anthropic Messages content_block_delta with a
// text_delta), never tool-call arguments, thinking or anything else.
//
// The tap reads the pieces the upstream.StreamScanner released, the bytes
// the worker got, never the raw upstream read: a reflected credential is
// refused before any of it reaches a preview. It parses them with the
// bounded SSE parser (an event over brokerclient.SSEWatchMaxEvent is
// skipped, not held). The scanner looks for raw forms only, and a JSON
// escape ("\u0073k-…") can hide one that decoding the delta reveals, so the
// decoded text is checked too, as upstream.CheckText checks any answer
// passed on as rewritten text (one upstream.TextChecker per answer, made
// once, not per delta, from the forms the turn made ready): the tap holds
// back its last longest-form-minus-one bytes until more text shows they
// begin no form (or the answer ends cleanly), and a match ends the
// answer's text for good. That tail is all the text it keeps: what the callback does with
// the rest is the caller's bound. Without WithText nothing is parsed and
// nothing costs.

// TextFunc receives the text of a turn's streamed answers: answer numbers
// the streamed model calls of the turn from 1, and delta is the next text
// of that answer, in order. It runs on the call's goroutine, after the
// piece that holds delta was flushed to the worker and before the next is
// read, so it must not block: the rest of the answer waits for it.
type TextFunc func(answer int, delta string)

// TurnOption configures one Turn.
type TurnOption func(*Turn)

// WithText reports the text of the turn's streamed answers to fn (see
// TextFunc); nil reports nothing.
func WithText(fn TextFunc) TurnOption {
	return func(t *Turn) { t.onText = fn }
}

// textTap extracts the text deltas of one relayed answer. A nil *textTap
// does nothing.
type textTap struct {
	parser    *brokerclient.SSEParser // nil once over its total
	matched   bool                    // the decoded text held a form: no more text
	fn        TextFunc
	answer    int
	anthropic bool
	// check holds the key's forms for this answer only, made once
	// rather than per delta; it prints as its type's name.
	check *upstream.TextChecker
	hold  int    // the longest form of the key, less one byte
	held  string // decoded text not yet reported: it may begin a form
}

// newTextTap returns the tap of the turn's next streamed answer, or nil
// when the turn reports no text.
func (t *Turn) newTextTap(forms *upstream.KeyForms) *textTap {
	if t.onText == nil {
		return nil
	}
	tap := &textTap{fn: t.onText, answer: int(t.answers.Add(1)), anthropic: t.b.anthropic(),
		check: forms.TextChecker(), hold: forms.Hold()}
	tap.parser = watchParser(tap.event)
	return tap
}

// write feeds the tap with a piece passed on. A stream over the parser's
// total stops the tap; the answer goes on.
func (tap *textTap) write(p []byte) {
	if tap == nil || tap.parser == nil || tap.matched {
		return
	}
	if _, err := tap.parser.Write(p); err != nil {
		tap.parser = nil
	}
}

func (tap *textTap) event(ev brokerclient.SSEEvent) error {
	if tap.matched {
		return nil
	}
	var text string
	if tap.anthropic {
		text = anthropicText(ev.Data)
	} else {
		text = openAIText(ev.Data)
	}
	if text != "" {
		tap.add(text)
	}
	return nil
}

// add checks text together with the held tail and reports all but the
// new tail, cut at a rune boundary. A match reports nothing more.
func (tap *textTap) add(text string) {
	s := tap.held + text
	if tap.check.Check(s) != nil {
		tap.matched, tap.held = true, ""
		return
	}
	cut := len(s) - tap.hold
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut <= 0 {
		tap.held = s
		return
	}
	tap.fn(tap.answer, s[:cut])
	tap.held = s[cut:]
}

// flush reports the held tail of an answer that ended cleanly: it was
// checked when it came, and no more text can complete a form.
func (tap *textTap) flush() {
	if tap == nil || tap.parser == nil || tap.matched || tap.held == "" {
		return
	}
	tap.fn(tap.answer, tap.held)
	tap.held = ""
}

// anthropicText is the text of a Messages text_delta event, or "".
func anthropicText(data string) string {
	if typ, _ := leadingType(data); typ != "content_block_delta" && typ != "" {
		return "" // classified without decoding: most events are deltas
	}
	var ev struct {
		Type  string `json:"type"`
		Delta struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"delta"`
	}
	if json.Unmarshal([]byte(data), &ev) != nil || ev.Type != "content_block_delta" || ev.Delta.Type != "text_delta" {
		return ""
	}
	return ev.Delta.Text
}

// openAIText is the content delta of choice 0 of a chat-completions chunk,
// or "".
func openAIText(data string) string {
	if !strings.Contains(data, `"content"`) {
		return "" // [DONE], tool-call and usage chunks
	}
	var ev struct {
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(data), &ev) != nil {
		return ""
	}
	for _, c := range ev.Choices {
		if c.Index == 0 {
			return c.Delta.Content
		}
	}
	return ""
}
