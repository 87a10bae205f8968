package compactor_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/compactor"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const modelKey = "model-secret-key-1234"

// request is a manual compact request in both message shapes the worker
// may send: chat-completions messages and content blocks.
func request() wire.CompactRequest {
	return wire.CompactRequest{
		Reason: wire.CompactManual, TokensBefore: 480000, FirstKeptEntryID: "e7",
		MessagesToSummarize: []json.RawMessage{
			json.RawMessage(`{"role":"user","content":"[Ann (ann)] plan the garden"}`),
			json.RawMessage(`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"memory_get","arguments":"{\"scope\":\"channel\"}"}}]}`),
			json.RawMessage(`{"role":"tool","tool_call_id":"c1","content":"beds: 3"}`),
			json.RawMessage(`{"role":"assistant","content":[{"type":"thinking","thinking":"PRIVATE REASONING"},{"type":"text","text":"Three beds, tomatoes first."}]}`),
		},
		KeptMessages:       []json.RawMessage{json.RawMessage(`{"role":"user","content":"and the roses?"}`)},
		PreviousSummary:    "## Goal\nA garden.",
		CustomInstructions: "keep the bed count",
		ReadFiles:          []string{"notes.md"},
		ModifiedFiles:      []string{"plan.md"},
	}
}

// engine builds the summary engine against the stand-in in api's dialect.
func engine(t *testing.T, api string, srv *fakemodel.Server, key string) *compactor.Summary {
	t.Helper()
	raw := srv.ChatURL()
	if api == rtsandbox.ModelAPIAnthropic {
		raw = srv.URL()
	}
	s, err := compactor.New(compactor.Options{API: api, URL: upstream.MustParseEndpoint(raw, true), Model: "summary-model",
		APIKey: func(context.Context) (rtsandbox.Secret, error) { return rtsandbox.Secret(key), nil }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Both dialects against the stand-in model on loopback: one call with the
// host's credential in the dialect's header, the engine's prompt, the
// transcript, the previous summary and the instructions; the answer is
// the model's text plus the file lists, with the request's entry and
// count, an estimate and details.
func TestSummaryBothDialects(t *testing.T) {
	for _, api := range []string{rtsandbox.ModelAPIOpenAI, rtsandbox.ModelAPIAnthropic} {
		t.Run(api, func(t *testing.T) {
			srv := fakemodel.NewWithOptions(fakemodel.Options{Key: modelKey}, fakemodel.Reply("  ## Goal\nA garden with three beds.  "))
			defer srv.Close()
			s := engine(t, api, srv, modelKey)
			got, err := s.Compact(context.Background(), request(), "discord:party")
			if err != nil {
				t.Fatalf("Compact: %v", err)
			}
			summary := "## Goal\nA garden with three beds.\n\n<read-files>\nnotes.md\n</read-files>\n\n<modified-files>\nplan.md\n</modified-files>"
			after := int64((len(summary)+3)/4 + (len(`{"role":"user","content":"and the roses?"}`)+3)/4)
			want := &wire.Compaction{Summary: summary, FirstKeptEntryID: "e7", TokensBefore: 480000,
				EstimatedTokensAfter: &after, Details: map[string]any{"model": "summary-model", "summarized": 4}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Compact (-want +got):\n%s", diff)
			}
			if err := got.Validate("e7"); err != nil {
				t.Errorf("answer fails the broker's checks: %v", err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("model saw %d requests; want 1", len(reqs))
			}
			r := reqs[0]
			wantPath, header, value := "/v1/chat/completions", "Authorization", "Bearer "+modelKey
			if api == rtsandbox.ModelAPIAnthropic {
				wantPath, header, value = "/v1/messages", "X-Api-Key", modelKey
				if v := r.Header.Get("Anthropic-Version"); v != "2023-06-01" {
					t.Errorf("anthropic-version = %q", v)
				}
			}
			if r.Path != wantPath || r.Header.Get(header) != value {
				t.Errorf("request %s with %s %q; want %s", r.Path, header, r.Header.Get(header), wantPath)
			}
			if r.Body.Model != "summary-model" || r.Body.MaxTokens != compactor.DefaultMaxSummaryTokens || r.System() != compactor.Prompt {
				t.Errorf("body model %q max_tokens %d system %.40q", r.Body.Model, r.Body.MaxTokens, r.System())
			}
			user := r.UserText()
			for _, part := range []string{"<previous-summary>\n## Goal\nA garden.", "[user] [Ann (ann)] plan the garden",
				`(tool call memory_get {"scope":"channel"})`, "[tool] beds: 3", "Three beds, tomatoes first.", "<instructions>\nkeep the bed count"} {
				if !strings.Contains(user, part) {
					t.Errorf("transcript lacks %q:\n%s", part, user)
				}
			}
			for _, absent := range []string{"PRIVATE REASONING", "and the roses?", "discord:party"} {
				if strings.Contains(string(r.Raw), absent) {
					t.Errorf("request holds %q", absent)
				}
			}
		})
	}
}

// Nothing to summarise: the engine declines without calling the model.
func TestSummaryDeclinesEmpty(t *testing.T) {
	srv := fakemodel.New(fakemodel.Reply("x"))
	defer srv.Close()
	s := engine(t, rtsandbox.ModelAPIOpenAI, srv, modelKey)
	req := request()
	req.MessagesToSummarize = nil
	req.TurnPrefixMessages = []json.RawMessage{json.RawMessage(`{"role":"user","content":"x"}`)} // not a split turn: ignored
	got, err := s.Compact(context.Background(), req, "discord:party")
	if got != nil || err != nil || len(srv.Requests()) != 0 {
		t.Errorf("Compact = %v, %v with %d calls; want a decline without a call", got, err, len(srv.Requests()))
	}
}

// A split turn's prefix is summarised too, in its own section.
func TestSummarySplitTurn(t *testing.T) {
	srv := fakemodel.New(fakemodel.Reply("S"))
	defer srv.Close()
	s := engine(t, rtsandbox.ModelAPIOpenAI, srv, modelKey)
	req := request()
	req.MessagesToSummarize = nil
	req.IsSplitTurn = true
	req.TurnPrefixMessages = []json.RawMessage{json.RawMessage(`{"role":"user","content":"PREFIX QUESTION"}`)}
	got, err := s.Compact(context.Background(), req, "discord:party")
	if err != nil || got == nil {
		t.Fatalf("Compact = %v, %v", got, err)
	}
	if user := srv.Requests()[0].UserText(); !strings.Contains(user, "<turn-prefix>\n[user] PREFIX QUESTION") {
		t.Errorf("transcript lacks the prefix:\n%s", user)
	}
}

// Failures are content-free: a refused status, an answer without text,
// an answer that reflects the credential (raw or encoded) and a missing
// credential (no call at all). None of the errors holds the credential
// or the upstream body.
func TestSummaryFailures(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte(modelKey))
	for _, tc := range []struct {
		name  string
		step  fakemodel.Step
		key   string
		want  error
		calls int
	}{
		{"status-400", fakemodel.Status(400), modelKey, upstream.ErrStatus, 1},
		{"wrong-key", fakemodel.Reply("x"), "other-key", upstream.ErrStatus, 1},
		{"empty-text", fakemodel.Reply("   "), modelKey, compactor.ErrNoSummary, 1},
		{"no-choices", fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Raw: []byte(`{"choices":[]}`)}
		}), modelKey, compactor.ErrBadAnswer, 1},
		{"reflects-key", fakemodel.Reply("your key is " + modelKey), modelKey, upstream.ErrReflect, 1},
		{"reflects-key-base64", fakemodel.Reply("k=" + b64), modelKey, upstream.ErrReflect, 1},
		{"no-key", fakemodel.Reply("x"), "", compactor.ErrNoKey, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakemodel.NewWithOptions(fakemodel.Options{Key: modelKey}, tc.step)
			defer srv.Close()
			s := engine(t, rtsandbox.ModelAPIOpenAI, srv, tc.key)
			got, err := s.Compact(context.Background(), request(), "discord:party")
			if got != nil || !errors.Is(err, tc.want) {
				t.Fatalf("Compact = %v, %v; want %v", got, err, tc.want)
			}
			if strings.Contains(err.Error(), modelKey) || strings.Contains(err.Error(), b64) || strings.Contains(err.Error(), "scripted") {
				t.Errorf("error %q holds the credential or the upstream body", err)
			}
			if n := len(srv.Requests()); n != tc.calls {
				t.Errorf("model saw %d calls; want %d", n, tc.calls)
			}
		})
	}
}

// The transcript stays within MaxInputBytes: the oldest messages are left
// out first and counted, and one long message is cut.
func TestSummaryInputBounded(t *testing.T) {
	srv := fakemodel.New(fakemodel.Reply("S"))
	defer srv.Close()
	s, err := compactor.New(compactor.Options{URL: upstream.MustParseEndpoint(srv.ChatURL(), true), Model: "m",
		APIKey:        func(context.Context) (rtsandbox.Secret, error) { return modelKey, nil },
		MaxInputBytes: compactor.MinMaxInputBytes})
	if err != nil {
		t.Fatal(err)
	}
	req := request()
	req.MessagesToSummarize = nil
	for i := range 40 {
		text := strings.Repeat("w", 1000)
		if i == 39 {
			text = "NEWEST " + strings.Repeat("z", 40000)
		}
		if i == 0 {
			text = "OLDEST"
		}
		m, _ := json.Marshal(map[string]string{"role": "user", "content": text})
		req.MessagesToSummarize = append(req.MessagesToSummarize, m)
	}
	got, err := s.Compact(context.Background(), req, "discord:party")
	if err != nil {
		t.Fatal(err)
	}
	user := srv.Requests()[0].UserText()
	if len(user) > compactor.MinMaxInputBytes+256 || strings.Contains(user, "OLDEST") || !strings.Contains(user, "NEWEST") ||
		!strings.Contains(user, "earlier messages left out]") || !strings.Contains(user, "bytes cut]") {
		t.Errorf("transcript of %d bytes:\n%.300s…", len(user), user)
	}
	if n := got.Details["summarized"].(int); n >= 40 || n < 1 {
		t.Errorf("summarized = %d", n)
	}
}

// New refuses options it cannot run with.
func TestNewRefusals(t *testing.T) {
	url := upstream.MustParseEndpoint("https://model.example/v1/chat/completions", false)
	key := func(context.Context) (rtsandbox.Secret, error) { return modelKey, nil }
	for _, tc := range []struct {
		name string
		o    compactor.Options
	}{
		{"api", compactor.Options{API: "gemini", URL: url, Model: "m", APIKey: key}},
		{"no-url", compactor.Options{Model: "m", APIKey: key}},
		{"no-model", compactor.Options{URL: url, Model: " ", APIKey: key}},
		{"no-key", compactor.Options{URL: url, Model: "m"}},
		{"tokens-low", compactor.Options{URL: url, Model: "m", APIKey: key, MaxSummaryTokens: 255}},
		{"tokens-high", compactor.Options{URL: url, Model: "m", APIKey: key, MaxSummaryTokens: 32769}},
		{"input-low", compactor.Options{URL: url, Model: "m", APIKey: key, MaxInputBytes: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := compactor.New(tc.o); !errors.Is(err, compactor.ErrOptions) {
				t.Errorf("New = %v; want ErrOptions", err)
			}
		})
	}
	s, err := compactor.New(compactor.Options{URL: url, Model: "m", APIKey: key})
	if err != nil || s.Engine() != "summary" || s.Timeout() != wire.DefaultCompactorTimeout || s.MaxRequestBytes() != wire.DefaultCompactorRequest {
		t.Errorf("defaults: %v %v", s, err)
	}
}
