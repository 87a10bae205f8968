package backup

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modernc.org/sqlite"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/memstore"
)

// benchMemory is a memory database of a busy host: 200 channels, each
// with 100 notes of 400 bytes and 20 history messages of 800 bytes
// (about 11 MB before the removal), after which every other channel's memory was removed
// (the free pages a deletion leaves).
func benchMemory(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, memstore.FileName)
	ctx := context.Background()
	s, err := memstore.Open(ctx, memstore.Options{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	speaker := rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "http:alice"}
	save := func(c int, notes int) {
		ch := rtsandbox.ChannelKey(fmt.Sprintf("http:c%d", c))
		st := rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{}, History: []rtsandbox.HistoryEntry{}}
		for i := range notes {
			st.Memory = append(st.Memory, rtsandbox.MemoryEntry{Scope: "channel", Key: fmt.Sprintf("k%d", i), Text: strings.Repeat("n", 400)})
		}
		for i := range 20 {
			role := [2]string{"user", "assistant"}[i%2]
			st.History = append(st.History, rtsandbox.HistoryEntry{Role: role, Content: strings.Repeat("h", 800)})
		}
		if err := s.Save(ctx, rtsandbox.Binding{Channel: ch, Speaker: speaker}, st); err != nil {
			b.Fatal(err)
		}
	}
	for c := range 200 {
		save(c, 100)
	}
	for c := 0; c < 200; c += 2 {
		save(c, 0)
	}
	return path
}

// backupAPI copies src to dst with SQLite's online backup API
// (modernc.org/sqlite's NewBackup), all pages in one step: the
// alternative to VACUUM INTO.
func backupAPI(ctx context.Context, src, dst string) error {
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: src}).String())
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		bk, err := dc.(interface {
			NewBackup(string) (*sqlite.Backup, error)
		}).NewBackup(dst)
		if err != nil {
			return err
		}
		for more := true; more; {
			if more, err = bk.Step(-1); err != nil {
				bk.Finish()
				return err
			}
		}
		return bk.Finish()
	})
}

// BenchmarkSnapshot: a consistent copy of the memory database by
// VACUUM INTO (what Write uses) and by the online backup API, side by
// side; bytes-out is the copy's size.
func BenchmarkSnapshot(b *testing.B) {
	src := benchMemory(b)
	ctx := context.Background()
	for _, way := range []struct {
		name string
		copy func(ctx context.Context, src, dst string) error
	}{
		{"vacuum-into", vacuumInto},
		{"backup-api", backupAPI},
	} {
		b.Run(way.name, func(b *testing.B) {
			dir := b.TempDir()
			var size int64
			for i := 0; b.Loop(); i++ {
				dst := filepath.Join(dir, fmt.Sprintf("copy-%d.db", i))
				if err := way.copy(ctx, src, dst); err != nil {
					b.Fatal(err)
				}
				fi, err := os.Stat(dst)
				if err != nil {
					b.Fatal(err)
				}
				size = fi.Size()
				os.Remove(dst)
			}
			b.ReportMetric(float64(size), "bytes-out")
		})
	}
}
