// Package sealed is the sealed runtime: it runs one guest turn in a fresh
// worker container whose only way out is a per-turn broker socket.
//
// The contract of RunTurn, in order (docs/architecture.md, "The request path"; docs/sealed-turn.md, "The sealed turn"):
//
//   - Refusals before any resource exists: a disposed runtime, a busy
//     channel (one turn per channel; check and insert under one lock), an
//     invalid channel key, a missing principal, text over 32,000 or a
//     speaker field over 256 UTF-16 units.
//   - Admission snapshots the channel's fresh-start generation before any
//     other work, and starts the turn deadline.
//   - The channel workspace <WorkspaceRoot>/<sha256 hex of the key> is
//     created once (0700) and never touched by the host again; a private
//     run dir <RunRoot>/turn-XXXXXX holds the broker socket (0600) bound to
//     the turn's rtsandbox.Binding (channel, speaker and the tier the router
//     resolved), which the broker's credential getters and host tools see.
//   - The worker gets the turn JSON on stdin: no principal, no tier, no
//     credential, no upstream URL; its tools are the broker's declarations. The reply comes only from the driver (the container's
//     stdout).
//   - Whatever happened, the turn context is cancelled (so host-tool calls
//     still in flight end), the broker is closed, the run dir is removed and
//     the channel is freed before RunTurn returns.
//
// When the service runs as root it must name a non-root worker user; the
// workspace, run dir and socket are then owned by that user but stay
// 0700/0600 behind roots that only the service can enter.
package sealed
