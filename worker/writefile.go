package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the write_file tool of a session turn (issue 13, "files
// out"): the model hands the guest a text file it wrote (a CSV, a script,
// a summary) by saving it in the turn's outbox, from where it comes back
// as a reply file (docs/host.md, "Routing rules" runTurn steps 10–13, docs/sealed-turn.md, "Commands"). The sealed worker has
// no outbox and no such tool.
//
// The name is kept as the model gives it when it is a safe name and its
// own basename; its extension (what follows the last dot, when that is
// neither the whole name nor empty) need not match saveToOutbox's
// ^[a-z0-9]{1,10}$, which binds only a host tool's image. A taken name
// becomes stem-2.ext, stem-3.ext … (stem-2 without an extension). The
// reply's bounds (docs/protocol.md, "The sealed turn": ten files, 10 MiB each, 50 MiB in all) are
// checked against what the outbox already holds, so the model is told
// at once rather than the whole turn failing at its end.

// writeFileSpec is write_file as the model sees it.
var writeFileSpec = rtsandbox.ToolSpec{
	Name: "write_file",
	Description: "Write a text file (a CSV, a script, a summary …) that is attached to your reply for the guest. " +
		"A reply carries at most 10 files, 10 MiB each and 50 MiB in all; a name already used in this reply gets -2, -3 … before its extension.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The file name, such as report.csv, without a directory."},` +
		`"content":{"type":"string","description":"The file's text (UTF-8), at least one byte."}},"required":["name","content"],"additionalProperties":false}`),
}

// writeFile is the write_file tool of the turn whose outbox is box. A
// refused call is the model's answer (a tool text, never a failed turn);
// only an I/O failure is an error.
func writeFile(box *outbox) *function {
	return &function{spec: writeFileSpec, run: func(_ context.Context, in toolInput) (string, error) {
		name, ok := baseName(in.fields["name"])
		if !ok {
			return "Invalid file name: give a plain file name such as report.csv, without a directory or control characters.", nil
		}
		// A decoded JSON string is valid UTF-8: invalid bytes and lone
		// surrogates become U+FFFD.
		content, ok := str(in.fields["content"])
		switch {
		case !ok:
			return "Invalid content: give the file's text as a string.", nil
		case content == "":
			return "Nothing saved: content is empty.", nil
		case len(content) > rtsandbox.MaxReplyFileBytes:
			return fmt.Sprintf("Not saved: a reply file holds at most 10 MiB (%d bytes); this one is %d bytes.", rtsandbox.MaxReplyFileBytes, len(content)), nil
		}
		files, used, err := box.usage()
		if err != nil {
			return "", err
		}
		switch {
		case files >= rtsandbox.MaxReplyFiles:
			return fmt.Sprintf("Not saved: this reply already holds %d files, the most it can carry.", rtsandbox.MaxReplyFiles), nil
		case used+int64(len(content)) > rtsandbox.MaxReplyFilesTotal:
			return fmt.Sprintf("Not saved: the reply's files would pass 50 MiB in all (%d bytes used, %d more asked).", used, len(content)), nil
		}
		stem, ext := splitExt(name)
		saved, err := box.create(stem, ext, []byte(content))
		if errors.Is(err, errOutputBounds) {
			return "Not saved: no free name is left for " + name + "; choose another name.", nil
		}
		if errors.Is(err, errNoRoom) {
			return noRoomText, nil
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Saved %s (%d bytes); it will be attached to your reply.", saved, len(content)), nil
	}}
}

// noRoomText answers a file the channel's workspace has no room for.
const noRoomText = "Not saved: the channel's workspace is full; the owner can free it with fresh. Give the content in your reply instead."

// baseName is a file name as the model gives it: a safe name that is its
// own basename.
func baseName(raw json.RawMessage) (string, bool) {
	name, ok := str(raw)
	if !ok || !wire.ValidSafeName(name) || path.Base(name) != name {
		return "", false
	}
	return name, true
}

// splitExt splits name at its last dot into stem and extension (without
// the dot); a name without one, or whose only dot leads or ends it, is all
// stem.
func splitExt(name string) (stem, ext string) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return name, ""
	}
	return name[:i], name[i+1:]
}
