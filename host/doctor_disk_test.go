package host

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/session"
)

// doctor names the disk bound each session channel's workspace gets on
// this host: hard where it can mount an image, soft by choice, soft as
// auto's fallback (a warning), and fails mode hard on a host that cannot,
// naming the reason.
func TestDiskCheck(t *testing.T) {
	can := session.DiskSupport{Hard: true, Reason: "root, /dev/loop-control, mke2fs and ext4 are available"}
	cannot := session.DiskSupport{Reason: "rtsandbox does not run as root, and mounting a filesystem needs root"}
	const sessions = "state_dir: /var/lib/rtsandbox\nmodel: {url: \"https://api.example/v1\", name: m, api_key_env: KEY}\n" +
		"profiles: {s: {mode: session}}\ndefault_profile: s\n"
	tests := []struct {
		name    string
		yaml    string
		sup     session.DiskSupport
		want    brief
		wantMsg string
	}{
		{"auto-hard", sessions, can, brief{"ok", diskCheckName, false}, "hard: each channel's workspace is its own ext4 filesystem of 1024 MiB and 20000 files"},
		{"auto-soft-warns", sessions, cannot, brief{"warn", diskCheckName, true}, "a worker can overshoot within a turn (auto: the hard bound is unavailable: rtsandbox does not run as root"},
		{"soft-chosen", sessions + "session: {disk: {mode: soft, size_mb: 64}}\n", can, brief{"ok", diskCheckName, false}, "soft: the host measures each channel's workspace against 64 MiB"},
		{"hard-unavailable-fails", sessions + "session: {disk: {mode: hard}}\n", cannot, brief{"fail", diskCheckName, true}, "session.disk.mode is hard, but rtsandbox does not run as root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			c, ok := diskCheck(cfg, tt.sup)
			if !ok {
				t.Fatal("no disk check with a session profile in use")
			}
			if diff := cmp.Diff(tt.want, briefOf(c)); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
			if !strings.Contains(c.msg, tt.wantMsg) {
				t.Errorf("message %q lacks %q", c.msg, tt.wantMsg)
			}
		})
	}
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rtsandbox\nmodel: {url: \"https://api.example/v1\", name: m, api_key_env: KEY}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := diskCheck(cfg, can); ok {
		t.Error("a disk check without session profiles")
	}
}
