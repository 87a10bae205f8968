package worker

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/wire"
)

// overflowConfig is a profile of the dialect api with a 20,000-token
// window (trigger 15,000) and the host compactor engine (or none: "").
func overflowConfig(api, engine string) string {
	if api == rtsandbox.ModelAPIAnthropic {
		return compactConfig(20_000, engine, "Be brief.")
	}
	compaction := ""
	if engine != "" {
		compaction = `,"compaction":{"engine":"` + engine + `"}`
	}
	return `{"modelApi":"openai","model":"gpt-test","prompt":"Be brief.","timeZone":"UTC","contextWindow":20000` + compaction + `}`
}

// overflowAnswer is the dialect's 400 "over the context" refusal.
func overflowAnswer(api string) fakemodel.Response {
	body := openaiTooLong
	if api == rtsandbox.ModelAPIAnthropic {
		body = anthropicTooLong
	}
	return fakemodel.Response{Status: http.StatusBadRequest, Raw: []byte(body)}
}

// Script words of TestCompactionOnOverflow's model: the dialect's
// overflow refusal, another 400, or else the answer's text.
const (
	scriptOverflow = "<overflow>"
	scriptInvalid  = "<invalid>"
)

// script turns script words into the dialect's answers.
func script(api string, words ...string) []fakemodel.Response {
	out := make([]fakemodel.Response, len(words))
	for i, w := range words {
		switch w {
		case scriptOverflow:
			out[i] = overflowAnswer(api)
		case scriptInvalid:
			out[i] = fakemodel.Response{Status: http.StatusBadRequest, Raw: []byte(anthropicInvalid)}
		default:
			out[i] = fakemodel.Response{Content: w}
		}
	}
	return out
}

// reportLine is a compaction report in a word: type, reason, willRetry,
// engine, and whether it has an error.
func reportLine(r map[string]any) string {
	return fmt.Sprintf("%v %v willRetry=%v engine=%v error=%v", r["type"], r["reason"], r["willRetry"], r["engine"], r["error"] != nil)
}

// Overflow compaction (docs/session.md, "Compaction in the worker"; docs/protocol.md, "The session protocol" reason overflow): a model call refused
// as over the context, in either dialect, is compacted with reason
// overflow, reported with willRetry true and retried once; without
// anything to compact, or when the compaction fails, the turn fails with
// the refusal as before; a second overflow fails the turn after the one
// retry; another 400 is no overflow; a threshold compaction still
// reports willRetry false.
func TestCompactionOnOverflow(t *testing.T) {
	const refused = "prompt failed: status 400"
	// 4 × 2,000 tokens: under the 15,000 trigger, the newest two kept
	under := bigExchanges(4, 8_000)
	tests := []struct {
		name       string
		history    []sessionExchange
		engine     string
		answers    []string
		summary    string // the worker's own summary: its text or a script word ("": PI SUMMARY)
		wantError  string // "" for an ok turn that answers "answered"
		wantCalls  int    // model calls of the turn, summaries aside
		wantReason []string
		wantReport []string
		wantRetry  bool // the last turn request holds the host summary and the kept exchanges only
	}{
		{
			name: "overflow compacts, reports willRetry and the retry answers", history: under, engine: hostEngine,
			answers: []string{scriptOverflow, "answered"}, wantCalls: 2,
			wantReason: []string{wire.CompactOverflow},
			wantReport: []string{"end overflow willRetry=true engine=extension error=false"}, wantRetry: true,
		},
		{
			name: "overflow again after the retry fails the turn", history: under, engine: hostEngine,
			answers: []string{scriptOverflow, scriptOverflow, "never"}, wantError: refused, wantCalls: 2,
			wantReason: []string{wire.CompactOverflow},
			wantReport: []string{"end overflow willRetry=true engine=extension error=false"}, wantRetry: true,
		},
		{
			name: "overflow with the worker's own summary", history: under,
			answers: []string{scriptOverflow, "answered"}, wantCalls: 2,
			wantReport: []string{"end overflow willRetry=true engine=pi error=false"},
		},
		{
			name: "overflow without history fails as before", engine: hostEngine,
			answers: []string{scriptOverflow, "never"}, wantError: refused, wantCalls: 1,
		},
		{
			name: "overflow with nothing to compact fails as before", engine: hostEngine,
			history: []sessionExchange{chatExchange("s1", "ann", "hi", "hello")},
			answers: []string{scriptOverflow, "never"}, wantError: refused, wantCalls: 1,
		},
		{
			name: "overflow whose compaction fails fails with the refusal", history: under, summary: scriptOverflow,
			answers: []string{scriptOverflow, "never"}, wantError: refused, wantCalls: 1,
			wantReport: []string{"end overflow willRetry=false engine=<nil> error=true"},
		},
		{
			name: "another 400 is not retried", history: under, engine: hostEngine,
			answers: []string{scriptInvalid, "never"}, wantError: refused, wantCalls: 1,
		},
		{
			name: "threshold compaction reports willRetry false", history: bigExchanges(4, 20_000), engine: hostEngine,
			answers: []string{"answered"}, wantCalls: 1,
			wantReason: []string{wire.CompactThreshold},
			wantReport: []string{"end threshold willRetry=false engine=extension error=false"},
		},
	}
	for _, api := range []string{rtsandbox.ModelAPIAnthropic, rtsandbox.ModelAPIOpenAI} {
		for _, tc := range tests {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				var compactor func(*http.Request, []byte) (int, string)
				if tc.engine != "" {
					compactor = hostCompactor("HOST SUMMARY")
				}
				summary := cmp.Or(tc.summary, "PI SUMMARY")
				model := scriptedModel(script(api, summary)[0], script(api, tc.answers...)...)
				c := startCompactingWith(t, model, tc.history, overflowConfig(api, tc.engine), compactor)
				r := c.b.execute(sessionTurn("t5", "go on"))
				if tc.wantError == "" && (!r.OK || r.Text != "answered") || tc.wantError != "" && (r.OK || r.Error != tc.wantError) {
					t.Errorf("turn %+v; want error %q (none: answered)\n%s", r, tc.wantError, c.w.log.String())
				}
				var turnReqs []fakemodel.Request
				for _, req := range model.Requests() {
					if req.System() != summaryPrompt {
						turnReqs = append(turnReqs, req)
					}
				}
				if len(turnReqs) != tc.wantCalls {
					t.Errorf("%d model calls of the turn; want %d", len(turnReqs), tc.wantCalls)
				}
				var reasons, reports []string
				for _, req := range compactRequests(t, c.b) {
					reasons = append(reasons, req.Reason)
				}
				for _, rep := range reportsOf(t, c.b) {
					reports = append(reports, reportLine(rep))
				}
				if diff := gocmp.Diff(tc.wantReason, reasons); diff != "" {
					t.Errorf("compact request reasons (-want +got):\n%s", diff)
				}
				if diff := gocmp.Diff(tc.wantReport, reports); diff != "" {
					t.Errorf("reports (-want +got):\n%s", diff)
				}
				if tc.wantRetry {
					last := string(turnReqs[len(turnReqs)-1].Raw)
					if !strings.Contains(last, "HOST SUMMARY") || !strings.Contains(last, "OLD-3") || strings.Contains(last, "OLD-2") {
						t.Error("the retried request does not hold the summary and the kept exchanges only")
					}
				}
			})
		}
	}
}
