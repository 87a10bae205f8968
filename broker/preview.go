package broker

import "github.com/rtsandbox/rtsandbox/upstream"

// Progress a guest can see (issue 11 item 4). A Turn made with WithText
// reports the text of each streamed 2xx model answer, as it is relayed, to
// its callback: only the answer's text (OpenAI chat-completions choice 0
// delta.content, Anthropic Messages text blocks), never tool-call
// arguments, thinking or anything else.
//
// The text comes from the relay's upstream.StreamScanner (CollectText),
// which reads each event once for both the check and the preview, and is
// taken from the pieces it released, after the worker got them: a key
// found in the raw bytes or in any field a client assembles stops the
// answer before any of it is reported. The preview itself is a text a
// guest watches grow, so it is checked as such: an upstream.TextHold
// holds back its tail (the longest form of the key, or its text as HTML
// character references, and a reference in progress) until more text
// shows that it begins no form, or the answer ends cleanly. A guest is
// therefore never shown any part of a key that the check refuses later,
// however the deltas cut it. A match, or a held tail past its bound,
// ends the answer's text for good. That tail is all the text the tap
// keeps: what the callback does with the rest is the caller's bound.
// Without WithText nothing is collected and nothing costs.

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

// textTap reports the text of one relayed answer. A nil *textTap does
// nothing.
type textTap struct {
	fn     TextFunc
	answer int
	// hold holds the key's forms for this answer only; it prints as
	// its type's name. nil once it refused: no more text.
	hold *upstream.TextHold
}

// newTextTap returns the tap of the turn's next streamed answer, or nil
// when the turn reports no text.
func (t *Turn) newTextTap(forms *upstream.KeyForms) *textTap {
	if t.onText == nil {
		return nil
	}
	return &textTap{fn: t.onText, answer: int(t.answers.Add(1)), hold: forms.TextHold()}
}

// add reports the text of a piece passed on, all but the tail it holds.
func (tap *textTap) add(text []byte) {
	if tap == nil || tap.hold == nil || len(text) == 0 {
		return
	}
	out, err := tap.hold.Add(string(text))
	if err != nil {
		tap.hold = nil
		return
	}
	if out != "" {
		tap.fn(tap.answer, out)
	}
}

// flush reports the held tail of an answer that ended cleanly: it was
// checked when it came, and no more text can complete a form.
func (tap *textTap) flush() {
	if tap == nil || tap.hold == nil {
		return
	}
	if rest := tap.hold.Flush(); rest != "" {
		tap.fn(tap.answer, rest)
	}
}
