package upstream

import (
	"strings"
	"testing"
)

func BenchmarkCheckJSON(b *testing.B) {
	body := []byte(`{"choices":[{"message":{"role":"assistant","content":"` + strings.Repeat("The quick brown fox jumps. ", 1<<20/27) + `"}}]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, "sk-proj-abcdefghijklmnop0123456789"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanOnly(b *testing.B) {
	body := []byte(`{"choices":[{"message":{"role":"assistant","content":"` + strings.Repeat("The quick brown fox jumps. ", 1<<20/27) + `"}}]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, ""); err != nil {
			b.Fatal(err)
		}
	}
}
