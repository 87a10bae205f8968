package broker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// turnEndingBody is a worker's body that keeps sending: every Read gives
// a chunk, and the one after the first few ends the turn as it hands its
// chunk over (the chunk that arrived as the turn ended). askedAfter counts
// the chunks asked for once the turn had ended.
type turnEndingBody struct {
	reads      int
	end        context.CancelFunc
	ended      bool
	askedAfter int
}

func (b *turnEndingBody) Read(p []byte) (int, error) {
	if b.ended {
		b.askedAfter++
		if b.askedAfter > 1000 { // the bug: the read would go on for as long as the worker sent
			return 0, errors.New("read on after the turn ended")
		}
	}
	b.reads++
	if b.reads == 3 {
		b.end()
		b.ended = true
	}
	n := min(len(p), 512)
	copy(p, strings.Repeat(" ", n))
	return n, nil
}

func (b *turnEndingBody) Close() error { return nil }

// The attack: a worker keeps sending its body after its turn ended. The
// session listener's silence limit re-arms the connection's read deadline
// after every chunk that arrives, so a chunk that arrived as the turn
// ended undid the deadline readBody set, and the body was read on, the
// host's intake share held, for as long as the worker kept sending (once
// in CI another channel's call waited a minute for it). readBody asks for
// no chunk once its context ended, whatever the deadline says, for each
// of its three ways of reading: a declared length, a body declared over
// the limit (read to the limit and dropped) and a chunked one.
func TestReadBodyWorkerSendingPastItsTurn(t *testing.T) {
	const limit = 1 << 20
	for name, declared := range map[string]int64{"declared": limit / 2, "over the limit": limit * 2, "chunked": -1} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := &turnEndingBody{end: cancel}
			r := httptest.NewRequest(http.MethodPost, "/tools/recall", nil)
			r.Body, r.ContentLength = body, declared
			_, err := readBody(ctx, httptest.NewRecorder(), r, limit)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("readBody = %v; want the turn's end", err)
			}
			if body.askedAfter > 0 {
				t.Errorf("%d chunks were asked for after the turn ended; want none", body.askedAfter)
			}
		})
	}
}
