// Package backup writes and restores a consistent copy of a host's state
// (`rtsandbox backup` and `rtsandbox restore`; docs/operations.md,
// "Backup and restore").
//
// What is state (and what is not) is decided here, once:
//
//   - state: the memory database (memory.db: each channel's memory and
//     sealed history), the usage database (usage.db: the day's budgets),
//     the channel store (channels.json) and the record that it was
//     seeded (channels.seeded), and each session channel's conversations
//     (<party_dir>/<segment>/workspace/sessions/, archives included) with
//     the channel's key record (.channel-key).
//   - not state: run/ (per-turn run dirs and sockets), the lock files,
//     inflight.json (the messages a running process has not answered: on
//     another host, or later, its restart notices would be false), the
//     -wal and -shm files (VACUUM INTO folds them in), a workspace's
//     attachments/ and outbox/ (pruned by age at every turn), the
//     worker's other files in the workspace, workspace.img (the
//     filesystem a hard-bounded workspace lives in: its sessions are
//     copied out of it, and restored into the workspace directory, which
//     the next start moves into a fresh image), and the older layouts
//     channel-state/ and workspaces/ (imported into memory.db once).
//
// The contract:
//
//   - Write copies the state into a new or empty directory while serve
//     runs: each SQLite database through VACUUM INTO, one read
//     transaction's snapshot (it needs no driver-specific API, waits for
//     no writer in WAL mode, and leaves out the free pages where deleted
//     memory would linger); each JSON state file as one read (its writers
//     replace it by rename, so a read sees the old or the new); each
//     conversation file up to its size when opened, cut after its last
//     newline (the worker appends whole lines, so a line being written is
//     left out, as a crash would leave it; a turn without its end record
//     is skipped when read, as the worker skips it). A workspace is read
//     through an os.Root: a link a guest planted never leads out of its
//     workspace; only plain directories and regular files of valid names
//     are copied, the rest are named in the report. The manifest (format,
//     version, time, each file's path, size and SHA-256) is written last,
//     atomically: a backup without it is incomplete. Everything is 0700
//     or 0600.
//   - Restore reads and checks the manifest (ParseManifest: bounded,
//     relative paths of plain names in the known places), then every
//     file's size and SHA-256, and every key record against its
//     directory's name, before it touches the state. It refuses a state
//     dir that holds state unless forced; forced, it moves that state
//     aside (<dir>.pre-restore-<UTC time>, never deleted) after checking
//     that no workspace is still mounted. Each file is written to a temp
//     name, synced and renamed into place; the channel store last. The
//     caller holds serve's locks (package host).
//   - Restored files are the host user's, 0600 in 0700 directories; a
//     channel's workspace/ and everything under it are handed to the
//     worker user when the host runs as root (Layout.Worker), as the
//     session runtime hands them.
package backup
