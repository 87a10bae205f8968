package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// session.disk: the defaults of the issue (auto, 1024 MiB, 20,000 files,
// outbox and attachments pruned after 7 days) and every key.
func TestParseSessionDisk(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want SessionDisk
	}{
		{"defaults", minimal, SessionDisk{Mode: DiskAuto, SizeMB: 1024, MaxFiles: 20000, PruneAfter: 7 * 24 * time.Hour}},
		{"empty-block-is-the-defaults", minimal + "session: {disk: {}}\n", SessionDisk{Mode: DiskAuto, SizeMB: 1024, MaxFiles: 20000, PruneAfter: 168 * time.Hour}},
		{"every-key", minimal + "session:\n  disk: {mode: hard, size_mb: 64, max_files: 65536, prune_after_hours: 1}\n",
			SessionDisk{Mode: DiskHard, SizeMB: 64, MaxFiles: 65536, PruneAfter: time.Hour}},
		{"soft-without-pruning", minimal + "session: {disk: {mode: soft, prune_after_hours: 0}}\n",
			SessionDisk{Mode: DiskSoft, SizeMB: 1024, MaxFiles: 20000}},
		{"largest", minimal + "session: {disk: {size_mb: 1048576, max_files: 1000000, prune_after_hours: 8760}}\n",
			SessionDisk{Mode: DiskAuto, SizeMB: 1 << 20, MaxFiles: 1000000, PruneAfter: 8760 * time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse error: %v", err)
			}
			if diff := cmp.Diff(tt.want, c.Session.Disk); diff != "" {
				t.Errorf("session.disk (-want +got):\n%s", diff)
			}
		})
	}
}

// Every refusal names the key and the rule.
func TestParseSessionDiskErrors(t *testing.T) {
	checkParseErrors(t, []errorTest{
		{"disk-not-mapping", minimal + "session: {disk: hard}\n", []string{"session.disk: must be a mapping"}},
		{"disk-unknown-key", minimal + "session: {disk: {quota: 1}}\n", []string{"session.disk.quota: unknown key"}},
		{"disk-mode-unknown", minimal + "session: {disk: {mode: quota}}\n", []string{`session.disk.mode: must be one of ["auto" "hard" "soft"]`}},
		{"disk-mode-not-string", minimal + "session: {disk: {mode: 1}}\n", []string{"session.disk.mode: must be a string"}},
		{"disk-size-small", minimal + "session: {disk: {size_mb: 63}}\n", []string{"session.disk.size_mb: must be an integer of at least 64"}},
		{"disk-size-large", minimal + "session: {disk: {size_mb: 1048577}}\n", []string{"session.disk.size_mb: must be an integer of at most 1048576"}},
		{"disk-size-string", minimal + "session: {disk: {size_mb: 1G}}\n", []string{"session.disk.size_mb: must be an integer"}},
		{"disk-files-few", minimal + "session: {disk: {max_files: 255}}\n", []string{"session.disk.max_files: must be an integer of at least 256"}},
		{"disk-files-many", minimal + "session: {disk: {max_files: 1000001}}\n", []string{"session.disk.max_files: must be an integer of at most 1000000"}},
		{"disk-files-beyond-the-inode-tables", minimal + "session: {disk: {size_mb: 64, max_files: 65537}}\n", []string{"session.disk.max_files: must be an integer of at most 65536"}},
		{"disk-prune-negative", minimal + "session: {disk: {prune_after_hours: -1}}\n", []string{"session.disk.prune_after_hours: must be an integer of at least 0"}},
		{"disk-prune-over-a-year", minimal + "session: {disk: {prune_after_hours: 8761}}\n", []string{"session.disk.prune_after_hours: must be an integer of at most 8760"}},
		{"disk-prune-duration", minimal + "session: {disk: {prune_after_hours: 7d}}\n", []string{"session.disk.prune_after_hours: must be an integer"}},
	})
}
