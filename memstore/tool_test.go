package memstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// tools returns s's tools by name.
func tools(s *Store, log *logBuf) map[string]*Tool {
	out := map[string]*Tool{}
	for _, t := range s.Tools(slogTo(log)) {
		out[t.Spec().Name] = t
	}
	return out
}

func session(b rtsandbox.Binding) wire.SessionBinding {
	return wire.SessionBinding{Binding: b, Profile: "studio", Thinking: "low"}
}

func runTool(t *testing.T, tl map[string]*Tool, b rtsandbox.Binding, name, input string) wire.SessionToolResponse {
	t.Helper()
	resp, err := tl[name].RunSession(context.Background(), json.RawMessage(input), session(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return resp
}

// TestToolSpecsAreTheSealedOnes: session mode declares the sealed
// worker's tools, names and schemas alike.
func TestToolSpecsAreTheSealedOnes(t *testing.T) {
	s, _ := testStore(t, nil)
	var got []rtsandbox.ToolSpec
	for _, tl := range s.Tools(nil) {
		got = append(got, tl.Spec())
	}
	if diff := cmp.Diff(wire.MemoryToolSpecs(), got); diff != "" {
		t.Errorf("specs (-want +got):\n%s", diff)
	}
}

// TestSecToolSpeakerFromBinding: the speaker is the binding's. Input that
// names another speaker, a principal, or a scope like "speaker:alice"
// never reaches alice's entries, to read, change or remove them.
func TestSecToolSpeakerFromBinding(t *testing.T) {
	s, log := testStore(t, nil)
	tl := tools(s, log)
	a, b := bind(chanA, alice), bind(chanA, bob)
	runTool(t, tl, a, "memory_set", `{"scope":"speaker","key":"secret","text":"alice's secret"}`)
	for _, tc := range []struct{ name, tool, input string }{
		{"speaker-member", "memory_get", `{"scope":"speaker","speaker":"alice"}`},
		{"principal-member", "memory_get", `{"scope":"speaker","principalId":"discord:alice","speakerId":"alice"}`},
		{"author-member", "memory_get", `{"scope":"speaker","author":{"id":"alice","principalId":"discord:alice"}}`},
		{"scope-names-speaker", "memory_get", `{"scope":"speaker:alice"}`},
		{"key-names-scope", "memory_get", `{"scope":"speaker","key":"speaker:alice"}`},
		{"query", "memory_get", `{"scope":"speaker","query":"secret"}`},
		{"channel-scope", "memory_get", `{"scope":"channel","query":"secret"}`},
		{"set-as-alice", "memory_set", `{"scope":"speaker","key":"secret","text":"overwritten","speaker":"alice"}`},
		{"remove-as-alice", "memory_remove", `{"scope":"speaker:alice","key":"secret"}`},
		{"remove-naming-alice", "memory_remove", `{"scope":"speaker","key":"secret","speaker":"alice"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := runTool(t, tl, b, tc.tool, tc.input)
			if strings.Contains(resp.Text+resp.Error, "alice's secret") || resp.PrivateTo == "alice" {
				t.Errorf("bob's call answered %+v", resp)
			}
		})
	}
	if got := runTool(t, tl, a, "memory_get", `{"scope":"speaker"}`); got.Text != `[{"key":"secret","text":"alice's secret"}]` {
		t.Errorf("alice's entries after bob's calls: %+v", got)
	}
}

// TestToolPrivateTo: every answer to a speaker-scope call carries
// privateTo = the speaker's id, whatever it says; channel-scope answers
// and refusals of the input are public.
func TestToolPrivateTo(t *testing.T) {
	s, log := testStore(t, nil)
	tl := tools(s, log)
	a := bind(chanA, alice)
	tests := []struct {
		name, tool, input string
		want              wire.SessionToolResponse
	}{
		{"speaker-set", "memory_set", `{"scope":"speaker","key":"k","text":"t"}`, wire.SessionToolResponse{OK: true, Text: "Saved.", PrivateTo: "alice"}},
		{"speaker-get", "memory_get", `{"scope":"speaker"}`, wire.SessionToolResponse{OK: true, Text: `[{"key":"k","text":"t"}]`, PrivateTo: "alice"}},
		{"speaker-get-empty", "memory_get", `{"scope":"speaker","key":"none"}`, wire.SessionToolResponse{OK: true, Text: `[]`, PrivateTo: "alice"}},
		{"speaker-remove", "memory_remove", `{"scope":"speaker","key":"k"}`, wire.SessionToolResponse{OK: true, Text: "Forgotten.", PrivateTo: "alice"}},
		{"speaker-text-refused", "memory_set", `{"scope":"speaker","key":"k","text":"  "}`, wire.SessionToolResponse{Error: "text must be 1..2048 characters"}},
		{"channel-set", "memory_set", `{"scope":"channel","key":"k","text":"t"}`, wire.SessionToolResponse{OK: true, Text: "Saved."}},
		{"channel-get", "memory_get", `{"scope":"channel"}`, wire.SessionToolResponse{OK: true, Text: `[{"key":"k","text":"t"}]`}},
		{"channel-remove", "memory_remove", `{"scope":"channel","key":"k"}`, wire.SessionToolResponse{OK: true, Text: "Forgotten."}},
		{"scope-refused", "memory_get", `{"scope":"owner"}`, wire.SessionToolResponse{Error: "scope must be speaker or channel"}},
		{"not-an-object", "memory_get", `["speaker"]`, wire.SessionToolResponse{Error: "scope must be speaker or channel"}},
		{"key-refused", "memory_remove", `{"scope":"channel"}`, wire.SessionToolResponse{Error: "key is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, runTool(t, tl, a, tc.tool, tc.input)); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

// TestToolFailuresAreFixedTexts: a failure that is not a refusal of the
// input gives the model a fixed text; the details go to the operator log.
// A speaker-scope failure is still private.
func TestToolFailuresAreFixedTexts(t *testing.T) {
	s, log := testStore(t, nil)
	tl := tools(s, log)
	runTool(t, tl, bind(chanA, alice), "memory_set", `{"scope":"speaker","key":"k","text":"t"}`)
	other := bind(chanA, rtsandbox.Speaker{ID: "alice", PrincipalID: "http:alice"})
	if got := runTool(t, tl, other, "memory_get", `{"scope":"speaker"}`); got != (wire.SessionToolResponse{Error: ownerText, PrivateTo: "alice"}) {
		t.Errorf("owner conflict: %+v", got)
	}
	plant(t, s, chanA, "channel", strings.Repeat("k", 200), "t", "", 9)
	got := runTool(t, tl, bind(chanA, alice), "memory_set", `{"scope":"channel","key":"k","text":"t"}`)
	if got != (wire.SessionToolResponse{Error: unavailableText}) {
		t.Errorf("corrupt store: %+v", got)
	}
	if l := log.String(); !strings.Contains(l, "memory tool failed") || !strings.Contains(l, "corrupt memory database") || strings.Contains(l, strings.Repeat("k", 200)) {
		t.Errorf("operator log:\n%s\nwant the failure without the stored data", l)
	}
}

// TestToolRunRefused: outside session mode a memory tool refuses, since
// its answer would carry no privateTo.
func TestToolRunRefused(t *testing.T) {
	s, _ := testStore(t, nil)
	for _, tl := range s.Tools(nil) {
		if _, err := tl.Run(context.Background(), json.RawMessage(`{"scope":"channel"}`), bind(chanA, alice)); !errors.Is(err, ErrSealedMode) {
			t.Errorf("%s.Run = %v; want ErrSealedMode", tl.Spec().Name, err)
		}
	}
}
