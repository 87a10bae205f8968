package attach

import (
	"encoding/base64"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// File is a decoded reply file (the root's noun).
type File = rtsandbox.File

// DecodeReplyFiles validates a worker's reply files again (docs/protocol.md, "Images and files") and
// decodes them. The decoder is the non-strict standard one (docs/session.md, "Decisions (Go port)": the
// reference tolerates non-zero trailing bits), and the decoded sizes are
// checked once more, so the host's bound rests on the bytes it holds and
// not on the length arithmetic of the validation alone.
func DecodeReplyFiles(files []wire.ReplyFile) ([]File, error) {
	if err := wire.ValidateReplyFiles(files); err != nil {
		return nil, err
	}
	out := make([]File, 0, len(files))
	total := 0
	for i, f := range files {
		data, err := base64.StdEncoding.DecodeString(f.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: file %d: %w", wire.ErrReplyFile, i+1, err)
		}
		if len(data) < 1 || len(data) > rtsandbox.MaxReplyFileBytes {
			return nil, fmt.Errorf("%w: file %d decodes to %d bytes", wire.ErrReplyFile, i+1, len(data))
		}
		if total += len(data); total > rtsandbox.MaxReplyFilesTotal {
			return nil, fmt.Errorf("%w: more than %d bytes in total", wire.ErrReplyBudget, rtsandbox.MaxReplyFilesTotal)
		}
		out = append(out, File{Name: f.Name, Data: data})
	}
	return out, nil
}
