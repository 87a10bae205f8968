package session

import (
	"context"
	"testing"
)

// BenchmarkWarmTurn measures the runtime's own share of a warm session
// turn (admission, validation, judge ∥ start with its status check and
// directory checks, memory, bind, execute, release) on the fake driver
// and broker, so that the ≤ 15 ms p50 target of issue 12 has a baseline
// without the engine, the broker socket and the worker.
func BenchmarkWarmTurn(b *testing.B) {
	w, log := newWorld(), &logSink{}
	dir := b.TempDir()
	rt, err := New(testOptions(dir, w, log))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	req := TurnRequest{Binding: binding("discord:bench", "a"), Text: "hello"}
	if _, err := rt.Turn(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := rt.Turn(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
