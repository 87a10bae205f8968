package console

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strconv"

	"github.com/rtsandbox/rtsandbox"
)

// maxCopies bounds the names tried for a file whose name is taken in
// FilesDir: the name, then "2-name" to "<maxCopies>-name".
const maxCopies = 99

// file shows one reply file: "file> name (n bytes)", and, with FilesDir,
// where it was saved or why it was not. Files are created anew (never
// over an existing file, never through a link: the name is resolved in
// FilesDir only, and a reply file's name is a safe name, without '/' or
// '\\'), mode 0600.
func (c *Chat) file(f rtsandbox.File) string {
	line := "file> " + Printable(f.Name) + " (" + strconv.Itoa(len(f.Data)) + " bytes)"
	if c.FilesDir == "" {
		return line
	}
	name, err := c.save(f)
	if err != nil {
		log := c.Logger
		if log == nil { // Deliver may come before Run sets it
			log = slog.New(slog.DiscardHandler)
		}
		log.Warn("reply file not saved", "dir", c.FilesDir, "err", err)
		return line + ", not saved (see the log)"
	}
	return line + ", saved as " + Printable(name)
}

// save writes f under FilesDir with its name, or "<n>-name" when that is
// taken, and returns the name used.
func (c *Chat) save(f rtsandbox.File) (string, error) {
	root, err := os.OpenRoot(c.FilesDir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	for n := 1; n <= maxCopies; n++ {
		name := f.Name
		if n > 1 {
			name = strconv.Itoa(n) + "-" + f.Name
		}
		w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = w.Write(f.Data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		return name, err
	}
	return "", errors.New("console: every name for the file is taken")
}
