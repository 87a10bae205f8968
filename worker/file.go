package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// maxStateFile bounds reads of memory.json and history.json. The worker
// writes far less (memory ≤ 512 KiB, history ≤ 20 × 8 KiB), but history
// written by older workers may hold long entries that are truncated on
// load, so the bound is generous; it only keeps a corrupt file from
// exhausting the container's memory.
const maxStateFile = 16 << 20

// readState reads a workspace state file. It reports exists=false when the
// file is absent.
func readState(path string) (data []byte, exists bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, maxStateFile+1))
	if err != nil {
		return nil, true, err
	}
	if len(data) > maxStateFile {
		return nil, true, fmt.Errorf("%s exceeds %d bytes", filepath.Base(path), maxStateFile)
	}
	return data, true, nil
}

// writeAtomic replaces path with data so that a crash or kill leaves either
// the old or the new file, never a torn one: write <path>.tmp (0600), fsync,
// rename over path, then fsync the directory. A stale .tmp is removed first
// and the new one created with O_EXCL, so a leftover file or symlink at
// that name is never written through.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// syncDir makes the rename durable. Some filesystems refuse fsync on a
// directory; the rename itself already happened, so that is not an error.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
