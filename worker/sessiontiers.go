package worker

import (
	"cmp"
	"encoding/json"

	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the arithmetic of the session worker's compaction
// (docs/session.md, "Compaction in the worker"): its token estimator and the tiers that pick
// the context size at which the conversation is compacted.
//
// The estimator is this worker's own, documented in docs/session.md
// ("Compaction"): a request's tokens are its JSON bytes (the chat shape
// the model client translates, images aside) divided by four, rounded
// up, plus a fixed imageTokens per image. It reads no usage the model
// reports, so it is the same before the first call and after a restart.

// The tiers of docs/session.md, "Compaction in the worker", in tokens. The hard tier is the ceiling above which
// the host compactor is bypassed.
const (
	softTier     = 300_000
	hardTier     = wire.CompactionCeiling
	tierHeadroom = 50_000
)

// Compaction sizes and defaults, in tokens.
const (
	bytesPerToken = 4
	// imageTokens is what one image of the running turn counts for: its
	// base64 bytes say little about what the model makes of it.
	imageTokens = 1_200
	// defaultContextWindow and defaultReserveTokens apply when
	// /worker/config names no window or reserve (the reserve at most a
	// quarter of a small configured window).
	defaultContextWindow = wire.DefaultContextWindow
	defaultReserveTokens = wire.DefaultReserveTokens
	// keepRecentTokens is how much of the newest conversation a
	// compaction keeps as it is (the reference's default): whole
	// exchanges, newest first, until they reach it.
	keepRecentTokens = 20_000
	// summaryReserve is what a summary request keeps free for the
	// summary (at most a quarter of the native threshold); the
	// transcript it summarises gets the rest of the threshold.
	summaryReserve = 16_384
)

// Bounds of the window and reserve /worker/config may name.
const (
	minContextWindow = wire.MinContextWindow
	maxContextWindow = wire.MaxContextWindow
)

// Engines of a compaction, in the report's words (docs/protocol.md, "The session protocol"): the host
// compactor's summary or the worker's own (the reference's name for its
// agent's summary).
const (
	engineHost   = wire.EngineExtension
	engineWorker = wire.EnginePi
)

// tokens is the estimate of n bytes of JSON.
func tokens(n int) int { return (n + bytesPerToken - 1) / bytesPerToken }

// messageTokens is the estimate of msgs as the chat shape writes them.
func messageTokens(msgs []message) int { return tokens(jsonjs.Size(msgs)) }

// lastCompaction is what the tiers need of the conversation's latest
// compaction: whose summary it was and the context it left.
type lastCompaction struct {
	engine       string
	contextAfter int
}

// tiers are the compaction thresholds of a model's window.
type tiers struct {
	window  int
	reserve int // the configured reserve: window − reserve is the native threshold
}

// newTiers applies the defaults to a configured window and reserve.
func newTiers(window, reserve int) tiers {
	window = cmp.Or(window, defaultContextWindow)
	if reserve == 0 {
		reserve = min(defaultReserveTokens, window/4)
	}
	return tiers{window: window, reserve: reserve}
}

// native is the model's own threshold: the window less the reserve.
func (t tiers) native() int { return t.window - t.reserve }

// trigger is the context size, in tokens, above which the conversation is
// compacted (docs/session.md, "Compaction in the worker"), given the latest compaction (nil: none yet):
//   - a native threshold of at most the soft tier applies as it is;
//   - else the soft tier, while the last compaction left at most the soft
//     tier less the headroom (or there was none);
//   - else a native threshold of at most the hard tier applies as it is;
//   - else the hard tier, unless the worker's own summary last left more
//     than the hard tier less the headroom: then the native threshold.
func (t tiers) trigger(last *lastCompaction) int {
	native := t.native()
	switch {
	case native <= softTier:
		return native
	case last == nil || last.contextAfter <= softTier-tierHeadroom:
		return softTier
	case native <= hardTier:
		return native
	case last.engine == engineWorker && last.contextAfter > hardTier-tierHeadroom:
		return native
	}
	return hardTier
}

// reserveTokens is the reserve the tiers set: the window less the
// trigger (the reference adjusts its agent's setting so).
func (t tiers) reserveTokens(last *lastCompaction) int { return t.window - t.trigger(last) }

// bypass reports why a compaction skips the host compactor for the
// worker's own summary (docs/session.md, "Compaction in the worker"): the context is above the hard tier, or the
// host's last summary left more than it.
func bypass(tokensBefore int, last *lastCompaction) (reason string, ok bool) {
	switch {
	case tokensBefore > hardTier:
		return "above the hard ceiling", true
	case last != nil && last.engine == engineHost && last.contextAfter > hardTier:
		return "the host compactor's last summary left more than the hard ceiling", true
	}
	return "", false
}

// safeInt reads a JSON number that is an integer from 0 to 2^53−1 (the
// reference's Number.isSafeInteger, and not negative).
func safeInt(raw json.RawMessage) (int, bool) {
	n, ok := wire.SafeInteger(raw)
	return int(n), ok && n >= 0
}
