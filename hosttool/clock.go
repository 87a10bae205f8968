package hosttool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// ClockName is the built-in clock tool's name (the model sees host_clock).
const ClockName = "clock"

// ClockSpec declares the clock tool; each call returns a fresh value, so
// a caller may change its copy (an operator's description, say).
func ClockSpec() rtsandbox.ToolSpec {
	return rtsandbox.ToolSpec{
		Name:        ClockName,
		Description: "Current date and time on the host, optionally in another IANA time zone.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"time_zone":{"type":"string",` +
			`"maxLength":64,"description":"IANA time zone such as Europe/Berlin; default the host's"}},` +
			`"additionalProperties":false}`),
	}
}

// Clock tells the time. It reads nothing secret and needs no network.
type Clock struct {
	Now      func() time.Time // nil means time.Now
	Location *time.Location   // default zone; nil means time.Local
}

// ErrZone marks a time zone the clock does not know.
var ErrZone = fmt.Errorf("%w: unknown time zone", rtsandbox.ErrInvalid)

// Run returns the current time as RFC 3339 and as a readable line.
func (c Clock) Run(_ context.Context, input json.RawMessage, _ rtsandbox.Binding) (string, error) {
	var in struct {
		TimeZone string `json:"time_zone"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return "", fmt.Errorf("%w: clock input", rtsandbox.ErrInvalid)
	}
	loc := c.Location
	if loc == nil {
		loc = time.Local
	}
	if in.TimeZone != "" {
		// "Local" would name the host's zone by another word; file paths
		// are refused by time.LoadLocation itself.
		if strings.EqualFold(in.TimeZone, "local") || len(in.TimeZone) > 64 {
			return "", ErrZone
		}
		l, err := time.LoadLocation(in.TimeZone)
		if err != nil {
			return "", ErrZone
		}
		loc = l
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	t := now().In(loc)
	return fmt.Sprintf("%s (%s, %s)", t.Format(time.RFC3339), t.Format("Monday, 2 January 2006 15:04:05 MST"), loc), nil
}
