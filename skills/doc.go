// Package skills holds the rules of session mode's operator skills (spec
// session.md docs/session.md, "Skills") that the worker enforces: the index, the system-prompt
// block, read_skill and tool gating. It runs inside the container, so it
// imports only the root package and the standard library; reading an
// operator's skills directory (YAML front matter, the copy the host
// mounts) is package skilltree's, on the host.
//
// The contract:
//
//   - An index is at most MaxSkills skills. Check states its rules: a
//     name is a safe folder name (wire.ValidSafeName) used once, a
//     description is a non-empty string of at most MaxFrontMatter bytes,
//     and tools lists the tools the skill gates, each named once in the
//     whole index, as the profile names it: a host tool by its name
//     (web_fetch), an MCP tool as <server>/<tool>. Names, descriptions
//     and tool names hold at most MaxIndexBytes together.
//   - New binds a checked index to the directory holding the skill
//     folders (the worker's /run/sandbox/skills): each skill's folder must
//     resolve strictly under the directory's realpath and hold a regular
//     SKILL.md. Skills are sorted by name.
//   - PromptBlock is the system-prompt block: an instruction to read a
//     matching skill first, then <available_skills> with XML-escaped name
//     and description; "" when there are no skills.
//   - Read is read_skill: the skill must be known; its root's realpath lies
//     strictly under the skills dir's realpath; the file's realpath
//     (SKILL.md by default) lies under the skill root and is an existing
//     regular file of at most MaxFileSize bytes, opened without following
//     a final link and without blocking. The text is cut at MaxReadChars
//     UTF-16 units with TruncatedMarker.
//   - A Gate blocks a tool claimed by a skill until that skill has been
//     marked read; the caller marks a skill read after a successful Read
//     of its SKILL.md. One Gate lives as long as the worker process.
//
// Errors wrap rtsandbox.ErrInvalid, or rtsandbox.ErrRefused for a symlink
// or an escape. The skills tree belongs to the operator and the worker
// sees the host's read-only copy; the realpath rules keep a careless
// symlink or a guest's "../" path from reading outside it.
package skills
