package budget

import (
	"context"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// Report is what owners see of a day: a channel's usage and the
// installation's, every kind with its limit (0 is unlimited). It names no
// speaker.
type Report struct {
	Day          string  `json:"day"` // UTC date
	Channel      string  `json:"channel"`
	ChannelUsage []Entry `json:"channel_usage"`
	Installation []Entry `json:"installation_usage"`
}

// ChannelReport returns today's report for channel.
func (l *Ledger) ChannelReport(ctx context.Context, channel rtsandbox.ChannelKey) (Report, error) {
	rep := Report{Day: l.Today(), Channel: string(channel)}
	var err error
	if rep.ChannelUsage, err = l.Usage(ctx, rep.Day, ChannelScope(channel)); err != nil {
		return Report{}, err
	}
	if rep.Installation, err = l.Usage(ctx, rep.Day, Installation); err != nil {
		return Report{}, err
	}
	return rep, nil
}

// String is the report as the owner's status command shows it, one line:
// "Today (UTC 2026-12-01): this channel 3/500 calls, 1200 tokens,
// 14 seconds; all channels …". Reserved amounts count as spent.
func (r Report) String() string {
	return fmt.Sprintf("Today (UTC %s): this channel %s; all channels %s.", r.Day, line(r.ChannelUsage), line(r.Installation))
}

func line(es []Entry) string {
	parts := make([]string, 0, len(es))
	for _, e := range es {
		n := fmt.Sprint(e.Used + e.Reserved)
		if e.Limit > 0 {
			n += fmt.Sprintf("/%d", e.Limit)
		}
		parts = append(parts, n+" "+string(e.Kind))
	}
	return strings.Join(parts, ", ")
}
