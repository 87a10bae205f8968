package brokerclient

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func FuzzSSEParser(f *testing.F) {
	for _, tt := range sseCases {
		f.Add(tt.in, uint16(len(tt.in)/2), uint16(tt.lim.MaxLine), uint16(tt.lim.MaxEvent), tt.lim.SkipOversize)
	}
	f.Fuzz(func(t *testing.T, in string, split, maxLine, maxEvent uint16, skip bool) {
		lim := SSELimits{MaxLine: int(maxLine), MaxEvent: int(maxEvent), SkipOversize: skip}
		whole, werr := parseChunks(lim, in)
		at := int(split) % (len(in) + 1)
		halves, herr := parseChunks(lim, in[:at], in[at:])
		bytewise, berr := parseChunks(lim, strings.Split(in, "")...)
		for _, other := range []struct {
			name   string
			events []SSEEvent
			err    error
		}{{"split", halves, herr}, {"byte by byte", bytewise, berr}} {
			if diff := cmp.Diff(whole, other.events); diff != "" || (werr == nil) != (other.err == nil) {
				t.Fatalf("%q %s: events differ from one write (-whole +%s):\n%s\nerrors %v, %v", in, other.name, other.name, diff, werr, other.err)
			}
		}
		if werr != nil && !errors.Is(werr, ErrSSELimit) {
			t.Fatalf("%q: error %v; want ErrSSELimit", in, werr)
		}
		for _, ev := range whole {
			if max(1, int(maxEvent)) < len(ev.Data) && maxEvent != 0 {
				t.Fatalf("%q: event data of %d bytes over the limit %d", in, len(ev.Data), maxEvent)
			}
		}
		if maxLine == 0 && maxEvent == 0 {
			if diff := cmp.Diff(oracleSSE(in), whole); diff != "" || werr != nil {
				t.Fatalf("%q: events differ from the oracle (-oracle +parser):\n%s\nerror %v", in, diff, werr)
			}
		}
	})
}

// oracleSSE is a direct, unbounded transcription of the WHATWG parsing
// rules over a whole stream.
func oracleSSE(in string) []SSEEvent {
	in = strings.TrimPrefix(in, "\xEF\xBB\xBF")
	in = strings.ReplaceAll(strings.ReplaceAll(in, "\r\n", "\n"), "\r", "\n")
	lines := strings.Split(in, "\n")
	lines = lines[:len(lines)-1] // the last piece has no line end
	var out []SSEEvent
	var typ, id string
	var data bytes.Buffer
	for _, line := range lines {
		switch {
		case line == "":
			if data.Len() > 0 {
				ev := SSEEvent{Type: typ, Data: strings.TrimSuffix(data.String(), "\n"), ID: id}
				if ev.Type == "" {
					ev.Type = "message"
				}
				out = append(out, ev)
			}
			typ = ""
			data.Reset()
		case line[0] == ':':
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				typ = value
			case "data":
				data.WriteString(value + "\n")
			case "id":
				if !strings.Contains(value, "\x00") {
					id = value
				}
			}
		}
	}
	return out
}
