package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/internal/chunkread"
)

// servePieces answers every request with body, in pieces of piece bytes
// each flushed on its own (chunked), or whole with its length declared
// when piece is 0.
func servePieces(t *testing.T, body []byte, piece int) Endpoint {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if piece == 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
			return
		}
		for b := body; len(b) > 0; {
			n := min(piece, len(b))
			w.Write(b[:n])
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	}))
	t.Cleanup(srv.Close)
	return MustParseEndpoint(srv.URL, true)
}

// PostJSON decides every answer as Post followed by CheckJSON does: the
// corpora, small and large (read in a goroutine of its own), whole or in
// small flushed pieces, with and without a form of the key inside.
func TestPostJSONAgreesWithPostThenCheckJSON(t *testing.T) {
	const key = "sk-feed-0123456789abcdefghijklmnopqrstu"
	c := New(nil)
	for _, kind := range answercorpus.Kinds() {
		for _, size := range []int{600, 16 << 10, asyncMin + 1, MaxResponseBytes} {
			clean := answercorpus.Answer(kind, size)
			at := bytes.LastIndex(clean[:len(clean)*3/4], []byte(" "))
			reflected := append(append(bytes.Clone(clean[:at]), Forms(key)[2]...), clean[at:]...)
			for _, tc := range []struct {
				name string
				body []byte
			}{
				{"clean", clean}, {"reflected", reflected}, {"cut", clean[:len(clean)-3]},
			} {
				for _, piece := range []int{0, 4093} {
					name := string(kind) + "/" + strconv.Itoa(size) + "/" + tc.name + "/" + strconv.Itoa(piece)
					t.Run(name, func(t *testing.T) {
						call := Call{URL: servePieces(t, tc.body, piece), Body: []byte(`{}`), Key: key}
						want, wantErr := c.Post(context.Background(), call)
						if wantErr == nil {
							wantErr = CheckJSON(want, key)
						}
						a, err := c.PostJSON(context.Background(), call)
						defer a.Release()
						got := a.Body
						if !errors.Is(err, wantErr) || (err == nil && !bytes.Equal(got, want)) {
							t.Errorf("PostJSON = %d bytes, %v; Post then CheckJSON = %d bytes, %v", len(got), err, len(want), wantErr)
						}
					})
				}
			}
		}
	}
}

// The read's own failures come first, as with Post then CheckJSON: an
// answer over the limit is ErrTooLarge even when it reflects the key or
// is no JSON, a body cut before its declared length is ErrNetwork, a
// cancelled read ErrCanceled.
func TestPostJSONReadFailuresComeFirst(t *testing.T) {
	const key = "sk-feed-0123456789abcdefghijklmnopqrstu"
	over := []byte(`{"a":"` + key + strings.Repeat("x", MaxResponseBytes) + `"}`)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		max     int
		want    error
	}{
		{"ReflectedOverLimitChunked", func(w http.ResponseWriter, r *http.Request) {
			w.Write(over)
		}, 0, ErrTooLarge},
		{"ReflectedOverLimitDeclared", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(over)))
			w.Write(over)
		}, 0, ErrTooLarge},
		{"OverMaxBytes", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"a":"`+strings.Repeat("x", 200)+`"}`)
		}, 100, ErrTooLarge},
		{"ExactlyMaxBytes", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"a":"`+strings.Repeat("x", 92)+`"}`)
		}, 100, nil},
		{"NotJSON", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"a":1} trailing`)
		}, 0, ErrNotJSON},
		{"ReflectedInvalid", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"a":"`+key+`"`)
		}, 0, ErrReflect},
		{"CutBeforeDeclaredLength", func(w http.ResponseWriter, r *http.Request) {
			conn, rw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 300000\r\n\r\n{\"a\":\"" + strings.Repeat("x", 200000))
			rw.Flush()
		}, 0, ErrNetwork},
	}
	c := New(nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			a, err := c.PostJSON(context.Background(), Call{URL: MustParseEndpoint(srv.URL, true), Key: key, MaxBytes: tt.max})
			defer a.Release()
			body := a.Body
			if !errors.Is(err, tt.want) || (err != nil && body != nil) {
				t.Errorf("PostJSON = %d bytes, %v; want %v", len(body), err, tt.want)
			}
		})
	}
}

func TestPostJSONCanceledMidBody(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(1<<20))
		io.WriteString(w, `{"a":"`+strings.Repeat("x", 200<<10))
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	a, err := New(nil).PostJSON(ctx, Call{URL: MustParseEndpoint(srv.URL, true), Key: "k"})
	defer a.Release()
	if !errors.Is(err, ErrCanceled) {
		t.Errorf("PostJSON cancelled mid-body = %v; want ErrCanceled", err)
	}
}

// [SEC] A released buffer is reused: one answer's bytes never show in
// another's, and an answer kept past its release is the caller's bug,
// so the broker writes before it releases. Here each answer is compared
// while held, one after the other, on the same client.
func TestPostJSONBufferReuseKeepsAnswersApart(t *testing.T) {
	bodies := [][]byte{answercorpus.Answer(answercorpus.Markdown, 300<<10), []byte(`{"short":true}`), answercorpus.Answer(answercorpus.ASCII, 200<<10)}
	c := New(nil)
	for range 2 {
		for _, want := range bodies {
			a, err := c.PostJSON(context.Background(), Call{URL: servePieces(t, want, 0), Key: "k-0123456789"})
			if err != nil || !bytes.Equal(a.Body, want) {
				t.Fatalf("PostJSON = %d bytes, %v; want the %d bytes served", len(a.Body), err, len(want))
			}
			a.Release()
		}
	}
}

// The feed's source never hands the scan a byte twice, nor one not yet
// read, whatever the reader's pieces: scanFrom over it sees the body.
func TestFeedReadsEveryPiece(t *testing.T) {
	body := answercorpus.Answer(answercorpus.ToolCalls, 5000)
	for _, size := range []int{1, 7, 4096} {
		f := feed{r: chunkread.Split(body, size), got: make([]byte, 0, len(body)+1)}
		valid, _ := scanFrom(f.got, f.read, newMatcher(nil), len(body), nil)
		if !valid || !bytes.Equal(f.got, body) || f.err != io.EOF {
			t.Errorf("pieces of %d: valid %v, read %d bytes, end %v", size, valid, len(f.got), f.err)
		}
	}
}

// ReadJSON decides as CheckJSON on the whole answer, its buffer growing
// from 64 KiB as the answer arrives in pieces; over the limit it is
// ErrTooLarge whatever the scan found, and a failed read keeps its error.
func TestReadJSON(t *testing.T) {
	const key = "sk-feed-0123456789abcdefghijklmnopqrstu"
	for _, kind := range answercorpus.Kinds() {
		body := answercorpus.Answer(kind, 700<<10)
		reflected := append(bytes.Clone(body[:1000]), append([]byte(key), body[1000:]...)...)
		for _, b := range [][]byte{body, reflected, body[:len(body)-1]} {
			a, err := ReadJSON(chunkread.Split(b, 4093), key, 1<<20, "usage")
			if want := CheckJSON(b, key); !errors.Is(err, want) || err == nil && !bytes.Equal(a.Body, b) {
				t.Errorf("%s: ReadJSON = %d bytes, %v; CheckJSON says %v", kind, len(a.Body), err, want)
			}
			wantUsage := `{"prompt_tokens":12,"completion_tokens":345,"total_tokens":357}`
			if kind == answercorpus.ToolCalls {
				wantUsage = "" // its answer carries none
			}
			if err == nil && (!a.MemberKnown || string(a.Member) != wantUsage) {
				t.Errorf("%s: usage = %q (known %v)", kind, a.Member, a.MemberKnown)
			}
		}
		if _, err := ReadJSON(chunkread.Split(body, 4093), key, len(body)-1, ""); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s one byte over the limit: %v; want ErrTooLarge", kind, err)
		}
		if _, err := ReadJSON(chunkread.Split(body, 4093), key, len(body), ""); err != nil {
			t.Errorf("%s at the limit: %v", kind, err)
		}
	}
	broken := io.MultiReader(strings.NewReader(`{"a":"`), iotest.ErrReader(io.ErrClosedPipe))
	if _, err := ReadJSON(broken, key, 1<<20, ""); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("broken read: %v; want its error", err)
	}
}

// TestReadJSONOneByteOverWithEOF is the answer that fills the buffer and
// says EOF in the same read: one byte over the limit is still refused
// (found merging the session broker's configurable answer cap).
func TestReadJSONOneByteOverWithEOF(t *testing.T) {
	const limit = 64
	body := `{"a":"` + strings.Repeat("a", limit+1-8) + `"}`
	if len(body) != limit+1 {
		t.Fatalf("body is %d bytes", len(body))
	}
	_, err := ReadJSON(iotest.DataErrReader(strings.NewReader(body)), "", limit, "")
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadJSON of limit+1 bytes = %v, want ErrTooLarge", err)
	}
	if _, err := ReadJSON(iotest.DataErrReader(strings.NewReader(body[:limit-2]+`"}`)), "", limit, ""); err != nil {
		t.Fatalf("ReadJSON at the limit: %v", err)
	}
}
