package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
)

// BrokerHello is where a worker that cannot share the host's broker
// socket finds the broker, and the credential it presents there: the first
// line of its stdin, before the turn (docs/kubernetes.md, "How a worker
// reaches the broker"). Kubernetes' engine writes it through the Pod's
// attach stream, so it lives nowhere but in the worker's memory: not in
// the Pod's spec, environment, volumes or logs.
type BrokerHello struct {
	// Broker is the broker's network listener: an IP address and a port
	// (a worker resolves no names).
	Broker string `json:"broker"`
	// Token is the turn's token (broker.TokenLen characters), sent in
	// BrokerTokenHeader on every request.
	Token string `json:"token"`
	// CA is the PEM certificate the listener's TLS certificate chains
	// to; "" when the listener speaks plain TCP.
	CA string `json:"ca,omitempty"`
}

// MaxBrokerHello bounds the hello line, its newline included: room for a
// CA bundle of a few certificates.
const MaxBrokerHello = 16 << 10

// ErrInvalidHello marks a hello line that ReadBrokerHello refuses.
var ErrInvalidHello = errors.New("invalid broker hello")

// String keeps the token out of any print of a hello.
func (h BrokerHello) String() string { return fmt.Sprintf("broker %s (token redacted)", h.Broker) }

// AppendBrokerHello appends h's line, newline included, to b.
func AppendBrokerHello(b []byte, h BrokerHello) ([]byte, error) {
	if err := h.check(); err != nil {
		return b, err
	}
	line, err := json.Marshal(h)
	if err != nil {
		return b, err
	}
	return append(append(b, line...), '\n'), nil
}

// ReadBrokerHello reads the hello line from r, at most MaxBrokerHello
// bytes whatever r holds, and leaves r at the turn that follows. Errors
// wrap ErrInvalidHello, or are r's.
func ReadBrokerHello(r *bufio.Reader) (BrokerHello, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxBrokerHello {
			return BrokerHello{}, fmt.Errorf("%w: over %d bytes", ErrInvalidHello, MaxBrokerHello)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return BrokerHello{}, fmt.Errorf("%w: no complete line: %w", ErrInvalidHello, err)
		}
	}
	return ParseBrokerHello(bytes.TrimSuffix(line, []byte{'\n'}))
}

// ParseBrokerHello parses one hello line without its newline: a JSON
// object with exactly the members of BrokerHello. Errors wrap
// ErrInvalidHello.
func ParseBrokerHello(line []byte) (BrokerHello, error) {
	var h BrokerHello
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return BrokerHello{}, fmt.Errorf("%w: %w", ErrInvalidHello, err)
	}
	if dec.More() {
		return BrokerHello{}, fmt.Errorf("%w: trailing data", ErrInvalidHello)
	}
	if err := h.check(); err != nil {
		return BrokerHello{}, err
	}
	return h, nil
}

// check is the hello's rule: an IP address and a non-zero port, and a
// token of 43 base64url characters (the broker's 256 bits).
func (h BrokerHello) check() error {
	ap, err := netip.ParseAddrPort(h.Broker)
	if err != nil || ap.Port() == 0 {
		return fmt.Errorf("%w: broker %q: want an IP address and a port", ErrInvalidHello, h.Broker)
	}
	if !ValidBrokerToken(h.Token) {
		return fmt.Errorf("%w: token: want 43 base64url characters", ErrInvalidHello)
	}
	return nil
}

func base64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
