package budget_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
)

// BenchmarkLedgerTurn is one sealed turn's ledger work, as the sandbox and
// the broker do it: Check and Reserve the turn's seconds, then one model
// call (Reserve and Settle a call and its tokens), then Settle the
// seconds. serial is one turn at a time; parallel runs turns of 12
// channels at once (GOMAXPROCS goroutines), the case issue 22 measured.
// Only the API both versions have is used, so the same benchmark runs on
// the ledger before batching (git show d319272:budget/budget.go).
func BenchmarkLedgerTurn(b *testing.B) {
	cfg := budget.Config{
		PerSpeaker:      budget.Limits{Calls: 1 << 40, Tokens: 1 << 40, Seconds: 1 << 40},
		PerChannel:      budget.Limits{Calls: 1 << 40},
		PerInstallation: budget.Limits{Tokens: 1 << 40},
	}
	turn := func(l *budget.Ledger, ch int, speaker int64) error {
		ctx := context.Background()
		scopes := budget.Scopes(rtsandboxChannel(ch), fmt.Sprintf("http:p%d", speaker))
		day := l.Today()
		if err := l.Check(ctx, day, scopes); err != nil {
			return err
		}
		secs, err := l.Reserve(ctx, day, scopes, budget.Seconds, 600)
		if err != nil {
			return err
		}
		calls, err := l.Reserve(ctx, day, scopes, budget.Calls, 1)
		if err != nil {
			return err
		}
		tokens, err := l.Reserve(ctx, day, scopes, budget.Tokens, 4000)
		if err != nil {
			return err
		}
		if err := l.Settle(ctx, calls, 1); err != nil {
			return err
		}
		if err := l.Settle(ctx, tokens, 1234); err != nil {
			return err
		}
		return l.Settle(ctx, secs, 2)
	}
	b.Run("serial", func(b *testing.B) {
		l := mustOpen(b, privateDir(b), cfg)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := turn(l, i%12, int64(i%50)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := mustOpen(b, privateDir(b), cfg)
		var n atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				if err := turn(l, int(i%12), i%50); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func rtsandboxChannel(i int) rtsandbox.ChannelKey {
	return rtsandbox.ChannelKey(fmt.Sprintf("http:room-%02d", i))
}
