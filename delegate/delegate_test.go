package delegate

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const channel rtsandbox.ChannelKey = "discord:channel"

var guest = Author{PrincipalID: "p_guest", ID: "speaker", Name: "Guest", Tier: access.Member}

func request() Request {
	return Request{Channel: channel, Target: "guest", Author: guest, Title: "Research", Task: "Check a public source"}
}

// recorder collects deliveries.
type recorder struct {
	mu   sync.Mutex
	jobs []Job
	outs []Outcome
}

func (r *recorder) deliver(_ context.Context, j Job, o Outcome) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs = append(r.jobs, j)
	r.outs = append(r.outs, o)
	return nil
}

func (r *recorder) outcomes() []Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Outcome(nil), r.outs...)
}

func mustNew(t *testing.T, o Options) *Delegator {
	t.Helper()
	d, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Dispose(context.Background()) })
	return d
}

func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	var de *DelegationError
	if !errors.As(err, &de) || !strings.Contains(de.Text, want) || !errors.Is(err, rtsandbox.ErrRefused) {
		t.Fatalf("Start error = %v; want a DelegationError containing %q", err, want)
	}
}

// The reference's tests
func TestScope(t *testing.T) {
	rec := &recorder{}
	var gotCtx RunContext
	d := mustNew(t, Options{Target: "guest", Deliver: rec.deliver, Run: func(_ context.Context, task string, rc RunContext) (string, error) {
		gotCtx = rc
		return "report for " + task, nil
	}})
	for name, mod := range map[string]func(*Request){
		"target-owner":    func(r *Request) { r.Target = "owner" },
		"origin":          func(r *Request) { r.Origin = "discord:owner" },
		"tier-owner":      func(r *Request) { r.Author.Tier = access.Owner },
		"tier-none":       func(r *Request) { r.Author.Tier = access.None },
		"empty-principal": func(r *Request) { r.Author.PrincipalID = "" },
	} {
		req := request()
		mod(&req)
		if _, err := d.Start(req); !errors.Is(err, ErrScope) {
			t.Errorf("%s: Start = %v; want scope refusal", name, err)
		}
	}
	job, err := d.Start(request())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := d.Idle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if job.ID != 1 {
		t.Errorf("job.ID = %d; want 1 (refused starts consume no id)", job.ID)
	}
	if diff := cmp.Diff([]Job{job}, rec.jobs); diff != "" {
		t.Errorf("delivered jobs (-want +got):\n%s", diff)
	}
	if job.Author != guest {
		t.Errorf("job.Author = %+v; want %+v", job.Author, guest)
	}
	want := RunContext{Channel: channel, Author: RunAuthor{ID: "speaker", Name: "Guest"}}
	if gotCtx != want {
		t.Errorf("run context = %+v; want %+v", gotCtx, want)
	}
	if diff := cmp.Diff([]Outcome{{OK: true, Report: "report for Check a public source"}}, rec.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// The reference's tests
func TestLimitsAndShutdown(t *testing.T) {
	rec := &recorder{}
	var cancelled atomic.Int32
	d, err := New(Options{Target: "guest", MaxRunning: 1, Deliver: rec.deliver, Run: func(ctx context.Context, _ string, _ RunContext) (string, error) {
		<-ctx.Done()
		cancelled.Add(1)
		return "", errors.New("cancelled")
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Request)
		want string
	}{
		{"task-4001", func(r *Request) { r.Task = strings.Repeat("x", 4001) }, "the task is 4001 characters; keep it within 4000"},
		{"blank-title", func(r *Request) { r.Title = " " }, "title and task are required"},
		{"title-201", func(r *Request) { r.Title = strings.Repeat("t", 201) }, "the title is 201 characters; keep it within 200"},
	} {
		req := request()
		tc.mod(&req)
		_, err := d.Start(req)
		wantRefusal(t, err, tc.want)
	}
	if _, err := d.Start(request()); err != nil {
		t.Fatalf("first Start: %v", err)
	}
	_, err = d.Start(request())
	wantRefusal(t, err, "this channel already has 1 delegated tasks running; wait for one to report back")
	other := request()
	other.Channel = "discord:other"
	if _, err := d.Start(other); err != nil {
		t.Errorf("Start in another channel: %v; other channels do not count", err)
	}
	if got := d.RunningChannels(); !cmp.Equal(got, []rtsandbox.ChannelKey{channel, "discord:other"}) {
		t.Errorf("RunningChannels() = %v", got)
	}
	if err := d.Dispose(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := cancelled.Load(); n != 2 {
		t.Errorf("cancelled = %d; want 2", n)
	}
	if got := d.RunningChannels(); len(got) != 0 {
		t.Errorf("RunningChannels() after Dispose = %v; want none", got)
	}
	if _, err := d.Start(request()); !errors.Is(err, ErrScope) {
		t.Errorf("Start after Dispose = %v; want scope refusal", err)
	}
	for _, o := range rec.outcomes() {
		if o != (Outcome{Error: TimedOutText}) {
			t.Errorf("outcome after Dispose = %+v; want ran out of time", o)
		}
	}
}

// The reference's tests
func TestFailureReporting(t *testing.T) {
	rec := &recorder{}
	d := mustNew(t, Options{Target: "guest", Timeout: time.Second, Deliver: rec.deliver, Run: func(_ context.Context, _ string, _ RunContext) (string, error) {
		return "", errors.New("Request to https://user:hunter2@example.invalid failed: 429 rate limited")
	}})
	if _, err := d.Start(request()); err != nil {
		t.Fatal(err)
	}
	_ = d.Idle(context.Background())
	out := rec.outcomes()
	if len(out) != 1 || out[0].OK || !strings.Contains(out[0].Error, "429 rate limited") || strings.Contains(out[0].Error, "hunter2") {
		t.Errorf("outcome = %+v; want a scrubbed failure", out)
	}

	rec2 := &recorder{}
	d2 := mustNew(t, Options{Target: "guest", Timeout: time.Second, Deliver: rec2.deliver, Run: func(ctx context.Context, _ string, _ RunContext) (string, error) {
		<-ctx.Done()
		return "late", nil
	}})
	start := time.Now()
	if _, err := d2.Start(request()); err != nil {
		t.Fatal(err)
	}
	_ = d2.Idle(context.Background())
	if el := time.Since(start); el < 900*time.Millisecond || el > 5*time.Second {
		t.Errorf("deadline took %v; want about 1s", el)
	}
	if diff := cmp.Diff([]Outcome{{Error: "the worker ran out of time"}}, rec2.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// The reference's tests: Go has no 1.5 or NaN for an int; 0 means the default, so the
// invalid values are negative ones other than NoLimit.
func TestTitleLimitOption(t *testing.T) {
	run := func(context.Context, string, RunContext) (string, error) { return "", nil }
	rec := &recorder{}
	for _, lim := range []int{1000, NoLimit} {
		d := mustNew(t, Options{Target: "guest", MaxTitleChars: lim, Run: run, Deliver: rec.deliver})
		req := request()
		req.Title = strings.Repeat("t", 500)
		if _, err := d.Start(req); err != nil {
			t.Errorf("MaxTitleChars %d: Start = %v", lim, err)
		}
		_ = d.Idle(context.Background())
	}
	for _, lim := range []int{-2, math.MinInt} {
		if _, err := New(Options{Target: "guest", MaxTitleChars: lim, Run: run, Deliver: rec.deliver}); !errors.Is(err, ErrTitleLimit) || !strings.Contains(err.Error(), "Invalid delegation title limit") {
			t.Errorf("MaxTitleChars %d: New = %v; want title limit error", lim, err)
		}
	}
}

// The reference's tests
func TestReportAndReasonBounds(t *testing.T) {
	rec := &recorder{}
	d := mustNew(t, Options{Target: "guest", MaxReportChars: NoLimit, Deliver: rec.deliver, Run: func(context.Context, string, RunContext) (string, error) {
		return strings.Repeat("r", 100000), nil
	}})
	_, _ = d.Start(request())
	_ = d.Idle(context.Background())
	if out := rec.outcomes(); len(out) != 1 || !out[0].OK {
		t.Errorf("unlimited report: outcome OK = false")
	}

	rec2 := &recorder{}
	d2 := mustNew(t, Options{Target: "guest", DiagnosticChars: NoLimit, Deliver: rec2.deliver, Run: func(context.Context, string, RunContext) (string, error) {
		return "", errors.New(strings.Repeat("e", 2000))
	}})
	_, _ = d2.Start(request())
	_ = d2.Idle(context.Background())
	if out := rec2.outcomes(); len(out) != 1 || len(out[0].Error) != 2000 {
		t.Errorf("unlimited diagnostic: error length = %d; want 2000", len(out[0].Error))
	}

	rec3 := &recorder{}
	d3 := mustNew(t, Options{Target: "guest", MaxReportChars: 10, Deliver: rec3.deliver, Run: func(context.Context, string, RunContext) (string, error) {
		return strings.Repeat("r", 11), nil
	}})
	_, _ = d3.Start(request())
	_ = d3.Idle(context.Background())
	if diff := cmp.Diff([]Outcome{{Error: ReportTooLargeText}}, rec3.outcomes()); diff != "" {
		t.Errorf("too large (-want +got):\n%s", diff)
	}

	if _, err := New(Options{Target: "guest", MaxReportChars: -5, Run: func(context.Context, string, RunContext) (string, error) { return "", nil }, Deliver: rec.deliver}); !errors.Is(err, ErrReportLimit) {
		t.Errorf("MaxReportChars -5: New = %v; want ErrReportLimit", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	run := func(context.Context, string, RunContext) (string, error) { return "", nil }
	del := func(context.Context, Job, Outcome) error { return nil }
	for _, tc := range []struct {
		name string
		o    Options
		want error
	}{
		{"no-target", Options{Run: run, Deliver: del}, ErrBudget},
		{"running-11", Options{Target: "g", MaxRunning: 11, Run: run, Deliver: del}, ErrBudget},
		{"running-negative", Options{Target: "g", MaxRunning: -1, Run: run, Deliver: del}, ErrBudget},
		{"timeout-999ms", Options{Target: "g", Timeout: 999 * time.Millisecond, Run: run, Deliver: del}, ErrBudget},
		{"timeout-21m", Options{Target: "g", Timeout: 21 * time.Minute, Run: run, Deliver: del}, ErrBudget},
		{"diagnostic-negative", Options{Target: "g", DiagnosticChars: -3, Run: run, Deliver: del}, ErrDiagnosticLimit},
		{"no-run", Options{Target: "g", Deliver: del}, ErrMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.o); !errors.Is(err, tc.want) || !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("New = %v; want %v", err, tc.want)
			}
		})
	}
}

func TestDeliverErrorIsLoggedNotFatal(t *testing.T) {
	var calls atomic.Int32
	d := mustNew(t, Options{Target: "guest",
		Run: func(context.Context, string, RunContext) (string, error) { return "r", nil },
		Deliver: func(context.Context, Job, Outcome) error {
			calls.Add(1)
			panic("surface gone")
		}})
	_, _ = d.Start(request())
	_ = d.Idle(context.Background())
	if calls.Load() != 1 || len(d.RunningChannels()) != 0 {
		t.Errorf("deliver calls = %d, running = %v", calls.Load(), d.RunningChannels())
	}
}

func TestScrubDiagnostic(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		max      int
		keep     []string
		lose     []string
	}{
		{"pin", "Request to https://user:hunter2@example.invalid failed: 429 rate limited", 600, []string{"429 rate limited", "https://[redacted]@example.invalid"}, []string{"hunter2"}},
		{"at-in-password", "GET https://user:p@ss@example.invalid/x failed", 600, []string{"https://[redacted]@example.invalid/x failed"}, []string{"ss@", "p@"}},
		{"authorization", "authorization: Bearer abc.def-123 then", 600, []string{"authorization: [redacted]"}, []string{"abc.def"}},
		{"bearer", "sent Bearer sk9Xx_abc and failed", 600, []string{"failed"}, []string{"sk9Xx_abc"}},
		{"token-word", "token expired for user", 600, []string{"token expired"}, nil},
		{"github", "bad ghp_0123456789abcdefABCDEF0123 key", 600, []string{"bad"}, []string{"ghp_0123456789"}},
		{"openai", "key sk-proj-abcdefghijklmnop1234 refused", 600, []string{"refused"}, []string{"abcdefghijklmnop1234"}},
		{"aws", "AKIAABCDEFGHIJKLMNOP was used", 600, []string{"was used"}, []string{"AKIAABCDEFGHIJKLMNOP"}},
		{"jwt", "jwt eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl end", 600, []string{"end"}, []string{"eyJzdWIiOiIx"}},
		{"pem", "x -----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY----- y", 600, []string{"x", "y"}, []string{"MIIB"}},
		{"cookie", "set-cookie: session=abcdef; Path=/", 600, []string{"set-cookie:"}, []string{"abcdef"}},
		{"assignment", `{"api_key":"zzz999","max_tokens":4096,"password_policy":"strict"}`, 600, []string{"4096", "strict"}, []string{"zzz999"}},
		{"token-numeric", "prompt_token=512 client_secret=s3cr3t", 600, []string{"prompt_token=512"}, []string{"s3cr3t"}},
		{"controls", "a\x00b\x1bc\x7fd\te\nf", 600, []string{"a b c d\te\nf"}, nil},
		{"cut", strings.Repeat("x", 20), 10, []string{strings.Repeat("x", 9) + "…"}, []string{strings.Repeat("x", 10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ScrubDiagnostic(tc.in, tc.max)
			for _, k := range tc.keep {
				if !strings.Contains(got, k) {
					t.Errorf("ScrubDiagnostic(%q) = %q; want it to keep %q", tc.in, got, k)
				}
			}
			for _, l := range tc.lose {
				if strings.Contains(got, l) {
					t.Errorf("ScrubDiagnostic(%q) = %q; want it to lose %q", tc.in, got, l)
				}
			}
		})
	}
	if got := ScrubDiagnostic(strings.Repeat("e", 10000), 600); rtsandbox.UTF16Len(got) != 600 {
		t.Errorf("cut length = %d; want 600", rtsandbox.UTF16Len(got))
	}
}

func FuzzScrubDiagnostic(f *testing.F) {
	f.Add("Request to https://user:hunter2@example.invalid failed: 429 rate limited", 600)
	f.Add("token=abc\x00", 5)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 1 || max > 5000 {
			max = 600
		}
		got := ScrubDiagnostic(s, max)
		if rtsandbox.UTF16Len(got) > max {
			t.Fatalf("length %d > %d", rtsandbox.UTF16Len(got), max)
		}
		if strings.ContainsFunc(got, func(r rune) bool { return (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f }) {
			t.Fatalf("control character in %q", got)
		}
	})
}
