package worker

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkOpenSessionStore measures a worker's start on its session
// file (readSessionFile, parseSessionFile, the history budget), side by
// side: a conversation of 1,000 exchanges of about 1 KiB each, the same
// with a 50 MB line at its end (a torn one and a whole one), and a file
// past the 32 MiB read bound.
func BenchmarkOpenSessionStore(b *testing.B) {
	var conv strings.Builder
	conv.WriteString(testHeader + "\n")
	answer := strings.Repeat("a", 1000)
	for i := range 1000 {
		conv.WriteString(turnLines(fmt.Sprintf("t%d", i), fmt.Sprintf("question %d", i), answer))
	}
	huge := strings.Repeat("h", 50<<20)
	var big strings.Builder
	big.WriteString(conv.String())
	for big.Len() <= maxSessionRead+(1<<20) {
		big.WriteString(turnLines("p", "pad", strings.Repeat("p", 64<<10)))
	}
	for _, bc := range []struct{ name, data string }{
		{"1000-exchanges", conv.String()},
		{"1000-exchanges-50MB-torn-tail", conv.String() + huge},
		{"1000-exchanges-50MB-line", conv.String() + huge + "\n"},
		{"33MiB-file", big.String()},
	} {
		dir := b.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(bc.data), 0o600); err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, "s.jsonl")
		b.Run(bc.name+"/lines-from-the-end", func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				s := openSessionStore(dir, sessionHistoryBudget, time.Now, nil)
				if len(s.exchanges) == 0 {
					b.Fatal("no exchanges")
				}
			}
		})
		b.Run(bc.name+"/main-header-and-tail", func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				data, err := mainReadSessionFile(path)
				if err != nil {
					b.Fatal(err)
				}
				log, _ := parseSession(data)
				_ = withinBudget(log.exchanges, sessionHistoryBudget)
			}
		})
	}
}

// mainReadSessionFile is the reader before issue 22 (main at d319272),
// the benchmark's baseline: the whole file up to 32 MiB, else its header
// line and its last 32 MiB from the next line start on.
func mainReadSessionFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() <= maxSessionRead {
		return io.ReadAll(io.LimitReader(f, maxSessionRead))
	}
	head := make([]byte, maxHeaderLine)
	n, _ := io.ReadFull(f, head)
	line, _, _ := bytes.Cut(head[:n], []byte("\n"))
	tail := make([]byte, maxSessionRead)
	if _, err := f.ReadAt(tail, info.Size()-maxSessionRead); err != nil && err != io.EOF {
		return nil, err
	}
	if _, rest, ok := bytes.Cut(tail, []byte("\n")); ok {
		tail = rest
	}
	return append(append(line, '\n'), tail...), nil
}
