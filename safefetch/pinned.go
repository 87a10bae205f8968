package safefetch

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"

	"github.com/andybalholm/brotli"
)

// maxHeaderBytes bounds the status line and response header. The reference
// (Node) uses 16 KiB; 64 KiB is as bounded and refuses fewer real sites.
const maxHeaderBytes = 64 << 10

// Pinned is the production Transport: one HTTP/1.1 GET over a fresh
// connection to the vetted address, with no proxy, no pooling, no cookies
// and no transparent decompression. Host, SNI and certificate verification
// use the URL's host name. The zero value is ready to use.
type Pinned struct {
	// Dial opens the TCP connection to address ("ip:port", the vetted
	// address). nil means a net.Dialer whose Control hook refuses any
	// connected address that is not the vetted one or not public: a second
	// layer under the vetting. A non-nil Dial is a trusted test seam and
	// replaces that hook.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// TLSConfig is cloned for https; ServerName is always set from the URL
	// and verification always happens. nil means the system roots.
	TLSConfig *tls.Config
}

// RoundTrip performs hop. It is exported as the reference's pinnedTransport;
// calling it directly skips admission and vetting, so only ever pass an
// address that Fetch vetted.
func (p *Pinned) RoundTrip(ctx context.Context, hop Hop) (*Result, error) {
	if hop.URL == nil || !hop.Addr.IsValid() || hop.MaxBytes < 1 {
		return nil, ErrInvalidBounds
	}
	u := hop.URL
	port := defaultPort(u.Scheme)
	if s := u.Port(); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return nil, ErrInvalidURL
		}
		port = n
	}
	addr := hop.Addr.Unmap()
	conn, err := p.connect(ctx, u.Scheme == "https", u.Hostname(), netip.AddrPortFrom(addr, uint16(port)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	res, err := exchange(conn, hop)
	if err != nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return res, err
}

// connect dials the pinned address and, for https, completes the TLS
// handshake, all within ConnectTimeout.
func (p *Pinned) connect(ctx context.Context, useTLS bool, hostname string, ap netip.AddrPort) (net.Conn, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, ConnectTimeout, errConnectDeadline)
	defer cancel()
	network := "tcp6"
	if ap.Addr().Is4() {
		network = "tcp4"
	}
	dial := p.Dial
	if dial == nil {
		d := &net.Dialer{Control: controlPinned(ap.Addr())}
		dial = d.DialContext
	}
	conn, err := dial(cctx, network, ap.String())
	if err == nil && useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if p.TLSConfig != nil {
			cfg = p.TLSConfig.Clone()
		}
		cfg.ServerName = hostname // an IP literal is verified against IP SANs
		cfg.InsecureSkipVerify = false
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if err = tc.HandshakeContext(cctx); err != nil {
			conn.Close()
		} else {
			conn = tc
		}
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case cctx.Err() != nil:
			return nil, errConnectDeadline
		}
		return nil, err
	}
	return conn, nil
}

// controlPinned is the dial-time check on the address actually being
// connected: it must be the vetted address and public. An unparsable
// address is refused, never a panic.
func controlPinned(want netip.Addr) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || ap.Addr().Unmap() != want || !IsPublicAddr(ap.Addr()) {
			return ErrNonPublic
		}
		return nil
	}
}

// exchange writes the request and reads the bounded response (docs/web.md).
func exchange(conn net.Conn, hop Hop) (*Result, error) {
	h := hop.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Accept-Encoding", "identity") // never let anything negotiate compression for us
	req := &http.Request{
		Method:     http.MethodGet,
		URL:        hop.URL,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Host:       hop.URL.Host,
		Close:      true,
	}
	bw := bufio.NewWriter(conn)
	if err := req.Write(bw); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	lim := &headerLimit{r: conn, n: maxHeaderBytes}
	br := bufio.NewReader(lim)
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(br, req); err != nil {
			return nil, err
		}
		// Skip interim responses, as Node and net/http do; 101 is final.
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		resp.Body.Close()
	}
	lim.n = math.MaxInt64 // the body is bounded by MaxBytes below
	defer resp.Body.Close()

	res := &Result{
		Status:     resp.StatusCode,
		StatusText: strings.TrimLeft(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)), " "),
		Header:     joinHeader(resp.Header),
	}
	if isRedirect(resp.StatusCode) || resp.StatusCode == http.StatusSwitchingProtocols {
		return res, nil // body never read
	}
	if resp.ContentLength > hop.MaxBytes {
		return nil, &ResponseTooLargeError{Status: res.Status, Header: res.Header}
	}
	enc := "identity"
	if vs := resp.Header.Values("Content-Encoding"); len(vs) > 0 {
		enc = strings.ToLower(strings.Join(vs, ", "))
	}
	body, err := readBody(resp.Body, enc, hop.MaxBytes)
	if err != nil {
		return nil, err
	}
	if enc != "identity" {
		res.Header.Del("Content-Length")
	}
	res.Header.Del("Content-Encoding")
	res.Body = body
	return res, nil
}

// readBody reads at most max wire bytes and at most max decoded bytes.
func readBody(r io.Reader, enc string, max int64) ([]byte, error) {
	wire := bufio.NewReader(&wireLimit{r: r, n: max})
	var dec io.Reader
	switch enc {
	case "identity", "gzip", "deflate", "br":
	default:
		return nil, ErrEncoding
	}
	if _, err := wire.Peek(1); errors.Is(err, io.EOF) {
		return []byte{}, nil // no body: nothing to decode
	} else if err != nil {
		return nil, err
	}
	switch enc {
	case "identity":
		dec = wire
	case "gzip":
		zr, err := gzip.NewReader(wire)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		dec = zr
	case "deflate": // zlib-wrapped, as in HTTP; raw deflate fails in the decoder
		zr, err := zlib.NewReader(wire)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		dec = zr
	case "br":
		dec = brotli.NewReader(wire)
	}
	body, err := io.ReadAll(io.LimitReader(dec, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > max {
		if enc == "identity" { // identity bytes are wire bytes
			return nil, ErrWireTooLarge
		}
		return nil, ErrBodyTooLarge
	}
	return body, nil
}

// wireLimit fails once more than n bytes have been read.
type wireLimit struct {
	r io.Reader
	n int64
}

func (w *wireLimit) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.n -= int64(n)
	if w.n < 0 {
		return n, ErrWireTooLarge
	}
	return n, err
}

// headerLimit fails once more than n bytes have been read; it is lifted
// once the header is parsed.
type headerLimit struct {
	r io.Reader
	n int64
}

func (h *headerLimit) Read(p []byte) (int, error) {
	if h.n <= 0 {
		return 0, fmt.Errorf("response header exceeds %d bytes: %w", maxHeaderBytes, ErrWireTooLarge)
	}
	if int64(len(p)) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p)
	if h.n != math.MaxInt64 {
		h.n -= int64(n)
	}
	return n, err
}

// joinHeader copies h, joining repeated fields with ", " (docs/web.md).
func joinHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		out[k] = []string{strings.Join(vs, ", ")}
	}
	return out
}
