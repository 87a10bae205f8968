package worker

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

const helloToken = "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"

// TestRunHelloFirstUsesTheNetworkBroker: with HelloFirst the worker reads
// the hello line, then the turn, and makes every broker call to the
// hello's address with its token, never to the socket.
func TestRunHelloFirstUsesTheNetworkBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		tokens []string
	)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tokens = append(tokens, r.Header.Get(wire.BrokerTokenHeader))
		mu.Unlock()
		w.Write([]byte(completion("over the network")))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	line, err := wire.AppendBrokerHello(nil, wire.BrokerHello{Broker: ln.Addr().String(), Token: helloToken})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := jsonjs.Marshal(testTurn("u1", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	code := Run(context.Background(), Options{
		Stdin: strings.NewReader(string(line) + string(turn)), Stdout: &out, Stderr: &errOut,
		Socket: "/nonexistent/broker.sock", Now: func() time.Time { return testNow }, HelloFirst: true,
	})
	wantOK(t, runResult{code: code, stdout: strings.TrimSuffix(out.String(), "\n"), stderr: errOut.String()}, "over the network")
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) == 0 || tokens[0] != helloToken {
		t.Errorf("tokens sent %q; want the hello's", tokens)
	}
}

// TestRunHelloFirstRefusesABadHello: a missing or malformed hello is the
// fixed failure, class invalid_turn, and no broker call.
func TestRunHelloFirstRefusesABadHello(t *testing.T) {
	for _, in := range []string{"", "{}\n", `{"text":"a turn, no hello"}`} {
		var out, errOut strings.Builder
		code := Run(context.Background(), Options{Stdin: strings.NewReader(in), Stdout: &out, Stderr: &errOut,
			Socket: "/nonexistent/broker.sock", HelloFirst: true})
		wantFailed(t, runResult{code: code, stdout: out.String(), stderr: errOut.String()})
		if !strings.Contains(errOut.String(), `"error_class":"invalid_turn"`) {
			t.Errorf("stderr %q; want class invalid_turn", errOut.String())
		}
	}
}
