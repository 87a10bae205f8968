package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// The speakers, the secret and the texts of TestSessionServePrivateMemory.
const (
	privSecret   = "SECRET-PIN-4711"
	privTell     = "Remember my pin"
	privAsk      = "what is A's pin?"
	privCheck    = "Check my memory"
	privRecall   = "What is my pin?"
	privSaved    = "Saved it."
	privPlain    = "Plain answer"
	privToolSaid = "Tool said: "
	// The worker's placeholder for a result private to another reader
	// (worker/sessionprivacy.go hiddenPrivate).
	privHidden = "(another person's private memory, hidden)"
	// The label of the speaker's own entries in the prompt memory block
	// (memstore/prompt.go speakerLabel).
	privSpeakerLabel = "Speaker memory (this speaker's own entries, JSON data): "
)

// privateMemoryModel scripts the turns of TestSessionServePrivateMemory
// by the guest's words: privTell saves privSecret in speaker scope and
// answers privSaved only when the host said "Saved." (so a privacy-gate
// refusal shows in the reply); privCheck lists the speaker's memory and
// answers what the tool said; anything else gets privPlain.
func privateMemoryModel() *fakemodel.Server {
	return fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			words := lastWords(req.UserText())
			if last := req.Last(); last.Role == "tool" {
				if words == privTell && last.Text() == "Saved." {
					return fakemodel.Response{Content: privSaved}
				}
				return fakemodel.Response{Content: privToolSaid + last.Text()}
			}
			switch words {
			case privTell:
				return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_memory_set",
					map[string]any{"scope": "speaker", "key": "pin", "text": privSecret})}}
			case privCheck:
				return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_memory_get",
					map[string]any{"scope": "speaker"})}}
			}
			return fakemodel.Response{Content: privPlain}
		}))
}

// sayAs sends text as the guest id and requires the one-chunk reply want.
func (s *server) sayAs(t *testing.T, channel, id, text, want string) {
	t.Helper()
	if got := s.postAs(t, channel, id, text); len(got) != 1 || got[0] != want {
		t.Fatalf("reply to %s's %q = %q; want %q\nserve:\n%s", id, text, got, want, s.out.String())
	}
}

// postAs sends text as the guest id (named id) and waits for the reply
// chunks.
func (s *server) postAs(t *testing.T, channel, id, text string) []string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"channel": channel, "author": map[string]string{"id": id, "name": id},
		"text": text, "mentions_bot": true, "wait": true})
	code, resp := s.call(t, "POST", "/api/v1/messages", serveGuestToken, string(body))
	if code != 200 {
		t.Fatalf("POST message as %s = %d %s\nserve:\n%s", id, code, resp, s.out.String())
	}
	var w waitReply
	if err := json.Unmarshal([]byte(resp), &w); err != nil {
		t.Fatal(err)
	}
	return chunksOf(w)
}

// turnRequests are the model requests since the first n.
func turnRequests(model *fakemodel.Server, n int) []fakemodel.Request {
	return model.Requests()[n:]
}

// wantNoSecret requires that no request of a turn of reader holds
// privSecret anywhere (system prompt, history, tool arguments, tool
// results) and that its prompt memory block holds no speaker entries.
func wantNoSecret(t *testing.T, reader string, reqs []fakemodel.Request) {
	t.Helper()
	if len(reqs) == 0 {
		t.Fatalf("%s's turn made no model request", reader)
	}
	for _, r := range reqs {
		if strings.Contains(string(r.Raw), privSecret) {
			t.Errorf("%s's model request %d holds the other speaker's secret:\n%s", reader, r.Index, r.Raw)
		}
		if strings.Contains(r.System(), privSpeakerLabel) {
			t.Errorf("%s's system prompt holds speaker memory:\n%s", reader, r.System())
		}
	}
}

// wantSecret requires that the first request of the reader's turn holds
// privSecret in the prompt memory block (the speaker's own entry) and in
// the arguments of her own host_memory_set call in the history.
func wantSecret(t *testing.T, reader string, reqs []fakemodel.Request) {
	t.Helper()
	if len(reqs) == 0 {
		t.Fatalf("%s's turn made no model request", reader)
	}
	const entry = privSpeakerLabel + `[{"key":"pin","text":"` + privSecret + `"}]`
	if sys := reqs[0].System(); !strings.Contains(sys, entry) {
		t.Errorf("%s's system prompt lacks %q:\n%s", reader, entry, sys)
	}
	for _, m := range reqs[0].Body.Messages {
		for _, c := range m.ToolCalls {
			if c.Function.Name == "host_memory_set" && strings.Contains(c.Function.Arguments, privSecret) {
				return
			}
		}
	}
	t.Errorf("%s's history lacks her own host_memory_set call with the secret:\n%s", reader, reqs[0].Raw)
}

// TestSessionServePrivateMemory is issue 13's privacy test through serve,
// the real broker and the real worker (docs/session.md, "Privacy projection"): in one channel alice tells
// the agent a pin in speaker scope; bob's turns after it carry nothing of
// it, neither in the prompt memory block nor in the history (alice's
// exchange is there only as the worker's hidden placeholder and her
// posted reply), and bob's own memory_get lists bob's memory, not alice's;
// alice's next turn still carries her pin. The same holds after serve
// restarts on the kept container, restarted by the engine meanwhile so
// the worker reads the conversation back from its session file (which
// must have kept privateTo). No privacy gate refused anything (the worker
// declares its capabilities).
func TestSessionServePrivateMemory(t *testing.T) {
	tag, cli := sessionDocker(t)
	model := privateMemoryModel()
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	addMember(t, cfg, "http:bob")
	s := startServe(t, addr, "--config", cfg)
	const ch = "http:lobby"

	// 1. alice saves her pin privately; the reply does not echo it.
	s.sayAs(t, ch, "alice", privTell, privSaved)
	before := oneContainer(t, cli, tag, s)

	// 2. bob asks for it in the same channel.
	n := len(model.Requests())
	s.sayAs(t, ch, "bob", privAsk, privPlain)
	bob := turnRequests(model, n)
	wantNoSecret(t, "bob", bob)
	wantHidden(t, "bob", bob[0])

	// 3. alice still has it.
	n = len(model.Requests())
	s.sayAs(t, ch, "alice", privRecall, privPlain)
	wantSecret(t, "alice", turnRequests(model, n))

	// 4. bob's own speaker memory is his (empty), not alice's.
	n = len(model.Requests())
	got := s.postAs(t, ch, "bob", privCheck)
	if want := privToolSaid + "[]"; len(got) != 1 || got[0] != want {
		t.Errorf("reply to bob's %q = %q; want %q (his empty speaker memory, nothing of alice's)\nserve:\n%s", privCheck, got, want, s.out.String())
	}
	wantNoSecret(t, "bob", turnRequests(model, n))

	wantNoPrivacyRefusal(t, s)
	s.stopOK(t)
	if after := oneContainer(t, cli, tag, s); after.ID != before.ID {
		t.Fatalf("container after serve stopped = %+v; want %s still running", after, before.ID)
	}
	// The engine restarts the kept container while serve is down, so the
	// worker process starts afresh and reads the conversation (with each
	// result's privateTo) back from its session file.
	if _, err := cli.ContainerRestart(context.Background(), before.ID, client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}

	// 5. after serve restarts on the kept container: the same.
	s2 := startServe(t, addr, "--config", cfg)
	n = len(model.Requests())
	s2.sayAs(t, ch, "bob", privAsk, privPlain)
	wantNoSecret(t, "bob after the restart", turnRequests(model, n))
	wantHidden(t, "bob after the restart", model.Requests()[n])
	n = len(model.Requests())
	s2.sayAs(t, ch, "alice", privRecall, privPlain)
	wantSecret(t, "alice after the restart", turnRequests(model, n))
	if after := oneContainer(t, cli, tag, s2); after.ID != before.ID {
		t.Errorf("turns after the restart ran in %s; want %s", after.ID, before.ID)
	}
	wantNoPrivacyRefusal(t, s2)
	s2.stopOK(t)
}

// addMember adds principal to the members of serveConfig's config.
func addMember(t *testing.T, cfg, principal string) {
	t.Helper()
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const members = `members: ["http:alice"]`
	if !bytes.Contains(data, []byte(members)) {
		t.Fatalf("config lacks %s:\n%s", members, data)
	}
	data = bytes.Replace(data, []byte(members), []byte(`members: ["http:alice", "`+principal+`"]`), 1)
	if err := os.WriteFile(cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantHidden requires that req shows alice's private exchange as the
// worker's projection for another reader: her host_memory_set call with
// arguments {} and its result replaced by privHidden.
func wantHidden(t *testing.T, reader string, req fakemodel.Request) {
	t.Helper()
	for _, m := range req.Body.Messages {
		if m.Role != "assistant" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "host_memory_set" {
			continue
		}
		args := m.ToolCalls[0].Function.Arguments
		result, _ := req.ToolResult(m.ToolCalls[0].ID)
		if args != "{}" || result != privHidden {
			t.Errorf("%s's request shows alice's call as %s → %q; want {} → %q", reader, args, result, privHidden)
		}
		return
	}
	t.Errorf("%s's request lacks alice's host_memory_set call:\n%s", reader, req.Raw)
}

// wantNoPrivacyRefusal requires that serve's log shows no privacy gate
// (docs/protocol.md, "Privacy") at work.
func wantNoPrivacyRefusal(t *testing.T, s *server) {
	t.Helper()
	if out := s.out.String(); strings.Contains(out, "privacy capability") {
		t.Errorf("serve logged a privacy-gate refusal:\n%s", out)
	}
}
