package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testToken = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // 43 base64url characters

// TestBrokerHelloRoundTrip: the line AppendBrokerHello writes is read back
// whole, and the turn after it is left unread.
func TestBrokerHelloRoundTrip(t *testing.T) {
	for _, h := range []BrokerHello{
		{Broker: "10.96.0.10:7443", Token: testToken},
		{Broker: "[fd00::1]:7443", Token: testToken, CA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
	} {
		line, err := AppendBrokerHello(nil, h)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(io.MultiReader(bytes.NewReader(line), strings.NewReader(`{"text":"turn"}`)))
		got, err := ReadBrokerHello(r)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(h, got); diff != "" {
			t.Errorf("hello (-sent +read):\n%s", diff)
		}
		if rest, _ := io.ReadAll(r); string(rest) != `{"text":"turn"}` {
			t.Errorf("the turn after the hello: %q", rest)
		}
	}
}

// TestBrokerHelloRefusals: every line the rule refuses, each named.
func TestBrokerHelloRefusals(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"no newline", `{"broker":"10.0.0.1:1","token":"` + testToken + `"}`},
		{"not json", "hello\n"},
		{"a name, not an address", `{"broker":"broker.svc:7443","token":"` + testToken + `"}` + "\n"},
		{"port zero", `{"broker":"10.0.0.1:0","token":"` + testToken + `"}` + "\n"},
		{"no port", `{"broker":"10.0.0.1","token":"` + testToken + `"}` + "\n"},
		{"short token", `{"broker":"10.0.0.1:1","token":"abc"}` + "\n"},
		{"token not base64url", `{"broker":"10.0.0.1:1","token":"` + strings.Repeat("+", 43) + `"}` + "\n"},
		{"unknown member", `{"broker":"10.0.0.1:1","token":"` + testToken + `","x":1}` + "\n"},
		{"trailing value", `{"broker":"10.0.0.1:1","token":"` + testToken + `"} {}` + "\n"},
		{"over the bound", `{"broker":"10.0.0.1:1","token":"` + testToken + `","ca":"` + strings.Repeat("A", MaxBrokerHello) + `"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadBrokerHello(bufio.NewReader(strings.NewReader(tt.in))); !errors.Is(err, ErrInvalidHello) {
				t.Errorf("ReadBrokerHello = %v; want ErrInvalidHello", err)
			}
		})
	}
}

// TestBrokerHelloOverBoundReadsNoMore: a line without end is read no
// further than the bound, whatever the sender holds.
func TestBrokerHelloOverBoundReadsNoMore(t *testing.T) {
	src := &countingReader{r: strings.NewReader(strings.Repeat("x", 10*MaxBrokerHello))}
	if _, err := ReadBrokerHello(bufio.NewReader(src)); !errors.Is(err, ErrInvalidHello) {
		t.Fatalf("ReadBrokerHello = %v", err)
	}
	if src.n > MaxBrokerHello+8192 {
		t.Errorf("read %d bytes for a bound of %d", src.n, MaxBrokerHello)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestBrokerHelloRedacted: a printed hello never shows its token.
func TestBrokerHelloRedacted(t *testing.T) {
	h := BrokerHello{Broker: "10.0.0.1:1", Token: testToken}
	if s := h.String(); strings.Contains(s, testToken) {
		t.Errorf("String() = %q", s)
	}
}

// FuzzBrokerHello: any line is refused or read into a hello that writes
// back to the same hello, within the bound.
func FuzzBrokerHello(f *testing.F) {
	f.Add([]byte(`{"broker":"10.96.0.10:7443","token":"` + testToken + `"}` + "\n"))
	f.Add([]byte(`{"broker":"[::1]:1","token":"` + testToken + `","ca":"x"}` + "\n{}"))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ReadBrokerHello(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			if !errors.Is(err, ErrInvalidHello) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		line, err := AppendBrokerHello(nil, h)
		if err != nil {
			t.Fatalf("a hello read is refused on write: %v", err)
		}
		back, err := ParseBrokerHello(bytes.TrimSuffix(line, []byte{'\n'}))
		if err != nil || back != h {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, h)
		}
	})
}
