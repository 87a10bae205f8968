// Package skilltree reads an operator's skills directory for session
// mode (docs/session.md, "Skills") on the host: it validates the tree, indexes
// it and keeps an in-memory copy the session runtime writes into each
// channel's run directory, where the worker reads it (package skills).
//
// The contract of Load:
//
//   - A skill is a folder <dir>/<name> holding a SKILL.md. Each SKILL.md
//     starts with YAML front matter between a first line "---" and the
//     next "---" line, decoded strictly (unknown or duplicate keys are
//     refused): name must equal the folder's name, description must be a
//     non-empty string and the optional tools is a list of the tools the
//     skill gates. The index keeps the rules of skills.Check. Skills are
//     sorted by name.
//   - Top-level folders without a SKILL.md and top-level plain files are
//     neither indexed nor copied; a top-level symlink is refused.
//   - A skill folder is copied whole, and may hold only directories and
//     regular files: a symlink anywhere in it is refused, never followed,
//     and so is a FIFO, socket or device. Every name is a safe file name
//     (wire.ValidSafeName).
//   - The copy is bounded: every file at most skills.MaxFileSize bytes
//     (read_skill could not return a larger one), at most MaxTreeBytes in
//     all, MaxTreeEntries files and folders, MaxTreeDepth levels below
//     the skills directory, at most skills.MaxSkills skills. Files are
//     opened without following a link and without blocking.
//   - Any broken rule fails the whole Load with an error that starts with
//     the offending file's path and names the rule; it wraps
//     rtsandbox.ErrInvalid, or rtsandbox.ErrRefused for a symlink, a
//     special file or a file too large.
//
// A Tree is immutable. Its Digest changes with any byte, name or folder
// of the copy, so a container built for one tree is recreated for
// another. The operator's directory is trusted not to change while Load
// reads it: the rules catch careless links and stray files, not a racing
// writer.
package skilltree
