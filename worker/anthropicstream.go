package worker

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/brokerclient"
)

// streamLimits bound a streamed answer as the worker reads it. The
// assembled blocks stay under MaxBrokerResponse like a whole answer; the
// events around them may take many times that (one event per few
// characters), hence the larger total.
var streamLimits = brokerclient.SSELimits{
	MaxLine:  rtsandbox.MaxBrokerResponse,
	MaxEvent: rtsandbox.MaxBrokerResponse,
	MaxTotal: 16 << 20,
}

// readStream assembles a streamed Messages answer from its events:
// message_start, then per block content_block_start, its deltas
// (text_delta, input_json_delta, thinking_delta, signature_delta) and
// content_block_stop, then message_delta and message_stop. Blocks must
// come in index order and deltas go to the open block. ping, unknown
// event types and unknown delta types are skipped, as the API asks of
// clients. An error event fails the call (errStreamErrorEvent); a stream
// that is cut before message_stop, breaks its limits or is not the
// Messages event shape fails it too (errModelStream), since its blocks
// cannot be trusted whole.
func readStream(r io.Reader) ([]answerBlock, error) {
	events := brokerclient.NewSSEReader(r, streamLimits)
	var s streamAssembler
	for !s.stopped {
		ev, err := events.Next()
		switch {
		case errors.Is(err, brokerclient.ErrSSELimit):
			return nil, errors.Join(errModelStreamLimit, err)
		case err != nil:
			return nil, errors.Join(errModelStream, err)
		}
		if err := s.event(ev); err != nil {
			return nil, err
		}
	}
	s.flush()
	return s.blocks, nil
}

// streamAssembler holds the blocks of a stream as its events arrive.
type streamAssembler struct {
	blocks  []answerBlock
	text    []byte // the open block's deltas, so that many small ones cost linear time
	sig     []byte // the open thinking block's signature deltas
	open    bool   // the last block has started and not stopped
	size    int    // bytes held in blocks
	started bool   // message_start was seen
	stopped bool   // message_stop was seen
}

// streamEvent is the part of an event's data the assembler reads.
type streamEvent struct {
	Type         string       `json:"type"`
	Index        *int         `json:"index"`
	ContentBlock *answerBlock `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
	} `json:"delta"`
}

// event applies one event.
func (s *streamAssembler) event(ev brokerclient.SSEEvent) error {
	if ev.IsError() {
		return errStreamErrorEvent
	}
	var e streamEvent
	if json.Unmarshal([]byte(ev.Data), &e) != nil {
		return errModelStreamMalformed
	}
	switch e.Type {
	case "message_start":
		s.started = true
		return nil
	case "message_stop":
		s.stopped = true
		return nil
	case "content_block_start", "content_block_delta", "content_block_stop":
	default: // ping, message_delta and types added later
		return nil
	}
	if !s.started || e.Index == nil {
		return errModelStreamMalformed
	}
	switch e.Type {
	case "content_block_start":
		return s.start(*e.Index, e.ContentBlock)
	case "content_block_stop":
		if !s.current(*e.Index) {
			return errModelStreamMalformed
		}
		s.flush()
		return nil
	}
	if !s.current(*e.Index) || e.Delta == nil {
		return errModelStreamMalformed
	}
	return s.delta(e.Delta.Type, e.Delta.Text+e.Delta.PartialJSON+e.Delta.Thinking+e.Delta.Signature)
}

// current reports whether index names the open block.
func (s *streamAssembler) current(index int) bool {
	return s.open && index == len(s.blocks)-1
}

// start opens block index, the next one in order.
func (s *streamAssembler) start(index int, b *answerBlock) error {
	if s.open || b == nil || index != len(s.blocks) || index >= maxAnswerBlocks {
		return errModelStreamMalformed
	}
	s.blocks = append(s.blocks, *b)
	s.open = true
	s.text, s.sig = s.text[:0], s.sig[:0]
	return s.grow(b.size())
}

// delta adds a piece to the open block: text to a text block, input JSON
// to a tool_use (replacing the empty input of its start), thinking and
// its signature to a thinking block. A delta that does not fit its block
// is skipped, like an unknown delta type.
func (s *streamAssembler) delta(typ, piece string) error {
	switch b := s.blocks[len(s.blocks)-1]; {
	case typ == "text_delta" && b.Type == "text",
		typ == "input_json_delta" && b.Type == "tool_use",
		typ == "thinking_delta" && b.Type == "thinking":
		s.text = append(s.text, piece...)
	case typ == "signature_delta" && b.Type == "thinking":
		s.sig = append(s.sig, piece...)
	default:
		return nil
	}
	return s.grow(len(piece))
}

// flush closes the open block, adding its deltas to what its start held.
func (s *streamAssembler) flush() {
	if !s.open {
		return
	}
	s.open = false
	b := &s.blocks[len(s.blocks)-1]
	switch b.Type {
	case "text":
		b.Text += string(s.text)
	case "tool_use":
		if len(s.text) > 0 { // the start holds an empty input; the deltas hold it all
			b.Input = json.RawMessage(string(s.text))
		}
		if len(b.Input) == 0 { // a call without arguments may send none
			b.Input = json.RawMessage(`{}`)
		}
	case "thinking":
		b.Thinking += string(s.text)
		b.Signature += string(s.sig)
	}
}

// grow counts n more bytes held, failing past MaxBrokerResponse.
func (s *streamAssembler) grow(n int) error {
	s.size += n
	if s.size > rtsandbox.MaxBrokerResponse {
		return errModelStreamLimit
	}
	return nil
}
