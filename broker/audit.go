package broker

import (
	"context"
	"log/slog"
	"time"
)

// audit emits the call's one record. It is content-free by construction:
// it names who (channel, principal), what (route, status, refusal class,
// a fixed detail text) and how much (duration, bytes in and out), and never
// a body, a header or a credential.
func (t *Turn) audit(ctx context.Context, route string, o outcome, d time.Duration) {
	level := slog.LevelInfo
	if o.status >= 500 {
		level = slog.LevelWarn
	}
	if !t.b.log.Enabled(ctx, level) {
		return // nothing to build the record for (a discarding logger)
	}
	attrs := []slog.Attr{
		slog.String("channel", string(t.binding.Channel)),
		slog.String("principal", t.binding.Speaker.PrincipalID),
		slog.String("route", route),
		slog.Int("status", o.status),
		slog.Duration("duration", d),
		slog.Int("bytes_in", o.bytesIn),
		slog.Int64("bytes_out", o.bytesOut()),
	}
	if o.class != "" {
		attrs = append(attrs, slog.String("refusal", o.class))
	}
	if o.detail != "" {
		attrs = append(attrs, slog.String("detail", o.detail))
	}
	t.b.log.LogAttrs(ctx, level, "broker call", attrs...)
}
