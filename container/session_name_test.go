package container_test

import (
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/container"
)

// PrefixedSessionName (config session.container_prefix): the name starts
// with the prefix, keeps the installation+channel hash, stays within the
// container name rule and its length bound for the longest prefix and
// channel, and the default prefix names a channel as SessionName always
// did.
func TestPrefixedSessionName(t *testing.T) {
	longest := "p" + strings.Repeat("-", 39) + "9" // 41 characters, the config's bound
	channels := []string{"discord:a:b", "discord:a_b", "x:A", "x:a", "x:" + strings.Repeat("z", 250)}
	tests := []struct {
		name, prefix, wantStart string
	}{
		{"default", container.DefaultSessionPrefix, "rtsandbox-session-"},
		{"short", "rt0", "rt0-"},
		{"longest", longest, longest + "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !container.ValidSessionPrefix(tt.prefix) {
				t.Fatalf("prefix %q refused", tt.prefix)
			}
			names := map[string]bool{}
			for _, ch := range channels {
				for _, inst := range []string{"prod", "test"} {
					n := container.PrefixedSessionName(tt.prefix, inst, ch)
					if names[n] {
						t.Errorf("name %s repeats", n)
					}
					names[n] = true
					if !strings.HasPrefix(n, tt.wantStart) || len(n) > 91 {
						t.Errorf("name %q (%d bytes): want the prefix %q and at most 91 bytes", n, len(n), tt.wantStart)
					}
					s := validSessionSpec()
					s.Name = n
					if err := s.Validate(); err != nil {
						t.Errorf("name %s: %v", n, err)
					}
					// The hash (the last 16 hex digits) is the prefix's own
					// business: the same channel hashes alike under any.
					if want := container.SessionName(inst, ch); n[len(n)-16:] != want[len(want)-16:] {
						t.Errorf("name %s: hash differs from %s", n, want)
					}
				}
			}
		})
	}
	if got, want := container.PrefixedSessionName(container.DefaultSessionPrefix, "prod", "discord:1"), container.SessionName("prod", "discord:1"); got != want {
		t.Errorf("default prefix name %q; want %q", got, want)
	}
	for _, bad := range []string{"", "RT", "-rt", "rt_x", "rt.x", strings.Repeat("r", 42)} {
		if container.ValidSessionPrefix(bad) {
			t.Errorf("prefix %q accepted", bad)
		}
	}
}
