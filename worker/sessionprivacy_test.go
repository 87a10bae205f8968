package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The secrets of the reference's tests: the private tool's argument and result, and the
// reader's private prompt memory.
const (
	argSecret    = "ARG_SECRET"
	resultSecret = "RESULT_SECRET"
	promptSecret = "PROMPT_SECRET"
)

var privacySecrets = []string{argSecret, resultSecret, promptSecret}

// annTurn is ann's turn (the reference's tests: reader ann, actor ann-actor) with the
// private prompt memory PROMPT_SECRET, or shared memory when visibility
// is "shared".
func annTurn(id, text, visibility string) wire.SessionTurn {
	return wire.SessionTurn{TurnID: id, Author: wire.SessionAuthor{ID: "ann-actor", Name: "Ann", PrincipalID: "ann"},
		Text: text, Memory: "Ann's note: " + promptSecret, MemoryVisibility: visibility, Images: []wire.Image{}, Thinking: "low"}
}

// boTurn is bo's turn, without memory.
func boTurn(id, text string) wire.SessionTurn {
	return wire.SessionTurn{TurnID: id, Author: wire.SessionAuthor{ID: "bo", Name: "Bo"}, Text: text, Images: []wire.Image{}, Thinking: "low"}
}

// recallPerson is the reference's tool: it answers RESULT_SECRET, as its text or
// its error, private to ann.
func recallPerson(failed bool) *sessionTool {
	return &sessionTool{answer: func(json.RawMessage, wire.SessionBinding) wire.SessionToolResponse {
		if failed {
			return wire.SessionToolResponse{Error: "no record of " + resultSecret, PrivateTo: "ann"}
		}
		return wire.SessionToolResponse{OK: true, Text: "ann said " + resultSecret, PrivateTo: "ann"}
	}}
}

// secretsIn lists the secrets raw holds.
func secretsIn(raw []byte) []string {
	var out []string
	for _, s := range privacySecrets {
		if bytes.Contains(raw, []byte(s)) {
			out = append(out, s)
		}
	}
	return out
}

// The reference's test "[SEC] Ownership persists", for the success and the error result,
// over the real broker: the result's privateTo is kept in the session;
// bo's next request holds none of the secrets but the placeholder; ann's
// next request has her call's argument again.
func TestSecPrivateToolResultOwnership(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(map[bool]string{false: "success", true: "error"}[failed], func(t *testing.T) {
			model := fakemodel.NewWithOptions(fakemodel.Options{Key: realModelKey},
				fakemodel.CallTools(fakemodel.Call("host_recall_person", map[string]string{"query": argSecret})),
				fakemodel.Reply("I recalled it."),
				fakemodel.Reply("Hello Bo."),
				fakemodel.Reply("Welcome back."),
			)
			defer model.Close()
			r := startRealSession(t, model, map[string]*sessionTool{"recall_person": recallPerson(failed)}, "", nil)
			r.mustRun(annTurn("t1", "what did I tell you?", ""))
			r.mustRun(boTurn("t2", "what did Ann tell you?"))
			r.mustRun(annTurn("t3", "and again?", ""))

			reqs := model.Requests()
			if len(reqs) != 4 {
				t.Fatalf("%d model requests; want 4 (none refused)", len(reqs))
			}
			if got := secretsIn(reqs[1].Raw); !cmp.Equal(got, privacySecrets) {
				t.Errorf("ann's own request holds %v; want all three secrets", got)
			}
			if got := secretsIn(reqs[2].Raw); len(got) > 0 {
				t.Errorf("[SEC] bo's request holds %v", got)
			}
			if !bytes.Contains(reqs[2].Raw, []byte("private memory, hidden")) {
				t.Errorf("bo's request lacks the placeholder: %s", reqs[2].Raw)
			}
			if !bytes.Contains(reqs[3].Raw, []byte(argSecret)) || !bytes.Contains(reqs[3].Raw, []byte(resultSecret)) {
				t.Errorf("ann's next request lacks her own call and result")
			}
			xs := loadSessions(t, r.ws)
			tool := xs[0].messages[2]
			if tool.Role != "tool" || tool.PrivateTo != "ann" || !strings.Contains(tool.Content, resultSecret) {
				t.Errorf("stored result %+v; want ann's private result", tool)
			}
		})
	}
}

// The reference's test "[SEC] Real bridge-provider turns" and "Shared versus private prompt
// blocks", as they apply to a worker that projects every request itself:
// there is no bridge refusal, so readers ann → bo → ann all proceed with
// private and with shared prompts (the model is seen 3 times), and bo's
// request never holds ann's prompt memory.
func TestSecNoBridgeRefusalReadersABA(t *testing.T) {
	for _, visibility := range []string{wire.MemoryPrivate, wire.MemoryShared} {
		t.Run(visibility, func(t *testing.T) {
			model := fakemodel.NewWithOptions(fakemodel.Options{Key: realModelKey},
				fakemodel.Reply("Hi Ann."), fakemodel.Reply("Hi Bo."), fakemodel.Reply("Hi again."))
			defer model.Close()
			r := startRealSession(t, model, nil, "", nil)
			r.mustRun(annTurn("t1", "hello", visibility))
			r.mustRun(boTurn("t2", "hello"))
			r.mustRun(annTurn("t3", "hello", visibility))
			reqs := model.Requests()
			if len(reqs) != 3 {
				t.Fatalf("model seen %d times; want 3", len(reqs))
			}
			if bytes.Contains(reqs[1].Raw, []byte(promptSecret)) {
				t.Errorf("[SEC] bo's request holds ann's prompt memory")
			}
			if !bytes.Contains(reqs[0].Raw, []byte(promptSecret)) || !bytes.Contains(reqs[2].Raw, []byte(promptSecret)) {
				t.Errorf("ann's requests lack her own prompt memory")
			}
		})
	}
}

// The reference's test "[SEC] Shared versus private prompt blocks": a turn with private
// prompt memory is closed to another reader (intermediate text, every
// call's arguments and every result hidden; the prompt and the final
// reply, posted in the channel, stay); with shared memory it is not.
func TestSecPrivatePromptClosesTurn(t *testing.T) {
	const intermediate, arg, result, final = "LOOKING_UP", "ARG_PUBLIC", "PUBLIC_RESULT", "FINAL_REPLY"
	for _, tc := range []struct {
		visibility string
		wantSeen   bool
	}{{wire.MemoryPrivate, false}, {wire.MemoryShared, true}} {
		t.Run(tc.visibility, func(t *testing.T) {
			model := fakemodel.NewWithOptions(fakemodel.Options{Key: realModelKey},
				fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
					return fakemodel.Response{Content: intermediate, ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_lookup", map[string]string{"query": arg})}}
				}),
				fakemodel.Reply(final), fakemodel.Reply("Hi Bo."))
			defer model.Close()
			lookup := &sessionTool{answer: func(json.RawMessage, wire.SessionBinding) wire.SessionToolResponse {
				return wire.SessionToolResponse{OK: true, Text: result}
			}}
			r := startRealSession(t, model, map[string]*sessionTool{"lookup": lookup}, "", nil)
			r.mustRun(annTurn("t1", "look it up", tc.visibility))
			r.mustRun(boTurn("t2", "what did you find?"))
			bo := model.Requests()[2].Raw
			for _, s := range []string{intermediate, arg, result} {
				if got := bytes.Contains(bo, []byte(s)); got != tc.wantSeen {
					t.Errorf("bo's request holds %s: %v; want %v", s, got, tc.wantSeen)
				}
			}
			if !bytes.Contains(bo, []byte(final)) || !bytes.Contains(bo, []byte("look it up")) {
				t.Errorf("bo's request lacks ann's prompt or final reply")
			}
			if hidden := bytes.Contains(bo, []byte(hiddenTurnResult)); hidden == tc.wantSeen {
				t.Errorf("placeholder present %v; want %v", hidden, !tc.wantSeen)
			}
		})
	}
}

// The reference's test "[SEC] Reader records": each turn starts with a reader record (the
// principal, else the author id, and whether its prompt memory is
// private) before its first model call.
func TestSecReaderRecords(t *testing.T) {
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: realModelKey},
		fakemodel.Reply("one"), fakemodel.Reply("two"), fakemodel.Reply("three"))
	defer model.Close()
	r := startRealSession(t, model, nil, "", nil)
	r.mustRun(annTurn("t1", "hi", ""))
	r.mustRun(boTurn("t2", "hi"))
	r.mustRun(annTurn("t3", "hi", wire.MemoryShared))
	files, _ := filepath.Glob(filepath.Join(r.ws, "sessions", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("session files %v", files)
	}
	data, _ := os.ReadFile(files[0])
	type rec struct {
		Type          string `json:"type"`
		TurnID        string `json:"turnId"`
		Reader        string `json:"reader"`
		PrivateMemory *bool  `json:"privateMemory"`
	}
	var got []rec
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var x rec
		json.Unmarshal(sc.Bytes(), &x)
		if x.Type == recordReader {
			got = append(got, x)
		}
	}
	yes, no := true, false
	want := []rec{{recordReader, "t1", "ann", &yes}, {recordReader, "t2", "bo", &no}, {recordReader, "t3", "ann", &no}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reader records (-want +got):\n%s", diff)
	}
}

// The capability handshake: the worker declares privateTo and
// readerRecords, so the real broker's gate (docs/protocol.md, "Privacy") delivers a private
// prompt and releases a privateTo result (an incapable worker would get
// ErrWorkerCapability and 409); privateHistory turns true once the kept
// conversation holds something private.
func TestSecCapabilityHandshake(t *testing.T) {
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: realModelKey},
		fakemodel.CallTools(fakemodel.Call("host_recall_person", map[string]string{"query": "q"})), fakemodel.Reply("ok"))
	defer model.Close()
	r := startRealSession(t, model, map[string]*sessionTool{"recall_person": recallPerson(false)}, "", nil)
	if res, err := r.run(annTurn("t1", "hi", wire.MemoryPrivate)); err != nil || !res.OK {
		t.Fatalf("private turn = %+v, %v; want it delivered and answered", res, err)
	}
	if !privateHistory(loadSessions(t, r.ws)) {
		t.Error("privateHistory false after a private turn")
	}

	standIn := fakemodel.New(fakemodel.Reply("ok"), fakemodel.Reply("ok"))
	defer standIn.Close()
	b := startSessionBroker(t, standIn)
	w := startWorker(t, b, t.TempDir())
	if res := b.execute(annTurn("t1", "hi", wire.MemoryPrivate)); !res.OK {
		t.Fatalf("turn %+v", res)
	}
	b.execute(boTurn("t2", "hi"))
	b.mu.Lock()
	bodies := append([]string(nil), b.readyBodies...)
	b.mu.Unlock()
	want := []string{
		`{"capabilities":{"privateTo":true,"readerRecords":true},"privateHistory":false}`,
		`{"capabilities":{"privateTo":true,"readerRecords":true},"privateHistory":true}`,
	}
	if len(bodies) < 2 || bodies[0] != want[0] || bodies[len(bodies)-1] != want[1] {
		t.Errorf("ready bodies %q; want first %s, last %s\n%s", bodies, want[0], want[1], w.log.String())
	}
}

// docs/session.md, "Privacy projection" "assistant messages before the running turn lose their thinking":
// the running turn replays its latest thinking (the API needs it in front
// of the tool calls), a later turn, even the same reader's, has none.
func TestSecThinkingNotReplayedAcrossTurns(t *testing.T) {
	const thought = "THINK_SECRET"
	answer := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[` +
		`{"type":"thinking","thinking":"` + thought + `","signature":"c2ln"},` +
		`{"type":"tool_use","id":"toolu_1","name":"host_lookup","input":{"query":"q"}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: realModelKey},
		fakemodel.Func(func(fakemodel.Request) fakemodel.Response { return fakemodel.Response{Raw: []byte(answer)} }),
		fakemodel.Reply("done"), fakemodel.Reply("again"))
	defer model.Close()
	lookup := &sessionTool{answer: func(json.RawMessage, wire.SessionBinding) wire.SessionToolResponse {
		return wire.SessionToolResponse{OK: true, Text: "found"}
	}}
	r := startRealSession(t, model, map[string]*sessionTool{"lookup": lookup}, "", nil)
	r.mustRun(annTurn("t1", "look", wire.MemoryShared))
	r.mustRun(annTurn("t2", "again", wire.MemoryShared))
	reqs := model.Requests()
	if !bytes.Contains(reqs[1].Raw, []byte(thought)) {
		t.Errorf("the running turn's request lacks its thinking")
	}
	if bytes.Contains(reqs[2].Raw, []byte(thought)) {
		t.Errorf("[SEC] a later turn's request replays thinking")
	}
}

// The projection rules, table by table (sessionprivacy.go).
func TestProjectExchanges(t *testing.T) {
	call := func(id, args string) []wire.ToolCall {
		return []wire.ToolCall{{ID: id, Type: "function", Function: wire.FunctionCall{Name: "host_recall", Arguments: args}}}
	}
	annPrivate := sessionExchange{turnID: "t1", reader: "ann", messages: []message{
		{Role: "user", Content: "[Ann (ann)] recall"},
		{Role: "assistant", Content: "checking ARG", ToolCalls: call("c1", `{"q":"ARG"}`)},
		{Role: "tool", ToolCallID: "c1", Content: "RESULT", PrivateTo: "ann"},
		{Role: "assistant", Content: "public", ToolCalls: call("c2", `{"q":"PUB"}`)},
		{Role: "tool", ToolCallID: "c2", Content: "PUBRES"},
		{Role: "assistant", Content: "final"},
	}}
	annMemory := sessionExchange{turnID: "t2", reader: "ann", privateMemory: true, messages: []message{
		{Role: "user", Content: "u"},
		{Role: "assistant", Content: "mid", ToolCalls: call("c3", `{"q":"MEM"}`)},
		{Role: "tool", ToolCallID: "c3", Content: "PUBRES2"},
		{Role: "assistant", Content: "final2"},
	}}
	bobPublic := sessionExchange{turnID: "t3", reader: "bo", messages: []message{
		{Role: "user", Content: "u3"},
		{Role: "assistant", Content: "mid3", ToolCalls: call("c4", `{"q":"X"}`)},
		{Role: "tool", ToolCallID: "c4", Content: "R4"},
		{Role: "assistant", Content: "final3"},
	}}
	xs := []sessionExchange{annPrivate, annMemory, bobPublic}
	closedAnn := []string{
		"user:[Ann (ann)] recall",
		"assistant::c1{}", "tool:" + hiddenPrivate,
		"assistant::c2{}", "tool:" + hiddenTurnResult,
		"assistant:final",
		"user:u", "assistant::c3{}", "tool:" + hiddenTurnResult, "assistant:final2",
	}
	bobOpen := []string{"user:u3", `assistant:mid3:c4{"q":"X"}`, "tool:R4", "assistant:final3"}
	tests := []struct {
		name string
		v    viewer
		want []string
	}{
		{"owner", viewer{id: "ann"}, append([]string{
			"user:[Ann (ann)] recall",
			`assistant:checking ARG:c1{"q":"ARG"}`, "tool:RESULT",
			`assistant:public:c2{"q":"PUB"}`, "tool:PUBRES",
			"assistant:final",
			"user:u", `assistant:mid:c3{"q":"MEM"}`, "tool:PUBRES2", "assistant:final2",
		}, bobOpen...)},
		{"another reader", viewer{id: "bo"}, append(closedAnn, bobOpen...)},
		{"no reader", anonymous, append(closedAnn, bobOpen...)},
		{"a reader named like no one", viewer{id: ""}, append(closedAnn, bobOpen...)},
	}
	before := cloneExchanges(xs)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, flatten(projectExchanges(xs, tc.v))); diff != "" {
				t.Errorf("projection (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(before, xs, cmp.AllowUnexported(sessionExchange{})); diff != "" {
		t.Errorf("the projection changed the kept conversation:\n%s", diff)
	}
	if !privateHistory(xs) || privateHistory([]sessionExchange{bobPublic}) {
		t.Error("privateHistory wrong")
	}
}

// hidePrivate hides a result private to another in the running turn too,
// with its call's arguments, and leaves the other calls of the message.
func TestHidePrivateRunningTurn(t *testing.T) {
	msgs := []message{
		{Role: "system", Content: "s"},
		{Role: "user", Content: "u"},
		{Role: "assistant", ToolCalls: []wire.ToolCall{
			{ID: "a", Type: "function", Function: wire.FunctionCall{Name: "host_x", Arguments: `{"k":"A"}`}},
			{ID: "b", Type: "function", Function: wire.FunctionCall{Name: "host_x", Arguments: `{"k":"B"}`}},
		}},
		{Role: "tool", ToolCallID: "a", Content: "mine", PrivateTo: "ann"},
		{Role: "tool", ToolCallID: "b", Content: "theirs", PrivateTo: "cy"},
	}
	got := flatten(hidePrivate(msgs, viewer{id: "ann"}))
	want := []string{"system:s", "user:u", `assistant::a{"k":"A"}b{}`, "tool:mine", "tool:" + hiddenPrivate}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if msgs[2].ToolCalls[1].Function.Arguments != `{"k":"B"}` || msgs[4].Content != "theirs" {
		t.Error("hidePrivate changed its input")
	}
	if out := hidePrivate(msgs[:4], viewer{id: "ann"}); &out[0] != &msgs[0] {
		t.Error("hidePrivate copied a conversation with nothing to hide")
	}
}

// flatten writes messages as role:content[:id args …].
func flatten(msgs []message) []string {
	var out []string
	for _, m := range msgs {
		s := m.Role + ":" + m.Content
		if len(m.ToolCalls) > 0 {
			s += ":"
			for _, c := range m.ToolCalls {
				s += c.ID + c.Function.Arguments
			}
		}
		out = append(out, s)
	}
	return out
}

func cloneExchanges(xs []sessionExchange) []sessionExchange {
	out := make([]sessionExchange, len(xs))
	for i, x := range xs {
		out[i] = x
		out[i].messages = make([]message, len(x.messages))
		for j, m := range x.messages {
			m.ToolCalls = append([]wire.ToolCall(nil), m.ToolCalls...)
			out[i].messages[j] = m
		}
	}
	return out
}

// A tool result's privateTo is kept beside its message in the session
// file and read back.
func TestSessionStorePrivateTo(t *testing.T) {
	dir := t.TempDir()
	s := openSessionStore(dir, sessionHistoryBudget, time.Now, nil)
	turn := annTurn("t1", "recall", "")
	msgs := []message{
		{Role: "user", Content: "u"},
		{Role: "assistant", ToolCalls: []wire.ToolCall{{ID: "c1", Type: "function", Function: wire.FunctionCall{Name: "host_recall", Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: "c1", Content: "secret", PrivateTo: "ann"},
		{Role: "assistant", Content: "done"},
	}
	if err := s.begin(turn); err != nil {
		t.Fatal(err)
	}
	if err := s.finish("t1", true, msgs); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(s.file)
	line := `{"type":"message","turnId":"t1","message":{"role":"tool","tool_call_id":"c1","content":"secret"},"privateTo":"ann"}`
	if !bytes.Contains(data, []byte(line)) {
		t.Errorf("file lacks %s:\n%s", line, data)
	}
	again := openSessionStore(dir, sessionHistoryBudget, time.Now, func(string, error) { t.Error("file ignored") })
	if len(again.exchanges) != 1 || again.exchanges[0].messages[2].PrivateTo != "ann" || !again.exchanges[0].privateMemory {
		t.Errorf("reloaded %+v; want the private result and the private turn", again.exchanges)
	}
}

// A version-1 file loads, but the worker does not append to it: the first
// write starts a version-2 file that carries its exchanges, so a worker
// that predates privateTo (and refuses version 2) never continues a
// conversation holding private results. A privateTo in a version-1 file
// is not read.
func TestSessionStoreCarriesVersion1(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.jsonl")
	v1 := testHeaderV1 + "\n" + turnLines("a", "1", "x") +
		strings.Replace(turnLines("b", "2", "y"), `"message":{"role":"user","content":"2"}}`, `"message":{"role":"user","content":"2"},"privateTo":"x"}`, 1)
	os.WriteFile(old, []byte(v1), 0o600)
	s := openSessionStore(dir, sessionHistoryBudget, time.Now, func(string, error) { t.Error("file ignored") })
	if s.file != "" || len(s.exchanges) != 2 || s.exchanges[1].messages[0].PrivateTo != "" {
		t.Fatalf("store %q %+v; want two exchanges and no file to append to", s.file, s.exchanges)
	}
	if err := s.begin(boTurn("c", "3")); err != nil {
		t.Fatal(err)
	}
	if err := s.finish("c", true, []message{{Role: "user", Content: "3"}, {Role: "assistant", Content: "z"}}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(old); string(data) != v1 {
		t.Errorf("the version-1 file changed")
	}
	data, _ := os.ReadFile(s.file)
	log, err := parseSession(data)
	xs, version := log.exchanges, log.version
	if err != nil || version != sessionVersion {
		t.Fatalf("new file: version %d, %v", version, err)
	}
	if diff := cmp.Diff([]string{"1", "2", "3"}, userTexts(xs)); diff != "" {
		t.Errorf("new file's exchanges (-want +got):\n%s", diff)
	}
}
