package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// FuzzParseResultPacket checks the envelope parser of POST /worker/result.
// Properties: no panic; an accepted packet has a string turnId (the one
// returned) and a result object with a boolean ok.
func FuzzParseResultPacket(f *testing.F) {
	for _, s := range []string{
		`{"turnId":"m1","result":{"ok":true,"text":"x","files":[]}}`,
		`{"turnId":"m1","result":{"ok":false,"error":"e"}}`,
		`{"turnId":null,"result":{"ok":true}}`, `{"turnId":"a","result":[]}`, `[]`, `{"turnId":"a","result":{"ok":"true"}}`,
		` {"turnId" : "a" , "result" : { "ok" : false } } `, `{"turnId":"a","turnId":1,"result":{"ok":true}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, raw, ok := broker.ParseResultPacket(body)
		if !ok {
			return
		}
		// The oracle reads members by their exact names, as JSON.parse and
		// the parser do. A struct would not: encoding/json matches a name
		// whatever its case, and read the member "turNId" as turnId
		// (testdata/fuzz's 6feae35534538f6b).
		var top, result map[string]json.RawMessage
		var turnID *string
		var okField *bool
		err := json.Unmarshal(body, &top)
		if err == nil {
			err = json.Unmarshal(top["turnId"], &turnID)
		}
		if err == nil {
			err = json.Unmarshal(top["result"], &result)
		}
		if err == nil {
			err = json.Unmarshal(result["ok"], &okField)
		}
		if err != nil || turnID == nil || *turnID != id || okField == nil {
			t.Fatalf("accepted %q: turnId %q, err %v", body, id, err)
		}
		var r wire.SessionResult
		if json.Unmarshal(raw, &r) == nil && r.OK && wire.ValidateReplyFiles(r.Files) != nil {
			t.Fatalf("result %q accepted with invalid files", raw)
		}
	})
}

// sessionTexts are every plain-text body the session broker answers with
// (docs/session.md, "Routes and statuses"), plus the upstream stand-in's answer.
var sessionTexts = map[string]bool{
	"Not found": true, "Turn ended": true, "Broker budget exhausted": true, "Invalid input": true,
	"Invalid tool input": true, "MCP method refused": true, "Broker call failed": true, "Upstream refused": true,
	"Already waiting": true, "Retry": true, "No matching turn": true, "Already receiving": true,
	"Invalid result": true, "Invalid ready handshake": true, "Ready": true, "Accepted": true,
	"Report budget exhausted": true, "Invalid report": true,
}

// fuzzCompactor summarises a manual request, declines a threshold one and
// fails an overflow one with an error that holds the model credential.
func fuzzCompactor() *fakeCompactor {
	c := newCompactor()
	inner := c.fn
	c.fn = func(ctx context.Context, req wire.CompactRequest) (*wire.Compaction, error) {
		switch req.Reason {
		case wire.CompactThreshold:
			return nil, nil
		case wire.CompactOverflow:
			return nil, errors.New("refused key " + hostSecret)
		}
		return inner(ctx, req)
	}
	return c
}

// FuzzSessionRoutes drives arbitrary methods, targets and bodies through
// a Session's handler (no socket; the MCP and model upstream answer in
// memory), bound or not. Properties: no panic; every answer is a fixed
// text, JSON, or the Anthropic refusal shape; the credentials never reach
// the worker; the upstream only ever sees a rebuilt JSON-RPC message with
// an allowed method.
func FuzzSessionRoutes(f *testing.F) {
	for _, seed := range []struct {
		method int
		target string
		body   string
		bound  bool
	}{
		{1, "/mcp/research", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, false},
		{1, "/mcp/research", `{"method":"tools/call","params":{"name":"search","arguments":{}}}`, true},
		{1, "/mcp/research", `{"method":"resources/read","params":{}}`, true},
		{1, "/tools/lookup", `{"input":{"q":1}}`, true},
		{1, "/worker/ready", `{"capabilities":{"privateTo":true}}`, false},
		{1, "/worker/result", `{"turnId":"a","result":{"ok":true,"text":"","files":[]}}`, false},
		{0, "/worker/config", ``, false},
		{0, "/mcp-tools", ``, false},
		{1, "/anthropic/v1/messages?beta=true", `{"messages":[{"role":"user","content":"hi"}]}`, true},
		{1, "/compaction/compact", `{}`, true},
		{1, "/compaction/compact", body7, true},
		{1, "/compaction/compact", strings.Replace(body7, "manual", "overflow", 1), true},
		{1, "/compaction/report", bypassReport, true},
		{1, "/compaction/report", endReport, false},
	} {
		f.Add(seed.method, seed.target, []byte(seed.body), seed.bound)
	}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete}
	f.Fuzz(func(t *testing.T, method int, target string, body []byte, bound bool) {
		if method < 0 || !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t") || len(target) > 200 {
			return
		}
		m := methods[method%len(methods)]
		if path, _, _ := strings.Cut(target, "?"); path == wire.RouteWorkerNext {
			return // the long poll waits 45 s; TestSessionNextLongPollTimeout covers it
		}
		var seen []string
		up := upstream.New(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			seen = append(seen, string(b))
			h := http.Header{"Content-Type": {"application/json"}, "Mcp-Session-Id": {"s1"}}
			return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(`{"ok":1}`))}, nil
		}))
		key := func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return hostSecret, nil }
		b, err := broker.New(broker.Config{
			API: rtsandbox.ModelAPIAnthropic, Stream: true, ModelURL: ep("https://model.example"), Model: hostModel, APIKey: key,
			Tools: []broker.Tool{{Spec: rtsandbox.ToolSpec{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`)},
				Impl: rtsandbox.HostToolFunc(func(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) { return "ok", nil })}},
			MCP: []broker.MCPServer{{Name: "research", URL: ep("https://mcp.example/mcp"), APIKey: key,
				Tools: []rtsandbox.ToolSpec{{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)}}}},
			Client: up,
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := broker.NewSession(broker.SessionConfig{Broker: b, Compactor: fuzzCompactor()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if bound {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			release, err := s.Bind(ctx, wire.SessionBinding{Thinking: "high"})
			if err != nil {
				t.Fatal(err)
			}
			defer release()
		}
		r := httptest.NewRequest(m, "http://broker/", bytes.NewReader(body))
		r.RequestURI = target
		w := httptest.NewRecorder()
		func() {
			defer func() {
				if v := recover(); v != nil && v != http.ErrAbortHandler {
					panic(v)
				}
			}()
			s.ServeHTTP(w, r)
		}()
		out := w.Body.String()
		if strings.Contains(out, hostSecret) {
			t.Fatalf("answer holds the credential: %q", out)
		}
		if !sessionTexts[out] && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s = %d %q: not a fixed text or JSON", m, target, w.Code, out)
		}
		for _, msg := range seen {
			var rpc struct {
				JSONRPC string `json:"jsonrpc"`
				Method  string `json:"method"`
			}
			if strings.Contains(msg, `"jsonrpc"`) && (json.Unmarshal([]byte(msg), &rpc) != nil || rpc.JSONRPC != "2.0") {
				t.Fatalf("upstream saw %q", msg)
			}
		}
	})
}

// FuzzParseResultAgreesWithRoot holds the broker's reading of a result
// (through views, its files counted before any is decoded) to the root's
// wire.SessionResult decoding, which encoding/json does: whatever the
// broker accepts the root accepts the same, and on members spelled as the
// protocol spells them (the broker matches them exactly, as JSON.parse
// does, where encoding/json folds their case) the two agree.
func FuzzParseResultAgreesWithRoot(f *testing.F) {
	for _, s := range []string{
		`{"ok":true,"text":"x","files":[]}`, `{"ok":false,"error":"e"}`, `{"ok":true,"text":"x","files":[{"name":"a.txt","data":"AQID"}]}`,
		`{"ok":true,"text":"x","files":[{"name":null,"data":"AQID"}]}`, `{"ok":true,"text":"x","files":[1]}`,
		`{"ok":true,"text":"x","files":[{},{},{},{},{},{},{},{},{},{},{}]}`, `{"ok":true,"text":1,"files":[]}`,
		`{"ok":false,"error":"e","error":"f"}`, `{"ok":true,"Text":"x","files":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var top map[string]json.RawMessage
		if json.Unmarshal(raw, &top) != nil || top == nil || (string(top["ok"]) != "true" && string(top["ok"]) != "false") {
			return // ParseResultPacket refuses it first
		}
		got, err := broker.ParseResult(raw)
		var want wire.SessionResult
		wantErr := json.Unmarshal(raw, &want)
		if err == nil && (wantErr != nil || !equalResults(got, want)) {
			t.Fatalf("broker accepts %q as %+v; root: %+v, %v", raw, got, want, wantErr)
		}
		if err != nil && wantErr == nil && !foldedKeys(raw) {
			t.Fatalf("broker refuses %q (%v); root accepts %+v", raw, err, want)
		}
	})
}

func equalResults(a, b wire.SessionResult) bool {
	if a.OK != b.OK || a.Text != b.Text || a.Error != b.Error || len(a.Files) != len(b.Files) {
		return false
	}
	for i := range a.Files {
		if a.Files[i] != b.Files[i] {
			return false
		}
	}
	return true
}

// foldedKeys reports whether raw has a key that encoding/json folds into
// a protocol member (ok, text, files, error, name, data) but that is not
// spelled as it is, or a key matched once exactly and once folded: then
// the two readers may differ.
func foldedKeys(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok {
			for _, k := range []string{"ok", "text", "files", "error", "name", "data"} {
				if s != k && strings.EqualFold(s, k) {
					return true
				}
			}
		}
	}
}

// FuzzParseCompactRequestAgreesWithRoot holds the broker's reading of a
// compact request (through views, under a budget) to
// wire.ParseCompactRequest: the same decision and the same request.
func FuzzParseCompactRequestAgreesWithRoot(f *testing.F) {
	for _, s := range []string{
		`{"reason":"manual","tokensBefore":10,"firstKeptEntryId":"e1","isSplitTurn":false,"messagesToSummarize":[{"role":"user","content":"hi"}],"turnPrefixMessages":[],"keptMessages":[],"readFiles":["a"],"modifiedFiles":[]}`,
		`{"reason":"threshold","tokensBefore":1e3,"firstKeptEntryId":"e","isSplitTurn":true,"messagesToSummarize":[],"turnPrefixMessages":[{"role":1}],"keptMessages":[],"readFiles":[],"modifiedFiles":[]}`,
		`{"reason":"overflow","tokensBefore":-1,"firstKeptEntryId":"","isSplitTurn":null,"messagesToSummarize":[[]],"turnPrefixMessages":[],"keptMessages":[],"readFiles":[1],"modifiedFiles":[],"previousSummary":"s","customInstructions":null}`,
		`[]`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"reason":"manual","tokensBefore":1,"firstKeptEntryId":"e","isSplitTurn":false,"messagesToSummarize":[],"turnPrefixMessages":[],"keptMessages":[],"readFiles":[],"modifiedFiles":[]} x`))
	f.Add([]byte(`{"reason":"manual","tokensBefore":1,"firstKeptEntryId":"e","isSplitTurn":false,"messagesToSummarize":[{"role":"u",}],"turnPrefixMessages":[],"keptMessages":[],"readFiles":[],"modifiedFiles":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := broker.ParseCompactRequest(body)
		want, wantErr := wire.ParseCompactRequest(body)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("ParseCompactRequest(%q): broker %v, root %v", body, err, wantErr)
		}
		if err != nil {
			return
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("ParseCompactRequest(%q): broker %s, root %s", body, a, b)
		}
	})
}
