package broker

import (
	"net/netip"
	"testing"
	"time"
)

// TestSourceLimiterBounded: addresses flooding the failure table fill it
// to maxSources and no further; a source tracked before the flood stays
// limited, a new one goes uncounted (never locked out) until the windows
// end, and then the table takes new sources again.
func TestSourceLimiterBounded(t *testing.T) {
	l := newSourceLimiter()
	now := time.Unix(1_000_000, 0)
	early := netip.MustParseAddr("10.0.0.1")
	for range SourceFailures {
		l.fail(early, now)
	}
	base := netip.MustParseAddr("fd00::")
	addr := base
	for range 3 * maxSources {
		addr = addr.Next()
		l.fail(addr, now.Add(time.Second))
	}
	if n := len(l.windows); n != maxSources {
		t.Fatalf("table holds %d sources; want the bound %d", n, maxSources)
	}
	if !l.limited(early, now.Add(2*time.Second)) {
		t.Error("a source over its limit before the flood is no longer limited")
	}
	late := netip.MustParseAddr("10.0.0.2")
	for range 2 * SourceFailures {
		l.fail(late, now.Add(2*time.Second))
	}
	if l.limited(late, now.Add(2*time.Second)) {
		t.Error("a new source was locked out by a table full of others")
	}
	after := now.Add(SourceWindow + 2*time.Second)
	for range SourceFailures {
		l.fail(late, after)
	}
	if !l.limited(late, after) {
		t.Error("once the windows ended, the table did not take the new source")
	}
	if n := len(l.windows); n != 1 {
		t.Errorf("after the sweep the table holds %d sources; want 1", n)
	}
}
