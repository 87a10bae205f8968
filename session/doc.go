// Package session is the runtime of session mode (docs/architecture.md, "The two modes"; docs/session.md, "The container"):
// one long-lived sealed worker container and one broker per channel,
// chosen per channel profile.
//
// The contract:
//
//   - At most one turn per channel: a second gets rtsandbox.ErrChannelBusy
//     ("Channel is busy") at once.
//   - A turn validates its input (wire.SessionTurn.Validate), judges
//     its thinking level while the channel's worker is started (starts are
//     deduplicated; a container is recreated, with a new broker, when it
//     is not running or its image, profile or spec changed), binds the
//     broker to the turn's Binding, profile, level and deadline, queues the
//     turn and waits for the worker's result. Whatever happens, the
//     binding is revoked and the channel freed when the turn ends.
//   - A turn that is aborted (deadline, Stop, Remove, StartFresh, Close, the
//     caller's context) waits for a pending start, saves the container's
//     last 200 log lines to the operator log (scrubbed) and force-removes
//     the channel's exact container, so a hung or hostile worker cannot go
//     on using the broker. A create or start under way runs to the
//     engine's answer first (bounded), so the removal never comes before
//     the container exists. A worker that reported ok:false is kept.
//   - Failed turns return an error whose text is "Sandbox turn timed out"
//     or "Sandbox turn failed: <scrubbed message>"; it wraps the cause.
//   - Containers run as a non-root user (never root, even when the host
//     is), with the container.SessionSpec hardening; Close stops the
//     brokers and leaves the containers running (they survive host
//     restarts, and a new broker on the same socket path takes the
//     worker's next ready call). Remove and StartFresh remove the
//     container; StartFresh then archives the conversation.
//   - RunInput collects a message's attachments (docs/session.md, "Attachments in, reply files out") once the channel
//     is taken: fetched through safefetch or taken from the surface's
//     bytes, bounded (20 files, 25 MiB each, 50 MiB in all), written
//     exclusively and no-follow into the owned workspace/attachments,
//     real images (sniffed, at most 8 within docs/protocol.md, "Images and files") as the turn's images,
//     a bounded block naming the files after the text; the reply ends
//     with attach.Notice's fixed text when a file was refused. Reply files
//     are validated again and decoded (attach.DecodeReplyFiles).
//   - The party directory is private to the service; each channel's
//     directory is named by Segment, injective over keys (segment.go;
//     a directory under the earlier lossy name is moved once), and
//     carries a .channel-key record that refuses a channel whose
//     directory holds another key's; whatever a guest plants in its
//     workspace is replaced, never followed (docs/session.md, "Directories and defences").
//   - Each workspace is bounded in bytes and files (Options.Disk,
//     disk.go): its own loop-mounted ext4 image where the host can, else
//     measured at each turn's start and end; a turn that finds it over
//     its bound is refused with rtsandbox.ErrWorkspaceFull, as is the
//     host's own work that finds a hard workspace full (ENOSPC). A
//     message's attachments and a turn's own files stop short of the
//     reserve its turns need (disk_room.go), so no guest locks a
//     channel; fresh frees a full workspace before archiving. Remove
//     unmounts the image; Close leaves it mounted with the container.
//
// The package depends on small interfaces (Broker, and the engine's
// container.LongLived) so that the host wires the concrete broker
// (*broker.Session) and engine (*docker.SessionDriver) in.
package session
