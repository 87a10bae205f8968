package inflight

import (
	"fmt"
	"log/slog"
	"testing"
)

// BenchmarkJournal measures, side by side, what a message costs the
// router's goroutine (a Begin and an End: no I/O, the writer saves in the
// background) and one save of the record (marshal, temp file, fsync,
// rename, fsync of the directory) at a host's usual set (8 messages), a
// busy one (512) and the bound (4,096).
func BenchmarkJournal(b *testing.B) {
	b.Run("begin-end", func(b *testing.B) {
		j, _ := Open(b.TempDir(), slog.New(slog.DiscardHandler))
		defer j.Close()
		b.ReportAllocs()
		for b.Loop() {
			j.Begin("http:lobby", "m_0123456789abcdef")
			j.End("http:lobby", "m_0123456789abcdef")
		}
	})
	for _, n := range []int{8, 512, MaxEntries} {
		b.Run(fmt.Sprintf("save-%d", n), func(b *testing.B) {
			j, _ := Open(b.TempDir(), slog.New(slog.DiscardHandler))
			for i := range n {
				j.Begin("discord:112233445566778899", fmt.Sprintf("11223344556677%04d", i))
			}
			j.Close()
			b.ReportAllocs()
			for b.Loop() {
				j.save()
			}
		})
	}
}
