// Command filler stands in for a session worker that writes without
// stopping, for the disk bound's end-to-end test: once /workspace/go
// exists (the test's signal that the turn began), it writes /workspace/fill
// in 1 MiB pieces until a write fails (or 512 MiB are written, so that a
// missing bound cannot fill the host's disk), removes it, then makes empty
// files until that fails (or 10,000 are made), prints what it found and
// waits for SIGTERM (the session container's restart policy would start
// an exiting worker again).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

const (
	maxBytes = 512 << 20
	maxFiles = 10000
)

func main() {
	for {
		if _, err := os.Stat("/workspace/go"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	n, err := fill("/workspace/fill")
	fmt.Printf("fill bytes=%d err=%s\n", n, name(err))
	os.Remove("/workspace/fill")
	files, err := many("/workspace/many")
	fmt.Printf("files n=%d err=%s\n", files, name(err))
	fmt.Fprintln(os.Stderr, "filler done")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

func fill(path string) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i) // not zeros: nothing may store them sparsely
	}
	written := 0
	for written < maxBytes {
		n, err := f.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, f.Sync()
}

func many(dir string) (int, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return 0, err
	}
	for i := range maxFiles {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), nil, 0o600); err != nil {
			return i, err
		}
	}
	return maxFiles, nil
}

func name(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, syscall.ENOSPC):
		return "ENOSPC"
	case errors.Is(err, syscall.EDQUOT):
		return "EDQUOT"
	}
	return strconv.Quote(err.Error())
}
