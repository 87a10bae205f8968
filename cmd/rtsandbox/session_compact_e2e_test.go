package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/compactor"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// hostSummaryText is what the stand-in model writes when the host
// compactor asks it for a summary: distinctive, so finding it in a later
// request shows the host's summary reached the conversation.
const hostSummaryText = "HOST-SUMMARY-7f3a: the guest numbered long paragraphs."

// compactingEcho answers the host compactor's call (its system prompt is
// compactor.Prompt) with hostSummaryText, the worker's own summary call
// with a different text, and every turn as echoModel does.
func compactingEcho() *fakemodel.Server {
	return fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			switch sys := req.System(); {
			case sys == compactor.Prompt:
				return fakemodel.Response{Content: hostSummaryText}
			case strings.HasPrefix(sys, "You compact the conversation"):
				return fakemodel.Response{Content: "WORKER-SUMMARY"}
			}
			return fakemodel.Response{Content: "Answer to " + lastWords(req.UserText())}
		}))
}

// TestSessionServeHostCompaction (issue 13 item 5, docs/protocol.md, "Compaction"; docs/session.md, "Compaction in the worker"): a
// session profile on a model with the smallest context window the worker
// accepts (models.<name>.context_window: 4096) and session.compactor
// {engine: summary}: past the trigger, the worker asks the broker, the
// host compactor's summary call reaches the stand-in model with the early
// turns, a later turn's request carries the host's summary, and the
// operator log has the compaction with engine "extension".
func TestSessionServeHostCompaction(t *testing.T) {
	tag, _ := sessionDocker(t)
	model := compactingEcho()
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	appendConfig(t, cfg, fmt.Sprintf("models:\n  small: {url: %q, name: fake-model, api_key_env: RTS_SEALED_KEY, context_window: 4096}\n", model.ChatURL())+
		"profiles:\n  chat: {mode: session, model: small}\ndefault_profile: chat\nsession:\n  turn_timeout: 120s\n  compactor: {engine: summary}\n")
	s := startServe(t, addr, "--config", cfg)

	const turns = 10
	filler := strings.TrimSpace(strings.Repeat("lorem ipsum ", 80)) // about 240 tokens a message
	for i := 1; i <= turns; i++ {
		text := fmt.Sprintf("PARA-%d %s", i, filler)
		s.sayOne(t, "http:lobby", text, "Answer to "+text)
	}

	var compactorCall, afterSummary int
	for i, req := range model.Requests() {
		switch {
		case req.System() == compactor.Prompt && compactorCall == 0:
			compactorCall = i + 1
			if !strings.Contains(string(req.Raw), "PARA-1 ") {
				t.Errorf("the host compactor's call lacks the first turn:\n%.2000s", req.Raw)
			}
		case compactorCall > 0 && req.System() != compactor.Prompt && strings.Contains(string(req.Raw), hostSummaryText):
			afterSummary = i + 1
			if !strings.Contains(string(req.Raw), "[Summary of the earlier conversation") || strings.Contains(string(req.Raw), "PARA-1 ") {
				t.Errorf("request %d carries the summary but not in place of the first turn:\n%.3000s", i+1, req.Raw)
			}
		}
	}
	out := s.out.String()
	if compactorCall == 0 {
		t.Fatalf("the stand-in model got no call from the host compactor\nserve:\n%s", out)
	}
	if afterSummary == 0 {
		t.Errorf("no turn's request after the compaction carries the host's summary\nlast:\n%.3000s", lastRaw(model))
	}
	for _, req := range model.Requests() {
		if strings.HasPrefix(req.System(), "You compact the conversation") {
			t.Errorf("the worker wrote its own summary; want the host compactor's\nserve:\n%s", out)
			break
		}
	}
	if !hasLogLine(out, `"msg":"host compactor answered"`) {
		t.Errorf("operator log lacks the host compactor's answer:\n%s", out)
	}
	if !hasLogLine(out, `"msg":"conversation compacted"`, `"engine":"extension"`, `"channel":"http:lobby"`) {
		t.Errorf("operator log lacks the compaction report with engine extension:\n%s", out)
	}
	s.stopOK(t)
}

// hasLogLine reports whether one line of out holds every one of wants.
func hasLogLine(out string, wants ...string) bool {
	for line := range strings.Lines(out) {
		all := true
		for _, w := range wants {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}
