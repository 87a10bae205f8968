// Package skills indexes the operator's skill folders of session mode
// (spec session.md §5.5) and enforces the rules of read_skill and of tool
// gating. It is host-side groundwork: nothing wires it yet.
//
// The contract:
//
//   - Load reads every <dir>/<name>/SKILL.md. Each file starts with YAML
//     front matter between a first line "---" and the next "---" line,
//     decoded strictly (unknown or duplicate keys are refused): name must
//     equal the directory name, description must be a non-empty string and
//     the optional tools is a list of non-empty tool-name strings, each
//     claimed by one skill at most. Any broken rule fails the whole Load
//     with an error that names the file and the rule (rtsandbox.ErrInvalid,
//     or rtsandbox.ErrRefused for a symlink or an escape). Skills are
//     sorted by name. Directories without a SKILL.md and plain files are
//     skipped.
//   - Load reads a bounded amount: SKILL.md at most MaxFileSize bytes,
//     front matter at most MaxFrontMatter bytes, at most MaxSkills skills.
//     A directory entry that is a symlink is refused (checked with lstat),
//     and the realpath of each skill root must lie strictly under the
//     realpath of dir.
//   - PromptBlock is the system-prompt block: an instruction to read a
//     matching skill first, then <available_skills> with XML-escaped name
//     and description; "" when there are no skills.
//   - Read is read_skill: the skill must be known; its root's realpath lies
//     strictly under the skills dir's realpath; the file's realpath
//     (SKILL.md by default) lies under the skill root and is an existing
//     regular file of at most MaxFileSize bytes. The text is cut at
//     MaxReadChars UTF-16 units with TruncatedMarker.
//   - A Gate blocks a tool claimed by a skill until that skill has been
//     marked read; the caller marks a skill read after a successful Read
//     of its SKILL.md. One Gate lives as long as the worker process.
//
// The skills tree belongs to the operator (and is read-only inside the
// worker image); the realpath rules keep a careless symlink or a guest's
// "../" path from reading outside it.
package skills
