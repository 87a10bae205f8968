package delegate

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
)

// ToolName is the guest-facing research tool's name (the model sees
// host_research).
const ToolName = "research"

// ToolSpec declares the research tool. Lengths are checked by Start, whose
// refusal texts tell the model the limits. Each call returns a fresh value.
func ToolSpec() rtsandbox.ToolSpec {
	return rtsandbox.ToolSpec{
		Name: ToolName,
		Description: "Start a background web research task on the host. It returns at once with a job " +
			"number; the report is posted to this channel when it is ready (usually a few minutes). " +
			"The task must be self-contained: the researcher sees only the task text, not this chat.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"title":{"type":"string","minLength":1,"description":"short title shown with the report"},` +
			`"task":{"type":"string","minLength":1,"description":"what to research, self-contained, at most 4000 characters"}},` +
			`"required":["title","task"],"additionalProperties":false}`),
	}
}

// ErrToolInput marks arguments that are not {"title": string, "task": string}.
var ErrToolInput = fmt.Errorf("%w: research needs a title and a task", rtsandbox.ErrInvalid)

// Tool is the guest-facing research host tool: it starts a job for the
// host-bound channel and speaker and answers at once. The speaker's tier
// (only members may delegate) is the one the router resolved, carried
// in the turn's Binding; nothing here parses a principal or a name.
type Tool struct {
	Delegator *Delegator
	// Target is the delegator's configured target.
	Target string
}

// Run starts the job. A refusal is answered as text (its fixed text tells
// the model why), so the guest learns it; only malformed input is an error.
func (t *Tool) Run(_ context.Context, input json.RawMessage, b rtsandbox.Binding) (string, error) {
	var in struct {
		Title *string `json:"title"`
		Task  *string `json:"task"`
	}
	if err := json.Unmarshal(input, &in); err != nil || in.Title == nil || in.Task == nil {
		return "", ErrToolInput
	}
	job, err := t.Delegator.Start(Request{
		Channel: b.Channel,
		Target:  t.Target,
		Author:  Author{PrincipalID: b.Speaker.PrincipalID, ID: b.Speaker.ID, Name: b.Speaker.Name, Tier: b.Tier},
		Title:   *in.Title,
		Task:    *in.Task,
	})
	if err != nil {
		if de, ok := err.(*DelegationError); ok {
			return "Research was not started: " + de.Text + ".", nil
		}
		return "", err
	}
	return "Research #" + strconv.Itoa(job.ID) + " started. The report will be posted to this channel " +
		"when it is ready; you do not need to wait for it or check on it.", nil
}

// Poster posts a text to a channel (the host posts it through
// router.PostReport).
type Poster interface {
	SendReply(ctx context.Context, channel rtsandbox.ChannelKey, text string) error
}

// OutcomeText is the channel message for a finished job: "Research #3
// (title) is ready:" and the report, or "Research #3 (title) failed:
// <reason>". The title is reduced to one line of at most 200 characters.
func OutcomeText(job Job, out Outcome) string {
	head := "Research #" + strconv.Itoa(job.ID) + " (" + oneLine(job.Title) + ")"
	switch {
	case !out.OK:
		return head + " failed: " + out.Error
	case strings.TrimSpace(out.Report) == "":
		return head + " finished with an empty report."
	}
	return head + " is ready:\n\n" + out.Report
}

// PostOutcome returns a Deliver function that posts OutcomeText to the
// job's channel in chunk.Chunk pieces.
func PostOutcome(p Poster) func(ctx context.Context, job Job, out Outcome) error {
	return func(ctx context.Context, job Job, out Outcome) error {
		return p.SendReply(ctx, job.Channel, OutcomeText(job, out))
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	return rtsandbox.PrefixUTF16(s, 200)
}
