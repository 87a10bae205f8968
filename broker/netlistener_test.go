package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/wire"
)

// netBroker is the network listener on loopback over tokens, with its
// own log.
type netBroker struct {
	srv    *broker.Server
	tokens *broker.Tokens
	logs   *syncbuf.Buffer
}

func newNetBroker(t *testing.T, tlsCfg *tls.Config) *netBroker {
	t.Helper()
	n := &netBroker{tokens: broker.NewTokens(), logs: &syncbuf.Buffer{}}
	srv, err := broker.ListenNet("127.0.0.1:0", n.tokens, broker.NetOptions{
		ListenOptions: broker.ListenOptions{Logger: slog.New(slog.NewJSONHandler(n.logs, nil))},
		TLS:           tlsCfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	n.srv = srv
	return n
}

func (n *netBroker) client(token string) *brokerclient.Client {
	return &brokerclient.Client{Network: &brokerclient.Network{Addr: n.srv.Addr().String(), Token: token}, Timeout: 10 * time.Second}
}

// answer is a response's status, content type and body.
type answer struct {
	status      int
	contentType string
	body        string
}

func call(t *testing.T, c *brokerclient.Client, route, body string) answer {
	t.Helper()
	resp, err := c.Do(context.Background(), brokerclient.Request{Route: route, Body: []byte(body)})
	if err != nil {
		t.Fatalf("broker call: %v", err)
	}
	defer resp.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return answer{resp.Status, resp.Header.Get("Content-Type"), string(b)}
}

// The one refusal every request without a live token of its own gets.
var tokenRefused = answer{http.StatusUnauthorized, "text/plain; charset=utf-8", "unauthorized"}

// TestNetBrokerRefusesNoToken, …WrongToken, …RevokedToken, …ReplayAfterTurn:
// a request without a live token gets one fixed refusal, byte for byte the
// same whatever was wrong, and reaches no tool; the live token works.
func TestNetBrokerRefusesWithoutALiveToken(t *testing.T) {
	echo := &echoTool{}
	f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, echo))
	n := newNetBroker(t, nil)
	ctx, endTurn := context.WithCancel(context.Background())
	live, revoke := n.tokens.Issue(ctx, f.turn)
	defer revoke()
	_, revokeEarly := n.tokens.Issue(context.Background(), f.turn)
	_, _ = n.tokens.Issue(context.Background(), f.turn) // a spare, never revoked
	revokeEarly()
	other, otherRevoke := n.tokens.Issue(context.Background(), f.turn)
	otherRevoke()

	route := wire.ToolRoute("echo")
	if got := call(t, n.client(live.Reveal()), route, `{}`); got.status != 200 {
		t.Fatalf("live token = %+v; want 200", got)
	}
	cases := map[string]*brokerclient.Client{
		"NoToken":       {Network: &brokerclient.Network{Addr: n.srv.Addr().String()}},
		"EmptyToken":    n.client(""),
		"MalformedLong": n.client(strings.Repeat("A", 44)),
		// The worst a header can hold under the 64 KiB bound: refused on
		// its length, never hashed.
		"MalformedHuge": n.client(strings.Repeat("A", 60<<10)),
		"MalformedChar": n.client(strings.Repeat("A", 42) + "="),
		"WrongToken":    n.client(strings.Repeat("A", broker.TokenLen)),
		"RevokedToken":  n.client(other.Reveal()),
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := call(t, c, route, `{}`); got != tokenRefused {
				t.Errorf("answer = %+v; want %+v", got, tokenRefused)
			}
		})
	}
	t.Run("ReplayAfterTurn", func(t *testing.T) {
		endTurn()
		if got := call(t, n.client(live.Reveal()), route, `{}`); got != tokenRefused {
			t.Errorf("the turn's token after its end = %+v; want %+v", got, tokenRefused)
		}
	})
	if calls := echo.calls.Load(); calls != 1 {
		t.Errorf("tool ran %d times; want once, for the live token", calls)
	}
	if n.tokens.Live() != 1 { // the spare: the others were revoked or their turn ended
		t.Errorf("live tokens = %d; want 1", n.tokens.Live())
	}
}

// TestNetBrokerOtherTurnsToken: a token selects its own turn's binding and
// nothing else: turn A's token lands on A's channel and speaker whatever
// the body claims, and B's on B's.
func TestNetBrokerOtherTurnsToken(t *testing.T) {
	echo := &echoTool{}
	f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, echo))
	n := newNetBroker(t, nil)
	other := rtsandbox.Speaker{ID: "guest-b", Name: "B", PrincipalID: "p_guest_b"}
	turnB := f.broker.Turn(context.Background(), rtsandbox.Binding{Channel: "fake:b", Speaker: other})
	tokA, revA := n.tokens.Issue(context.Background(), f.turn)
	defer revA()
	tokB, revB := n.tokens.Issue(context.Background(), turnB)
	defer revB()
	for _, tc := range []struct {
		tok  broker.Token
		want rtsandbox.Binding
	}{
		{tokA, rtsandbox.Binding{Channel: testChannel, Speaker: guest}},
		{tokB, rtsandbox.Binding{Channel: "fake:b", Speaker: other}},
	} {
		if got := call(t, n.client(tc.tok.Reveal()), wire.ToolRoute("echo"), `{"channel":"fake:b","speaker":"guest-b"}`); got.status != 200 {
			t.Fatalf("call = %+v", got)
		}
		if b := echo.tc.Load().(rtsandbox.Binding); b.Channel != tc.want.Channel || b.Speaker != tc.want.Speaker {
			t.Errorf("tool binding = %+v; want %+v", b, tc.want)
		}
	}
}

// TestNetBrokerSameRulesAsSocket: the same calls through the socket and
// through the network listener get the same answers, refusals included:
// the token is removed before the turn's own rules.
func TestNetBrokerSameRulesAsSocket(t *testing.T) {
	f := newFixture(t, jsonReply(`{"choices":[{"message":{"role":"assistant","content":"**Hi** \\u0026 \\\"bye\\\""}}]}`),
		withTool("echo", `{"type":"object"}`, &echoTool{}))
	sock := filepath.Join(shortDir(t), "broker.sock")
	srv, err := broker.Listen(sock, f.turn, broker.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	n := newNetBroker(t, nil)
	tok, revoke := n.tokens.Issue(context.Background(), f.turn)
	defer revoke()
	viaSocket := &brokerclient.Client{Socket: sock, Timeout: 10 * time.Second}
	viaNet := n.client(tok.Reveal())
	model := `{"model":"x","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, route, body string
		header            http.Header
	}{
		{"model", wire.RouteModel, model, nil},
		{"tool", wire.ToolRoute("echo"), `{}`, nil},
		{"unknown route", "/admin", `{}`, nil},
		{"forbidden header", wire.RouteModel, model, http.Header{"X-Api-Key": {"x"}}},
		{"not the dummy key", wire.RouteModel, model, http.Header{"Authorization": {"Bearer real"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]answer
			for i, c := range []*brokerclient.Client{viaSocket, viaNet} {
				resp, err := c.Do(context.Background(), brokerclient.Request{Route: tc.route, Body: []byte(tc.body), Header: tc.header})
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Close()
				got[i] = answer{resp.Status, resp.Header.Get("Content-Type"), string(b)}
			}
			if got[0] != got[1] {
				t.Errorf("socket %+v, network %+v; want the same", got[0], got[1])
			}
		})
	}
}

// TestNetBrokerSourceLimit: past SourceFailures refusals in a window, a
// source is refused even with a live token; another source is not.
func TestNetBrokerSourceLimit(t *testing.T) {
	f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, &echoTool{}))
	n := newNetBroker(t, nil)
	tok, revoke := n.tokens.Issue(context.Background(), f.turn)
	defer revoke()
	from := func(src, token string) answer {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		conn, err := d.Dial("tcp", n.srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req, _ := http.NewRequest("POST", "http://broker"+wire.ToolRoute("echo"), strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+wire.DummyKey)
		req.Header.Set(broker.TokenHeader, token)
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufioReader(conn), req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
	}
	wrong := strings.Repeat("B", broker.TokenLen)
	for range broker.SourceFailures {
		if got := from("127.0.0.2", wrong); got != tokenRefused {
			t.Fatalf("wrong token = %+v", got)
		}
	}
	if got := from("127.0.0.2", tok.Reveal()); got != tokenRefused {
		t.Errorf("a live token from a source over its limit = %+v; want the refusal", got)
	}
	if got := from("127.0.0.3", tok.Reveal()); got.status != 200 {
		t.Errorf("a live token from another source = %+v; want 200", got)
	}
	if lines := strings.Count(n.logs.String(), "refused a request"); lines != 1 {
		t.Errorf("%d log lines for %d refusals of one source; want 1 per window:\n%s", lines, broker.SourceFailures+1, n.logs.String())
	}
}

// TestNetBrokerTokenNeverLogged: the token's text reaches no log, and the
// type redacts itself wherever it is printed.
func TestNetBrokerTokenNeverLogged(t *testing.T) {
	f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, &echoTool{}))
	n := newNetBroker(t, nil)
	tok, revoke := n.tokens.Issue(context.Background(), f.turn)
	call(t, n.client(tok.Reveal()), wire.ToolRoute("echo"), `{}`)
	call(t, n.client(tok.Reveal()), "/nowhere", `{}`)
	revoke()
	call(t, n.client(tok.Reveal()), wire.ToolRoute("echo"), `{}`)
	var printed bytes.Buffer
	slog.New(slog.NewJSONHandler(&printed, nil)).Info("issued", "token", tok)
	fmt.Fprint(&printed, tok, fmt.Sprintf("%v %+v %#v %s %q", tok, tok, tok, tok, tok))
	for where, text := range map[string]string{"listener log": n.logs.String(), "audit log": f.logs.String(), "printed": printed.String()} {
		if strings.Contains(text, tok.Reveal()) {
			t.Errorf("the token is in the %s: %s", where, text)
		}
	}
	if !strings.Contains(printed.String(), "[token]") {
		t.Errorf("printed = %s; want [token]", printed.String())
	}
}

// TestNetBrokerTLS: with a certificate the listener speaks only TLS: a
// client that trusts the certificate calls, plain HTTP gets nothing.
func TestNetBrokerTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, &echoTool{}))
	n := newNetBroker(t, &tls.Config{Certificates: []tls.Certificate{cert}})
	tok, revoke := n.tokens.Issue(context.Background(), f.turn)
	defer revoke()
	c := n.client(tok.Reveal())
	c.Network.TLS = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if got := call(t, c, wire.ToolRoute("echo"), `{}`); got.status != 200 {
		t.Errorf("TLS call = %+v; want 200", got)
	}
	plain := n.client(tok.Reveal())
	plain.Timeout = 2 * time.Second
	if resp, err := plain.Do(context.Background(), brokerclient.Request{Route: wire.ToolRoute("echo"), Body: []byte(`{}`)}); err == nil {
		resp.Close()
		if resp.Status == 200 {
			t.Error("a plain HTTP call to the TLS listener was answered 200")
		}
	}
	untrusting := n.client(tok.Reveal())
	untrusting.Network.TLS = &tls.Config{ServerName: "127.0.0.1"}
	if _, err := untrusting.Do(context.Background(), brokerclient.Request{Route: wire.ToolRoute("echo"), Body: []byte(`{}`)}); err == nil {
		t.Error("a client that does not trust the certificate got through")
	}
}

// selfSigned makes a certificate for 127.0.0.1 in memory.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(parsed)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: parsed}, pool
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
